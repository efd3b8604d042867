"""The command line's output contracts of issue 35 (items 6 and 7): Ctrl-C from the first moment,
notes once per command and nothing on success with ``-q``, the summary line in the report,
``--color`` and ``NO_COLOR``, option errors in ckptdoctor's words, and flags that conflict."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from terminal import in_terminal

from ckptdoctor.testing import write_burn_run

REPO = Path(__file__).resolve().parents[1]


def _age(folder: Path) -> None:
    """Older than --min-age, so that prune and repair plan for every file."""
    when = time.time() - 86400
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (when, when))


# --- Ctrl-C from the program's first moment -------------------------------------------------------

_CONSOLE_SCRIPT = "import sys; from ckptdoctor.__main__ import program; sys.exit(program())"
"""What the ``ckptdoctor`` console script runs (pip writes these two lines)."""
ENTRY_POINTS = {"console-script": [sys.executable, "-c", _CONSOLE_SCRIPT], "python-m": [sys.executable, "-m", "ckptdoctor"]}

_SIGINT_ON_IMPORT = """
import os, signal, sys

class _CtrlC:
    '''SIGINT to this process as {module} starts to be imported: a Ctrl-C landing there.'''

    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, _CtrlC())
"""


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("module", ["typer", "rich", "ckptdoctor.cli", "ckptdoctor.api", "ckptdoctor.cli.inspect"])
def test_ctrl_c_while_the_program_starts_is_interrupted_and_130(tmp_path: Path, module: str, entry: str) -> None:
    """Deterministic: the signal lands exactly as each module of the start-up path is imported
    (a sitecustomize the interpreter loads before the program sets the hook)."""
    (tmp_path / "sitecustomize.py").write_text(_SIGINT_ON_IMPORT.format(module=module))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "NO_COLOR": "1"}
    done = subprocess.run([*ENTRY_POINTS[entry], "inspect", str(tmp_path)], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130 and done.stderr.splitlines()[-1] == "Interrupted.", (done.returncode, done.stderr)


def _interrupted_after(delay: float) -> subprocess.CompletedProcess[str] | None:
    """``ckptdoctor rules`` sent SIGINT ``delay`` s after it was started; None where the signal
    landed before ckptdoctor's program began (``ckptdoctor/__main__.py``): killed, saying nothing,
    by a signal Python did not handle yet, or Python's own KeyboardInterrupt in the interpreter's
    start-up or its import of the package, with no frame of the program."""
    process = subprocess.Popen(
        [*ENTRY_POINTS["console-script"], "rules"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    program = str(REPO / "ckptdoctor" / "__main__.py")
    if (process.returncode == -signal.SIGINT and not stderr) or ("KeyboardInterrupt" in stderr and program not in stderr):
        return None
    return subprocess.CompletedProcess(process.args, process.returncode, "", stderr)


@pytest.mark.slow
def test_ctrl_c_at_any_early_moment_is_interrupted_and_130() -> None:
    """By the clock, as a user's Ctrl-C comes: each delay is tried until its signal lands where
    ckptdoctor runs (on a loaded machine start-up takes longer); every such try says
    "Interrupted." and exits 130, or exits 0 having finished first."""
    landed = 0
    for delay in (0.0, 0.01, 0.05, 0.1, 0.15):
        for attempt in range(5):
            done = _interrupted_after(delay + attempt * 0.01)
            if done is None:
                continue
            landed += 1
            assert "Traceback" not in done.stderr, (delay, done.stderr)
            assert done.returncode == 0 or (done.returncode == 130 and "Interrupted." in done.stderr), (delay, done)
            break
    if not landed:
        pytest.skip("every signal landed before the interpreter had started on this machine")


# --- the summary line ends the human report -------------------------------------------------------


def _missing_optimizer(root: Path) -> Path:
    """A burn run whose epoch 5 has no optimizer file (CKD101: an error, exit 1)."""
    folder = root / "checkpoint"
    write_burn_run(folder, range(3, 6))
    (folder / "optim-5.bpk").unlink()
    return folder


SUMMARY = "1 error, 0 warnings, 0 info in 1 run."


def test_the_summary_is_the_last_line_of_the_report_on_stdout(tmp_path: Path, cli: Callable[..., Any]) -> None:
    result = cli("inspect", _missing_optimizer(tmp_path))
    assert result.exit_code == 1
    assert result.stdout.rstrip("\n").splitlines()[-1] == SUMMARY, result.stdout
    assert "error" not in result.stderr, "a count, not a message: stderr has nothing to say"
    for fmt in ("json", "sarif", "junit", "github", "markdown"):  # the count is the human report's alone
        other = cli("inspect", "--format", fmt, _missing_optimizer(tmp_path / fmt))
        assert SUMMARY not in other.stdout + other.stderr, fmt


def test_the_summary_is_written_to_the_output_file_too(tmp_path: Path, cli: Callable[..., Any]) -> None:
    report = tmp_path / "report.txt"
    result = cli("verify", "-o", report, _missing_optimizer(tmp_path))
    assert result.exit_code == 1 and result.stdout == ""
    assert report.read_text().rstrip("\n").splitlines()[-1] == SUMMARY


# --- --color, NO_COLOR, FORCE_COLOR ---------------------------------------------------------------

UNSET = {"NO_COLOR": None, "FORCE_COLOR": None, "TTY_COMPATIBLE": None}
"""The environment with neither variable set (the ``cli`` fixture sets NO_COLOR)."""
COMMANDS = (("inspect",), ("verify",), ("prune", "--dry-run", "--keep-last", "1"), ("repair", "--dry-run"))


def _styled(result: Any) -> bool:
    return "\x1b[" in result.stdout + result.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
@pytest.mark.parametrize(
    ("given", "env", "styles"),
    [
        ((), {}, False),  # piped: plain
        (("--color", "always"), {}, True),  # forced, piped
        (("--color", "always"), {"NO_COLOR": "1"}, True),  # the flag wins over NO_COLOR
        (("--color", "never"), {"FORCE_COLOR": "1"}, False),  # and over FORCE_COLOR
        ((), {"FORCE_COLOR": "1"}, True),
        ((), {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),  # NO_COLOR wins over FORCE_COLOR: no bold, no dim either
        (("--color", "NEVER"), {"FORCE_COLOR": "1"}, False),
    ],
    ids=["piped", "always", "always-over-no-color", "never-over-force-color", "force-color", "no-color-over-force-color", "case"],
)
def test_color_flag_over_no_color_over_force_color_over_the_terminal(
    tmp_path: Path, cli: Callable[..., Any], command: tuple[str, ...], given: tuple[str, ...], env: dict[str, str], styles: bool
) -> None:
    folder = _missing_optimizer(tmp_path)
    _age(folder)
    result = cli(*command, *given, folder, env={**UNSET, **env})
    assert result.exit_code in (0, 1), result.stderr
    assert _styled(result) is styles, (result.stdout, result.stderr)


def test_rules_takes_color_too(cli: Callable[..., Any]) -> None:
    assert _styled(cli("rules", "--color", "always", env=UNSET))
    assert not _styled(cli("rules", "--color", "never", env={**UNSET, "FORCE_COLOR": "1"}))


def test_an_output_file_is_plain_whatever_color_says(tmp_path: Path, cli: Callable[..., Any]) -> None:
    report = tmp_path / "report.txt"
    cli("inspect", "--color", "always", "-o", report, _missing_optimizer(tmp_path), env=UNSET)
    assert "CKD101" in report.read_text() and "\x1b" not in report.read_text()


@pytest.mark.slow
@pytest.mark.parametrize(("given", "env"), [((), {"NO_COLOR": "1"}), (("--color", "never"), {})], ids=["NO_COLOR", "never"])
def test_on_a_terminal_no_color_and_never_leave_no_escape_at_all(tmp_path: Path, given: tuple[str, ...], env: dict[str, str]) -> None:
    """Not a colour, and not bold or dim either (rich's own NO_COLOR keeps those)."""
    folder = _missing_optimizer(tmp_path)
    base = {k: v for k, v in os.environ.items() if k not in UNSET} | {"TERM": "xterm-256color", "COLUMNS": "120"}
    args = [sys.executable, "-m", "ckptdoctor", "inspect", str(folder)]
    code, coloured, _ = in_terminal(args, base)
    assert code == 1 and b"\x1b[1m" in coloured, "on a terminal the report is styled (the control case)"
    code, plain, _ = in_terminal([*args, *given], base | env)
    assert code == 1 and b"CKD101" in plain and SUMMARY.encode() in plain
    assert b"\x1b" not in plain, plain


# --- a command line the parser refuses: one line, in ckptdoctor's words, exit 2 -------------------

REFUSED = [
    (("prune", "--keep-last", "-1"), "--keep-last must be 0 or more, not -1"),
    (("prune", "--keep-best", "-2"), "--keep-best must be 0 or more, not -2"),
    (("prune", "--keep-every", "0"), "--keep-every must be 1 or more, not 0"),
    (("prune", "--max-runs", "0"), "--max-runs must be 1 or more, not 0"),
    (("prune", "--keep-last", "two"), "--keep-last must be a whole number, not 'two'"),
    (("prune", "--keep", "x"), "--keep must be a whole number, not 'x'"),
    (("diskcheck", "--keep-last", "0"), "--keep-last must be 1 or more, not 0"),
    (("diskcheck", "--runway", "0"), "--runway must be 1 or more, not 0"),
    (("diskcheck", "--margin", "-0.5"), "--margin must be a fraction between 0 and 10, not -0.5"),
    (("diskcheck", "--margin", "lots"), "--margin must be a number, not 'lots'"),
    (("verify", "--jobs", "-1"), "--jobs must be 0 or more, not -1"),
    (("inspect", "--fail-on", "catastrophe"), "--fail-on must be one of error, warning or info, not 'catastrophe'"),
    (("repair", "--color", "sometimes"), "--color must be one of auto, always or never, not 'sometimes'"),
    (("rules", "--format", "junit"), "--format must be one of human, json or sarif, not 'junit'"),
    (("inspect", "--ignor", "CKD101"), "no option --ignor (did you mean --ignore?): `ckptdoctor inspect -h` lists them"),
    (("prune", "--keep-last"), "option '--keep-last' requires an argument: `ckptdoctor prune -h` says how it is used"),
    (("inspekt",), "no such command 'inspekt' (did you mean 'inspect'?): `ckptdoctor -h` says how it is used"),
]


@pytest.mark.parametrize(("args", "said"), REFUSED, ids=[" ".join(args) for args, _ in REFUSED])
def test_a_refused_option_is_one_line_in_ckptdoctors_words(cli: Callable[..., Any], args: tuple[str, ...], said: str) -> None:
    result = cli(*args)
    assert result.exit_code == 2
    assert result.stderr == f"ckptdoctor: error: {said}\n"
    assert result.stdout == ""


def test_help_and_choices_in_any_case_are_as_they_were(tmp_path: Path, cli: Callable[..., Any]) -> None:
    """Beside the one-line refusal: ``ckptdoctor`` alone still shows its help, and a choice in
    capitals is still the same choice."""
    alone = cli()
    assert "Commands" in alone.stdout + alone.stderr and "ckptdoctor: error" not in alone.stderr
    folder = _missing_optimizer(tmp_path)
    assert cli("inspect", "--fail-on", "WARNING", "--color", "NEVER", folder).exit_code == 1
    assert cli("inspect", "--fail-on", "warn", folder).stderr.count("\n") == 1


# --- flags that conflict, and --resume with --json --------------------------------------------------

CONFLICTING = [("inspect",), ("verify",), ("diskcheck",), ("prune", "--dry-run", "--keep-last", "1"), ("repair", "--dry-run")]


@pytest.mark.parametrize("command", [*CONFLICTING, ("rules",)], ids=lambda command: command[0])
def test_json_beside_another_format_is_refused(tmp_path: Path, cli: Callable[..., Any], command: tuple[str, ...]) -> None:
    where = () if command == ("rules",) else (_missing_optimizer(tmp_path),)
    result = cli(*command, "--format", "sarif", "--json", *where)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == "ckptdoctor: error: --json is short for --format json, and --format sarif was given too: pass one of them\n"
    assert cli(*command, "--format", "JSON", "--json", *where).exit_code in (0, 1), "the same format twice is no conflict"


@pytest.mark.parametrize("command", ["inspect", "verify"])
@pytest.mark.parametrize("flag", ["--resume", "--resume-path"])
def test_resume_with_json_prints_one_json_object(tmp_path: Path, cli: Callable[..., Any], command: str, flag: str) -> None:
    folder = _missing_optimizer(tmp_path)
    result = cli(command, flag, "--json", folder)
    assert result.exit_code == 0, result.stderr
    # burn resumes from the run's artifact folder, the checkpoint folder's parent
    assert json.loads(result.stdout) == {"run": str(folder), "unit": "epoch", "index": 4, "resume_path": str(folder.parent)}
    plain = cli(command, flag, folder).stdout.strip()
    assert plain == ("4" if flag == "--resume" else str(folder.parent)), "without --json, the one word as before"


# --- notes once per command, and nothing at all from -q on success --------------------------------


def _young_runs(root: Path, count: int = 4) -> list[Path]:
    """``count`` runs of five epochs, just written: a prune keeping 2 keeps the rest for --min-age,
    and notes it, run by run."""
    folders = [root / f"run{n}" / "checkpoint" for n in range(count)]
    for folder in folders:
        write_burn_run(folder, range(1, 6))
    return folders


def test_a_note_of_every_run_is_one_line_naming_them(tmp_path: Path, cli: Callable[..., Any], fake_machine: Any) -> None:
    runs = _young_runs(tmp_path)
    result = cli("prune", "--yes", "--keep-last", "2", tmp_path)
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines, "the control: the runs' notes are there to be said"
    templates = list(lines)
    for run in sorted(map(str, runs), key=len, reverse=True):
        templates = [line.replace(run, "<run>") for line in templates]
    assert len(templates) == len(set(templates)), "no two lines that differ only in their run:\n" + result.stderr
    noted = [line for line in lines if str(runs[0]) in line]
    assert len(noted) == 1 and all(str(run) in noted[0] for run in runs[1:]), "the one line names every run it holds for"


def test_notes_told_twice_are_said_once_and_those_of_several_runs_as_one(capsys: pytest.CaptureFixture[str]) -> None:
    from ckptdoctor.cli._acting import Notes

    notes = Notes(quiet=False)
    notes.runs_are(["/r/a", "/r/a/b", "/r/c"])
    for text in ("note: the process table cannot be read", "/r/a: kept. `prune /r/a`", "note: the process table cannot be read"):
        notes.hear(text)
    notes.hear("/r/a/b: kept. `prune /r/a/b`")
    notes.hear("/r/c: kept. `prune /r/c`")
    notes.flush()
    notes.hear("note: the process table cannot be read")  # said already: not again
    notes.flush()
    assert capsys.readouterr().err.splitlines() == [
        "note: the process table cannot be read",
        "/r/a: kept. `prune /r/a` (and the same for 2 more runs: /r/a/b, /r/c)",
    ]


@pytest.mark.parametrize(
    "command", [("prune", "--yes", "--keep-last", "2"), ("repair", "--yes"), ("prune", "--dry-run", "--keep-last", "2")], ids=" ".join
)
def test_quiet_prints_nothing_at_all_on_success(
    tmp_path: Path, cli: Callable[..., Any], fake_machine: Any, command: tuple[str, ...]
) -> None:
    runs = _young_runs(tmp_path)
    write_burn_run(runs[0], [6], roles=("model",))  # epoch 6: a model alone, which repair would move (were it not young)
    loud = cli(*command, tmp_path)
    assert loud.exit_code == 0 and loud.stdout, "the control: without -q, the plans (and the notes)"
    quiet = cli(*command, "-q", tmp_path)
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")


def test_quiet_holds_the_notes_until_the_command_fails(tmp_path: Path, cli: Callable[..., Any], fake_machine: Any) -> None:
    _age(_young_runs(tmp_path)[0])  # one run with epochs to delete: the question is asked
    loud = cli("prune", "--dry-run", "--keep-last", "2", tmp_path).stderr
    assert cli("prune", "-q", "--dry-run", "--keep-last", "2", tmp_path).stderr == "", "held: the dry run went well"
    failed = cli("prune", "-q", "--keep-last", "2", tmp_path)  # no --yes, and no terminal to answer on
    assert failed.exit_code == 2 and "pass --yes" in failed.stderr
    notes = [line for line in loud.splitlines() if not line.startswith("Dry run")]
    assert notes and all(line in failed.stderr for line in notes), (loud, failed.stderr)
