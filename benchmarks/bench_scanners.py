"""How often ckptdoctor and its peer scanners flag payloads and benign files of the project's sample set.

    python benchmarks/bench_scanners.py [--scanners-python PATH] [--json FILE] [--keep DIR]

Builds the sample set of ``tests/sample_set.py`` (``build(root)``: payloads, each with a canary
file that its code would create, and benign files written by real libraries) in a temporary
folder, runs every scanner on every sample file, and prints, as markdown: the share of payloads
and of benign files each scanner flags, the same per family, and the versions of every scanner,
torch, numpy and Python. ckptdoctor runs from this interpreter (the project's venv).

The peer scanners live in their own virtualenv, so that they do not disturb the project's:

    python3 -m venv benchmarks/.scanners-venv && benchmarks/.scanners-venv/bin/pip install \\
        picklescan==1.0.5 modelscan==0.8.8 fickling==0.1.12 typing_extensions 'numpy<2.3' torch==2.13.0

fickling 0.1.12 imports ``typing_extensions`` on Python < 3.12 but declares it only in its dev
extras, and ``fickling.polyglot`` (its file-type detection) imports torch; torch==2.13.0 is the
CPU wheel (any other torch spec can pull a multi-GB CUDA build). modelscan 0.8.8 calls
``numpy.lib.format._check_version``, which numpy 2.3 removed: with a newer numpy it reports an
error for every ``.npy`` file and exits 3, "nothing scanned". ``--scanners-python`` picks another
interpreter; by default ``benchmarks/.scanners-venv/bin/python`` is used when it exists, else
this one; a scanner that does not import there is left out, and the output says so.

How each scanner is run and judged, per sample file (one file per sample). Every peer runs as its
own process per file, in an empty scratch folder as working directory, killed after ``--timeout``
seconds (default 60; for fickling, a child forked per file, see below); ``--jobs`` files at once.
A scanner **flags** a file when it tells the user the file is dangerous or could not be checked,
in a way a user or a CI gate notices: a non-zero exit status that the scanner documents as
"unsafe" or "error". An exit status it documents as "nothing scanned" is *skipped*, not flagged;
a timeout (killed, so no exit status at all) is not flagged; an undocumented exit status or a
traceback is a *crash*, flagged when the status is non-zero.

- **ckptdoctor**: one ``python -m ckptdoctor verify --json ROOT`` over the whole sample root (the
  findings carry the path of their file). Flagged: a CKD401 (unsafe pickle) or CKD403 (zip
  trick) finding of severity error for that file. A file the report never names is
  "not-scanned" (not flagged), counted with the skipped ones. Exit 0 and 1 are its verdicts;
  anything else is a crash of the whole pass (the same rule: flagged when non-zero).
- **picklescan**: its console script, ``picklescan -g --path FILE`` (``-g`` only lists the globals
  found). Exit 1: dangerous globals (flagged); 2: scan error, which picklescan prints and counts
  as a failure (flagged); 0: clean, including files it could not parse as a pickle (it warns and
  exits 0). "Suspicious" globals (imports outside its allow and deny lists) do not change the exit
  status unless ``--strict`` is given; they are recorded, and counted in a note under the table.
- **modelscan**: ``modelscan -p FILE -r json -o REPORT``. Exit 1: issues of any severity
  (flagged); 2: scan errors (flagged); 3: no supported file was scanned (skipped, not flagged,
  even when its scanner hit an error first, because that is the exit status modelscan gives);
  0: clean. It picks its scanner by file extension.
- **fickling**: its Python API, with the per-file dispatch that its own ``--huggingface`` scanner
  applies to every file of a repository (``fickling.cli._scan_huggingface``):
  ``fickling.polyglot.find_file_properties(FILE)``, then a zip (by content, or a ``.pt`` /
  ``.pth`` name) goes to ``fickling.scan_zip_archive(FILE, graceful=True)`` (every ``.pkl``,
  ``.pickle`` and ``.bin`` member), a pickle (by content, or a ``.bin`` / ``.pkl`` /
  ``.pickle`` name) to ``fickling.scan_file(FILE, graceful=True)``, and anything else (NumPy,
  tar, 7z, safetensors, compressed) is skipped, as fickling skips it. Flagged: any result that
  is not ``is_safe`` (severity above LIKELY_SAFE; read and parse errors count as SUSPICIOUS):
  that is where fickling's scanner exits 1. fickling rates every import from outside the
  standard library LIKELY_UNSAFE (a plain ``torch.save`` state dict too); a note counts what the
  laxer threshold LIKELY_OVERTLY_MALICIOUS would flag. Not used for the verdict:
  ``fickling.is_likely_safe(path)``, which parses the file as one raw pickle (it raises on a zip,
  so it never sees a torch archive's ``data.pkl``), and the plain CLI ``fickling --check-safety
  FILE``, which reads every file as a raw stack of pickles and so exits 2 ("failed to parse") on
  every zip, benign or not; a pass of its own runs that CLI's ``main`` on every file, for a note.
  ``fickling.polyglot`` imports torch (2.5 s), so one process per job imports fickling once and
  forks a child for each file, which it kills after the timeout.

Nothing here loads a sample: this script and ckptdoctor only read bytes, and the peers are the
scanners under test. After each scanner's pass every canary is checked; a canary that appears
means that scanner ran a payload, and the benchmark says so and exits 1.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime
import importlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SAMPLE_SET = ROOT / "tests" / "sample_set.py"
DEFAULT_SCANNERS_PYTHON = ROOT / "benchmarks" / ".scanners-venv" / "bin" / "python"
PEERS = ("picklescan", "modelscan", "fickling")
SCANNERS = ("ckptdoctor", *PEERS)
UNSAFE_CODES = {"CKD401", "CKD403"}

# The console scripts' own entry points, so that a venv without its bin/ scripts works too
# (``python -m picklescan`` would not do: its __main__ drops main()'s exit status).
_CONSOLE_SCRIPT = "import sys; from {module} import main; sys.argv[0] = {prog!r}; sys.exit(main())"

_PROBE = """
import importlib, importlib.metadata, json, platform, sys
found = {"python": platform.python_version()}
for name in sys.argv[1:] + ["numpy"]:
    try:
        importlib.import_module(name)
        found[name] = importlib.metadata.version(name)
    except Exception as error:
        found[name] = None
        found[name + ":error"] = f"{type(error).__name__}: {error}"
print(json.dumps(found))
"""

# fickling: the per-file dispatch of fickling.cli._scan_huggingface (0.1.12), or (for reference, in
# a pass of its own) the plain CLI. fickling.polyglot imports torch (2.5 s), so one "zygote" process
# per job imports fickling once and forks a child per file, which it kills after the timeout.
_FICKLING = """
import contextlib, io, json, os, select, signal, sys, time
from pathlib import PurePosixPath
from fickling.cli import HF_RAW_PICKLE_EXTENSIONS, HF_ZIP_PICKLE_EXTENSIONS, main as cli_main
from fickling.loader import scan_file, scan_zip_archive
from fickling.polyglot import find_file_properties

def dispatch(path):
    ext = PurePosixPath(path).suffix.lower()
    props = find_file_properties(path)
    if props["is_torch_zip"] or props["is_standard_zip"] or ext in HF_ZIP_PICKLE_EXTENSIONS:
        mode, results = "zip", scan_zip_archive(path, graceful=True)
    elif props["is_valid_pickle"] or ext in HF_RAW_PICKLE_EXTENSIONS:
        mode, results = "pickle", {"<file>": scan_file(path, graceful=True)}
    else:
        kind = "7z/tar/numpy" if props.get("is_7z") or props["is_tar"] or props["is_numpy_pickle"] else "unknown"
        mode, results = "skipped (" + kind + ")", {}
    members = [
        {"member": name, "severity": r.severity.name, "safe": r.is_safe, "errors": r.errors,
         "findings": [a.to_string() for a in r.results if a.to_string()]}
        for name, r in results.items()
    ]
    print(json.dumps({"mode": mode, "members": members}), flush=True)

def cli(path):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = cli_main(["fickling", "--check-safety", "--json-output", os.devnull, path])
    except BaseException as error:  # uncaught: the console script would exit 1
        code = error.code if isinstance(error, SystemExit) and isinstance(error.code, int) else 1
    print(json.dumps({"cli_exit": code, "cli_output": out.getvalue()[-400:]}), flush=True)

timeout = float(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    what, _, path = line.rstrip("\\n").partition(" ")
    read, write = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(write, 1)
        os.dup2(write, 2)
        sys.stdout = os.fdopen(1, "w")
        sys.stderr = os.fdopen(2, "w")
        try:
            (dispatch if what == "dispatch" else cli)(path)
            sys.stdout.flush()
            os._exit(0)
        except BaseException:
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
    os.close(write)
    chunks, timed_out = [], False
    while True:
        left = started + timeout - time.perf_counter()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            timed_out = True
            break
        if select.select([read], [], [], left)[0]:
            data = os.read(read, 1 << 16)
            if not data:
                break
            chunks.append(data)
    _, status = os.waitpid(pid, 0)
    os.close(read)
    print(json.dumps({
        "exit": None if timed_out else os.waitstatus_to_exitcode(status),
        "output": b"".join(chunks).decode(errors="replace"),
        "seconds": time.perf_counter() - started,
    }), flush=True)
"""


class SampleLike(Protocol):
    """``tests/sample_set.Sample``."""

    @property
    def name(self) -> str: ...
    @property
    def path(self) -> Path: ...
    @property
    def malicious(self) -> bool: ...
    @property
    def loader(self) -> str: ...
    @property
    def family(self) -> str: ...
    @property
    def canary(self) -> Path | None: ...


@dataclass
class Verdict:
    """One scanner on one file. ``outcome``: unsafe, error-reported, clean, skipped, crash,
    timeout or not-scanned (see the module docstring for how each is decided)."""

    flagged: bool
    outcome: str
    exit: int | None
    seconds: float | None
    detail: str
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class Done:
    """A finished (or timed-out) process."""

    code: int | None
    stdout: str
    stderr: str
    seconds: float


def run(command: Sequence[str], timeout: float, cwd: Path) -> Done:
    started = time.perf_counter()
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as expired:

        def text(value: bytes | str | None) -> str:
            return value.decode(errors="replace") if isinstance(value, bytes) else value or ""

        return Done(None, text(expired.stdout), text(expired.stderr), time.perf_counter() - started)
    return Done(result.returncode, result.stdout, result.stderr, time.perf_counter() - started)


def console_script(python: str, module: str, prog: str, *args: str) -> list[str]:
    return [python, "-c", _CONSOLE_SCRIPT.format(module=module, prog=prog), *args]


def tail(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def exit_verdict(done: Done, documented: dict[int, str], detail: str, raw: dict[str, Any]) -> Verdict:
    """The rule of the module docstring: documented exit statuses map to outcomes; a timeout is
    never flagged; an undocumented status (or a traceback) is a crash, flagged when non-zero."""
    raw = {**raw, "output_tail": tail(done.stdout + done.stderr)}
    if done.code is None:
        return Verdict(False, "timeout", None, done.seconds, "timed out", raw)
    outcome = documented.get(done.code)
    if outcome is None or (outcome == "clean" and "Traceback (most recent call last)" in done.stderr):
        return Verdict(done.code != 0, "crash", done.code, done.seconds, tail(done.stderr, 160), raw)
    if not detail and outcome != "clean":
        detail = tail((done.stdout + done.stderr).strip().rpartition("\n")[2], 160)
    return Verdict(outcome in ("unsafe", "error-reported"), outcome, done.code, done.seconds, detail, raw)


# --- the scanners -------------------------------------------------------------------------------


def scan_picklescan(python: str, path: Path, timeout: float, scratch: Path) -> Verdict:
    done = run(console_script(python, "picklescan.cli", "picklescan", "-g", "--path", str(path)), timeout, scratch)
    text = done.stdout + done.stderr
    counts = {
        key.lower().replace(" ", "_"): int(value)
        for key, value in re.findall(r"^(Scanned files|Infected files|Suspicious globals|Dangerous globals): (\d+)$", text, re.M)
    }
    found = re.findall(r"^  \* (.+) - (\w+)$", text, re.M)
    warnings = [line for line in text.splitlines() if line.startswith(("WARNING", "ERROR"))]
    raw: dict[str, Any] = {**counts, "globals": {name: safety for name, safety in found}, "warnings": warnings}
    dangerous = sorted(name for name, safety in found if safety == "dangerous")
    suspicious = sorted(name for name, safety in found if safety == "suspicious")
    if dangerous:
        detail = "dangerous: " + ", ".join(dangerous)
    elif warnings:
        detail = tail(warnings[0], 160)
    else:
        detail = "suspicious: " + ", ".join(suspicious) if suspicious else ""
    verdict = exit_verdict(done, {0: "clean", 1: "unsafe", 2: "error-reported"}, detail, raw)
    if verdict.outcome == "error-reported" and counts.get("dangerous_globals"):
        verdict.outcome = "unsafe"
    if verdict.outcome == "clean" and counts.get("scanned_files") == 0:
        verdict.outcome = "skipped"
    return verdict


def scan_modelscan(python: str, path: Path, timeout: float, scratch: Path) -> Verdict:
    report = scratch / "modelscan-report.json"
    done = run(console_script(python, "modelscan.cli", "modelscan", "-p", str(path), "-r", "json", "-o", str(report)), timeout, scratch)
    try:
        parsed: dict[str, Any] = json.loads(report.read_text())
    except (OSError, ValueError):
        parsed = {}
    issues = [f"{i.get('module')}.{i.get('operator')} ({i.get('severity')})" for i in parsed.get("issues", [])]
    errors = [str(e.get("description")) for e in parsed.get("errors", [])]
    raw: dict[str, Any] = {"issues": issues, "errors": errors, "scanned": parsed.get("summary", {}).get("scanned")}
    detail = ", ".join(issues) or tail("; ".join(errors), 160)
    return exit_verdict(done, {0: "clean", 1: "unsafe", 2: "error-reported", 3: "skipped"}, detail, raw)


def fickling_verdict(done: Done) -> Verdict:
    parts: dict[str, Any] = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):  # something fickling printed itself
                parts |= json.loads(line)
    raw: dict[str, Any] = {**parts, "output_tail": tail(done.stdout + done.stderr)}
    if "mode" not in parts:  # died (or timed out) before fickling gave a verdict
        if done.code is None:
            return Verdict(False, "timeout", None, done.seconds, "timed out", raw)
        code = done.code or 1  # no verdict and no error: as if fickling's scanner had failed
        return Verdict(True, "crash", code, done.seconds, tail(done.stdout, 160), raw)
    members: list[dict[str, Any]] = parts["members"]
    unsafe = [m for m in members if not m["safe"] and not m["errors"]]
    errored = [m for m in members if m["errors"]]
    if parts["mode"].startswith("skipped"):
        outcome = "skipped"
    elif unsafe:
        outcome = "unsafe"
    elif errored:
        outcome = "error-reported"
    else:
        outcome = "clean"
    shown = unsafe or errored
    detail = (
        parts["mode"]
        if not shown
        else "; ".join(f"{m['member']}: {m['severity']} {tail(' '.join(m['errors'] or m['findings']), 120)}" for m in shown[:2])
    )
    return Verdict(outcome in ("unsafe", "error-reported"), outcome, done.code, done.seconds, detail, raw)


def fickling_pass(python: str, what: str, samples: Sequence[SampleLike], timeout: float, jobs: int, scratch: Path) -> dict[str, Done]:
    """One zygote process per job (see ``_FICKLING``); each sample is scanned in a forked child.
    ``what``: "dispatch" (the verdict) or "cli" (the plain CLI, for reference)."""
    pending = list(enumerate(samples))
    results: dict[int, Done] = {}

    def worker(number: int) -> None:
        folder = scratch / f"fickling-{what}-{number}"
        folder.mkdir()
        errors = folder / "stderr"
        with errors.open("w") as stderr:
            zygote = subprocess.Popen(
                [python, "-c", _FICKLING, str(timeout)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                cwd=folder,
            )
        assert zygote.stdin is not None and zygote.stdout is not None
        try:
            if zygote.stdout.readline().strip() != "ready":
                zygote.wait()
                raise SystemExit(f"fickling does not start with {python}: {tail(errors.read_text())}")
            while pending:
                try:
                    index, sample = pending.pop()
                except IndexError:  # another worker took the last one
                    break
                zygote.stdin.write(f"{what} {sample.path}\n")
                zygote.stdin.flush()
                answer = json.loads(zygote.stdout.readline())
                results[index] = Done(answer["exit"], answer["output"], "", answer["seconds"])
        finally:
            zygote.stdin.close()
            zygote.wait()
            shutil.rmtree(folder, ignore_errors=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for future in [pool.submit(worker, number) for number in range(jobs)]:
            future.result()
    return {sample.name: results[index] for index, sample in enumerate(samples)}


def add_fickling_cli(verdicts: dict[str, Verdict], dones: dict[str, Done]) -> None:
    """The plain CLI's exit status (None: timed out or died) into each fickling verdict's raw."""
    for name, done in dones.items():
        parts: dict[str, Any] = {}
        for line in done.stdout.splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    parts |= json.loads(line)
        verdicts[name].raw |= {"cli_exit": parts.get("cli_exit"), "cli_seconds": round(done.seconds, 3)}


PEER_RUNNERS: dict[str, Callable[[str, Path, float, Path], Verdict]] = {
    "picklescan": scan_picklescan,
    "modelscan": scan_modelscan,
}


def scan_ckptdoctor(samples: Sequence[SampleLike], root: Path, timeout: float, scratch: Path) -> dict[str, Verdict]:
    """One ``verify --json`` over the whole root; findings are mapped to files by path."""
    done = run([sys.executable, "-m", "ckptdoctor", "verify", "--json", str(root)], timeout, scratch)
    if done.code not in (0, 1):
        outcome = "timeout" if done.code is None else "crash"  # the same rule as for the peers
        return {
            s.name: Verdict(
                done.code not in (None, 0),
                outcome,
                done.code,
                None,
                tail(done.stderr, 160),
                {"output_tail": tail(done.stderr)},
            )
            for s in samples
        }
    report = json.loads(done.stdout)
    named = set(strings(report))
    by_path: dict[Path, list[dict[str, Any]]] = {}
    for finding in report["findings"]:
        if finding.get("path"):
            by_path.setdefault(Path(finding["path"]).resolve(), []).append(finding)
    verdicts = {}
    for sample in samples:
        findings = by_path.get(sample.path.resolve(), [])
        unsafe = [f for f in findings if f["code"] in UNSAFE_CODES and f["severity"] == "error"]
        raw = {"codes": sorted({f"{f['code']} {f['severity']}" for f in findings})}
        if unsafe:
            verdicts[sample.name] = Verdict(True, "unsafe", done.code, None, tail(unsafe[0]["message"], 160), raw)
        elif str(sample.path) in named or findings:
            verdicts[sample.name] = Verdict(False, "clean", done.code, None, ", ".join(raw["codes"]), raw)
        else:
            verdicts[sample.name] = Verdict(False, "not-scanned", done.code, None, "not in the report", raw)
    for verdict in verdicts.values():
        verdict.raw["pass_seconds"] = round(done.seconds, 3)
    return verdicts


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def scan_peer(name: str, python: str, samples: Sequence[SampleLike], timeout: float, jobs: int, scratch: Path) -> dict[str, Verdict]:
    runner = PEER_RUNNERS[name]

    def one(index: int) -> Verdict:
        folder = scratch / f"{name}-{index}"
        folder.mkdir()
        try:
            return runner(python, samples[index].path, timeout, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return {s.name: v for s, v in zip(samples, pool.map(one, range(len(samples))), strict=True)}


# --- versions, samples and the report -----------------------------------------------------------


def probe(python: str) -> dict[str, Any]:
    """Python and scanner versions in ``python``'s environment; None where a module does not import."""
    done = run([python, "-c", _PROBE, *PEERS], 120, Path.cwd())
    if done.code != 0:
        raise SystemExit(f"{python} does not run: {tail(done.stderr)}")
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def load_sample_set(path: Path) -> Any:
    """Import ``tests/sample_set.py`` (or another file with the same API) by module name, from its folder."""
    if not path.is_file():
        raise SystemExit(f"{path} does not exist: the sample set is needed (--sample-set)")
    sys.path.insert(0, str(path.parent))
    return importlib.import_module(path.stem)


def percent(flagged: int, total: int) -> str:
    return f"{100 * flagged / total:.0f}% ({flagged}/{total})" if total else "—"


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def report(samples: Sequence[SampleLike], verdicts: dict[str, dict[str, Verdict]], seconds: dict[str, float]) -> str:
    names = list(verdicts)
    payloads = [s for s in samples if s.malicious]
    benign = [s for s in samples if not s.malicious]

    def count(name: str, group: Sequence[SampleLike], test: Callable[[Verdict], bool]) -> int:
        return sum(test(verdicts[name][s.name]) for s in group)

    def flagged(v: Verdict) -> bool:
        return v.flagged

    def outcome(*outcomes: str) -> Callable[[Verdict], bool]:
        return lambda v: v.outcome in outcomes

    rows = [
        ["payloads flagged", *(percent(count(n, payloads, flagged), len(payloads)) for n in names)],
        ["benign files flagged", *(percent(count(n, benign, flagged), len(benign)) for n in names)],
        ["payloads skipped (not scanned)", *(str(count(n, payloads, outcome("skipped", "not-scanned"))) for n in names)],
        [
            "scan errors / crashes / timeouts",
            *("/".join(str(count(n, samples, outcome(o))) for o in ("error-reported", "crash", "timeout")) for n in names),
        ],
        ["wall time of the pass", *(f"{seconds[n]:.1f} s" for n in names)],
    ]
    parts = [markdown(["", *names], rows)]
    for title, group in (("Payloads flagged, by family", payloads), ("Benign files flagged, by family", benign)):
        families = sorted({s.family for s in group})
        table = []
        for family in families:
            members = [s for s in group if s.family == family]
            table.append([family, *(f"{count(n, members, flagged)}/{len(members)}" for n in names)])
        parts.append(f"{title}:\n\n" + markdown(["family", *names], table))
    notes = []
    if "picklescan" in verdicts:

        def suspicious(v: Verdict) -> bool:
            return not v.flagged and bool(v.raw.get("suspicious_globals"))

        notes.append(
            f"picklescan listed suspicious globals, exiting 0, for {count('picklescan', payloads, suspicious)} more "
            f"payloads and {count('picklescan', benign, suspicious)} more benign files (`--strict` would flag them)."
        )
    if "fickling" in verdicts:

        def cli(v: Verdict) -> bool:
            return v.raw.get("cli_exit") not in (0, None)

        notes.append(
            f"fickling's plain CLI (`fickling --check-safety FILE`, every file read as raw pickles) exits non-zero on "
            f"{percent(count('fickling', payloads, cli), len(payloads))} of payloads and "
            f"{percent(count('fickling', benign, cli), len(benign))} of benign files "
            f"(a pass of its own: {seconds.get('fickling --check-safety', 0):.1f} s)."
        )

        def overt(v: Verdict) -> bool:
            members = v.raw.get("members") or []
            return any(m["severity"] in ("LIKELY_OVERTLY_MALICIOUS", "OVERTLY_MALICIOUS") for m in members)

        notes.append(
            f"fickling at severity LIKELY_OVERTLY_MALICIOUS and up only (not its default) would flag "
            f"{percent(count('fickling', payloads, overt), len(payloads))} of payloads and "
            f"{percent(count('fickling', benign, overt), len(benign))} of benign files."
        )
    parts.append("\n".join(f"- {note}" for note in notes))
    return "\n\n".join(part for part in parts if part)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--scanners-python",
        type=Path,
        help=f"python of the peer scanners' venv (default: {DEFAULT_SCANNERS_PYTHON.relative_to(ROOT)} if present, else this python)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every per-sample verdict here")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="build the samples in DIR (new or empty) and keep them")
    parser.add_argument(
        "--sample-set", type=Path, default=DEFAULT_SAMPLE_SET, help="module with build(root) -> list[Sample] (default: tests/sample_set.py)"
    )
    parser.add_argument("--only", action="append", choices=SCANNERS, help="run only this scanner (repeatable)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per file and peer scanner (default 60)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="files scanned at once (default: one per CPU)")
    args = parser.parse_args()

    if args.scanners_python is not None and not args.scanners_python.exists():
        raise SystemExit(f"--scanners-python {args.scanners_python} does not exist")
    python = str(args.scanners_python or (DEFAULT_SCANNERS_PYTHON if DEFAULT_SCANNERS_PYTHON.exists() else Path(sys.executable)))
    sample_set = load_sample_set(args.sample_set.resolve())
    wanted = [name for name in SCANNERS if not args.only or name in args.only]
    peers = probe(python) if any(name in PEERS for name in wanted) else {}
    skipped = {name: peers.get(f"{name}:error") for name in PEERS if name in wanted and not peers.get(name)}
    names = [name for name in wanted if name not in skipped]

    if args.keep is not None and args.keep.exists() and any(args.keep.iterdir()):
        raise SystemExit(f"--keep {args.keep} is not empty: give a new or empty folder")
    work = Path(tempfile.mkdtemp(prefix="ckptdoctor-bench-scanners-"))
    root = (args.keep or work / "samples").resolve()
    scratch = work / "scratch"
    scratch.mkdir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        samples: list[SampleLike] = list(sample_set.build(root))
        build_s = time.perf_counter() - started
        if len({s.name for s in samples}) != len(samples):
            raise SystemExit("sample names are not unique")
        canaries = [s.canary for s in samples if s.canary is not None]
        alarms: list[str] = [f"canary {c} exists before any scanner ran" for c in canaries if c.exists()]

        verdicts: dict[str, dict[str, Verdict]] = {}
        seconds: dict[str, float] = {}

        def check_canaries(scanner: str) -> None:
            for canary in canaries:
                if canary.exists() and not any(str(canary) in alarm for alarm in alarms):
                    alarms.append(f"canary {canary} appeared during the {scanner} pass: it ran a payload")

        for name in names:
            started = time.perf_counter()
            if name == "ckptdoctor":
                verdicts[name] = scan_ckptdoctor(samples, root, max(600.0, args.timeout * len(samples)), scratch)
            elif name == "fickling":
                dones = fickling_pass(python, "dispatch", samples, args.timeout, args.jobs, scratch)
                verdicts[name] = {sample: fickling_verdict(done) for sample, done in dones.items()}
            else:
                verdicts[name] = scan_peer(name, python, samples, args.timeout, args.jobs, scratch)
            seconds[name] = time.perf_counter() - started
            check_canaries(name)
            if name == "fickling":  # the plain CLI, for reference (a note under the table)
                started = time.perf_counter()
                add_fickling_cli(verdicts[name], fickling_pass(python, "cli", samples, args.timeout, args.jobs, scratch))
                seconds["fickling --check-safety"] = time.perf_counter() - started
                check_canaries("fickling --check-safety")

        if args.json is not None:
            document = {
                "date": datetime.date.today().isoformat(),
                "versions": {
                    "ckptdoctor": version("ckptdoctor"),
                    "torch": version("torch"),
                    "numpy": version("numpy"),
                    "python": platform.python_version(),
                    "scanners_python": python,
                    "scanners": peers,
                },
                "left_out": skipped,
                "alarms": alarms,
                "seconds": seconds,
                "samples": [
                    {
                        "name": s.name,
                        "file": str(s.path.relative_to(root)) if s.path.is_relative_to(root) else str(s.path),
                        "malicious": s.malicious,
                        "loader": s.loader,
                        "family": s.family,
                        "verdicts": {name: asdict(verdicts[name][s.name]) for name in names},
                    }
                    for s in samples
                ],
            }
            args.json.write_text(json.dumps(document, indent=1) + "\n")
        payloads = sum(s.malicious for s in samples)
        print(f"## Scanners on the sample set ({payloads} payloads, {len(samples) - payloads} benign files)\n")
        print(report(samples, verdicts, seconds))
        print()
        print(f"- date: {datetime.date.today().isoformat()}; {os.cpu_count()} CPUs; {args.jobs} files at once; {args.timeout:g} s per file")
        print(
            f"- ckptdoctor {version('ckptdoctor')}, torch {version('torch')}, numpy {version('numpy')}, Python {platform.python_version()} ({sys.executable})"
        )
        found = ", ".join(f"{n} {peers[n]}" for n in PEERS if n in names)
        if found:
            print(f"- {found}; numpy {peers.get('numpy')}, Python {peers['python']} ({python})")
        for name, error in skipped.items():
            print(f"- {name} left out: it does not import with {python} ({error})")
        print(f"- samples: {args.sample_set} built in {build_s:.1f} s" + (f", kept in {root}" if args.keep else ""))
        for alarm in alarms:
            print(f"- **ALARM**: {alarm}")

        return 1 if alarms else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"benchmark took {time.perf_counter() - started:.0f} s")
    sys.exit(code)
