"""Names from a checkpoint folder are shown, never obeyed, and the commands that name them work.

A file or folder name may hold terminal escape sequences: ``ESC ] 0 ; … BEL`` retitles the
terminal, ``ESC [ 31 m`` colours everything after it. ckptdoctor prints such names with the
control characters escaped (``\\x1b``) on stdout and stderr alike, and a command a fix prints
quotes the name as one shell word (``$'…'``) that bash resolves to the real file. Files moved
aside by hand keep their place in the run, so two files of one name never meet there, and the
folder they go to is never one the framework reads (accelerate parses every name in its
``checkpoints/`` folder).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from frameworks import copy_run
from terminal import in_terminal

from ckptdoctor.places import MOVED_ASIDE
from ckptdoctor.quoting import printable, shell_word

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "runs"
TITLE = "\x1b]0;owned\x07"
RED = "\x1b[31m"
SPAN = re.compile(r"`([^`]+)`")


def _aged(root: Path) -> Path:
    for path in [root, *root.rglob("*")]:
        stamp = os.lstat(path).st_mtime - 3600
        os.utime(path, (stamp, stamp), follow_symlinks=False)
    return root


def _hostile_tree(tmp_path: Path) -> Path:
    """A torch run in a folder whose name retitles the terminal, and beside it a cut file whose
    name turns the terminal red."""
    root = tmp_path / "tree"
    root.mkdir()
    shutil.copytree(EXAMPLES / "torch-split", root / f"r{TITLE}un")
    (root / f"esc{RED}aped.pt").write_bytes((EXAMPLES / "torch-split" / "optimizer_1.pt").read_bytes()[:100])
    return _aged(root)


def _ckptdoctor(where: Path, *args: str, terminal: bool = False) -> tuple[int, bytes]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    command = [sys.executable, "-m", "ckptdoctor", *args]
    if terminal:
        env.pop("NO_COLOR", None)
        env["FORCE_COLOR"] = "1"
        code, shown, _ = in_terminal(command, env={**env, "PWD": str(where)} | {"TERM": "xterm"}, stdout=None)
        return code, shown
    done = subprocess.run(command, cwd=where, env={**env, "NO_COLOR": "1"}, capture_output=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


def test_printable_and_shell_word() -> None:
    assert printable(f"a{TITLE}b") == "a\\x1b]0;owned\\x07b"
    assert printable("tab\tand\nnewline stay") == "tab\tand\nnewline stay"
    assert shell_word("plain") == "plain" and shell_word("with space") == "'with space'"
    word = shell_word(f"it's{RED}\\")
    assert "\x1b" not in word and word.startswith("$'")
    assert subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True).stdout == f"it's{RED}\\".encode()


@pytest.mark.parametrize(
    "command", [("inspect", "."), ("verify", "."), ("repair", "--dry-run", "."), ("prune", "--dry-run", "--keep-last", "1", ".")]
)
def test_no_escape_sequence_from_a_name_reaches_the_output(tmp_path: Path, command: tuple[str, ...]) -> None:
    root = _hostile_tree(tmp_path)
    code, output = _ckptdoctor(root, *command)
    assert code != 2, output
    assert b"\x1b" not in output and b"\x07" not in output, output
    assert b"\\x1b" in output  # the names are there, escaped


def test_on_a_terminal_only_ckptdoctors_own_colours_are_sent(tmp_path: Path) -> None:
    root = _hostile_tree(tmp_path)
    os.chdir(root)
    try:
        code, shown = _ckptdoctor(root, "verify", ".", terminal=True)
    finally:
        os.chdir(tmp_path)
    assert code == 1
    assert b"\x1b]" not in shown and b"\x07" not in shown  # no title, no bell
    assert b"\x1b[31maped" not in shown  # the name's own colour was not sent
    assert b"\\x1b[31maped" in shown


def test_an_error_about_a_hostile_path_is_escaped(tmp_path: Path) -> None:
    code, output = _ckptdoctor(tmp_path, "inspect", f"missing{RED}")
    assert code == 2 and b"\x1b" not in output and b"missing\\x1b[31m" in output


def test_the_printed_move_names_the_hostile_file_exactly(tmp_path: Path) -> None:
    root = _hostile_tree(tmp_path)
    _, output = _ckptdoctor(root, "verify", "--json", ".")
    report = json.loads(output[: output.rindex(b"}") + 1])
    (cut,) = [f for f in report["findings"] if f["code"] == "CKD203" and "aped.pt" in f["path"]]
    (fix,) = [fix for fix in cut["fixes"] if "mkdir -p" in fix]
    away, back = SPAN.findall(fix)
    assert "\x1b" not in away + back
    subprocess.run(["bash", "-c", away], cwd=root, check=True)
    assert not (root / f"esc{RED}aped.pt").exists() and (root / MOVED_ASIDE / f"esc{RED}aped.pt").is_file()
    subprocess.run(["bash", "-c", back], cwd=root, check=True)
    assert (root / f"esc{RED}aped.pt").is_file()


def _move_fix(report: dict, name: str) -> tuple[str, str]:
    (finding,) = [f for f in report["findings"] if f["path"] and f["path"].endswith(name) and any("mkdir -p" in x for x in f["fixes"])]
    away, back = SPAN.findall(next(x for x in finding["fixes"] if "mkdir -p" in x))
    return away, back


def test_files_of_one_name_moved_aside_by_hand_keep_their_place_in_the_run(hf_trained: Path, tmp_path: Path, cli) -> None:
    """Two checkpoint folders of a real HF Trainer run, each holding a cut file that is none of
    the checkpoint's roles: each goes to its own folder in the quarantine, so the second move is
    not silently skipped, and each goes back where it was."""
    run = copy_run(hf_trained, tmp_path / "out")
    cut = (EXAMPLES / "torch-split" / "optimizer_1.pt").read_bytes()[:100]
    for step in (2, 4):
        (run / f"checkpoint-{step}" / "extra.pt").write_bytes(cut)
    report = json.loads(cli("verify", "--json", "--exit-zero", run).stdout)
    fixes = [_move_fix(report, f"checkpoint-{step}/extra.pt") for step in (2, 4)]
    for away, _ in fixes:
        subprocess.run(["bash", "-c", away], cwd=tmp_path, check=True)
    moved = sorted(p.relative_to(run).as_posix() for p in run.rglob("extra.pt"))
    assert moved == [f"{MOVED_ASIDE}/checkpoint-2/extra.pt", f"{MOVED_ASIDE}/checkpoint-4/extra.pt"]
    for _, back in fixes:
        subprocess.run(["bash", "-c", back], cwd=tmp_path, check=True)
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("extra.pt")) == ["checkpoint-2/extra.pt", "checkpoint-4/extra.pt"]


def test_a_file_moved_aside_in_an_accelerate_run_leaves_checkpoints_as_accelerate_reads_it(
    accelerate_saved: Path, tmp_path: Path, cli
) -> None:
    """accelerate's load_state() parses a number out of every name in checkpoints/: a folder
    there without one (IndexError) would break the resume the move was meant to protect."""
    import accelerate
    import torch
    from accelerate.utils import ProjectConfiguration

    project = copy_run(accelerate_saved, tmp_path / "project")
    run = project / "checkpoints"
    (run / "checkpoint_2" / "extra.pt").write_bytes(b"")
    report = json.loads(cli("verify", "--json", "--exit-zero", run).stdout)
    away, back = _move_fix(report, "checkpoint_2/extra.pt")
    subprocess.run(["bash", "-c", away], cwd=tmp_path, check=True)
    assert sorted(os.listdir(run)) == ["checkpoint_1", "checkpoint_2", "checkpoint_3"]
    assert not (run / "checkpoint_2" / "extra.pt").exists()
    config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True, total_limit=3, iteration=4)
    accelerator = accelerate.Accelerator(project_config=config, cpu=True)
    accelerator.prepare(torch.nn.Linear(4, 2), torch.optim.AdamW(torch.nn.Linear(4, 2).parameters()))
    accelerator.load_state()  # the newest save, found by parsing every name in checkpoints/
    subprocess.run(["bash", "-c", back], cwd=tmp_path, check=True)
    assert (run / "checkpoint_2" / "extra.pt").is_file()


def test_a_path_that_starts_with_a_dash_is_never_read_as_an_option(tmp_path: Path) -> None:
    """Every ckptdoctor command the fixes print for a run called ``-e f`` runs as printed."""
    root = tmp_path / "work"
    shutil.copytree(EXAMPLES / "torch-split", root / "-e f")
    _aged(root)
    _, output = _ckptdoctor(root, "inspect", "--json", "--exit-zero", "--", "-e f")
    report = json.loads(output[: output.rindex(b"}") + 1])
    commands = {span for f in report["findings"] for fix in f["fixes"] for span in SPAN.findall(fix) if span.startswith("ckptdoctor ")}
    assert commands and all("'./-e f'" in command for command in commands), commands
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command.replace("ckptdoctor ", f"{sys.executable} -m ckptdoctor ", 1) + " --help"], cwd=root, capture_output=True
        )
        assert done.returncode == 0, (command, done.stderr)


def test_a_lone_file_hint_and_a_note_on_stderr_stay_one_line_and_quoted(tmp_path: Path) -> None:
    folder = tmp_path / "sp a"
    folder.mkdir()
    shutil.copy(EXAMPLES / "torch-split" / "model_2.safetensors", folder / "model_2.safetensors")
    _, output = _ckptdoctor(tmp_path, "inspect", "sp a/model_2.safetensors")
    assert b"`ckptdoctor inspect 'sp a'`" in output
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "x\ny.pt").write_bytes(b"")
    (tmp_path / "odd" / "train.log").write_text("")
    _, output = _ckptdoctor(tmp_path, "inspect", "odd")
    notes = [line for line in output.decode().splitlines() if "no layout" in line]
    assert all("x\\x0ay.pt" in line for line in notes), output


def test_resume_path_is_raw_in_a_pipe_and_escaped_on_a_terminal(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    shutil.copytree(EXAMPLES / "torch-split", root / f"r{TITLE}un")
    _, piped = _ckptdoctor(tmp_path, "inspect", "--resume-path", str(root / f"r{TITLE}un"))
    assert piped.decode().strip() == str(root / f"r{TITLE}un" / "model_2.safetensors")
    _, shown = _ckptdoctor(tmp_path, "inspect", "--resume-path", str(root / f"r{TITLE}un"), terminal=True)
    assert b"\x1b]" not in shown and b"\\x1b]0;owned\\x07" in shown


def test_diskcheck_of_a_run_sizes_that_run_not_one_below_it(tmp_path: Path, cli) -> None:
    run = tmp_path / "r" / "checkpoint"
    shutil.copytree(EXAMPLES / "burn-healthy" / "checkpoint", run)
    shutil.copytree(EXAMPLES / "torch-split", run / "inner")
    report = json.loads(cli("diskcheck", "--json", run).stdout)
    # the burn run's own saves: 3 files of about 5 KiB each epoch, not the torch run's
    assert (report["disk"]["next_save_files"], report["disk"]["estimate_basis"].split(":")[0]) == (
        3,
        "the largest of the last 3 complete epochs",
    )
    assert (
        report["disk"]["next_save_bytes"]
        == (run / "model-5.bpk").stat().st_size + (run / "optim-5.bpk").stat().st_size + (run / "scheduler-5.bpk").stat().st_size
    )


@pytest.mark.slow
def test_a_byte_ff_and_the_four_characters_backslash_x_f_f_never_print_alike(tmp_path: Path) -> None:
    """Issue 32, item 10: a folder named with the byte 0xff and one named ``\\xff`` (four
    characters) printed the same, in the table, the JSON and the commands alike. A literal
    backslash is doubled wherever names are escaped; the JSON's path gives the name's bytes back
    (``quoting.unshown``), and a printed command names the very folder in bash."""
    byte, literal = b"run\xff", b"run\\xff"
    for name in (byte, literal):
        shutil.copytree(EXAMPLES / "torch-split", os.fsdecode(bytes(tmp_path) + b"/" + name))
    _aged(tmp_path)
    _, human = _ckptdoctor(tmp_path, "inspect", ".")
    assert b"./run\\xff " in human and b"./run\\\\xff " in human, human
    from ckptdoctor.quoting import unshown  # new with the fix

    _, output = _ckptdoctor(tmp_path, "inspect", "--json", ".")
    paths = sorted(run["path"] for run in json.loads(output)["runs"])
    assert len(set(paths)) == 2 and sorted(unshown(path) for path in paths) == sorted([b"./" + byte, b"./" + literal])
    for path in paths:
        listed = subprocess.run(["bash", "-c", f"ls {shell_word(path)}"], cwd=tmp_path, capture_output=True, check=True).stdout
        assert b"model_2.safetensors" in listed.split(), listed
    assert shell_word("run\\xff") == "$'run\\xff'" and shell_word("run\\\\xff") == "'run\\xff'"
