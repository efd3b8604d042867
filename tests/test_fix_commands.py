"""Every command a fix suggests works as printed, and acts on no more than the finding's own run
(issue 16, items 7 and 8).

Each scenario is a real broken tree: the shipped examples, runs written by the frameworks (or
by hand under their exact names with real ``torch.save`` files), and loose files beside them.
Every ``ckptdoctor …`` command that any finding's fixes name, in the JSON report and in the
human output, is run as printed in a fresh copy of the scenario, from the folder the user ran
from: none may be a usage error (exit 2) or end in a traceback, and none may keep a placeholder
(``RUN_DIR``, ``N``) that the user would have to fill in.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from frameworks import copy_run, deepspeed_run, megatron_run
from typer.testing import CliRunner

from ckptdoctor.cli import app
from ckptdoctor.places import MOVED_ASIDE
from ckptdoctor.rules.registry import RULES

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "runs"
CODE_SPAN = re.compile(r"`([^`]+)`")
PLACEHOLDERS = re.compile(r"RUN_DIR|\{\w+\}|(?<![\w-])[NE](?![\w-])")
"""What a fix for a real run must not leave for the user to fill in."""
AN_HOUR_AGO = 3600.0


def _aged(root: Path) -> Path:
    """Every file an hour old: older than repair's and prune's --min-age, as a run left overnight."""
    for path in [root, *root.rglob("*")]:
        stamp = os.lstat(path).st_mtime - AN_HOUR_AGO
        os.utime(path, (stamp, stamp), follow_symlinks=False)
    return root


def _invoke(where: Path, *args: str) -> tuple[int, str, str]:
    """ckptdoctor as the user runs it from ``where``; a traceback fails the test."""
    before = os.getcwd()
    os.chdir(where)
    try:
        result = CliRunner().invoke(app, list(args), env={"NO_COLOR": "1", "COLUMNS": "200"})
    finally:
        os.chdir(before)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"`ckptdoctor {shlex.join(args)}` raised {result.exception!r}") from result.exception
    assert "Traceback" not in result.stdout + result.stderr, (args, result.stderr)
    return result.exit_code, result.stdout, result.stderr


def _tree(root: Path) -> dict[str, str]:
    """Every file below ``root`` (ckptdoctor's own records aside) by its path, with a hash of its bytes."""
    found = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if ".ckptdoctor" in relative.split("/") or path.is_dir():
            continue
        found[relative] = "link:" + os.readlink(path) if path.is_symlink() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _commands(texts: list[str]) -> list[str]:
    """The ckptdoctor commands in ``texts``: code spans, and "more fixes: ckptdoctor rules …" lines."""
    found = []
    for text in texts:
        found += [span for span in CODE_SPAN.findall(text) if span.startswith("ckptdoctor ")]
        found += re.findall(r"more fixes: (ckptdoctor rules \S+)", text)
    return found


# --- scenarios: each builds a broken tree in a folder and names the paths the user checks ------------


def _examples(root: Path) -> None:
    shutil.copytree(EXAMPLES, root)


def _loose_beside_runs(root: Path) -> None:
    """The working folder holds loose files (empty, truncated, a staging leftover) and runs below it."""
    shutil.copytree(EXAMPLES, root)
    (root / "stray.pt").write_bytes(b"")
    (root / "export.safetensors").write_bytes((EXAMPLES / "torch-split" / "model_1.safetensors").read_bytes()[:300])


def _run_with_leftover_and_runs_below(root: Path) -> None:
    """The working folder is itself a run, with a staging leftover and a stray-prefix file, and
    other runs below it."""
    root.mkdir()
    for path in (EXAMPLES / "torch-split").iterdir():
        if not path.name.split(".")[0].endswith("_3"):
            shutil.copy2(path, root / path.name)
    (root / "model_2.safetensors.tmp").write_bytes(b"\0" * 100)
    for name in ("burn-healthy", "burn-missing-optimizer", "burn-truncated"):
        shutil.copytree(EXAMPLES / name, root / "older" / name)


def _burn_stray_prefix(root: Path) -> None:
    run = root / "checkpoint"
    shutil.copytree(EXAMPLES / "burn-healthy" / "checkpoint", run)
    shutil.copy2(run / "optim-4.bpk", run / "optimizer-4.bpk")
    shutil.copy2(run / "optim-5.bpk", run / "optimizer-5.bpk")


def _deepspeed_stale(root: Path) -> None:
    folder = deepspeed_run(root / "ds", steps=(100, 200, 300), latest="global_step400")
    (folder / "global_step300" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()


def _megatron_ahead(root: Path) -> None:
    folder = megatron_run(root / "mg", iterations=(100, 200), tracker=300)
    (folder / "iter_0000200" / "mp_rank_01" / "model_optim_rng.pt").write_bytes(b"")


def _diverged(root: Path) -> None:
    """A torch run whose newest epoch saved NaN weights (found by ``verify --deep``)."""
    safetensors = pytest.importorskip("safetensors.torch")
    root.mkdir()
    for path in (EXAMPLES / "torch-split").iterdir():
        if not path.name.split(".")[0].endswith("_3"):
            shutil.copy2(path, root / path.name)
    for name in ("optimizer", "scheduler"):
        shutil.copy2(root / f"{name}_2.pt", root / f"{name}_3.pt")
    tensors = safetensors.load_file(str(root / "model_2.safetensors"))
    safetensors.save_file({key: value.clone().fill_(float("nan")) for key, value in tensors.items()}, str(root / "model_3.safetensors"))


def _hf_broken(hf_trained: Path) -> Callable[[Path], None]:
    def build(root: Path) -> None:
        out = copy_run(hf_trained, root / "out")
        (out / "checkpoint-6" / "trainer_state.json").unlink()
        shutil.copytree(out / "checkpoint-4", out / "tmp-checkpoint-8")

    return build


SCENARIOS: dict[str, Callable[[Path], None]] = {
    "examples": _examples,
    "loose-beside-runs": _loose_beside_runs,
    "run-with-runs-below": _run_with_leftover_and_runs_below,
    "burn-stray-prefix": _burn_stray_prefix,
    "deepspeed-stale-latest": _deepspeed_stale,
    "megatron-tracker-ahead": _megatron_ahead,
    "diverged": _diverged,
}


@pytest.fixture(params=[*SCENARIOS, "hf-trainer"])
def scenario(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], None]:
    if request.param == "hf-trainer":
        return _hf_broken(request.getfixturevalue("hf_trained"))
    return SCENARIOS[request.param]


def _built(build: Callable[[Path], None], into: Path) -> Path:
    build(into)
    return _aged(into)


def _suggested(root: Path) -> Iterator[tuple[str, str]]:
    """(the command that found it, each ckptdoctor command a fix suggests) over ``root``, as the
    user runs inspect and verify from it, in JSON and for people."""
    for command in ("inspect", "verify --deep"):
        code, out, _ = _invoke(root, *command.split(), "--json", "--exit-zero", ".")
        assert code == 0
        report = json.loads(out)
        for finding in report["findings"]:
            for text in finding["fixes"]:
                assert not PLACEHOLDERS.search(" ".join(CODE_SPAN.findall(text))), (finding["code"], text)
                assert "RUN_DIR" not in text, (finding["code"], text)
            yield from ((command, c) for c in _commands(finding["fixes"]))
        code, out, _ = _invoke(root, *command.split(), "--exit-zero", ".")
        yield from ((command, c) for c in _commands(out.splitlines()))


def test_every_suggested_command_works_as_printed(scenario: Callable[[Path], None], tmp_path: Path) -> None:
    root = _built(scenario, tmp_path / "scenario")
    commands = sorted({command for _, command in _suggested(root)})
    assert commands, "the scenario fired no finding with a command"
    for number, command in enumerate(commands):
        args = shlex.split(command)[1:]
        variants = [args]
        if args[0] in ("prune", "repair") and "--yes" not in args:
            variants = [[*args, "--dry-run"], [*args, "--yes"]]  # as shown first, then as carried out
        for index, variant in enumerate(variants):
            copy = _built(scenario, tmp_path / f"copy-{number}-{index}")
            code, _, err = _invoke(copy, *variant)
            assert code != 2, f"`ckptdoctor {shlex.join(variant)}` (suggested as `{command}`) exits 2: {err}"


# --- item 7: a loose file's fix acts on that file's run alone -------------------------------------


def _fixes_for(root: Path, command: str, path: str) -> list[str]:
    code, out, _ = _invoke(root, command, "--json", "--exit-zero", ".")
    assert code == 0
    return [text for finding in json.loads(out)["findings"] if finding["path"] == path for text in finding["fixes"]]


def _moved_only(before: dict[str, str], after: dict[str, str], gone: set[str], arrived: set[str]) -> None:
    assert set(before) - set(after) == gone
    assert set(after) - set(before) == arrived
    assert all(after[path] == digest for path, digest in before.items() if path not in gone), "a file changed"


def test_a_loose_file_beside_runs_is_moved_alone_by_hand(tmp_path: Path) -> None:
    """Files of no run in the working folder, above 4 runs: their fix moves each file and nothing
    else, as printed; ``repair .`` (every run below) is never suggested."""
    root = _built(_loose_beside_runs, tmp_path / "work")
    for name in ("stray.pt", "export.safetensors"):
        fixes = _fixes_for(root, "verify", f"./{name}")
        assert fixes, name
        assert not [c for c in _commands(fixes) if c.split()[1] in ("repair", "prune")], fixes
        (move,) = [span for text in fixes for span in CODE_SPAN.findall(text) if span.startswith("mkdir")]
        copy = _built(_loose_beside_runs, tmp_path / f"copy-{name}")
        before = _tree(copy)
        subprocess.run(["sh", "-c", move], cwd=copy, check=True)
        _moved_only(before, _tree(copy), {name}, {f"{MOVED_ASIDE}/{name}"})
        assert (copy / MOVED_ASIDE / name).read_bytes() == (root / name).read_bytes()
        _, out, _ = _invoke(copy, "verify", "--json", "--exit-zero", ".")
        assert name not in out, "what was moved aside is out of every scan"
        (back,) = [span for text in fixes for span in CODE_SPAN.findall(text) if span.startswith("mv -n -- ./.")]
        subprocess.run(["sh", "-c", back], cwd=copy, check=True)
        assert _tree(copy) == before


def test_a_leftover_of_a_run_with_runs_below_is_repaired_in_that_run_alone(tmp_path: Path) -> None:
    """The working folder is a run with a staging leftover, and 3 runs lie below it (2 of them
    broken, which ``repair .`` would quarantine): the fix's repair moves the leftover alone, every
    other run stays byte for byte, and its undo puts the leftover back."""
    root = _built(_run_with_leftover_and_runs_below, tmp_path / "work")
    fixes = _fixes_for(root, "inspect", "./model_2.safetensors.tmp")
    repairs = [c for c in _commands(fixes) if c.startswith("ckptdoctor repair ")]
    assert repairs == ["ckptdoctor repair --no-recurse .", "ckptdoctor repair --undo --no-recurse ."], fixes
    code, out, _ = _invoke(root, "repair", "--dry-run", ".")
    assert "./older/burn-truncated/checkpoint" in out, "without --no-recurse, repair would act on the runs below"
    before = _tree(root)
    code, out, err = _invoke(root, *shlex.split(repairs[0])[1:], "--yes")
    assert code == 0, err
    assert "older" not in out + err
    _moved_only(before, _tree(root), {"model_2.safetensors.tmp"}, set())
    assert not (root / "older" / "burn-truncated" / "checkpoint" / ".ckptdoctor").exists(), "no other run was locked or touched"
    code, _, err = _invoke(root, *shlex.split(repairs[1])[1:], "--yes")
    assert code == 0, err
    assert _tree(root) == before


def test_no_recurse_acts_on_no_run_below_a_folder_that_is_none(tmp_path: Path) -> None:
    """Fail closed: --no-recurse on a folder that is no run's own does nothing, and says so."""
    root = _built(_examples, tmp_path / "work")
    before = _tree(root)
    for command in ("repair", "prune"):
        policy = ["--keep-last", "1"] if command == "prune" else []
        code, _, err = _invoke(root, command, "--no-recurse", "--yes", *policy, ".")
        assert code == 0, err
        assert "No run in . itself" in err
        assert _tree(root) == before


def test_a_stray_prefix_is_moved_aside_not_repaired(tmp_path: Path) -> None:
    """``repair`` never moves a stray-prefix file, so its fix does not claim it would: it moves
    exactly those files aside, and the run resumes as before."""
    root = _built(_burn_stray_prefix, tmp_path / "work")
    fixes = _fixes_for(root, "inspect", "./checkpoint/optimizer-4.bpk")
    (move,) = [span for text in fixes for span in CODE_SPAN.findall(text) if span.startswith("mkdir")]
    before = _tree(root)
    subprocess.run(["sh", "-c", move], cwd=root, check=True)
    aside = f"checkpoint/{MOVED_ASIDE}"
    _moved_only(
        before,
        _tree(root),
        {"checkpoint/optimizer-4.bpk", "checkpoint/optimizer-5.bpk"},
        {f"{aside}/optimizer-4.bpk", f"{aside}/optimizer-5.bpk"},
    )
    code, out, _ = _invoke(root, "inspect", "--json", ".")
    assert code == 0 and json.loads(out)["findings"] == []


# --- diskcheck of a folder that does not exist yet ---------------------------------------------------


@pytest.mark.parametrize("size", ["1000TiB", "1KiB"])
def test_diskcheck_of_a_new_folder_suggests_no_prune_nor_a_sizeless_diskcheck(tmp_path: Path, size: str) -> None:
    """Before the first save there is nothing to prune or repair in the folder, and a diskcheck
    of it without a size estimates nothing: neither is suggested (``1000TiB``: the save does not
    fit, CKD501; ``1KiB`` with a network-free local disk: nothing to say)."""
    code, out, _ = _invoke(tmp_path, "diskcheck", "--json", "--model-bytes", size, "--optimizer", "adam", "./new-run")
    report = json.loads(out)
    fixes = [text for finding in report["findings"] for text in finding["fixes"]]
    if size == "1KiB":
        assert code == 0 and not fixes
        return
    assert code == 1 and [f["code"] for f in report["findings"]] == ["CKD501"]
    assert not _commands(fixes), fixes
    assert any("`mkdir -p ./new-run`" in text for text in fixes)
    assert not (tmp_path / "new-run").exists()


def test_diskcheck_of_a_new_folder_says_it_does_not_exist_yet(tmp_path: Path) -> None:
    code, out, _ = _invoke(tmp_path, "diskcheck", "./new-run")
    assert code == 0
    assert "does not exist yet" in out and "--model-bytes" in out
    assert "no complete checkpoint" not in out


def test_a_run_judged_from_one_file_is_repaired_without_what_may_lie_below_it(tmp_path: Path) -> None:
    """``inspect FILE`` lists nothing below the file's folder, nor the rest of its run: runs may lie
    there, unseen, and whether that run's repair would move the file (its checkpoint newer than a
    resume point) is unknown, so no repair is promised: the fix moves that file alone (fail closed)."""
    root = _built(_examples, tmp_path / "work")
    _, out, _ = _invoke(root, "inspect", "--json", "--exit-zero", "./torch-split/optimizer_3.pt")
    fixes = [text for finding in json.loads(out)["findings"] for text in finding["fixes"]]
    assert not [c for c in _commands(fixes) if c.split()[1] in ("repair", "prune")], fixes
    (move,) = [span for text in fixes for span in CODE_SPAN.findall(text) if span.startswith("mkdir")]
    before = _tree(root)
    subprocess.run(["sh", "-c", move], cwd=root, check=True)
    _moved_only(before, _tree(root), {"torch-split/optimizer_3.pt"}, {f"torch-split/{MOVED_ASIDE}/optimizer_3.pt"})


def test_no_fix_template_prunes_or_repairs_a_bare_run_folder() -> None:
    """``{run}`` after ``repair`` or ``prune`` would act on every run below a run's folder:
    acting commands name ``{this_run}`` (with ``--no-recurse`` where needed)."""
    bare = re.compile(r"ckptdoctor (?:repair|prune)(?: --[\w-]+)* \{run\}")
    found = [
        (rule.code, text)
        for rule in RULES
        for record in rule.fix_records
        for text in (record.generic or "", *(t for _, t in record.frameworks))
        if bare.search(text)
    ]
    assert not found, found


def test_a_file_named_on_its_own_whose_name_no_layout_claims_is_moved_by_hand(tmp_path: Path) -> None:
    """``inspect 'hint/my file.pt'`` judges the file by its content; a scan of ``hint`` passes it
    by (no layout claims its name), so ``repair hint`` would move nothing: the fix moves the file."""
    root = tmp_path / "work"
    (root / "hint").mkdir(parents=True)
    (root / "hint" / "my file.pt").write_bytes((EXAMPLES / "torch-split" / "optimizer_1.pt").read_bytes()[:100])
    _aged(root)
    _, out, _ = _invoke(root, "inspect", "--json", "--exit-zero", "hint/my file.pt")
    fixes = [text for finding in json.loads(out)["findings"] for text in finding["fixes"]]
    assert not [c for c in _commands(fixes) if c.split()[1] in ("repair", "prune")], fixes
    (move,) = [span for text in fixes for span in CODE_SPAN.findall(text) if span.startswith("mkdir")]
    subprocess.run(["sh", "-c", move], cwd=root, check=True)
    assert (root / "hint" / MOVED_ASIDE / "my file.pt").is_file() and not (root / "hint" / "my file.pt").exists()


def test_the_undo_a_repair_names_acts_on_that_run_alone_and_survives_a_space(tmp_path: Path) -> None:
    """After ``repair --no-recurse 'a run'``, the undo it prints is quoted and keeps to that run:
    a run below it, repaired before, stays repaired."""
    root = tmp_path / "work"
    shutil.copytree(EXAMPLES / "torch-split", root / "a run")
    shutil.copytree(EXAMPLES / "burn-truncated", root / "a run" / "nested")
    _aged(root)
    code, _, err = _invoke(root, "repair", "--yes", "a run/nested/checkpoint")
    assert code == 0, err
    nested = _tree(root / "a run" / "nested")
    code, out, err = _invoke(root, "repair", "--yes", "--no-recurse", "a run")
    assert code == 0, err
    (undo,) = [c for c in _commands([out + err]) if "--undo" in c]
    assert undo == "ckptdoctor repair --undo --no-recurse 'a run'"
    code, _, err = _invoke(root, *shlex.split(undo)[1:], "--yes")
    assert code == 0, err
    assert (root / "a run" / "optimizer_3.pt").is_file()  # the run's own repair undone
    assert _tree(root / "a run" / "nested") == nested  # the nested run's repair stands


def test_findings_of_one_rule_with_different_fixes_each_keep_theirs(tmp_path: Path) -> None:
    """Two cut files, one a checkpoint's (repair moves it) and one loose (moved by hand): the
    human output shows both fixes, not the first file's for both."""
    root = tmp_path / "work"
    shutil.copytree(EXAMPLES / "torch-split", root / "v")
    (root / "v" / "stray.pt").write_bytes((EXAMPLES / "torch-split" / "optimizer_1.pt").read_bytes()[:100])
    _aged(root)
    _, out, _ = _invoke(root, "verify", "v")
    assert "ckptdoctor repair --verify v" in out and "mv -n -- v/stray.pt" in out, out
