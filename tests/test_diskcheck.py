"""``ckptdoctor diskcheck`` and ``ckptdoctor.preflight``: predictions checked against a real full
disk (a small tmpfs, as root), unwritable and missing folders, network filesystems, exhausted
inodes, runs with no checkpoint yet, and the runway under retention."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

import ckptdoctor
from ckptdoctor.model import Estimate
from ckptdoctor.planners.space import OPTIMIZER_STATE, runway
from ckptdoctor.testing import write_burn_run

MiB = 2**20


def mount_tmpfs(where: Path, *options: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(where)], capture_output=True, text=True)
    if result.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()}); CI runs as root and can")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs: a disk that fills up for real."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    where = tmp_path / "disk"
    mount_tmpfs(where, "size=24m", "nr_inodes=4096")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def torch_run(folder: Path, epochs: range, width: int = 256) -> tuple[object, object]:
    """A real run: ``model_N.pt`` and ``optimizer_N.pt`` per epoch (AdamW state: 2x the model)."""
    torch = pytest.importorskip("torch")
    folder.mkdir(parents=True, exist_ok=True)
    model = torch.nn.Linear(width, width * 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(3, width)).sum().backward()
    optimizer.step()
    for epoch in epochs:
        save(folder, epoch, model, optimizer)
    return model, optimizer


def save(folder: Path, epoch: int, model, optimizer) -> None:
    import torch

    torch.save(model.state_dict(), folder / f"model_{epoch}.pt")
    torch.save(optimizer.state_dict(), folder / f"optimizer_{epoch}.pt")


def fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` until ``leave`` bytes are free."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(disk / "filler.bin", "ab") as handle:
        handle.write(b"\0" * max(0, free - leave))
    assert abs(os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize - leave) <= 8192


# --- a real full disk -------------------------------------------------------------------------------


def test_a_save_diskcheck_says_will_not_fit_fails_for_real_with_enospc(small_disk, cli):
    run = small_disk / "run"
    model, optimizer = torch_run(run, range(1, 3))
    report = ckptdoctor.preflight(run)
    one_save = report.disk.estimate.bytes
    assert 1.4 * MiB < one_save < 1.7 * MiB  # model 0.5 MiB + AdamW's two moments 1 MiB
    fill(small_disk, one_save // 2)
    result = cli("diskcheck", "--json", run)
    assert result.exit_code == 1
    assert result.codes() == ["CKD501"]
    assert result.json["disk"]["next_save_bytes"] == one_save
    with pytest.raises((RuntimeError, OSError)) as raised:
        save(run, 3, model, optimizer)
    said = str(raised.value)  # what torch says when the disk fills (CKD501 explains each)
    assert "No space left on device" in said or "failed writing file" in said or "unexpected pos" in said
    for leftover in run.glob("*_3.pt"):
        leftover.unlink()


def test_a_save_diskcheck_says_will_fit_succeeds_for_real(small_disk, cli):
    run = small_disk / "run"
    model, optimizer = torch_run(run, range(1, 3))
    one_save = ckptdoctor.preflight(run).disk.estimate.bytes
    fill(small_disk, int(one_save * 1.5))
    result = cli("diskcheck", "--json", run)
    assert result.exit_code == 0, result.stdout
    assert "CKD501" not in result.codes()
    assert result.json["disk"]["saves_until_full"] == 1
    assert "CKD502" in result.codes(), "one more save fits, then the disk is full"
    save(run, 3, model, optimizer)
    assert (run / "optimizer_3.pt").stat().st_size > 0


def test_the_next_save_fits_exactly_as_far_as_the_margin_allows(small_disk, cli):
    run = small_disk / "run"
    torch_run(run, range(1, 2))
    one_save = ckptdoctor.preflight(run).disk.estimate.bytes
    fill(small_disk, int(one_save * 1.05))  # fits, but not with the default 10% headroom
    assert cli("diskcheck", run).exit_code == 1
    assert cli("diskcheck", "--margin", "0", run).exit_code == 0


def test_exhausted_inodes_are_ckd505(tmp_path, cli):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    disk = tmp_path / "inodes"
    mount_tmpfs(disk, "size=64m", "nr_inodes=24")
    try:
        run = disk / "run"
        torch_run(run, range(1, 4), width=8)
        for n in range(32):
            try:
                (disk / f"f{n}").touch()
            except OSError as error:
                assert error.errno == errno.ENOSPC
                break
        result = cli("diskcheck", "--json", run)
        assert "CKD505" in result.codes()
        assert result.json["disk"]["free_inodes"] < 6
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


# --- where a save cannot go -------------------------------------------------------------------------------


def test_a_read_only_folder_is_ckd503(tmp_path, cli):
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root (CI runs as root)")
    disk = tmp_path / "ro"
    mount_tmpfs(disk, "size=8m")
    try:
        run = disk / "run"
        torch_run(run, range(1, 3), width=8)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        result = cli("diskcheck", "--json", run)
        assert result.exit_code == 1
        assert result.codes() == ["CKD503"]
        assert "Read-only file system" in result.json["findings"][0]["message"]
        assert result.json["disk"]["writable"] is False
        missing = cli("diskcheck", "--json", disk / "not-yet", "--model-bytes", "1MiB", "--optimizer", "sgd")
        assert missing.codes() == ["CKD503"] and "does not let this user create it" in missing.json["findings"][0]["message"]
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_folder_this_user_cannot_write_is_ckd503(tmp_path, cli, monkeypatch):
    run = tmp_path / "run"
    write_burn_run(run, range(1, 3))
    real_open = os.open

    def refuse_probe(path, *args, **kwargs):
        if ".ckptdoctor-probe-" in str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse_probe)
    result = cli("diskcheck", "--json", run)
    assert result.exit_code == 1 and result.codes() == ["CKD503"]
    assert "Permission denied" in result.json["findings"][0]["message"]


def test_a_missing_folder_that_can_be_created_is_fine_and_nothing_is_created(tmp_path, cli):
    folder = tmp_path / "new" / "checkpoint"
    result = cli("diskcheck", "--json", folder, "--model-bytes", "10MiB", "--optimizer", "adam")
    assert result.exit_code == 0, result.stdout
    assert result.json["disk"]["writable"] is True
    assert not (tmp_path / "new").exists()


def test_nothing_is_left_behind_by_the_probe(tmp_path, cli):
    run = tmp_path / "run"
    write_burn_run(run, range(1, 3))
    before = sorted(os.listdir(run))
    assert cli("diskcheck", run).exit_code == 0
    assert sorted(os.listdir(run)) == before


def test_a_network_filesystem_is_ckd504(tmp_path, cli, monkeypatch):
    import psutil

    run = tmp_path / "run"
    write_burn_run(run, range(1, 3))
    real = psutil.disk_partitions

    def with_nfs(all: bool = False):
        return [*real(all), SimpleNamespace(device="server:/export", mountpoint=str(tmp_path), fstype="nfs4", opts="rw")]

    monkeypatch.setattr(psutil, "disk_partitions", with_nfs)
    result = cli("diskcheck", "--json", run)
    assert result.exit_code == 0
    assert result.codes() == ["CKD504"]
    assert result.json["disk"]["fstype"] == "nfs4" and result.json["disk"]["network"] is True
    monkeypatch.undo()
    assert "CKD504" not in cli("diskcheck", "--json", run).codes()


# --- estimates ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("optimizer", "factor"), sorted(OPTIMIZER_STATE.items()))
def test_an_empty_run_is_estimated_from_the_model_and_the_optimizer(tmp_path, cli, optimizer, factor):
    torch = pytest.importorskip("torch")
    model = tmp_path / "model.pt"
    torch.save(torch.nn.Linear(64, 64).state_dict(), model)
    result = cli("diskcheck", "--json", tmp_path / "run", "--model", model, "--optimizer", optimizer)
    assert result.exit_code == 0
    disk = result.json["disk"]
    assert disk["next_save_bytes"] == pytest.approx(model.stat().st_size * (1 + factor), abs=1)
    assert optimizer in disk["estimate_basis"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model-bytes", "1GiB"), "--optimizer is needed"),
        (("--model-bytes", "1GiB", "--optimizer", "adamax"), "unknown optimizer 'adamax'"),
        (("--model-bytes", "lots", "--optimizer", "adam"), "not a size"),
    ],
)
def test_unusable_estimates_are_usage_errors(tmp_path, cli, args, message):
    result = cli("diskcheck", tmp_path / "run", *args)
    assert result.exit_code == 2 and message in result.stderr


def test_an_empty_run_without_a_model_size_says_what_to_give(tmp_path, cli):
    result = cli("diskcheck", tmp_path)
    assert result.exit_code == 0
    assert "give --model or --model-bytes, and --optimizer" in result.stdout


def test_the_estimate_is_the_largest_of_the_newest_complete_checkpoints(tmp_path):
    run = tmp_path / "run"
    write_burn_run(run, range(1, 6))
    (run / "model-5.bpk").write_bytes((run / "model-5.bpk").read_bytes() * 40)  # grew, then truncated below
    (run / "optim-6.bpk").write_bytes(b"x" * 10**6)  # an incomplete save does not count
    report = ckptdoctor.preflight(run)
    sizes = dict(report.disk.sizes)
    assert report.disk.estimate.bytes == max(sizes[3], sizes[4], sizes[5])
    assert "last 3 complete epochs" in report.disk.estimate.basis


def test_a_lightning_last_ckpt_copy_is_not_a_second_save(tmp_path):
    """``save_last=True`` rewrites ``last.ckpt`` in place of the old copy (staged in $TMPDIR, which
    the training callback checks): the next save on the run's volume is one checkpoint."""
    torch = pytest.importorskip("torch")
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for epoch in (1, 2):
        torch.save(
            {"epoch": epoch, "state_dict": {"w": torch.zeros(4096)}, "optimizer_states": [{}], "lr_schedulers": []},
            folder / f"epoch={epoch}-step={epoch}.ckpt",
        )
    (folder / "last.ckpt").write_bytes((folder / "epoch=2-step=2.ckpt").read_bytes())
    one = (folder / "epoch=2-step=2.ckpt").stat().st_size
    assert ckptdoctor.preflight(folder).disk.estimate.bytes == one


# --- runway ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "kept", "keep_last", "expected"),
    [
        (1000, 0, None, 9),  # 100 each, the last needs 110
        (1000, 2, 3, None),  # one more to reach 3, then each save frees one: fits for good
        (150, 5, 3, None),  # already beyond retention: every save frees one after it
        (250, 0, 5, 2),  # retention would need 5 x 100: only 2 fit
        (105, 0, None, 0),
    ],
)
def test_runway(free, kept, keep_last, expected):
    assert runway(Estimate(100, 2, "x"), free, kept, keep_last) == expected


def test_a_short_runway_is_ckd502_and_retention_from_the_config_lifts_it(small_disk, cli, monkeypatch):
    run = small_disk / "run"
    torch_run(run, range(1, 3))
    one_save = ckptdoctor.preflight(run).disk.estimate.bytes
    fill(small_disk, int(one_save * 2.5))
    result = cli("diskcheck", "--json", run)
    assert result.codes() == ["CKD502"] and result.exit_code == 0
    assert result.json["disk"]["saves_until_full"] == 2
    assert cli("diskcheck", "--json", "--keep-last", "2", run).codes() == []
    monkeypatch.chdir(small_disk)
    Path("ckptdoctor.toml").write_text("[prune]\nkeep-last = 2\n")
    configured = cli("diskcheck", "--json", run)
    assert configured.json["disk"]["keep_last"] == 2 and configured.codes() == []
    assert cli("diskcheck", "--json", "--runway", "2", run).codes() == [], "two saves left is enough at --runway 2"


def test_human_output_draws_a_bar_per_checkpoint_and_one_line_that_sums_it_up(tmp_path, cli):
    run = tmp_path / "run"
    write_burn_run(run, range(1, 4))
    result = cli("diskcheck", "--keep-last", "3", run)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert sum("█" in line or "━" in line for line in lines) >= 4  # three checkpoints and the next save
    summary = next(line for line in lines if line.startswith("next save ≈"))
    assert "free" in summary and "keep-last 3 keeps the run within it" in summary


def test_preflight_is_the_report_diskcheck_prints(tmp_path, cli):
    run = tmp_path / "run"
    write_burn_run(run, range(1, 4))
    report = ckptdoctor.preflight(run, keep_last=2)
    printed = cli("diskcheck", "--json", "--keep-last", "2", run).json
    assert report.ok and report.command == "diskcheck"
    assert printed["disk"]["next_save_bytes"] == report.disk.estimate.bytes
    assert printed["disk"]["saves_until_full"] == report.disk.saves_until_full


def test_a_healthy_run_on_a_roomy_local_disk_is_quiet(tmp_path, cli):
    run = tmp_path / "run"
    write_burn_run(run, range(1, 4))
    result = cli("diskcheck", "--json", "--keep-last", "3", run)
    assert result.exit_code == 0 and result.codes() == []
    disk = result.json["disk"]
    assert disk["writable"] is True and disk["network"] is False and disk["saves_until_full"] is None
    assert set(disk) >= {"path", "fstype", "total_bytes", "free_bytes", "free_inodes", "writable", "next_save_bytes", "saves_until_full"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--margin", "nan"), "--margin must be a fraction"),
        (("--margin", "1e308"), "--margin must be a fraction"),
        (("--model-bytes", "1e400", "--optimizer", "adam"), "not a size"),
        (("--model", "."), "not a file"),
    ],
)
def test_odd_numbers_and_paths_are_usage_errors_not_tracebacks(tmp_path, cli, args, message):
    result = cli("diskcheck", tmp_path / "run", *args)
    assert result.exit_code == 2 and message in result.stderr
    assert "internal error" not in result.stderr


def test_a_file_is_not_a_checkpoint_folder(tmp_path, cli):
    run = tmp_path / "run"
    write_burn_run(run, range(1, 3))
    result = cli("diskcheck", run / "model-1.bpk")
    assert result.exit_code == 2 and "is not a folder" in result.stderr


def test_a_file_standing_where_a_folder_should_be_is_named_and_the_checks_look_above_it(tmp_path, cli):
    """``diskcheck afile/sub``: the save cannot be made (CKD503 names the file), and the fixes'
    permission and mount checks look at the folder that holds the file, which exists."""
    (tmp_path / "afile").write_text("")
    result = cli("diskcheck", "--json", tmp_path / "afile" / "sub")
    (finding,) = [f for f in result.json["findings"] if f["code"] == "CKD503"]
    assert f"{tmp_path / 'afile'} is not a folder" in finding["message"]
    checks = " ".join(finding["fixes"])
    assert f"findmnt -T {tmp_path}`" in checks and "findmnt -T " + str(tmp_path / "afile") not in checks


@pytest.mark.parametrize("command", ["diskcheck", "inspect"])
def test_the_roles_of_the_configuration_named_are_honoured(tmp_path, monkeypatch, cli, command):
    """Issue 33: ``diskcheck --config X`` read X's retention but judged the run with the role hints
    of the configuration nearest the run (none here), where ``inspect --config X`` used X's. A
    project's ``ema-N.bpk`` is a model file only by X's ``[roles]``."""
    run = tmp_path / "run"
    write_burn_run(run, range(1, 4))
    for epoch in range(1, 4):
        (run / f"ema-{epoch}.bpk").write_bytes((run / f"model-{epoch}.bpk").read_bytes())
    settings = tmp_path / "elsewhere" / "ckptdoctor.toml"
    settings.parent.mkdir()
    settings.write_text('[roles]\nema = "model"\n')
    monkeypatch.chdir(tmp_path)  # no configuration above it, nor above the run
    roles = {
        f["path"].rsplit("/", 1)[-1]: f["role"]
        for r in cli(command, "--json", "--config", settings, run).json["runs"]
        for c in r["checkpoints"]
        for f in c["files"]
    }
    assert roles.get("ema-3.bpk") == "model", roles


def test_a_value_error_from_the_scan_is_no_usage_error(tmp_path, monkeypatch, cli):
    """Issue 33: ``diskcheck`` took any ValueError from the whole scan for a usage error (exit 2,
    one line), hiding bugs. Only the declared usage errors are; anything else reaches
    ``cli.main``, which calls it an internal error."""
    from ckptdoctor.pipelines import scan

    run = tmp_path / "run"
    write_burn_run(run, range(1, 3))

    def broken(*args, **kwargs):
        raise ValueError("a bug in the scan")

    monkeypatch.setattr(scan, "scan", broken)
    with pytest.raises(ValueError, match="a bug in the scan"):
        cli("diskcheck", run)
    refused = cli("diskcheck", "--model-bytes", "lots", run)  # a declared usage error still is one
    assert refused.exit_code == 2 and "--model-bytes: not a size" in refused.stderr


def test_the_run_is_judged_by_the_configuration_nearest_it_not_the_working_folders(tmp_path, monkeypatch, cli):
    """Found by issue 33's attack: the command line read the configuration nearest the working
    folder once and handed it to diskcheck, so cron's ``diskcheck /data/proj/run`` lost the run's
    retention (the runway said "nothing deleted between saves") and a broken configuration beside
    the run passed silently. The run's own configuration answers, as it did before the seam."""
    project = tmp_path / "proj"
    write_burn_run(project / "run", range(1, 4))
    (project / "pyproject.toml").write_text("[tool.ckptdoctor.prune]\nkeep-last = 2\n")
    elsewhere = tmp_path / "cron"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli("diskcheck", "--json", project / "run").json["disk"]["keep_last"] == 2
    assert ckptdoctor.preflight(project / "run").disk.keep_last == 2  # the API agrees

    (project / "pyproject.toml").write_text('[tool.ckptdoctor.severity]\nCKD101 = "meh"\n')
    refused = cli("diskcheck", project / "run")
    assert refused.exit_code == 2 and "CKD101" in refused.stderr and "meh" in refused.stderr


def test_a_model_size_given_for_a_run_that_has_saved_sizes_the_next_save_and_says_so(tmp_path, cli):
    """Issue 35, item 7: ``--model-bytes 7GiB`` on a run with saves was silently ignored."""
    run = tmp_path / "run"
    write_burn_run(run, range(1, 4))
    result = cli("diskcheck", "--json", run, "--model-bytes", "7GiB", "--optimizer", "adamw")
    disk = result.json["disk"]
    assert disk["next_save_bytes"] == 3 * 7 * 2**30, "the size given wins: the user knows the next save"
    assert disk["estimate_basis"].startswith("model 7.0 GiB + adamw state (2x the model), from the model size given; the run's last saves ")
    human = cli("diskcheck", run, "--model-bytes", "7GiB", "--optimizer", "adamw")
    assert "next save ≈ 21.0 GiB (model 7.0 GiB + adamw state (2x the model), from the model size given; the run's last saves measure " in (
        " ".join(human.stdout.split())
    )


def test_preflight_sizes_only_a_first_save_from_the_model_a_callback_passes(tmp_path):
    run = tmp_path / "run"
    write_burn_run(run, range(1, 4))
    report = ckptdoctor.preflight(run, model_bytes=7 * 2**30, optimizer="adamw")
    assert report.disk is not None and report.disk.estimate is not None
    assert report.disk.estimate.basis.startswith("the largest of the last 3 complete epochs")
    fresh = ckptdoctor.preflight(tmp_path / "fresh", model_bytes=2**20, optimizer="adamw")
    assert fresh.disk is not None and fresh.disk.estimate is not None and fresh.disk.estimate.bytes == 3 * 2**20
