"""Every fix ckptdoctor prints works when followed at that moment (issue 35, item 3).

Each scenario is a real run on a real, small, full disk (a tmpfs, as root): a crash mid-save in
its first minutes (every checkpoint younger than --min-age, the newest one partial), or long
after. ``inspect``, ``verify`` and ``diskcheck`` are run on it; every ``ckptdoctor …`` command
their output prints is run as printed, on its own fresh copy of the scenario, and so is every
command that one prints in turn (a plan's notes), with ``--yes`` added only where ckptdoctor says
to pass it. Then the promise is checked: the next save fits and ``diskcheck`` passes without
suggesting the same prune again, the run still resumes from its resume point (its files read by
``torch.load(weights_only=True)``), and what a repair was to move is moved.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_diskcheck import mount_tmpfs
from test_weights_only import tiny

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("fake_machine")  # no process holds a file unless a test says so

MiB = 2**20
COMMAND = re.compile(r"`(ckptdoctor [^`]+)`")
FOLLOWED = ("prune", "repair", "diskcheck")
"""The commands a fix may print that change the run or tell more: followed. ``rules`` only
explains, and ``--undo`` / ``--discard-journal`` take back what a followed one did."""


@dataclass(frozen=True)
class Scenario:
    disk: Path
    run: Path
    layout: str


def _save(run: Path, layout: str, number: int, model, optimizer) -> None:
    """One save as the layout writes it: ``model_N.pt`` and ``optimizer_N.pt`` (torch), or an HF
    Trainer's ``checkpoint-N/`` (safetensors weights, torch-saved optimizer and scheduler)."""
    if layout == "torch":
        torch.save(model.state_dict(), run / f"model_{number}.pt")
        torch.save(optimizer.state_dict(), run / f"optimizer_{number}.pt")
        return
    from safetensors.torch import save_file

    folder = run / f"checkpoint-{number}"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(f'{{"global_step": {number}, "log_history": []}}')
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, folder / "model.safetensors")
    torch.save(optimizer.state_dict(), folder / "optimizer.pt")
    torch.save({"last_epoch": number}, folder / "scheduler.pt")


def _fill(disk: Path, name: str, leave: int = 0) -> None:
    """Write ``name`` on ``disk`` until ``leave`` bytes are free (or the disk is full)."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(disk / name, "ab") as handle:
        try:
            handle.write(b"\0" * max(0, free - leave))
            handle.flush()
        except OSError:  # full before the last block: that is what was asked
            pass


@pytest.fixture
def on_small_disk(tmp_path: Path) -> Iterator[Callable[..., Scenario]]:
    """Makes scenarios, each on its own 8 MiB tmpfs: ``saves`` complete saves, then one the full
    disk cut short (``crashed``), written just now or (``aged``) an hour ago."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mounted: list[Path] = []

    def make(saves: int, layout: str = "torch", crashed: bool = True, aged: bool = False) -> Scenario:
        disk = tmp_path / f"disk{len(mounted)}"
        mount_tmpfs(disk, "size=8m")
        mounted.append(disk)
        run = disk / "run"
        run.mkdir()
        model, optimizer = tiny(256, 512)  # 0.5 MiB of weights and 1 MiB of AdamW state: a save of about 1.5 MiB
        for number in range(1, saves + 1):
            _save(run, layout, number * 100 if layout == "hf" else number, model, optimizer)
        _fill(disk, "other-jobs.bin", leave=900 * 1024)  # the volume is shared: the next save does not fit
        if crashed:
            with pytest.raises((RuntimeError, OSError)):
                _save(run, layout, (saves + 1) * 100 if layout == "hf" else saves + 1, model, optimizer)
        _fill(disk, "other-jobs.bin")
        if aged:
            an_hour_ago = time.time() - 3600
            for path in run.rglob("*"):
                os.utime(path, (an_hour_ago, an_hour_ago))
        return Scenario(disk, run, layout)

    yield make
    for disk in mounted:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def printed(said: str) -> list[str]:
    """Every ``ckptdoctor …`` command ``said`` prints to copy (between backticks), in order."""
    return list(dict.fromkeys(command.strip() for command in COMMAND.findall(said)))


def _followed(command: str) -> bool:
    words = shlex.split(command)
    return words[1] in FOLLOWED and "--undo" not in words and "--discard-journal" not in words


def follow(cli, command: str, seen: list[str]) -> list[str]:
    """Run ``command`` as printed (with ``--yes`` only where its answer says to pass it), then
    every command its output prints (one printed again after others ran, once more): the
    commands run, in order; ``seen`` holds those printed so far."""
    args = shlex.split(command)[1:]
    result = cli(*args)
    said = result.stdout + result.stderr
    if "pass --yes to go ahead" in said:
        result = cli(*args, "--yes")
        said = result.stdout + result.stderr
    assert result.exit_code in (0, 1), f"{command}\n{said}"  # 1: findings, as diskcheck's on a full disk
    ran = [command]
    for more in printed(said):
        if _followed(more) and seen.count(more) < 2:  # "prune …, then repair again": twice, never round and round
            seen.append(more)
            ran += follow(cli, more, seen)
    return ran


def fixes_of(cli, run: Path) -> list[str]:
    """The commands ``inspect``, ``verify`` and ``diskcheck`` of ``run`` print, in that order."""
    found: list[str] = []
    for command in ("inspect", "verify", "diskcheck"):
        result = cli(command, run, env={"COLUMNS": "100000"})
        found += printed(result.stdout + result.stderr)
    return list(dict.fromkeys(found))


def resume_point(cli, run: Path) -> tuple[int, dict[str, str]]:
    """The run's resume point: its index and each of its files' sha256."""
    resume = cli("inspect", "--json", run).json["runs"][0]["resume"]
    assert resume is not None
    return resume["index"], {path: hashlib.sha256(Path(path).read_bytes()).hexdigest() for path in resume["paths"]}


def assert_resumes(cli, run: Path, before: tuple[int, dict[str, str]]) -> None:
    """The resume point is the one it was, byte for byte, and each of its files loads as a resume
    loads it."""
    from safetensors.torch import load_file

    assert resume_point(cli, run) == before
    loaders = {".safetensors": load_file, ".pt": lambda path: torch.load(path, weights_only=True), ".json": json.loads}
    for path in before[1]:
        assert loaders[Path(path).suffix](Path(path).read_text() if path.endswith(".json") else path), path


def assert_fits(cli, scenario: Scenario, advised: list[str]) -> None:
    """The next save fits: diskcheck passes, and prints none of the prunes ``advised`` again."""
    check = cli("diskcheck", scenario.run, env={"COLUMNS": "100000"})
    assert check.exit_code == 0, check.stdout
    again = set(printed(check.stdout)) & set(advised)
    assert not again, f"diskcheck suggests {again} again after it was followed:\n{check.stdout}"
    disk = cli("diskcheck", "--json", scenario.run).json["disk"]
    assert disk["free_bytes"] >= disk["needed_bytes"]


def partial_after_resume(cli, run: Path) -> list[int]:
    scanned = cli("inspect", "--json", run).json["runs"][0]
    resume = scanned["resume"]["index"]
    return [c["index"] for c in scanned["checkpoints"] if c["index"] > resume and c["status"] != "complete"]


@pytest.mark.parametrize("layout", ["torch", "hf"])
@pytest.mark.parametrize("aged", [False, True], ids=["minutes-after-the-crash", "an-hour-after"])
def test_every_printed_command_after_a_crash_on_a_full_disk_does_what_it_says(on_small_disk, cli, layout, aged):
    """The issue's story: three saves, the fourth cut short by a full disk. Keeping the last two
    frees 1.5 MiB and the next save needs 1.7: the prune each fix prints must keep only one; in the
    first minutes it needs --min-age 0, and says so (or prints the command that does)."""
    shown = on_small_disk(3, layout, aged=aged)
    commands = fixes_of(cli, shown.run)
    prunes = [c for c in commands if shlex.split(c)[1] == "prune"]
    assert prunes, commands
    assert any(shlex.split(c)[1] == "repair" for c in commands), commands
    followed = [c for c in commands if _followed(c)]
    for command in followed:
        scenario = on_small_disk(3, layout, aged=aged)
        here = command.replace(str(shown.run), str(scenario.run))
        before = resume_point(cli, scenario.run)
        ran = follow(cli, here, [here])
        verbs = {shlex.split(c)[1] for c in ran}
        if "prune" in verbs:
            assert_fits(cli, scenario, [c.replace(str(shown.run), str(scenario.run)) for c in prunes])
        if "repair" in verbs:
            assert partial_after_resume(cli, scenario.run) == [], f"{ran} left the partial save in the run"
        assert_resumes(cli, scenario.run, before)


def test_the_prune_a_fix_prints_keeps_as_many_as_still_free_enough(on_small_disk, cli):
    """An hour after the crash: the prune keeps the most checkpoints that still free what the next
    save lacks (keeping one more would not), and needs no --min-age 0."""
    scenario = on_small_disk(5, crashed=False, aged=True)  # 5 saves of 1.5 MiB fill it; the next needs 1.7: two must go
    prunes = [c for c in fixes_of(cli, scenario.run) if shlex.split(c)[1] == "prune"]
    assert prunes == [f"ckptdoctor prune {shlex.quote(str(scenario.run))} --keep-last 3 --yes"]
    before = resume_point(cli, scenario.run)
    follow(cli, prunes[0], list(prunes))
    assert_fits(cli, scenario, prunes)
    assert_resumes(cli, scenario.run, before)


def test_where_no_prune_frees_enough_the_fix_says_so_and_what_to_do_instead(on_small_disk, cli):
    """Two saves, and the disk filled by other jobs: even keeping one frees 1.5 MiB of the 1.7 the
    next save lacks. No prune is printed as the fix; what it says to do instead works."""
    scenario = on_small_disk(2, crashed=False, aged=True)
    said = cli("diskcheck", scenario.run, env={"COLUMNS": "100000"}).stdout
    assert "no prune of this run frees enough" in said, said
    assert not [c for c in printed(said) if shlex.split(c)[1] == "prune"], said
    assert f"delete other files on {scenario.disk}" in said
    (scenario.disk / "other-jobs.bin").unlink()  # what it says to do
    assert_fits(cli, scenario, [])


def test_a_repair_minutes_after_a_crash_says_when_the_default_will_act_and_then_it_does(on_small_disk, cli, fake_machine):
    """``repair`` in the first minutes: "Nothing to repair" was all it said. It says the partial
    save is younger than --min-age and after which time the same command moves it; at that time,
    it does."""
    scenario = on_small_disk(3)
    held = cli("repair", "--yes", scenario.run)
    said = held.stdout + held.stderr
    assert held.exit_code == 0 and partial_after_resume(cli, scenario.run) == [4]
    match = re.search(r"epoch 4 is younger than --min-age 10min .* the same command does after (\d\d):(\d\d) UTC \(in ([\d.]+)min\)", said)
    assert match is not None, said
    fake_machine.now = time.time() + float(match[3]) * 60 + 30
    (scenario.disk / "other-jobs.bin").unlink()  # room for the quarantine's records: this is about the time
    done = cli("repair", "--yes", scenario.run)
    assert done.exit_code == 0, done.stdout + done.stderr
    assert partial_after_resume(cli, scenario.run) == []


def test_files_a_live_process_holds_are_named_with_its_pid_and_the_command_for_after_it(on_small_disk, cli, fake_machine):
    """A process still holds the partial save: no --min-age 0 is offered as working now; the note
    names the pid, and the command it prints works once that process is gone."""
    scenario = on_small_disk(3)
    fake_machine.held[str(scenario.run / "optimizer_4.pt")] = 4242
    held = cli("repair", "--yes", scenario.run)
    said = held.stdout + held.stderr
    assert "epoch 4 is left as it is because a file of it is open in process 4242" in said, said
    commands = printed(said)
    assert commands and not any("moves it now" in line for line in said.splitlines() if "4242" in line)
    assert partial_after_resume(cli, scenario.run) == [4]
    fake_machine.held.clear()  # the process ended
    follow(cli, commands[-1], list(commands))
    assert partial_after_resume(cli, scenario.run) == []


def test_a_prune_names_the_process_holding_a_checkpoint_it_would_delete(on_small_disk, cli, fake_machine):
    """A checkpoint the policy deletes is held open by a live process: the prune says which pid,
    and the command it prints deletes it once that process is gone."""
    scenario = on_small_disk(5, crashed=False, aged=True)
    fake_machine.held[str(scenario.run / "model_1.pt")] = 4343
    pruned = cli("prune", "--yes", "--keep-last", "3", scenario.run)
    said = pruned.stdout + pruned.stderr
    assert "epoch 1 is left as it is because a file of it is open in process 4343" in said, said
    assert _epochs(cli, scenario.run) == [1, 3, 4, 5]
    fake_machine.held.clear()  # the process ended
    commands = printed(said)
    follow(cli, commands[-1], list(commands))
    assert _epochs(cli, scenario.run) == [3, 4, 5]


def _epochs(cli, run: Path) -> list[int]:
    return [c["index"] for c in cli("inspect", "--json", run).json["runs"][0]["checkpoints"]]
