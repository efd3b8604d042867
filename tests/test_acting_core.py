"""The acting protocol in the core (``ckptdoctor.acting``), driven through ``ckptdoctor.api`` as a
Python caller drives it: no CliRunner. Plan → show → confirm → check again → act → outcome, for
prune, repair and undo alike; the CLI tests cover the rendering of the same passes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import ckptdoctor.api as ckd
from ckptdoctor import acting
from ckptdoctor.model import Action
from ckptdoctor.render.json import document
from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.usefixtures("fake_machine")  # the process table and clock are the test's (conftest)

DAY = 86400.0


def _aged(folder: Path) -> Path:
    """Every file older than --min-age: safe to act on."""
    past = time.time() - DAY
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (past, past), follow_symlinks=False)
    return folder


def _tree(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and ".ckptdoctor" not in path.parts
    }


def _epochs(folder: Path) -> list[int]:
    return sorted({int(name.split("-")[1].split(".")[0]) for name in os.listdir(folder) if name.endswith(".bpk")})


class Recorder:
    """A listener and a confirm callback that remember the order of what they saw."""

    def __init__(self, answer: bool = True) -> None:
        self.answer = answer
        self.seen: list[object] = []

    def hear(self, event: acting.Event) -> None:
        self.seen.append(event)

    def confirm(self, question: acting.Question) -> bool:
        self.seen.append(question)
        return self.answer


def test_prune_plans_shows_asks_then_deletes_what_the_plan_says(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_burn_run(run, range(1, 8))
    _aged(run)
    recorder = Recorder()
    outcome = ckd.prune(run, keep_last=2, confirm=recorder.confirm, listener=recorder.hear)
    assert outcome.acted and not outcome.declined and not outcome.problems
    steps = [seen for seen in recorder.seen if not isinstance(seen, acting.Message)]
    planned, question = steps[0], steps[1]
    assert isinstance(planned, acting.Planned) and isinstance(question, acting.Question), "the plans are shown before anything is asked"
    assert question.ask is acting.Ask.GO
    (plan,) = outcome.plans
    assert planned.plans[0][0] is plan
    deleted = {item.number for item in plan.acting(Action.DELETE)}
    assert deleted == {1, 2, 3, 4, 5}
    assert _epochs(run) == [6, 7], "what the plan deletes is gone, and only that"
    assert any(
        isinstance(event, acting.Message) and event.tone is acting.Tone.DONE and "deleted 5 checkpoints" in event.text
        for event in recorder.seen
    )


def test_a_declined_or_unanswered_prune_changes_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_burn_run(run, range(1, 8))
    _aged(run)
    before = _tree(run)
    declined = ckd.prune(run, keep_last=2, confirm=Recorder(answer=False).confirm)
    unanswered = ckd.prune(run, keep_last=2)  # the default: no confirmation, nothing deleted
    assert declined.declined == unanswered.declined == "nothing was deleted"
    assert not declined.acted and not unanswered.acted
    assert _tree(run) == before
    assert {item.number for item in declined.plans[0].acting(Action.DELETE)} == {1, 2, 3, 4, 5}


def test_a_dry_run_creates_nothing_and_asks_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_burn_run(run, range(1, 8))
    _aged(run)
    recorder = Recorder()
    outcome = ckd.prune(run, keep_last=2, dry_run=True, confirm=recorder.confirm, listener=recorder.hear)
    assert outcome.dry_run and not outcome.acted
    assert not any(isinstance(seen, acting.Question) for seen in recorder.seen)
    assert not (run / ".ckptdoctor").exists(), "a dry run makes no lock and no folder"
    assert _epochs(run) == list(range(1, 8))


@pytest.mark.slow
def test_a_prune_over_more_runs_than_max_runs_asks_first_and_true_is_no_licence(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        write_burn_run(tmp_path / name, range(1, 5))
    _aged(tmp_path)
    outcome = ckd.prune(tmp_path, keep_last=1, max_runs=2, confirm=True)
    assert outcome.declined and not outcome.acted, "confirm=True answers --yes, which never passes max-runs"
    assert all(_epochs(tmp_path / name) == [1, 2, 3, 4] for name in ("a", "b", "c"))
    recorder = Recorder()
    outcome = ckd.prune(tmp_path, keep_last=1, max_runs=2, confirm=recorder.confirm)
    asked = [seen for seen in recorder.seen if isinstance(seen, acting.Question)]
    assert [question.ask for question in asked] == [acting.Ask.TOO_MANY_RUNS, acting.Ask.GO]
    assert asked[0].needed == 3
    assert outcome.acted and all(_epochs(tmp_path / name) == [4] for name in ("a", "b", "c"))


def test_what_changes_while_the_question_waits_is_left(tmp_path: Path) -> None:
    """Checked again after the confirmation: a trainer writing into a doomed file meanwhile keeps it."""
    run = tmp_path / "run"
    write_burn_run(run, range(1, 8))
    _aged(run)

    def trainer_writes_while_asked(question: acting.Question) -> bool:
        with open(run / "model-2.bpk", "ab") as handle:
            handle.write(b"more")
        return True

    outcome = ckd.prune(run, keep_last=2, confirm=trainer_writes_while_asked)
    assert outcome.acted
    assert (run / "model-2.bpk").exists(), "a file written since the plan is not deleted"
    assert any("left 1 entry written, opened or replaced since the plan was made" in line for line in outcome.messages)


def _written_keeping_its_stamp(path: Path) -> Callable[[acting.Question], bool]:
    """A confirmation during which ``path`` is written and its old time set back (a copy that
    keeps times, or a filesystem clock behind this machine's), then a yes."""

    def confirm(question: acting.Question) -> bool:
        stamp = os.stat(path).st_mtime
        with open(path, "ab") as handle:
            handle.write(b"more")
        os.utime(path, (stamp, stamp))
        return True

    return confirm


def test_a_write_stamped_by_a_clock_behind_ours_is_still_seen(tmp_path: Path) -> None:
    """A filesystem stamps a write with its own clock (coarser, or an NFS server's, behind this
    machine's): a file written after the plan, with a modification time older than the plan,
    is still left, because it is not what the scan saw."""
    run = tmp_path / "run"
    write_burn_run(run, range(1, 8))
    _aged(run)
    doomed = run / "model-2.bpk"
    outcome = ckd.prune(run, keep_last=2, confirm=_written_keeping_its_stamp(doomed))
    assert outcome.acted
    assert doomed.exists(), "a file written since the plan is not deleted, whatever its stamp"


@pytest.mark.slow
@pytest.mark.parametrize("inner", ["config.json", "optimizer.pt"])
def test_a_file_inside_a_checkpoint_folder_written_while_asked_keeps_the_folder(hf_trained: Path, tmp_path: Path, inner: str) -> None:
    """A real HF Trainer run: a file in a doomed ``checkpoint-N/`` written while the question
    waited, its time then set back (a copy that keeps times), is not what the scan saw: the
    whole folder is left."""
    from frameworks import copy_run

    run = _aged(copy_run(hf_trained, tmp_path / "out"))
    written = run / "checkpoint-2" / inner
    outcome = ckd.prune(run, keep_last=1, confirm=_written_keeping_its_stamp(written))
    assert outcome.acted
    assert written.exists() and not (run / "checkpoint-4").exists()
    assert any("left 1 entry written, opened or replaced since the plan was made" in line for line in outcome.messages)


def test_a_file_added_to_a_checkpoint_folder_while_asked_keeps_the_folder_whatever_its_times(hf_trained: Path, tmp_path: Path) -> None:
    """The attack on issue 32: a file added to a doomed ``checkpoint-N/`` while the question
    waited, it and its folder then dated back (`rsync -a`, `cp -p` into it), was deleted with the
    folder, though the plan never showed it. Its change time, which no copy sets, is after the plan."""
    from frameworks import copy_run

    run = _aged(copy_run(hf_trained, tmp_path / "out"))
    folder = run / "checkpoint-2"
    added = folder / "extra.bin"

    def confirm(question: acting.Question) -> bool:
        stamp = os.stat(folder).st_mtime
        added.write_bytes(b"not in the plan")
        for path in (added, folder):
            os.utime(path, (stamp, stamp))
        return True

    outcome = ckd.prune(run, keep_last=1, confirm=confirm)
    assert outcome.acted
    assert added.exists() and not (run / "checkpoint-4").exists()


def test_repair_then_undo_through_the_api(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_burn_run(run, range(1, 6))
    (run / "optim-5.bpk").unlink()
    (run / "model-4.bpk").write_bytes((run / "model-4.bpk").read_bytes()[:100])
    _aged(run)
    before = _tree(run)
    assert ckd.inspect(run).runs[0].resume is not None
    outcome = ckd.repair(run, confirm=True)
    assert outcome.acted and not outcome.problems
    moved = {entry.name for item in outcome.plans[0].acting(Action.QUARANTINE) for entry in item.entries}
    assert moved == {"model-4.bpk", "optim-4.bpk", "scheduler-4.bpk", "model-5.bpk", "scheduler-5.bpk"}
    after = ckd.inspect(run)
    assert [c.index for c in after.runs[0].checkpoints] == [1, 2, 3]
    assert not [f for f in after.findings if f.severity.value == "error"], "the repaired run is clean"
    undone = ckd.repair(run, undo=True, confirm=True)
    assert undone.acted and _tree(run) == before, "undo puts the tree back exactly"


def test_an_undo_that_would_overwrite_refuses_and_restores_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_burn_run(run, range(1, 4))
    (run / "optim-3.bpk").unlink()
    _aged(run)
    assert ckd.repair(run, confirm=True).acted
    (run / "model-3.bpk").write_bytes(b"a new file under the old name")
    outcome = ckd.repair(run, undo=True, confirm=True)
    assert not outcome.acted and outcome.refused and "model-3.bpk is in the run again" in outcome.refused[0]
    assert "Nothing was restored." in outcome.messages
    assert (run / "model-3.bpk").read_bytes() == b"a new file under the old name"
    assert not (run / "scheduler-3.bpk").exists()


@pytest.mark.parametrize("call", [lambda path: ckd.prune(path, keep_last=1, confirm=True), lambda path: ckd.repair(path, confirm=True)])
def test_paths_that_cannot_be_acted_on_are_refused_before_anything_changes(tmp_path: Path, call) -> None:
    run = tmp_path / "run"
    write_burn_run(run, range(1, 4))
    _aged(run)
    with pytest.raises(acting.Refused, match="is one file"):
        call(run / "model-1.bpk")
    with pytest.raises(acting.Refused, match="your home folder"):
        call(Path.home())
    with pytest.raises(acting.Refused, match="No such file"):
        call(tmp_path / "missing")
    assert not (run / ".ckptdoctor").exists()


def test_the_api_reports_are_the_ones_the_json_is_made_from(tmp_path: Path, cli) -> None:
    examples = Path(__file__).resolve().parents[1] / "examples" / "runs"
    run = tmp_path / "torch-split"
    shutil.copytree(examples / "torch-split", run)
    from_cli = json.loads(cli("inspect", "--json", run).stdout)
    assert document(ckd.inspect(run)) == from_cli
    verified = json.loads(cli("verify", "--json", run).stdout)
    assert document(ckd.verify(run)) == verified
    assert [f["code"] for f in verified["findings"]], "the example run has a truncated optimizer file: it is found"


def test_the_configuration_beside_the_run_is_used(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_burn_run(run, range(1, 6))
    _aged(run)
    (tmp_path / "ckptdoctor.toml").write_text('ignore = ["CKD"]\n[prune]\nkeep-last = 2\n')
    (run / "optim-5.bpk").unlink()
    assert not ckd.inspect(run).findings, "ignore from the nearest configuration applies"
    outcome = ckd.prune(run, dry_run=True)
    assert {item.number for item in outcome.plans[0].acting(Action.DELETE)} == {1, 2}, "keep-last from [prune]"
    assert ckd.diskcheck(run).disk is not None and ckd.diskcheck(run).disk.keep_last == 2


def test_a_repaired_torch_run_resumes_with_torch_from_the_point_the_api_names(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    run = tmp_path / "torch-split"
    shutil.copytree(Path(__file__).resolve().parents[1] / "examples" / "runs" / "torch-split", run)
    _aged(run)
    outcome = ckd.repair(run, confirm=True)
    assert outcome.acted and not outcome.problems
    assert not (run / "optimizer_3.pt").exists(), "the truncated save is out of the way"
    resume = ckd.inspect(run).runs[0].resume
    assert resume is not None and resume.index == 2
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))  # as examples/make_examples.py
    model.load_state_dict(load_file(str(run / f"model_{resume.index}.safetensors")))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    optimizer.load_state_dict(torch.load(run / f"optimizer_{resume.index}.pt", weights_only=True))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    scheduler.load_state_dict(torch.load(run / f"scheduler_{resume.index}.pt", weights_only=True))
    assert scheduler.last_epoch == resume.index


def test_the_examples_in_docs_api_md_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/api.md stays true: its Python blocks run, in order, on healthy runs."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 5
    for name in ("exp1", "exp2"):
        write_burn_run(tmp_path / "runs" / name / "checkpoint", range(1, 7))
    _aged(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "docs/api.md", "exec"), namespace)
    printed = capsys.readouterr().out
    assert "runs/exp1/checkpoint: resume from epoch 6" in printed
    assert _epochs(tmp_path / "runs" / "exp1" / "checkpoint") == [4, 5, 6], "the interactive prune kept the last 3"


@pytest.mark.parametrize("damage", ["delete", "truncate", "replace"])
def test_a_resume_point_damaged_while_the_question_waits_stops_the_deletion(tmp_path: Path, damage: str) -> None:
    """Deleting the older checkpoints after the newest was lost would leave nothing to resume from."""
    run = tmp_path / "run"
    write_burn_run(run, range(1, 9))
    _aged(run)
    newest = run / "optim-8.bpk"

    def lose_the_newest_while_asked(question: acting.Question) -> bool:
        if damage == "delete":
            newest.unlink()
        elif damage == "truncate":
            newest.write_bytes(newest.read_bytes()[:10])
        else:
            data = newest.read_bytes()
            newest.unlink()
            newest.write_bytes(data)  # same bytes, another file: a save that rewrote it
        return True

    outcome = ckd.prune(run, keep_last=1, confirm=lose_the_newest_while_asked)
    assert _epochs(run) == list(range(1, 9)), "nothing deleted"
    assert outcome.problems and "which the plan keeps the run resumable by, changed since the plan was made" in outcome.problems[0]


@pytest.mark.parametrize("answer", ["no", 1, "yes", None])
def test_only_true_goes_ahead(tmp_path: Path, answer: object) -> None:
    run = tmp_path / "run"
    write_burn_run(run, range(1, 5))
    _aged(run)
    outcome = ckd.prune(run, keep_last=1, confirm=lambda question: answer)
    assert outcome.declined and _epochs(run) == [1, 2, 3, 4]
    with pytest.raises(TypeError, match="confirm must be True, False or a function"):
        ckd.prune(run, keep_last=1, confirm=answer)  # type: ignore[arg-type]


def test_no_paths_is_refused_never_the_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_burn_run(tmp_path / "run", range(1, 5))
    _aged(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="no paths given"):
        ckd.prune([], keep_last=1, confirm=True)  # an empty glob
    with pytest.raises(TypeError, match="paths must be"):
        ckd.inspect(b"run")  # type: ignore[arg-type]
    assert _epochs(tmp_path / "run") == [1, 2, 3, 4]
    assert ckd.prune((path for path in tmp_path.glob("r*")), keep_last=1, confirm=True).acted, "a generator of paths is paths"
    assert _epochs(tmp_path / "run") == [4]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"model_bytes": "7GiB"}, ValueError),
        ({"keep_last": -3}, ValueError),
        ({"runway": True}, ValueError),
        ({"runway": 0}, ValueError),
        ({"margin": -1.0}, ValueError),
        ({"margin": float("nan")}, ValueError),
        ({"margin": float("inf")}, ValueError),
        ({"margin": "0.1"}, ValueError),
        ({"model_bytes": 10**40}, ValueError),
        ({"run_dir": ""}, ValueError),
        ({"run_dir": ["a", "b"]}, TypeError),
    ],
)
def test_diskcheck_refuses_arguments_it_cannot_use_with_a_clear_message(tmp_path: Path, arguments: dict, error: type) -> None:
    given = {"run_dir": tmp_path, **arguments}
    with pytest.raises(error, match="must"):
        ckd.diskcheck(**given)


def test_a_report_written_to_a_fifo_nobody_reads_is_refused_not_waited_for(tmp_path: Path, cli) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result = cli("inspect", "-o", fifo, Path(__file__).resolve().parents[1] / "examples" / "runs" / "torch-split")
    assert result.exit_code == 2 and "a FIFO no process reads" in result.stderr


def test_a_repair_whose_resume_point_breaks_while_the_question_waits_moves_nothing(tmp_path: Path) -> None:
    """Re-pointing at, or resuming from, a checkpoint damaged meanwhile would fix nothing."""
    from frameworks import deepspeed_run

    run = deepspeed_run(tmp_path / "ds", steps=(40, 50))
    (run / "global_step50" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()  # 50 broken; `latest` names it
    _aged(run)
    before = _tree(run)

    def break_the_resume_point(question: acting.Question) -> bool:
        state = run / "global_step40" / "mp_rank_00_model_states.pt"
        state.write_bytes(state.read_bytes()[:50])
        return True

    outcome = ckd.repair(run, confirm=break_the_resume_point)
    assert outcome.problems and "nothing was moved" in outcome.problems[0] and "global_step40" in outcome.problems[0]
    after = _tree(run)
    assert (run / "latest").read_text().strip() == "global_step50", "the pointer is not turned to a damaged checkpoint"
    assert set(after) == set(before), "nothing moved"


def test_a_prune_whose_pointer_moves_while_the_question_waits_deletes_nothing(tmp_path: Path) -> None:
    """`latest` turned back to an older step meanwhile (a manual rollback racing a cron prune): that
    step is the framework's resume point now, and the plan would delete it."""
    from frameworks import deepspeed_run

    run = deepspeed_run(tmp_path / "ds", steps=(10, 20, 30, 40))
    _aged(run)

    def roll_back(question: acting.Question) -> bool:
        (run / "latest").write_text("global_step20")
        return True

    outcome = ckd.prune(run, keep_last=1, confirm=roll_back)
    assert outcome.problems and "latest" in outcome.problems[0]
    assert all((run / f"global_step{step}").is_dir() for step in (10, 20, 30, 40))
