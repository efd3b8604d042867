"""The shape of one rule of the rule table, and how its fixes are worded for a user.

A rule is data: the documentation that `ckptdoctor rules CODE` prints, SARIF help text and the
README table all come from the same record. Fixes are templates so that a finding can name
the user's own files ("Restore optim-5.bpk ...") while `rules` prints the same advice in
general terms. A fix may also have the words of particular frameworks (a burn run is told about
``with_default_checkpointers()``, an HF run about ``resume_from_checkpoint``), which each layout
declares (``Layout.fix_wordings``): a run gets its own framework's words, or the general ones,
never another framework's.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, ParamSpec, TypeVar

from ckptdoctor.model import Severity

GENERIC_CONTEXT: Mapping[str, str] = {
    "run": "RUN_DIR",
    "this_run": "RUN_DIR",
    "repair": "ckptdoctor repair",
    "resume": "N",
    "resume_pointer": "N",
    "quarantine": "`ckptdoctor repair RUN_DIR` moves it into a quarantine folder (`ckptdoctor repair --undo RUN_DIR` puts it back)",
    "path": "the file",
    "name": "the file",
    "unit": "epoch",
    "index": "N",
    "expected": "the missing file",
    "folder": "the checkpoint's folder",
    "existing": "the nearest existing folder at or above RUN_DIR",
    "prune_to_fit": "prune old checkpoints, always keeping the resume point: `ckptdoctor prune RUN_DIR --keep-last N --yes`, with the N that frees what the next save lacks (the finding gives it, or says that no prune of the run can and what to do instead)",
    "prefix": "the prefix",
    "known": "the run's own prefix",
    "format": "the expected format",
    "ratio": "the usual ratio",
    "bucket": "BUCKET",
    "keys": "RUN_PREFIX/",
    "keys_arg": "RUN_PREFIX/",
    "probe_key": "RUN_PREFIX/.ckptdoctor/write-test",
    "key_prefix": "RUN_PREFIX/",
    "key": "KEY",
    "copy_source": "'BUCKET/KEY?versionId=VERSION_ID'",
    "owner": "OWNER",
    "object_key": "KEY",
    "restore_command": 'aws s3api restore-object --bucket BUCKET --key KEY --restore-request \'{"Days":7,"GlacierJobParameters":{"Tier":"Standard"}}\'',
    "holders": "PID (COMMAND, USER)",
    "volume": "the run's volume",
    "start_over": "rm -r -- THE_CHECKPOINT",
    "remove": "rm -r -- THE_CHECKPOINT",
    "restore_tiers": "GLACIER: Expedited, Standard or Bulk; DEEP_ARCHIVE: Standard or Bulk; Intelligent-Tiering's archive tiers: no Days, the object moves back to the Frequent Access tier",
}
"""What each fix placeholder says when no particular run is at hand (``ckptdoctor rules``).

``run`` is the run's folder; ``this_run`` the same as the PATH of ``repair`` or ``prune``, which
act on every run below a path (with ``--no-recurse`` where runs lie below the run's folder);
``repair`` the command that quarantines what the finding saw (``ckptdoctor repair --verify``
where only a whole read saw it, as ``verify``'s); ``resume`` the index of the resume point (a fix that names it is left out of a run without
one); ``resume_pointer`` what the run's pointer file holds to name it (Megatron's tracker says
``release`` for ``release/``), where the layout writes that file (``Layout.repoint``); ``quarantine`` how to move a finding's file aside and back, acting on that file's run
alone (``rules/context.py`` fills them). A save that stopped part-way (CKD117) has its own:
``holders`` the processes writing it, ``volume`` its filesystem, ``remove`` the command that
deletes what it left, and ``start_over`` the same where the run has nothing earlier to resume from."""

NEEDS_THE_RUN = frozenset({"resume", "resume_pointer", "quarantine", "start_over"})
"""Placeholders only a run can fill: a fix that uses one is not shown for a run that lacks it (a
run without a resume point; a file no one should move aside, which its framework manages)."""

OTHERWISE = "*"
"""The ``case`` of a fix for every case of its rule that no other fix of the rule names."""

BUCKET = "bucket"
"""The case of a finding on a run in an object store: its fixes name the store's permissions,
``aws s3api`` and versions, never a folder's mode, a mount or ``dmesg``. A rule with fixes of
this case gets it for every finding on a store URL (``context.make_finding``)."""


@dataclass(frozen=True)
class Fix:
    """One fix of a rule, in general words, with a slot under which frameworks word it their own way.

    Made with ``fix(...)``; a plain string in ``Rule.fixes`` is a fix with general words only.
    The rules name no framework: each layout declares its words for the slots it has its own
    for (``Layout.fix_wordings``)."""

    generic: str | None
    """For a run of any framework; None where only some frameworks have this fix (DeepSpeed's
    ``zero_to_fp32.py``)."""
    slot: str | None = None
    """``CODE/what-it-does``: the key of this fix in the layouts' ``fix_wordings``; None where no
    framework has words of its own for it."""
    case: str | tuple[str, ...] | None = None
    """Only for findings of this case (the content a CKD205 file really holds: ``html``), or of
    these cases, ``OTHERWISE`` among them; None for every finding of the rule."""

    @property
    def cases(self) -> tuple[str, ...]:
        return () if self.case is None else (self.case,) if isinstance(self.case, str) else self.case

    @property
    def frameworks(self) -> tuple[tuple[str, str], ...]:
        """(framework, template) for each framework with its own words for this fix, by name;
        ``""`` where the fix does not apply to that framework (HF Trainer saves the scheduler itself)."""
        if self.slot is None:
            return ()
        return tuple((name, own[self.slot]) for name, own in _framework_wordings().items() if self.slot in own)

    def text_for(self, keys: Sequence[str]) -> str | None:
        """The template for a run whose layout answers to ``keys`` (``Layout.fix_keys``: its name,
        then what it builds on)."""
        if self.slot is not None:
            wordings = _framework_wordings()
            for key in keys:
                own = wordings.get(key, {})
                if self.slot in own:
                    return own[self.slot]
        return self.generic


def fix(generic: str | None = None, /, *, slot: str | None = None, case: str | tuple[str, ...] | None = None) -> Fix:
    """``fix("Restore it.", slot="CKD101/restore")``: frameworks word the slot in their layouts."""
    return Fix(generic, slot, case)


def _framework_wordings() -> Mapping[str, Mapping[str, str]]:
    # imported when a fix is first worded: loading the rule type loads no layout (tests/test_layers.py)
    from ckptdoctor.layouts.registry import FIX_WORDINGS

    return FIX_WORDINGS


@dataclass(frozen=True)
class Rule:
    """One row of the rule table (docs/rules.md) with the documentation that explains it."""

    code: str
    """``CKD`` + three digits; hundreds group families; never reused."""
    name: str
    """Kebab-case symbolic name, accepted wherever a code is."""
    severity: Severity
    """Default severity; a check may lower or raise it where the table says so."""
    summary: str
    """One line: what fired."""
    meaning: str
    """What it means for the run, in a paragraph."""
    causes: str
    """When it happens: the situations that produce it."""
    fixes: tuple[str | Fix, ...]
    """Concrete fixes, most useful first, as templates over the placeholders of ``GENERIC_CONTEXT``."""
    messages: tuple[str, ...] = ()
    """Exact error messages of other tools that this rule explains."""
    related: tuple[str, ...] = ()
    """Codes of related rules."""

    @property
    def family(self) -> int:
        return int(self.code[3]) * 100

    @property
    def behind_resume(self) -> Severity | None:
        """The highest severity on a broken checkpoint older than the resume point: nothing
        resumes from it, so it is dead weight for ``prune``. None where the rule keeps its
        severity there (an unsafe file is not dead weight: whoever loads it runs its code)."""
        return Severity.WARNING if self.family in _LOWERED_BEHIND_RESUME else None

    @property
    def lowered_behind_resume(self) -> bool:
        """Whether a finding of this rule is less severe on a checkpoint nothing resumes from."""
        return self.behind_resume is not None and self.behind_resume.rank < self.severity.rank

    @property
    def fix_records(self) -> tuple[Fix, ...]:
        return tuple(Fix(f) if isinstance(f, str) else f for f in self.fixes)

    def fix_texts(
        self,
        context: Mapping[str, str] | None = None,
        frameworks: Sequence[str] | None = None,
        case: str | None = None,
    ) -> tuple[str, ...]:
        """The fixes worded for ``context`` (a run's own names, generic where it is silent).

        ``frameworks`` are the keys of the run's layout, most specific first: each fix in that
        framework's words, or in general words, or left out where only other frameworks have it.
        None documents the rule: each fix in general words, then in each framework's, labelled.
        ``case`` picks the fixes for one case of the rule (None: all of them)."""
        if frameworks is None:
            return tuple(text for generic, own in self.documented_fixes(context) for text in (*generic, *(f"{k}: {t}" for k, t in own)))
        values = _Context(context or {})
        texts = (record.text_for(frameworks) for record in self._for_case(case))
        lacking = NEEDS_THE_RUN - set(context or {})
        return tuple(_FORMATTER.vformat(text, (), values) for text in texts if text and not lacking & _names(text))

    def documented_fixes(self, context: Mapping[str, str] | None = None) -> tuple[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], ...]:
        """Each fix as the rule's documentation gives it: in general words (none where only some
        frameworks have it), and each framework's own words, by key."""
        values = _Context(context or {})
        return tuple(
            (
                tuple(_FORMATTER.vformat(t, (), values) for t in (record.generic,) if t),
                tuple((key, _FORMATTER.vformat(text, (), values)) for key, text in record.frameworks if text),
            )
            for record in self.fix_records
        )

    def has_case(self, case: str) -> bool:
        """Whether some fix of this rule is for ``case`` alone."""
        return any(case in record.cases for record in self.fix_records)

    def _for_case(self, case: str | None) -> tuple[Fix, ...]:
        records = self.fix_records
        if case is None:
            return records
        named = {one for f in records for one in f.cases} - {OTHERWISE}
        wanted = case if case in named else OTHERWISE
        return tuple(f for f in records if f.case is None or wanted in f.cases)

    def placeholders(self) -> frozenset[str]:
        """Every placeholder the fixes use (tests check each is known)."""
        names: set[str] = set()
        for record in self.fix_records:
            for template in (record.generic or "", *(text for _, text in record.frameworks)):
                names.update(_names(template))
        return frozenset(names)


def _names(template: str) -> frozenset[str]:
    """The placeholders ``template`` uses."""
    return frozenset(field for _, field, _, _ in _FORMATTER.parse(template) if field)


P = ParamSpec("P")
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True)
class Check(Generic[P, R_co]):
    """A function that makes findings, with the rules it may fire: the registry's unit.

    Made by ``@fires(RULE, ...)`` on the function; calling it calls the function. The test
    suite holds every check to its word (a finding of a rule it does not declare fails the test
    that made it) and every rule to some check (tests/_fired_rules.py)."""

    run: Callable[P, R_co]
    fires: frozenset[Rule]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co:
        return self.run(*args, **kwargs)

    @property
    def name(self) -> str:
        return f"{self.run.__module__}.{self.run.__qualname__}"


def fires(*rules: Rule) -> Callable[[Callable[P, R_co]], Check[P, R_co]]:
    """Declare the rules a check may fire: ``@fires(MISSING_MODEL, MISSING_OPTIMIZER)``."""

    def declare(run: Callable[P, R_co]) -> Check[P, R_co]:
        return Check(run, frozenset(rules))

    return declare


class _Context(dict[str, str]):
    def __init__(self, specific: Mapping[str, str]) -> None:
        super().__init__(GENERIC_CONTEXT)
        self.update(specific)


_FORMATTER = string.Formatter()
_LOWERED_BEHIND_RESUME = frozenset({100, 200, 300})
BEHIND_RESUME = "on a broken checkpoint older than the resume point: nothing resumes from it, and the fix is `prune`"
"""How the rule table and rule pages say what ``rules._harm.by_harm`` does."""
