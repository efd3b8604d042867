"""Fixes are written for the run's framework only (issue 16, item 4).

Every rule is rendered for every layout: a run is told its own framework's words, or general
ones, never another framework's API. Each layout declares its framework's vocabulary: the names of
its API, files and tools that a fix could mention. The scenarios at the end show it on real
findings: a torch or HF run gets no burn text, an LFS pointer no HTML advice, and the resume
point is said once, in the last lines, with how the framework resumes from it.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from ckptdoctor.layouts.registry import FIX_WORDINGS, LAYOUTS
from ckptdoctor.rules.registry import RULES
from ckptdoctor.rules.rule import GENERIC_CONTEXT, OTHERWISE, Fix, fix


def _vocabulary() -> dict[str, tuple[str, ...]]:
    """Each framework's own words, as its layout declares them (``Layout.vocabulary``; the
    layouts that share a name, such as Composer's and its sharded saves', pool theirs)."""
    words: dict[str, tuple[str, ...]] = {}
    for layout in LAYOUTS:
        words[layout.name] = tuple(dict.fromkeys((*words.get(layout.name, ()), *layout.vocabulary)))
    return words


VOCABULARY = _vocabulary()
"""Each framework's own words; a fix for another framework's run must not use them."""

ALSO_SPOKEN: dict[str, frozenset[str]] = {
    "hf-trainer": frozenset({"deepspeed"}),
}
"""Frameworks a layout's runs may use inside: HF Trainer runs DeepSpeed ZeRO-3 and saves its
``global_stepN/`` in the checkpoint folder, so its fixes may say how to rebuild those weights."""


def _uses(text: str, word: str) -> bool:
    if re.fullmatch(r"\w+", word):
        return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None
    return word in text


def _foreign(keys: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    spoken = set(keys) | {other for key in keys for other in ALSO_SPOKEN.get(key, ())}
    return {name: words for name, words in VOCABULARY.items() if name not in spoken}


def test_every_layout_has_a_vocabulary_and_every_wording_names_a_fix() -> None:
    """A new layout brings its words (else nothing keeps other runs' fixes free of them), and a
    wording for a slot no rule's fix has would never be shown."""
    assert all(VOCABULARY[layout.name] for layout in LAYOUTS), [name for name, words in VOCABULARY.items() if not words]
    slots = {record.slot for rule in RULES for record in rule.fix_records if record.slot}
    for layout in LAYOUTS:
        assert set(layout.fix_wordings) <= slots, (layout.name, set(layout.fix_wordings) - slots)
    assert set(FIX_WORDINGS) <= {key for layout in LAYOUTS for key in layout.fix_keys}


def test_a_slot_names_one_fix() -> None:
    """Two fixes under one slot would share every framework's words: a slot is one fix's (one
    record may serve several rules, as retention serves CKD501 and CKD502)."""
    by_slot: dict[str, Fix] = {}
    for rule in RULES:
        for record in rule.fix_records:
            if record.slot:
                assert by_slot.setdefault(record.slot, record) == record, record.slot


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.name)
def test_every_rule_rendered_for_a_layout_names_no_other_framework(layout) -> None:
    foreign = _foreign(layout.fix_keys)
    leaks = []
    for rule in RULES:
        for text in rule.fix_texts(GENERIC_CONTEXT, layout.fix_keys):
            leaks += [
                f"{rule.code}: {name}'s {word!r} in {text!r}" for name, words in foreign.items() for word in words if _uses(text, word)
            ]
    assert not leaks, "\n".join(leaks)


def test_general_words_name_no_framework() -> None:
    """What a run of no known layout (files checked one by one) is told: no framework at all."""
    leaks = []
    for rule in RULES:
        for text in rule.fix_texts(GENERIC_CONTEXT, ()):
            leaks += [
                f"{rule.code}: {name}'s {word!r} in {text!r}" for name, words in VOCABULARY.items() for word in words if _uses(text, word)
            ]
    assert not leaks, "\n".join(leaks)


def test_the_vocabulary_check_sees_a_leak() -> None:
    assert _uses("build them with `with_default_checkpointers()`", "with_default_checkpointers")
    assert _uses("in HF, pass it", "HF") and not _uses("a HFS volume", "HF")
    assert not _uses("ckptdoctor inspect --resume-path", "latest")
    assert "burn" in _foreign(("torch",)) and "burn" not in _foreign(("burn",))


def test_a_run_is_told_its_own_frameworks_words_else_the_general_ones(monkeypatch) -> None:
    from ckptdoctor.layouts import registry

    wordings = {"burn": {"demo": "burn's"}, "torch": {"demo": "torch's"}, "hf-trainer": {"demo": ""}, "deepspeed": {"only": "only"}}
    monkeypatch.setattr(registry, "FIX_WORDINGS", wordings)
    record = fix("general", slot="demo")
    assert record.text_for(("burn",)) == "burn's"
    assert record.text_for(("lightning", "torch")) == "torch's"
    assert record.text_for(("orbax",)) == "general"
    assert record.text_for(("hf-trainer", "torch")) == ""  # does not apply there
    assert fix(slot="only").text_for(("torch",)) is None
    assert record.frameworks == (("burn", "burn's"), ("torch", "torch's"), ("hf-trainer", ""))


def test_every_wording_is_on_the_layout_not_the_rule() -> None:
    """The real table: burn's runs get burn's words for CKD101's first fix, from burn's layout."""
    from ckptdoctor.rules.completeness import MISSING_OPTIMIZER

    first = MISSING_OPTIMIZER.fix_records[0]
    burn = next(layout for layout in LAYOUTS if layout.name == "burn")
    assert first.text_for(burn.fix_keys) == burn.fix_wordings[first.slot]
    assert "with_default_checkpointers" in first.text_for(burn.fix_keys) and "with_default_checkpointers" not in (first.generic or "")


def test_a_case_picks_its_own_fixes_and_otherwise_the_rest() -> None:
    from ckptdoctor.model import Severity
    from ckptdoctor.rules.rule import Rule  # the shape under test: built here, not registered

    rule = Rule(
        "CKD999", "demo", Severity.ERROR, "s", "m", "c",
        fixes=("always", Fix("lfs", case="git-lfs-pointer"), Fix("html", case="html"), Fix("else", case=OTHERWISE)),
    )  # fmt: skip
    assert rule.fix_texts(None, (), "git-lfs-pointer") == ("always", "lfs")
    assert rule.fix_texts(None, (), "zip") == ("always", "else")
    assert rule.fix_texts(None, ()) == ("always", "lfs", "html", "else")


def test_the_rule_page_shows_each_frameworks_words_under_the_general_ones(cli) -> None:
    result = cli("rules", "CKD101")
    assert result.exit_code == 0
    page = result.stdout
    general = page.index("Point the optimizer's saving code at RUN_DIR")
    assert general < page.index("burn: Build all three checkpointers") < page.index("hf-trainer: Pass `resume_from_checkpoint`")


# --- on real runs ------------------------------------------------------------------------------


def _inspect(cli, path: Path, *args: str) -> dict:
    result = cli("inspect", "--json", "--exit-zero", *args, str(path))
    return json.loads(result.stdout)


def _fixes(report: dict) -> str:
    return "\n".join(fix for finding in report["findings"] for fix in finding["fixes"])


def test_a_torch_run_missing_its_optimizer_gets_torch_words_and_no_burn(cli, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    run = tmp_path / "run"
    run.mkdir()
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    for epoch in (1, 2):
        torch.save(model.state_dict(), run / f"model_{epoch}.pt")
        if epoch == 1:
            torch.save(optimizer.state_dict(), run / f"optimizer_{epoch}.pt")
    report = _inspect(cli, run)
    assert {f["code"] for f in report["findings"]} >= {"CKD101"}
    text = _fixes(report)
    assert "`model.load_state_dict(...)`" in text
    for word in VOCABULARY["burn"] + VOCABULARY["hf-trainer"]:
        assert not _uses(text, word), word
    assert not any(fix.startswith("Resume from") for fix in text.splitlines())


def test_a_burn_run_gets_burn_words_and_the_resume_said_once(cli, tmp_path: Path) -> None:
    shutil.copytree(Path(__file__).parent.parent / "examples" / "runs" / "burn-missing-optimizer", tmp_path / "run")
    human = cli("inspect", "--exit-zero", str(tmp_path / "run")).stdout
    assert "`with_default_checkpointers()`" in human
    assert human.count("Resume from epoch 4") == 1
    assert "how: pass `.checkpoint(4)` to burn's `SupervisedTraining`" in human.replace("\n  ", " ")
    for word in VOCABULARY["hf-trainer"] + VOCABULARY["torch"]:
        assert not _uses(human, word) or word == "Trainer", word
    report = _inspect(cli, tmp_path / "run")
    (run,) = report["runs"]
    assert run["resume"]["how"].startswith("pass `.checkpoint(4)`")
    assert run["resume"]["path"] == str(tmp_path / "run")  # the artifact folder above checkpoint/


def test_an_lfs_pointer_is_not_told_to_download_an_html_page_again(cli, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 1234\n"
    (run / "model.safetensors").write_text(pointer)
    result = cli("verify", "--json", "--exit-zero", str(run / "model.safetensors"))
    (finding,) = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "CKD205"]
    assert any("git lfs pull" in fix for fix in finding["fixes"])
    assert not any("curl" in fix or "HTML" in fix or "another format" in fix for fix in finding["fixes"])


def test_an_html_page_is_told_to_download_again(cli, tmp_path: Path) -> None:
    page = tmp_path / "model.pt"
    page.write_text("<!DOCTYPE html><html><body>Sign in</body></html>")
    result = cli("verify", "--json", "--exit-zero", str(page))
    (finding,) = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "CKD205"]
    assert any("`curl -fL`" in fix for fix in finding["fixes"])
    assert not any("git lfs" in fix for fix in finding["fixes"])


def test_a_split_torch_run_is_told_which_file_each_object_loads_from_and_it_resumes(cli, tmp_path: Path) -> None:
    """The ``how`` of a hand-made loop's run names each state's file; loading them as it says
    restores the model, optimizer and scheduler that saved them."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    run = tmp_path / "run"
    run.mkdir()
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    for epoch in (1, 2):
        model(torch.randn(4, 3)).sum().backward()
        optimizer.step()
        scheduler.step()
        save_file(model.state_dict(), str(run / f"model_{epoch}.safetensors"))
        torch.save(optimizer.state_dict(), run / f"optimizer_{epoch}.pt")
        torch.save(scheduler.state_dict(), run / f"scheduler_{epoch}.pt")
    (resumed,) = _inspect(cli, run)["runs"]
    how = resumed["resume"]["how"]
    pairs = dict(re.findall(r"(\w+) from (\S+?)(?:,|$)", how))
    assert pairs == {"model": "model_2.safetensors", "optimizer": "optimizer_2.pt", "scheduler": "scheduler_2.pt"}, how
    fresh = torch.nn.Linear(3, 2)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters())
    fresh_scheduler = torch.optim.lr_scheduler.StepLR(fresh_optimizer, 1)
    fresh.load_state_dict(load_file(str(run / pairs["model"])))
    fresh_optimizer.load_state_dict(torch.load(run / pairs["optimizer"], weights_only=True))
    fresh_scheduler.load_state_dict(torch.load(run / pairs["scheduler"], weights_only=True))
    assert torch.equal(fresh.weight, model.weight)
    assert fresh_optimizer.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]
    assert fresh_scheduler.last_epoch == scheduler.last_epoch
