"""The command line's contracts (DESIGN §3): exit codes, output options, the JSON report's shape,
`inspect --resume`, the human report, colour, the version, and never importing torch."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
from reports import codes
from terminal import in_terminal, shown_until

import ckptdoctor
from ckptdoctor.regular import write_whole
from ckptdoctor.testing import write_burn_run

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "runs"


# --- run builders (real burnpack files from the spec-following writer) ------------------------------


def healthy(root: Path, epochs: range = range(1, 6)) -> Path:
    folder = root / "checkpoint"
    write_burn_run(folder, epochs)
    return folder


def missing_optimizer(root: Path) -> Path:
    """The seed scenario: epoch 5 has a model but no optimizer file."""
    folder = healthy(root, range(3, 6))
    (folder / "optim-5.bpk").unlink()
    return folder


def warning_only(root: Path) -> Path:
    """Bytes past the end of one file (CKD204, a warning) and nothing else."""
    folder = healthy(root)
    with open(folder / "optim-5.bpk", "ab") as handle:
        handle.write(b"\x00" * 64)
    return folder


def info_only(root: Path) -> Path:
    """A recorder-era burn run (CKD210, info) and nothing else."""
    folder = root / "checkpoint"
    folder.mkdir(parents=True)
    metadata = {
        "float": "f32",
        "int": "i32",
        "format": "burn_core::record::file::NamedMpkFileRecorder<burn_core::record::settings::FullPrecisionSettings>",
        "version": "0.21.0",
        "settings": "FullPrecisionSettings",
    }
    for epoch in (1, 2):
        for role, item in (("model", {"w": None}), ("optim", {}), ("scheduler", 97)):
            record = msgpack.packb({"metadata": metadata, "item": item, "_b": []})
            (folder / f"{role}-{epoch}.mpk").write_bytes(record)
    return folder


def nothing_complete(root: Path) -> Path:
    folder = root / "checkpoint"
    write_burn_run(folder, range(1, 4), roles=("model",))
    return folder


# --- exit codes -----------------------------------------------------------------------------------


def test_exit_0_on_a_healthy_run(tmp_path, cli):
    result = cli("inspect", healthy(tmp_path))
    assert result.exit_code == 0
    assert "Resume from epoch 5" in result.stdout


def test_exit_1_on_findings(tmp_path, cli):
    result = cli("inspect", missing_optimizer(tmp_path))
    assert result.exit_code == 1
    assert "CKD101" in result.stdout


def test_exit_2_on_a_path_that_does_not_exist(tmp_path, cli):
    missing = tmp_path / "no" / "such" / "run"
    result = cli("inspect", missing)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(missing) in lines[0]
    assert "No such file or directory" in lines[0]
    assert "Traceback" not in result.stderr


def test_exit_2_when_one_of_several_paths_does_not_exist(tmp_path, cli):
    result = cli("inspect", healthy(tmp_path / "a"), tmp_path / "absent")
    assert result.exit_code == 2
    assert str(tmp_path / "absent") in result.stderr


def test_exit_2_in_a_real_process_without_traceback(tmp_path):
    missing = tmp_path / "absent"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # as from a job script
    proc = subprocess.run(
        [sys.executable, "-m", "ckptdoctor", "inspect", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert len(str(missing)) > 40  # long enough that a wrapping console would split the line
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert str(missing) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_fail_on_warning_turns_a_warning_only_run_into_exit_1(tmp_path, cli):
    folder = warning_only(tmp_path)
    assert codes(cli("inspect", "--json", folder)) == ["CKD204"]
    assert cli("inspect", folder).exit_code == 0
    assert cli("inspect", "--fail-on", "error", folder).exit_code == 0
    assert cli("inspect", "--fail-on", "warning", folder).exit_code == 1
    assert cli("inspect", "--fail-on", "info", folder).exit_code == 1


def test_fail_on_info_is_the_only_threshold_an_info_finding_reaches(tmp_path, cli):
    folder = info_only(tmp_path)
    assert codes(cli("inspect", "--json", folder)) == ["CKD210"]
    assert cli("inspect", "--fail-on", "warning", folder).exit_code == 0
    assert cli("inspect", "--fail-on", "info", folder).exit_code == 1


def test_exit_zero_keeps_the_report_but_exits_0(tmp_path, cli):
    folder = missing_optimizer(tmp_path)
    result = cli("inspect", "--exit-zero", folder)
    assert result.exit_code == 0
    assert "CKD101" in result.stdout
    assert codes(cli("inspect", "--exit-zero", "--json", folder)) == ["CKD101"]


def test_exit_zero_does_not_hide_a_missing_path(tmp_path, cli):
    assert cli("inspect", "--exit-zero", tmp_path / "absent").exit_code == 2


def test_invalid_option_value_is_a_usage_error(tmp_path, cli):
    result = cli("inspect", "--fail-on", "catastrophe", healthy(tmp_path))
    assert result.exit_code == 2


# --- output options --------------------------------------------------------------------------------


def test_quiet_prints_nothing_on_success(tmp_path, cli):
    result = cli("inspect", "-q", healthy(tmp_path))
    assert result.exit_code == 0
    assert result.stdout == ""
    assert result.stderr == ""


def test_quiet_prints_the_report_on_failure(tmp_path, cli):
    folder = missing_optimizer(tmp_path)
    result = cli("inspect", "-q", folder)
    assert result.exit_code == 1
    assert "CKD101" in result.stdout
    assert "Resume from epoch 4" in result.stdout
    quiet_json = cli("inspect", "-q", "--json", folder)
    assert codes(quiet_json) == ["CKD101"]


@pytest.mark.parametrize("fmt", ["json", "human"])
def test_output_file_gets_the_report_and_stdout_stays_empty(tmp_path, cli, fmt):
    folder = missing_optimizer(tmp_path / "run")
    target = tmp_path / f"report.{fmt}"
    args = ["--json"] if fmt == "json" else []
    result = cli("inspect", *args, "-o", target, folder)
    assert result.exit_code == 1
    assert result.stdout == ""
    text = target.read_text(encoding="utf-8")
    if fmt == "json":
        document = json.loads(text)
        assert [f["code"] for f in document["findings"]] == ["CKD101"]
        assert document == json.loads(cli("inspect", "--json", folder).stdout)
    else:
        assert "CKD101" in text
        assert "Resume from epoch 4" in text
        assert "\x1b[" not in text


def test_output_file_long_option(tmp_path, cli):
    target = tmp_path / "report.json"
    result = cli("inspect", "--format", "json", "--output", target, healthy(tmp_path / "run"))
    assert result.exit_code == 0
    assert result.stdout == ""
    assert json.loads(target.read_text())["schema"] == "ckptdoctor.report.v1"


def test_an_output_file_is_replaced_whole_or_not_at_all(tmp_path, cli):
    """A report that fails part-way (here: its writing runs out of room after the first part)
    leaves the earlier report as it was and no partial file beside it; a link to the report
    stays a link; a file's mode stays its own."""
    folder = healthy(tmp_path / "run")
    target = tmp_path / "report.json"
    assert cli("inspect", "--json", "--output", target, folder).exit_code == 0
    before = target.read_bytes()
    target.chmod(0o640)

    def runs_out_of_room() -> Iterator[bytes]:
        yield b'{"schema":'
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write_whole(str(target), runs_out_of_room())
    assert target.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "run"]

    (tmp_path / "link.json").symlink_to("report.json")
    assert cli("inspect", "--json", "--output", tmp_path / "link.json", missing_optimizer(tmp_path / "other")).exit_code == 1
    assert (tmp_path / "link.json").is_symlink() and json.loads(target.read_text())["findings"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_a_run_reached_by_two_paths_is_reported_once(tmp_path, cli, monkeypatch):
    """A path given twice, a run given beside the folder above it, a link to it: one run, its
    findings once, and no "No checkpoints found" for the path that reached it again."""
    missing_optimizer(tmp_path / "runs" / "exp1")
    healthy(tmp_path / "runs" / "exp2")
    (tmp_path / "again").symlink_to(tmp_path / "runs" / "exp1")
    monkeypatch.chdir(tmp_path)
    alone = json.loads(cli("inspect", "--json", "runs").stdout)
    for paths in (("runs", "runs"), ("runs", "runs/exp1"), ("runs/exp1/checkpoint", "runs"), ("runs", "again")):
        result = cli("inspect", "--json", *paths)
        report = json.loads(result.stdout)
        assert [run["path"] for run in report["runs"]] == [run["path"] for run in alone["runs"]], paths
        assert report["summary"] == alone["summary"] == {"error": 1, "warning": 0, "info": 0}, paths
        assert "No checkpoints found" not in result.stderr, paths


def test_json_flag_equals_format_json(tmp_path, cli):
    folder = missing_optimizer(tmp_path)
    short = cli("inspect", "--json", folder)
    long = cli("inspect", "--format", "json", folder)
    assert short.exit_code == long.exit_code == 1
    assert short.stdout == long.stdout
    json.loads(short.stdout)


# --- the JSON report (DESIGN §3.3) ------------------------------------------------------------------


def test_json_report_shape(tmp_path, cli, monkeypatch):
    folder = missing_optimizer(tmp_path / "exp1")
    monkeypatch.chdir(tmp_path)
    result = cli("inspect", "--json", "exp1")
    assert result.exit_code == 1
    report = json.loads(result.stdout)

    assert {"schema", "version", "command", "runs", "findings", "summary"} <= set(report)
    assert report["schema"] == "ckptdoctor.report.v1"
    assert report["version"] == ckptdoctor.__version__
    assert report["command"] == "inspect"

    assert len(report["runs"]) == 1
    run = report["runs"][0]
    assert {"path", "layout", "unit", "bytes", "checkpoints", "resume"} <= set(run)
    assert run["path"] == "exp1/checkpoint"  # as the user gave it, joined with the path below
    assert run["layout"] == "burn"
    assert run["unit"] == "epoch"
    on_disk = {f"exp1/checkpoint/{p.name}": p.stat().st_size for p in folder.iterdir()}
    assert run["bytes"] == sum(on_disk.values())

    assert [c["index"] for c in run["checkpoints"]] == [3, 4, 5]
    for item in run["checkpoints"]:
        assert {"index", "status", "bytes", "files"} <= set(item)
        assert isinstance(item["index"], int)
        assert item["status"] in ("complete", "incomplete", "partial", "corrupt")
        assert item["bytes"] == sum(f["bytes"] for f in item["files"])
        for file in item["files"]:
            assert {"role", "path", "bytes", "format"} <= set(file)
            assert file["path"] in on_disk
            assert file["bytes"] == on_disk[file["path"]]
            assert file["format"] == "burnpack"
    roles = {c["index"]: [f["role"] for f in c["files"]] for c in run["checkpoints"]}
    assert roles[4] == ["model", "optimizer", "scheduler"]
    assert sorted(roles[5]) == ["model", "scheduler"]
    assert [c["status"] for c in run["checkpoints"]] == ["complete", "complete", "incomplete"]

    assert run["resume"] == {
        "index": 4,
        "paths": [f"exp1/checkpoint/{n}" for n in ("model-4.bpk", "optim-4.bpk", "scheduler-4.bpk")],
        "weights_only": False,
        "path": "exp1",  # burn resumes from the artifact folder above checkpoint/
        "how": "pass `.checkpoint(4)` to burn's `SupervisedTraining` (or `LearnerBuilder`)",
    }
    assert run["weights_only"] is None

    assert len(report["findings"]) == 1
    finding = report["findings"][0]
    assert {"code", "name", "severity", "run", "index", "path", "message", "fixes"} <= set(finding)
    assert finding["code"] == "CKD101"
    assert finding["name"] == "missing-optimizer"
    assert finding["severity"] == "error"
    assert finding["run"] == "exp1/checkpoint"
    assert finding["index"] == 5
    assert finding["path"] == "exp1/checkpoint/model-5.bpk"
    assert "optim-5.bpk" in finding["message"]
    assert isinstance(finding["fixes"], list) and all(isinstance(f, str) for f in finding["fixes"])
    assert not any(fix.startswith("Resume from") for fix in finding["fixes"])  # the run says it once: runs[].resume

    assert report["summary"] == {"error": 1, "warning": 0, "info": 0}


def test_json_resume_is_null_and_summary_counts_one_finding_per_cause(tmp_path, cli):
    folder = nothing_complete(tmp_path)
    report = json.loads(cli("inspect", "--json", folder).stdout)
    assert report["runs"][0]["resume"] is None
    severities = [f["severity"] for f in report["findings"] if "part_of" not in f]  # a part counts with its finding
    assert report["summary"] == {s: severities.count(s) for s in ("error", "warning", "info")}
    assert report["summary"]["error"] >= 1
    run_level = [f for f in report["findings"] if f["code"] == "CKD110"]
    assert len(run_level) == 1 and run_level[0]["index"] is None


def test_json_report_for_several_runs(tmp_path, cli):
    healthy(tmp_path / "runs" / "a")
    missing_optimizer(tmp_path / "runs" / "b")
    report = json.loads(cli("inspect", "--json", tmp_path / "runs").stdout)
    paths = [run["path"] for run in report["runs"]]
    assert paths == [str(tmp_path / "runs" / x / "checkpoint") for x in ("a", "b")]
    assert [run["resume"]["index"] for run in report["runs"]] == [5, 4]
    assert {f["run"] for f in report["findings"]} == {paths[1]}


# --- inspect --resume --------------------------------------------------------------------------------


def test_resume_prints_only_the_index(tmp_path, cli):
    result = cli("inspect", "--resume", healthy(tmp_path / "ok"))
    assert result.exit_code == 0
    assert result.stdout == "5\n"
    result = cli("inspect", "--resume", missing_optimizer(tmp_path / "seed"))
    assert result.exit_code == 0
    assert result.stdout == "4\n"


def test_resume_exits_1_with_nothing_on_stdout_when_nothing_is_complete(tmp_path, cli):
    result = cli("inspect", "--resume", nothing_complete(tmp_path))
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.strip()


def test_resume_on_a_missing_path_exits_2(tmp_path, cli):
    result = cli("inspect", "--resume", tmp_path / "absent")
    assert result.exit_code == 2
    assert result.stdout == ""


# --- the human report ----------------------------------------------------------------------------


def _blocks(stdout: str, run_paths: list[str]) -> list[list[str]]:
    """The lines of each run's block, from its title line to the next run's title (or to the
    summary of several runs, which ends the report)."""
    lines = stdout.splitlines()
    summary = next((i for i, line in enumerate(lines) if re.match(r"\d+ runs( in |$)", line)), len(lines))
    lines = lines[:summary]
    starts = []
    for path in run_paths:
        matches = [i for i, line in enumerate(lines) if line.startswith(path + "  ")]
        assert len(matches) == 1, (path, stdout)
        starts.append(matches[0])
    assert starts == sorted(starts)
    ends = [*starts[1:], len(lines)]
    return [[line for line in lines[a:b] if line.strip()] for a, b in zip(starts, ends, strict=True)]


def test_human_report_ends_each_run_with_its_resume_point(tmp_path, cli):
    healthy(tmp_path / "runs" / "a")
    missing_optimizer(tmp_path / "runs" / "b")
    nothing_complete(tmp_path / "runs" / "c")
    result = cli("inspect", tmp_path / "runs")
    assert result.exit_code == 1
    paths = [str(tmp_path / "runs" / x / "checkpoint") for x in ("a", "b", "c")]
    a, b, c = _blocks(result.stdout, paths)
    assert a[-2:] == [
        "Resume from epoch 5: model-5.bpk, optim-5.bpk, scheduler-5.bpk",
        "  how: pass `.checkpoint(5)` to burn's `SupervisedTraining` (or `LearnerBuilder`)",
    ]
    assert b[-2] == "Resume from epoch 4: model-4.bpk, optim-4.bpk, scheduler-4.bpk"
    assert b[-1].startswith("  how: pass `.checkpoint(4)`")
    # said once per run: no finding's fix repeats it
    assert sum("Resume from" in line or ".checkpoint(4)" in line for line in b) == 2
    assert any("CKD101" in line for line in b)  # the findings sit above the resume line
    assert c[-1].startswith("No checkpoint to resume from")
    assert "CKD110" in c[-1]


def test_human_report_has_a_row_per_checkpoint_with_its_status(tmp_path, cli):
    result = cli("inspect", missing_optimizer(tmp_path))
    rows = {int(m[1]): m[0] for m in re.finditer(r"^\s*(\d+)\s+model-\d+\.bpk.*$", result.stdout, re.MULTILINE)}
    assert sorted(rows) == [3, 4, 5]
    assert "complete" in rows[4] and "optim-4.bpk" in rows[4] and "scheduler-4.bpk" in rows[4]
    assert "incomplete" in rows[5] and "missing" in rows[5]
    header = next(line for line in result.stdout.splitlines() if line.lstrip().startswith("EPOCH"))
    for column in ("MODEL", "OPTIMIZER", "SCHEDULER", "SIZE", "STATUS"):
        assert column in header


def _row_indexes(stdout: str) -> list[int]:
    return [int(m) for m in re.findall(r"^\s*(\d+)\s+model-\d+\.bpk", stdout, re.MULTILINE)]


def test_human_report_shows_the_newest_20_rows_unless_all(tmp_path, cli):
    folder = healthy(tmp_path, range(1, 26))
    result = cli("inspect", folder)
    assert result.exit_code == 0
    assert _row_indexes(result.stdout) == list(range(6, 26))
    assert "5 older checkpoints not shown" in result.stdout
    *_, resume, _how, summary = result.stdout.rstrip().splitlines()
    assert resume.startswith("Resume from epoch 25") and summary == "0 errors, 0 warnings, 0 info in 1 run."

    everything = cli("inspect", "--all", folder)
    assert _row_indexes(everything.stdout) == list(range(1, 26))
    assert "not shown" not in everything.stdout


def test_human_report_of_20_rows_hides_nothing(tmp_path, cli):
    result = cli("inspect", healthy(tmp_path, range(1, 21)))
    assert _row_indexes(result.stdout) == list(range(1, 21))
    assert "not shown" not in result.stdout


def test_human_report_off_a_terminal_has_no_escapes(tmp_path, cli):
    result = cli("inspect", missing_optimizer(tmp_path), env={"NO_COLOR": ""})
    assert "\x1b[" not in result.stdout
    assert "\x1b[" not in result.stderr


_SGR = re.compile(rb"\x1b\[([0-9;]*)m")


def _colour_codes(output: bytes) -> set[int]:
    """SGR parameters that set a foreground or background colour (not bold, dim or reset)."""
    found: set[int] = set()
    for params in _SGR.findall(output):
        for part in params.split(b";"):
            if part and (30 <= int(part) <= 49 or 90 <= int(part) <= 107):
                found.add(int(part))
    return found


@pytest.mark.slow
def test_no_color_is_respected_on_a_terminal(tmp_path):
    folder = missing_optimizer(tmp_path)
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE", "TTY_COMPATIBLE")}
    base["TERM"] = "xterm-256color"
    args = [sys.executable, "-m", "ckptdoctor", "inspect", str(folder)]

    code, coloured, _ = in_terminal(args, base)
    assert code == 1
    assert _colour_codes(coloured), "on a terminal the report is coloured (the control case)"

    code, plain, _ = in_terminal(args, {**base, "NO_COLOR": "1"})
    assert code == 1
    assert b"CKD101" in plain
    assert _colour_codes(plain) == set()


# --- version and entry points ---------------------------------------------------------------------


def test_version_option(cli):
    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"ckptdoctor {ckptdoctor.__version__}"


def test_python_dash_m_version():
    proc = subprocess.run([sys.executable, "-m", "ckptdoctor", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"ckptdoctor {ckptdoctor.__version__}"
    assert re.fullmatch(r"ckptdoctor \d+\.\d+\.\d+\S*", proc.stdout.strip())


def test_help_lists_the_commands(cli):
    result = cli("--help")
    assert result.exit_code == 0
    assert "inspect" in result.stdout and "rules" in result.stdout


# --- torch is never imported by inspect, rules or --help -----------------------------------------------

_PROBE = """
import atexit, sys
atexit.register(lambda: print("TORCH-IMPORTED=" + str("torch" in sys.modules), file=sys.stderr))
{prelude}
sys.argv = ["ckptdoctor", *sys.argv[1:]]
from ckptdoctor.cli import main
main()
"""


def _torch_imported(args: list[str], prelude: str = "") -> bool:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE.format(prelude=prelude), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    markers = re.findall(r"TORCH-IMPORTED=(True|False)", proc.stderr)
    assert markers, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return markers[-1] == "True"


def _torch_run(tmp_path: Path) -> Path:
    """A run with torch files, so that inspect has every reason to reach for torch."""
    if (EXAMPLES / "torch-split").is_dir():
        return EXAMPLES
    return healthy(tmp_path)


@pytest.mark.parametrize(
    "args",
    [["inspect"], ["inspect", "--json"], ["rules"], ["rules", "CKD101"], ["--help"], ["inspect", "--help"]],
    ids=["inspect", "inspect-json", "rules", "rules-code", "help", "inspect-help"],
)
def test_torch_is_never_imported(tmp_path, args):
    if args[0] == "inspect" and "--help" not in args:
        args = [*args, str(_torch_run(tmp_path))]
    assert _torch_imported(args) is False


@pytest.mark.slow
def test_torch_import_probe_detects_torch():
    """The control: the same probe reports torch once a module of that name is loaded."""
    prelude = "import types; sys.modules['torch'] = types.ModuleType('torch')"
    assert _torch_imported(["rules"], prelude=prelude) is True


@pytest.mark.slow
def test_ctrl_c_exits_130_without_a_traceback(tmp_path):
    """SIGINT in the middle of a big scan (parallel probing included) exits 130, quietly."""
    import pty
    import signal
    import time

    from ckptdoctor.testing import write_burn_run

    folder = tmp_path / "checkpoint"
    write_burn_run(folder, [1])
    for epoch in range(2, 10_001):  # hard links: a scan of a second or two, set up in less
        for role in ("model", "optim", "scheduler"):
            os.link(folder / f"{role}-1.bpk", folder / f"{role}-{epoch}.bpk")
    # stderr on a terminal, where the scan's status line shows the moment the scan begins: the
    # signal to interrupt it, however long start-up takes on a loaded machine
    terminal, stderr = pty.openpty()
    env = os.environ | {"CKPTDOCTOR_PROGRESS_AFTER": "0", "NO_COLOR": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "ckptdoctor", "inspect", "--json", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=stderr, env=env
    )
    os.close(stderr)
    shown = shown_until(terminal, process, b"scanning: ", time.monotonic() + 120)
    if b"scanning: " not in shown or process.poll() is not None:
        os.close(terminal)
        process.wait(timeout=60)
        pytest.skip("the scan finished before it could be interrupted on this machine")
    process.send_signal(signal.SIGINT)
    shown += shown_until(terminal, process, None, time.monotonic() + 60)
    os.close(terminal)
    assert process.wait(timeout=60) == 130
    assert b"Traceback" not in shown
    assert b"Interrupted" in shown


def test_prune_and_repair_take_config_like_the_other_commands(tmp_path, cli):
    """Issue 15's drift: `prune --config x.toml` said "No such option"."""
    from ckptdoctor.testing import write_burn_run

    run = tmp_path / "run"
    write_burn_run(run, range(1, 5))
    settings = tmp_path / "elsewhere" / "ckptdoctor.toml"
    settings.parent.mkdir()
    settings.write_text('[prune]\nkeep-last = 1\nmin-age = "0s"\n')
    plan = cli("prune", "--config", settings, "--dry-run", "--json", run).json["plan"]
    assert [item["index"] for item in plan if item["action"] == "delete"] == [1, 2, 3]
    assert cli("repair", "--config", settings, "--dry-run", run).exit_code == 0
    settings.write_text("bogus = 1\n")  # read, and refused by name, by both
    for command in ("prune", "repair"):
        refused = (
            cli(command, "--config", settings, "--dry-run", "--keep-last", "1", run)
            if command == "prune"
            else cli(command, "--config", settings, "--dry-run", run)
        )
        assert refused.exit_code == 2 and "bogus" in refused.stderr, command


def test_preflight_uses_the_role_hints_of_the_runs_own_configuration(tmp_path, monkeypatch):
    """Issue 15's drift: `[tool.ckptdoctor.roles]` reached preflight only after some CLI command
    had run in the same process. A project's `ema-N.bpk` is then a model file, not a stray."""
    import ckptdoctor
    from ckptdoctor.testing import write_burn_run

    project = tmp_path / "project"
    run = project / "checkpoint"
    write_burn_run(run, range(1, 4))
    for epoch in range(1, 4):
        (run / f"ema-{epoch}.bpk").write_bytes((run / f"model-{epoch}.bpk").read_bytes())
    monkeypatch.chdir(tmp_path)  # not the project: its pyproject is found from the run
    plain = ckptdoctor.preflight(run)
    assert "ema" not in {f.prefix for r in plain.runs for c in r.checkpoints for f in c.files}
    (project / "pyproject.toml").write_text('[tool.ckptdoctor.roles]\nema = "model"\n')
    hinted = ckptdoctor.preflight(run)
    prefixes = {f.prefix for r in hinted.runs for c in r.checkpoints for f in c.files}
    assert "ema" in prefixes
