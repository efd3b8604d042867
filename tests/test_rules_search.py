"""`ckptdoctor rules "<pasted error>"`: real error messages rank the rule that explains them first.

Every message below is what a library really prints, copied from a run here (torch 2.13,
safetensors 0.8, accelerate 1.15, orbax 0.12, torch.distributed.checkpoint, Python's OSError) or
from the library's source where it cannot run here (transformers' and Lightning's resume checks,
DeepSpeed's zero_to_fp32, burn's panics from ../shared/reference/burn-format.md §8). Each row
names where its message comes from. The full-disk ones (FULL_DISK) were produced by saving a 4 MB
tensor or model into a 1 MiB tmpfs (torch 2.13, safetensors 0.8, transformers 5.25, Lightning 2.6).
"""

from __future__ import annotations

import json
import re

import pytest

from ckptdoctor.rules.registry import RULES
from ckptdoctor.rules.search import rank

_WEIGHTS_ONLY = (
    "Weights only load failed. In PyTorch 2.6, we changed the default value of the `weights_only` argument in "
    "`torch.load` from `False` to `True`. Re-running `torch.load` with `weights_only` set to `False` will likely "
    "succeed, but it can result in arbitrary code execution. Do it only if you got the file from a trusted source.\n"
    "Please file an issue with the following so that we can make `weights_only=True` compatible with your use case: "
    "WeightsUnpickler error: \n\nUnsupported operand {}\n\nCheck the documentation of torch.load to learn more about "
    "types accepted by default with weights_only https://pytorch.org/docs/stable/generated/torch.load.html."
)
_LIGHTNING = " This is probably due to `ModelCheckpoint.save_weights_only` being set to `True`."
_BURN_FULL = (
    "Training interrupted: Record error: `Record I/O error: I/O error: cannot write to "
    "'run/checkpoint/optim-7.bpk': No space left on device (os error 28)`"
)

# (source, message, the rule that must rank first)
MESSAGES: list[tuple[str, str, str]] = [
    # torch, produced by running torch.load / load_state_dict here
    (
        "torch.load of a half-length file",
        "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory. This is an "
        "internal miniz error. If you are seeing this error, there is a high likelihood that your checkpoint file is "
        "corrupted. This can happen if the checkpoint was not saved properly, was transferred incorrectly, or the "
        "file was modified after saving.",
        "CKD203",
    ),
    ("torch.load of a Git-LFS pointer", "_pickle.UnpicklingError: " + _WEIGHTS_ONLY.format(118), "CKD205"),
    ("torch.load of an HTML page", "_pickle.UnpicklingError: " + _WEIGHTS_ONLY.format(60), "CKD205"),
    ("torch.load(weights_only=False) of a Git-LFS pointer", "_pickle.UnpicklingError: invalid load key, 'v'.", "CKD205"),
    (
        "torch.load of a dict holding argparse.Namespace",
        "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you have two "
        "options, do those steps only if you trust the source of the checkpoint. \n\t(1) In PyTorch 2.6, we changed "
        "the default value of the `weights_only` argument in `torch.load` from `False` to `True`. Re-running "
        "`torch.load` with `weights_only` set to `False` will likely succeed, but it can result in arbitrary code "
        "execution. Do it only if you got the file from a trusted source.\n\t(2) Alternatively, to load with "
        "`weights_only=True` please check the recommended steps in the following error message.\n\tWeightsUnpickler "
        "error: Unsupported global: GLOBAL argparse.Namespace was not an allowed global by default. Please use "
        "`torch.serialization.add_safe_globals([argparse.Namespace])` or the "
        "`torch.serialization.safe_globals([argparse.Namespace])` context manager to allowlist this global if you "
        "trust this class/function.",
        "CKD402",
    ),
    (
        "torch Module.load_state_dict, a key missing",
        'RuntimeError: Error(s) in loading state_dict for Linear:\n\tMissing key(s) in state_dict: "bias". ',
        "CKD307",
    ),
    (
        "torch Module.load_state_dict, another shape",
        "RuntimeError: Error(s) in loading state_dict for Linear:\n\tsize mismatch for weight: copying a param with "
        "shape torch.Size([2, 2]) from checkpoint, the shape in current model is torch.Size([2, 3]).",
        "CKD307",
    ),
    (
        "torch Module.load_state_dict of a DDP state_dict",
        'RuntimeError: Error(s) in loading state_dict for Linear:\n\tMissing key(s) in state_dict: "weight", "bias". '
        '\n\tUnexpected key(s) in state_dict: "module.weight", "module.bias". ',
        "CKD306",
    ),
    (
        "torch Module.load_state_dict of a torch.compile state_dict",
        'RuntimeError: Error(s) in loading state_dict for Linear:\n\tMissing key(s) in state_dict: "weight", "bias". '
        '\n\tUnexpected key(s) in state_dict: "_orig_mod.weight", "_orig_mod.bias". ',
        "CKD306",
    ),
    (
        "torch Optimizer.load_state_dict, other parameters",
        "ValueError: loaded state dict contains a parameter group that doesn't match the size of optimizer's group",
        "CKD301",
    ),
    (
        "torch Optimizer.load_state_dict, other groups",
        "ValueError: loaded state dict has a different number of parameter groups",
        "CKD301",
    ),
    (
        "torch/serialization.py, a CUDA tensor on a CPU machine",
        "RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If "
        "you are running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu') to map "
        "your storages to the CPU.",
        "CKD305",
    ),
    # safetensors, produced by running load_file / safe_open here
    (
        "safetensors load_file of a 5-byte file",
        "safetensors_rust.SafetensorError: Error while deserializing header: header too small",
        "CKD201",
    ),
    (
        "safetensors load_file of a file 3 bytes short",
        "safetensors_rust.SafetensorError: Error while deserializing header: incomplete metadata, file not fully covered",
        "CKD203",
    ),
    (
        "safetensors load_file of a Git-LFS pointer",
        "safetensors_rust.SafetensorError: Error while deserializing header: header too large",
        "CKD205",
    ),
    (
        "safetensors load_file, a bad JSON header",
        "safetensors_rust.SafetensorError: Error while deserializing header: invalid JSON in header: key must be a string at line 1 column 2",
        "CKD207",
    ),
    (
        "safetensors safe_open.get_tensor of a tensor the shard lacks",
        "safetensors_rust.SafetensorError: File does not contain tensor lm_head.weight",
        "CKD308",
    ),
    # transformers Trainer (trainer.py, source)
    (
        "transformers Trainer.train(resume_from_checkpoint=True)",
        "ValueError: No valid checkpoint found in output directory (out)",
        "CKD110",
    ),
    ("transformers Trainer._load_from_checkpoint", "ValueError: Can't find a valid checkpoint at out/checkpoint-6", "CKD102"),
    (
        "transformers TrainerState.load_from_json in Trainer.train",
        "FileNotFoundError: [Errno 2] No such file or directory: 'out/checkpoint-6/trainer_state.json'",
        "CKD104",
    ),
    # Lightning (checkpoint_connector.py, strategies/strategy.py, source)
    (
        "Lightning _CheckpointConnector.restore_optimizers_and_schedulers",
        "KeyError: 'Trying to restore optimizer state but checkpoint contains only the model." + _LIGHTNING + "'",
        "CKD107",
    ),
    (
        "Lightning _CheckpointConnector.restore_optimizers_and_schedulers",
        "KeyError: 'Trying to restore learning rate scheduler state but checkpoint contains only the model." + _LIGHTNING + "'",
        "CKD107",
    ),
    ("Lightning Strategy.load_optimizer_state_dict", "KeyError: 'optimizer_states'", "CKD107"),
    # accelerate, produced by running Accelerator.load_state after deleting a file here
    (
        "accelerate load_state, optimizer.bin deleted",
        "FileNotFoundError: [Errno 2] No such file or directory: '/tmp/run/optimizer.bin'",
        "CKD101",
    ),
    (
        "accelerate load_state, scheduler.bin deleted",
        "FileNotFoundError: [Errno 2] No such file or directory: '/tmp/run/scheduler.bin'",
        "CKD103",
    ),
    (
        "accelerate load_state, model.safetensors deleted",
        "FileNotFoundError: [Errno 2] No such file or directory: '/tmp/run/pytorch_model.bin'",
        "CKD102",
    ),
    # accelerate's own examples (complete_nlp_example.py, by_feature/checkpointing.py) and HF's
    # *_no_trainer scripts take the step from the folder they resume: int("best".replace("step_", ""))
    (
        "accelerate examples' resume from a folder named best",
        "ValueError: invalid literal for int() with base 10: 'best'",
        "CKD114",
    ),
    # DeepSpeed (utils/zero_to_fp32.py, source)
    (
        "DeepSpeed zero_to_fp32 parse_optim_states",
        "ValueError: Expected 4 of '*_optim_states.pt' under 'ckpt/global_step100' but found 3 files. Possibly due to "
        "an overwrite of an old checkpoint, or a checkpoint didn't get saved by one or more processes.",
        "CKD105",
    ),
    # torch.distributed.checkpoint, produced by running dcp.load here
    (
        "dcp.load of a folder without .metadata",
        "AssertionError: metadata is None; global metadata read failed: [Errno 2] No such file or directory: "
        "'/tmp/dcp/.metadata'; rank local metadata read failed: [Errno 2] No such file or directory: '/tmp/dcp/__0.metadata'",
        "CKD106",
    ),
    ("dcp.load of a key the checkpoint lacks", "RuntimeError: Missing key in checkpoint state_dict: x.", "CKD307"),
    ("dcp.load with a .distcp file deleted", "FileNotFoundError: [Errno 2] No such file or directory: '/tmp/dcp2/__0_0.distcp'", "CKD105"),
    # Orbax, produced by running CheckpointManager.restore here
    ("orbax CheckpointManager.restore with no committed step", "FileNotFoundError: No steps found in /tmp/run.", "CKD110"),
    # burn (crates/burn-train, burn-pack, burn-optim; ../shared/reference/burn-format.md §8)
    ("burn learner/base.rs load_checkpoint", "Can load optimizer checkpoint.", "CKD101"),
    ("burn learner/base.rs load_checkpoint", "thread 'main' panicked: Can load model checkpoint.: ...", "CKD102"),
    ("burn learner/base.rs load_checkpoint", "Can load learning rate scheduler checkpoint.", "CKD103"),
    ("burn learner/base.rs Checkpointer::save", "Can save optimizer checkpoint.", "CKD501"),
    ("burn checkpoint/async_checkpoint.rs", "Can send message to checkpointer thread.: SendError { .. }", "CKD501"),
    ("burn stop reason for a full disk (burn-pack Display chain)", _BURN_FULL, "CKD501"),
    (
        "burn-pack reader, a file shorter than its header",
        "Record error: `Record I/O error: I/O error: failed to fill whole buffer`",
        "CKD201",
    ),
    ("burn-pack reader, tensors past the end", "Validation error: File truncated: expected at least 4096 bytes, got 1024 bytes", "CKD203"),
    ("burn-pack reader, bad CBOR", 'Metadata deserialization error: Semantic(None, "missing field `tensors`")', "CKD207"),
    ("burn-optim module_optimizer.rs", "Optimizer record tensors should carry a parameter id.", "CKD301"),
    ("burn-core ModuleRecord::apply", 'Failed to load record: Validation("Missing tensors: [\\"linear.weight\\"]")', "CKD307"),
    (
        "burn recorder.rs (<= v0.21), another Burn version",
        'Unable to load record.\nMetadata has a different Burn version: Actual "0.19.1", Expected "0.21.0"',
        "CKD303",
    ),
    # the OS, as Python raises it (OSError(errno, os.strerror(errno), path) produced here)
    ("OS ENOSPC", "OSError: [Errno 28] No space left on device: '/ckpt/epoch-3.pt'", "CKD501"),
    ("OS EDQUOT", "OSError: [Errno 122] Disk quota exceeded: '/ckpt/epoch-3.pt'", "CKD501"),
    ("OS EROFS", "OSError: [Errno 30] Read-only file system: '/ckpt/epoch-3.pt'", "CKD503"),
    ("OS EACCES", "PermissionError: [Errno 13] Permission denied: '/ckpt/epoch-3.pt'", "CKD503"),
    ("OS EIO", "OSError: [Errno 5] Input/output error: '/ckpt/epoch-3.pt'", "CKD211"),
    ("OS ESTALE", "OSError: [Errno 116] Stale file handle: '/ckpt/epoch-3.pt'", "CKD211"),
    ("OS ENOTEMPTY (a rename onto a full folder)", "OSError: [Errno 39] Directory not empty: '/ckpt/tmp-3' -> '/ckpt/epoch-3'", "CKD202"),
]


def test_the_table_is_large_and_covers_every_source():
    assert len(MESSAGES) >= 40
    sources = " ".join(source for source, _, _ in MESSAGES).lower()
    for library in (
        "torch",
        "safetensors",
        "transformers",
        "lightning",
        "accelerate",
        "deepspeed",
        "dcp",
        "orbax",
        "burn",
        "enospc",
        "erofs",
        "edquot",
    ):
        assert library in sources, library


@pytest.mark.parametrize(("source", "message", "code"), MESSAGES, ids=[f"{code}:{source}" for source, _, code in MESSAGES])
def test_a_real_message_ranks_its_rule_first(source, message, code):
    ranked = rank(message)
    assert ranked, f"{source}: nothing matches"
    assert ranked[0].rule.code == code, (source, [(m.rule.code, m.score, m.why) for m in ranked])


def test_lightning_weights_only_is_not_a_disk_problem():
    said = "KeyError: 'Trying to restore optimizer state but checkpoint contains only the model." + _LIGHTNING + "'"
    assert [match.rule.code for match in rank(said)] == ["CKD107"]


def test_burn_load_is_never_a_save():
    codes = [match.rule.code for match in rank("Can load optimizer checkpoint.")]
    assert codes[0] == "CKD101"
    assert "CKD501" not in codes
    assert "CKD102" not in codes  # "Can load model checkpoint." shares three words of four: not the same message


def test_an_ordinary_model_mismatch_is_not_a_shard_index_problem():
    said = 'RuntimeError: Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: "fc2.weight", "fc2.bias". '
    assert "CKD308" not in [match.rule.code for match in rank(said)]


def test_every_match_says_why_and_scores_best_first():
    ranked = rank("Can load optimizer checkpoint.")
    assert ranked[0].why == 'says "Can load optimizer checkpoint."'
    assert [match.score for match in ranked] == sorted((match.score for match in ranked), reverse=True)
    # part of a message matches it, below a whole message
    part = rank("optimizer checkpoint")
    assert {match.rule.code for match in part} >= {"CKD101", "CKD501"}
    assert all(match.why.startswith("is part of") for match in part)
    assert rank("") == () and rank("  ::  ") == ()


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_messages_are_messages_not_file_names(rule):
    for message in rule.messages:
        # a bare file name ("optimizer.pt") matches any paste naming it; a message says what went wrong
        assert not re.fullmatch(r"[\w*.-]*\.(pt|bin|json|safetensors|txt|ckpt|pth|mpk|bpk)", message.strip()), (rule.code, message)
        assert rank(message), (rule.code, message)
        assert rule in [match.rule for match in rank(message)], (rule.code, message)


def test_a_search_with_several_matches_prints_one_line_each(cli):
    result = cli("rules", "Can load optimizer checkpoint.")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CODE", "NAME", "WHY"]
    assert lines[1].startswith("CKD101") and "missing-optimizer" in lines[1] and "Can load optimizer checkpoint." in lines[1]
    assert "What it means" not in result.stdout  # no page: one line per match
    assert "--full" in result.stdout


def test_full_explains_every_match(cli):
    result = cli("rules", "--full", "Can load optimizer checkpoint.")
    assert result.exit_code == 0
    assert result.stdout.startswith("CKD101 missing-optimizer")
    assert result.stdout.count("What it means") == len(rank("Can load optimizer checkpoint."))


def test_a_single_match_is_one_line_too(cli):
    """Issue 35: one match printed its whole page (~70 lines); `rules CODE` is the page."""
    result = cli("rules", "KeyError: 'optimizer_states'")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[0].split() == ["CODE", "NAME", "WHY"], result.stdout
    assert lines[1].split()[:2] == ["CKD107", "weights-only"]
    assert "ckptdoctor rules CODE" in lines[2] and "--full" in lines[2]
    assert "What it means" not in result.stdout
    assert "What it means" in cli("rules", "CKD107").stdout
    assert "What it means" in cli("rules", "--full", "KeyError: 'optimizer_states'").stdout


def test_the_match_list_never_splits_a_word(cli):
    """Issue 35: the WHY column was folded mid-word where the terminal is narrow: at 80 columns
    the WHY is wrapped beside the rule, at 40 under it, its words whole either way."""
    pasted = "No such file or directory"
    ranked = rank(pasted)
    for width in (40, 80):
        out = cli("rules", pasted, env={"COLUMNS": str(width)}).stdout
        assert all(len(line) <= width for line in out.splitlines()), out
        words = out.split()
        for match in ranked:
            assert f"{match.rule.code} {match.rule.name}" in " ".join(words), out
            assert all(word in words for word in match.why.split()), (match.why, out)
        assert "`ckptdoctor rules CODE`" in out  # the command to paste, whole


_TORCH_FULL_TRACEBACK = """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/serialization.py", line 1003, in save
    _save(
  File "/venv/lib/python3.11/site-packages/torch/serialization.py", line 1312, in _save
    zip_file.write_record(name, storage, num_bytes)
RuntimeError: basic_ios::clear: iostream error

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "train.py", line 10, in <module>
    torch.save(state, "/ckpt/last.pt")
  File "/venv/lib/python3.11/site-packages/torch/serialization.py", line 1002, in save
    with _open_zipfile_writer(f) as opened_zipfile:
  File "/venv/lib/python3.11/site-packages/torch/serialization.py", line 834, in __exit__
    self.file_like.write_end_of_file()
RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534
"""

# (source, what it printed when the disk filled up during a save)
FULL_DISK: list[tuple[str, str]] = [
    ("torch.save to a path, its first error", "RuntimeError: basic_ios::clear: iostream error"),
    ("torch.save to a path, its last error", "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"),
    ("torch.save to a path, the whole traceback", _TORCH_FULL_TRACEBACK),
    ("torch.save to an open file", "OSError: [Errno 28] No space left on device"),
    ("torch.save(_use_new_zipfile_serialization=False)", "RuntimeError: write(): fd 3 failed with No space left on device"),
    # older torch, from framework-layouts.md's failure table (hiyouga/LlamaFactory#1223)
    ("torch.save, older torch", "RuntimeError: PytorchStreamWriter failed writing file data/0: file write failed"),
    (
        "DeepSpeed save_checkpoint of bf16_zero_*optim_states.pt (zai-org/ChatGLM-6B#1166)",
        "RuntimeError: [enforce fail at inline_container.cc:445] . PytorchStreamWriter failed writing file data/176: file write failed",
    ),
    (
        "safetensors save_file, and transformers save_pretrained through it",
        "safetensors._safetensors_rust.SafetensorError: Error while serializing: I/O error: No space left on device (os error 28)",
    ),
    (
        "safetensors save_file before 0.5 (its io::Error's Debug form)",
        'safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })',
    ),
    (
        "Lightning Trainer.save_checkpoint (its atomic save's move into place)",
        "OSError: [Errno 28] No space left on device: '/tmp/tmpdv4nrqyd' -> '/ckpt/last.ckpt'",
    ),
    ("burn stop reason (burn-pack Display chain)", _BURN_FULL),
]


def test_a_full_disk_ranks_the_disk_rule_first_on_its_own():
    """Issue 35: torch's first error matched nothing, and the others tied the disk-full rule with
    not-writable and low-inodes, first only by the table's order."""
    for source, message in FULL_DISK:
        ranked = rank(message)
        assert ranked and ranked[0].rule.code == "CKD501", (source, [(m.rule.code, m.score) for m in ranked])
        assert all(other.score < ranked[0].score for other in ranked[1:]), (source, [(m.rule.code, m.score) for m in ranked])


def test_rules_takes_config_for_its_format(cli, tmp_path):
    """Issue 35: `rules --config x.toml` said "No such option"; the configured format is used where
    it renders rules, and a file that cannot be used is refused by name."""
    settings = tmp_path / "ckptdoctor.toml"
    settings.write_text('format = "json"\n')
    assert json.loads(cli("rules", "--config", settings, "CKD501").stdout)["rules"][0]["code"] == "CKD501"
    assert cli("rules", "--config", settings, "--format", "human", "CKD501").stdout.startswith("CKD501 insufficient-space")
    settings.write_text('format = "junit"\n')  # a CI job's report format: rules stay for people
    assert cli("rules", "--config", settings, "unexpected pos").stdout.startswith("CODE")
    settings.write_text("bogus = 1\n")
    refused = cli("rules", "--config", settings)
    assert refused.exit_code == 2 and "bogus" in refused.stderr and refused.stdout == ""
    missing = cli("rules", "--config", tmp_path / "nowhere.toml")
    assert missing.exit_code == 2 and "nowhere.toml" in missing.stderr


def test_json_has_the_ranked_matches(cli):
    result = cli("rules", "--json", "Can load optimizer checkpoint.")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    ranked = rank("Can load optimizer checkpoint.")
    assert [entry["code"] for entry in document["matches"]] == [match.rule.code for match in ranked]
    assert [entry["code"] for entry in document["rules"]] == [match.rule.code for match in ranked]
    first = document["matches"][0]
    assert first == {"code": "CKD101", "name": "missing-optimizer", "score": ranked[0].score, "why": ranked[0].why}
    # a rule asked for by code has no matches, only the rule
    assert "matches" not in json.loads(cli("rules", "--json", "CKD101").stdout)
