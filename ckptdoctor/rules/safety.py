"""Safety rules (CKD4xx): would loading a file run code, or is its container built to fool scanners?

These checks look at pickles statically (imports and opcodes, never executed) and at the zip
container around them.
"""

from __future__ import annotations

from ckptdoctor.model import Severity
from ckptdoctor.rules.rule import Rule, fix

UNSAFE_PICKLE = Rule(
    code="CKD401",
    name="unsafe-pickle",
    severity=Severity.ERROR,
    summary="A pickle imports something outside the allowlist, or uses opcodes torch never writes: loading it would run code.",
    meaning=(
        "A torch checkpoint's `data.pkl`, like any pickle in a `.pkl`, `.bin` or `.pt` file, is a small program that the "
        "loader runs. Files torch writes need only a few dozen harmless imports and a fixed set of opcodes. This one imports "
        "something else (`os.system`, `builtins.eval`, `subprocess`, a project's own classes) or uses opcodes torch never "
        "emits, a common way to hide imports from scanners. Loading it with `torch.load(weights_only=False)`, `pickle.load` "
        "or an old torch would run that code with your permissions. ckptdoctor found this statically, without running "
        'anything. The finding says which kind it is: a pickle that "calls functions that run commands or touch files" (`os`, '
        '`subprocess`, `builtins.eval`, a function of a module that can act) is an attack or worse; one that "calls '
        "functions (…) when loaded\" calls other functions (any name not a class's, such as pandas' `_unpickle_block`) "
        'with what the file holds, which can run code; one that only "rebuilds objects of these classes" (a `BertConfig`, '
        'a dataclass, an `nn.Module`) is what training code saves, but "safe only if you trust whoever wrote it": declare '
        "your own classes in `trusted-globals` and it is CKD402 instead. The rule fails closed: a pickle that ckptdoctor cannot follow to its end the way the loaders read it "
        "(an argument the C and pure-Python unpicklers read differently, a record count that is not a literal, a link out "
        'of a tar, a stream past the per-file budget) is reported here too, as "cannot be proven safe".'
    ),
    causes=(
        "A malicious or tampered file from an untrusted source (a model hub, a shared drive, an email). A checkpoint that "
        "pickled custom objects (a lambda, a loss object, the training script's own classes): not malicious, but still code "
        "that runs on load. A pickle written by another tool with other opcodes."
    ),
    fixes=(
        fix("Do not load it with a loader that runs pickled code (`pickle.load`, an unrestricted unpickler).", slot="CKD401/do-not-load"),
        "Find out where the file came from and compare its `sha256sum` with the publisher's; if in doubt, delete it.",
        fix(
            "If it is your own file with custom objects, re-save only the tensors, as safetensors, from a trusted, isolated environment.",
            slot="CKD401/re-save",
        ),
        fix(
            'If it only rebuilds objects of classes you wrote or trust (the finding names them), declare them: `trusted-globals = ["mypkg.Config"]` in `[tool.ckptdoctor]` (exact names, or `mypkg.*` for a package of your own; never a module that can act, such as `os` or `builtins`).',
            slot="CKD401/declare-trusted",
        ),
        "Check the other files from the same source: `ckptdoctor verify {run}`.",
        "Share weights as safetensors, which cannot hold code.",
    ),
    messages=("Trying to load unsupported GLOBAL",),
    related=("CKD402", "CKD403"),
)

NON_WEIGHTS_OBJECT = Rule(
    code="CKD402",
    name="non-weights-object",
    severity=Severity.WARNING,
    summary="A pickle needs known-benign globals that `torch.load(weights_only=True)` refuses (numpy scalars, `argparse.Namespace`, …).",
    meaning=(
        "As far as the static scan can tell the file is not dangerous: it imports only well-known harmless classes. But since "
        "torch 2.6 `torch.load` defaults to `weights_only=True`, which allows only tensors and a few containers, so loading "
        "fails with `Weights only load failed … Unsupported global: GLOBAL …`. Resume code hits this after a torch upgrade: "
        "HF's `rng_state.pth`, Lightning hyper-parameters, timm's saved `args`. Side files that the framework which wrote "
        "them loads itself with these globals allowed (HF `rng_state.pth` and `training_args.bin`, accelerate's "
        "`random_states_N.pkl`) are reported as info, and so are timm's checkpoints when `argparse.Namespace` is all "
        "they need: timm's own loader allows exactly that one. Classes whose construction runs set-up code (`TrainingArguments`, "
        "accelerate's `PartialState`) are harmless only when rebuilt field by field; a pickle that calls them is CKD401. "
        "Objects a framework's own save code writes (DeepSpeed's loss scaler, `ZeroStageEnum` and `fragment_address` in "
        "every ZeRO partition, mmengine's `HistoryBuffer`, the YOLO model and arguments of Ultralytics' saves) are vouched for "
        "only in a run of that framework, only rebuilt the way pickle writes a plain object, a namespace or an enum member, "
        "and only with nothing else unsafe in the file: then the finding "
        "is this one, saying how the framework's own loader loads them (info where it does unaided, as DeepSpeed's "
        "`load_checkpoint` does; a warning where the resume needs a step, as mmengine's does on torch >= 2.6). Anywhere "
        "else, or used any other way, they are CKD401. Classes a user declared in `trusted-globals` are CKD402 too, "
        '"declared trusted in" the configuration file that names them.'
    ),
    causes=(
        "The checkpoint stores non-tensor Python objects: numpy arrays or scalars (RNG states, metrics), `argparse.Namespace` "
        "arguments, Lightning `AttributeDict` hyper-parameters, OmegaConf configs, loss modules. It was written with torch "
        "older than 2.6 and is now loaded with 2.6 or later. Or the framework's own save code writes these objects into "
        "every checkpoint (DeepSpeed's ZeRO partitions, mmengine's `message_hub`, timm's `args`)."
    ),
    fixes=(
        fix("Allow exactly the globals the finding names, and keep the restricted loader.", slot="CKD402/allowlist"),
        fix(
            "For files you wrote yourself and trust, the unrestricted loader works; never use it for files from elsewhere.",
            slot="CKD402/own-files",
        ),
        fix(
            "Save plain types from now on: `vars(args)` instead of the `Namespace`, Python numbers or tensors instead of numpy scalars, plain dicts for hyper-parameters.",
            slot="CKD402/save-plain",
        ),
        fix("Upgrade the framework: newer releases allow the globals their own files need.", slot="CKD402/upgrade"),
    ),
    messages=(
        "Weights only load failed. This file can still be loaded",
        "Unsupported global: GLOBAL",
        "was not an allowed global by default",
    ),
    related=("CKD401", "CKD210"),
)

ZIP_ANOMALY = Rule(
    code="CKD403",
    name="zip-anomaly",
    severity=Severity.ERROR,
    summary="The zip container has tricks: encrypted or odd flag bits, local/central name mismatch, duplicate or compressed members.",
    meaning=(
        "torch writes its zips one plain way: stored (uncompressed) members, a fixed set of flag bits, and names that agree "
        "between the local headers and the central directory. A file that differs was written or edited by another tool, "
        "and some of these differences are known ways to slip a pickle past scanners: Python's `zipfile`, which most "
        "scanners use, fails on or skips a member that torch's own reader still loads. Treat the file as unsafe until you "
        "know where it came from; ckptdoctor reads members through the central directory itself and never skips one."
    ),
    causes=(
        "A file crafted to evade scanners. A checkpoint re-zipped by a general-purpose tool (compressed members also break "
        "`torch.load(mmap=True)` with `Trying to resize storage that is not resizable`). A tool that renamed members or "
        "appended a second copy of one. Corruption in the zip headers."
    ),
    fixes=(
        "Do not load it if it comes from an untrusted source; find out where it came from and compare its `sha256sum` with the publisher's.",
        fix("If it is your own file re-zipped by a tool, restore the original.", slot="CKD403/re-zipped"),
        "Never re-compress checkpoints with `zip`; archive whole runs with `tar` instead.",
        "Check every member's CRC and pickle: `ckptdoctor verify --deep {run}`.",
    ),
    messages=(
        "File name in directory",
        "password required for extraction",
        "Trying to resize storage that is not resizable",
    ),
    related=("CKD401", "CKD206", "CKD207"),
)

CODE_IN_CONFIG = Rule(
    code="CKD404",
    name="code-in-config",
    severity=Severity.ERROR,
    summary="A model's saved configuration holds Python code that its loader runs (a Keras `Lambda` layer's bytecode).",
    meaning=(
        "Keras saves a `Lambda` layer's function as marshalled Python bytecode inside the model's configuration "
        "(`config.json` in a `.keras` archive, the `model_config` attribute of a legacy `.h5` model). "
        "`keras.models.load_model` refuses it in its default safe mode (`Requested the deserialization of a Lambda layer "
        "... arbitrary code execution`) and runs it when called with `safe_mode=False` or after "
        "`keras.config.enable_unsafe_deserialization()`. Code in a checkpoint is never proven safe, so the file is no place "
        "to resume from until you trust where it came from."
    ),
    causes=(
        "The model has a `Lambda` layer (or a layer argument given as a Python lambda), as many tutorials write. Or the file "
        "was crafted to run code when someone loads it with safe mode off."
    ),
    fixes=(
        fix("Do not load it with safe mode off unless you wrote it yourself.", slot="CKD404/safe-mode"),
        fix(
            "Keep a model's code in your package, not in the file: build the model in code and load only its weights.",
            slot="CKD404/code-in-package",
        ),
    ),
    messages=(
        "Requested the deserialization of a `Lambda` layer",
        "Requested the deserialization of a Python lambda",
        "carries a potential risk of arbitrary code execution",
    ),
    related=("CKD401", "CKD402"),
)

RULES: tuple[Rule, ...] = (
    UNSAFE_PICKLE,
    NON_WEIGHTS_OBJECT,
    ZIP_ANOMALY,
    CODE_IN_CONFIG,
)

CHECKS: tuple[()] = ()
"""Checks of this family arrive with `verify` and `diskcheck`; the rules are documented already."""
