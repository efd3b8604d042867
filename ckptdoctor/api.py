"""The Python API: every command as a function returning the objects its JSON is made from.

    import ckptdoctor.api as ckd

    report = ckd.inspect(["runs/exp1"])           # ckptdoctor inspect
    report = ckd.verify(["runs/exp1"], deep=True)  # ckptdoctor verify --deep
    outcome = ckd.prune(["runs/exp1"], keep_last=3, confirm=True)
    repaired = ckd.repair(["runs/exp1"], confirm=True)  # .advised: where each run goes on
    report = ckd.diskcheck("runs/exp1", keep_last=3)   # = ckptdoctor.preflight

Settings (``select``, ``ignore``, severities, thresholds, role hints, ``[tool.ckptdoctor.prune]``)
come from ``config`` when given, else from the configuration nearest the first path, as the
command line reads them. ``docs/api.md`` has the details and examples.

The command line calls one ``run_<command>`` per command, with that command's options object;
the keyword functions build the same objects. The command line imports nothing else of the core
but ``render`` and ``errors``: what it shows and parses with (``printable``, ``size``,
``find_rule`` …) it takes from here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ckptdoctor.errors import InvalidValue
from ckptdoctor.model import Report, Run
from ckptdoctor.model import Severity as Severity
from ckptdoctor.places import run_root as run_root
from ckptdoctor.planners.space import MARGIN, MAX_MARGIN, check
from ckptdoctor.progress import Tally as Tally
from ckptdoctor.quoting import printable as printable
from ckptdoctor.quoting import shell_word as shell_word
from ckptdoctor.rules.context import RUNWAY
from ckptdoctor.units import counted as counted
from ckptdoctor.units import parse_size as parse_size
from ckptdoctor.units import size as size

if TYPE_CHECKING:
    from ckptdoctor import baseline
    from ckptdoctor.acting import Ask as Ask
    from ckptdoctor.acting import Confirm, Event, Listener, Outcome, Pass, Question
    from ckptdoctor.acting import Planned as Planned
    from ckptdoctor.acting import Tone as Tone
    from ckptdoctor.baseline import BaselineError as BaselineError
    from ckptdoctor.config import Settings
    from ckptdoctor.config import check_rules as check_rules
    from ckptdoctor.config import settings as read_settings
    from ckptdoctor.pipelines.verify import RESUME_TRIES as RESUME_TRIES
    from ckptdoctor.planners.retention import PruneSettings as PruneSettings
    from ckptdoctor.records import Pending as Pending
    from ckptdoctor.regular import DENIED as DENIED
    from ckptdoctor.regular import write_whole as write_whole
    from ckptdoctor.rules.registry import find_rule as find_rule
    from ckptdoctor.rules.rule import Rule
    from ckptdoctor.rules.search import Match
    from ckptdoctor.stores.session import configure as use_endpoint
    from ckptdoctor.stores.urls import bad_endpoint as bad_endpoint

__all__ = [
    "DENIED",
    "MAX_MARGIN",
    "RESUME_TRIES",
    "ActOptions",
    "Ask",
    "BaselineError",
    "Configured",
    "Confirm",
    "DiskcheckOptions",
    "Event",
    "InspectOptions",
    "Listener",
    "Outcome",
    "Pending",
    "Planned",
    "PruneOptions",
    "PruneSettings",
    "Question",
    "RepairOptions",
    "Repaired",
    "Report",
    "Reported",
    "RuleAnswer",
    "RulesOptions",
    "Run",
    "Scanned",
    "Settings",
    "Severity",
    "Tally",
    "Tone",
    "VerifyOptions",
    "bad_endpoint",
    "baseline",
    "check_rules",
    "diskcheck",
    "find_rule",
    "inspect",
    "parse_size",
    "preflight",
    "printable",
    "prune",
    "read_settings",
    "repair",
    "rules",
    "run_diskcheck",
    "run_inspect",
    "run_prune",
    "run_repair",
    "run_root",
    "run_rules",
    "run_verify",
    "shell_word",
    "size",
    "use_endpoint",
    "verify",
    "write_whole",
]  # fmt: skip

Paths = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]
"""One path or several: run folders, folders holding runs, or single checkpoint files."""


# options: one frozen object per command (the command line builds them from its flags)


def _typed(options: object, name: str, kinds: type | tuple[type, ...], what: str) -> None:
    """TypeError where ``options.name`` is not of ``kinds`` (a bool is no number here), as a
    Python call with an argument of the wrong type raises it: before anything runs."""
    value = getattr(options, name)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,))):
        raise TypeError(f"{name} must be {what}, not {value!r}")


def _texts(options: object, name: str) -> None:
    """``options.name``, a list or tuple of text, as a tuple (a frozen object's field set once)."""
    value = getattr(options, name)
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or not all(isinstance(item, str) for item in value):
        raise TypeError(f"{name} must be a tuple of text, not {value!r}")
    object.__setattr__(options, name, tuple(value))


@dataclass(frozen=True)
class Configured:
    """Where the settings (``select``, severities, thresholds, role hints, trusted globals,
    ``[tool.ckptdoctor.prune]``) come from, read once per command."""

    paths: tuple[str, ...] = (".",)
    config: str | None = None
    """The settings file; None: ``$CKPTDOCTOR_CONFIG``, else the configuration nearest the first path."""
    settings: Settings | None = None
    """Settings read already: used as they are, ``config`` unread (the command line reads its
    own once, from ``--config`` or the configuration nearest the working folder)."""

    def __post_init__(self) -> None:
        config: object = self.config  # any os.PathLike, as open() takes it
        if isinstance(config, os.PathLike):
            object.__setattr__(self, "config", os.fspath(config))
        _typed(self, "config", (str, type(None)), "a path (str or os.PathLike) or None")


@dataclass(frozen=True)
class Reported(Configured):
    """What a report command (inspect, verify, diskcheck) reports, over the settings."""

    select: tuple[str, ...] = ()
    """Rules to report, replacing the settings' ``select`` (``--select``)."""
    ignore: tuple[str, ...] = ()
    """Rules not to report, added to the settings' ``ignore`` (``--ignore``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _texts(self, "select")
        _texts(self, "ignore")


@dataclass(frozen=True)
class InspectOptions(Reported):
    tally: Tally | None = None
    """Counts what the scan sees as it goes (a progress line reads it)."""


@dataclass(frozen=True)
class VerifyOptions(InspectOptions):
    deep: bool = False
    load: bool = False
    jobs: int = 0
    resume: bool = False
    """Read only the files of each run's resume point (``verify --resume``)."""
    download: Callable[[int, int], bool] | None = None
    """Asked, once the header reads are done and before any object is read whole, with the count of
    the objects to read whole from stores and the most bytes the command will then have received
    from stores in all (the headers included); False stops with ``pipelines.verify.NotDownloaded``.
    None: read them."""
    ray: str | None = None
    """With ``deep``: the address of a Ray cluster whose tasks read the deep check's ranges
    (``auto``: ``RAY_ADDRESS``, else the cluster on this machine; ``off``: this process reads
    them); needs ``ckptdoctor[ray]``. None: as the configuration's ``ray`` says."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("deep", "load", "resume"):
            _typed(self, name, bool, "True or False")
        _typed(self, "jobs", int, "a whole number (0: one per core)")
        if self.jobs < 0:
            raise InvalidValue(f"jobs must be 0 (one per core) or more, not {self.jobs}")
        if self.ray is not None and (not isinstance(self.ray, str) or not self.ray.strip()):
            raise InvalidValue(f"ray must be a Ray cluster's address (or 'auto'), not {self.ray!r}")
        if self.ray not in (None, "off") and not self.deep:
            raise InvalidValue("ray fans out the deep check, which reads every byte: set deep too (verify --deep --ray)")

    def cluster(self, settings: Settings) -> str | None:
        """The Ray cluster whose tasks read the deep check's ranges, as ``ray`` or else the
        configuration (``settings``) names it; None: this process reads them."""
        cluster = (self.ray or settings.ray) if self.deep else None
        return None if cluster == "off" else cluster


@dataclass(frozen=True)
class DiskcheckOptions(Reported):
    model_bytes: int | None = None
    model: str | None = None
    optimizer: str | None = None
    keep_last: int | None = None
    """None: ``[tool.ckptdoctor.prune]`` ``keep-last``, where set."""
    margin: float = MARGIN
    runway: int = RUNWAY
    model_first: bool = True
    """Whether a model size given wins over what the run's saves measure (``diskcheck``); False:
    it sizes only a run's first save (``preflight``, which training code calls with its model)."""


def _prune_settings(**asked: Any) -> PruneSettings:
    """``PruneSettings(**asked)``, the retention planner loaded now: it loads every layout, which
    no other command needs."""
    from ckptdoctor.planners.retention import PruneSettings  # loads every layout: only a prune asks for it

    return PruneSettings(**asked)


@dataclass(frozen=True)
class ActOptions(Configured):
    """What every acting command (prune, repair) is told besides its own settings."""

    dry_run: bool = False
    confirm: Confirm | bool = False
    listener: Listener | None = None
    recurse: bool = True
    """False: only the runs whose folders are the paths given (``--no-recurse``)."""
    lock: bool = True
    """False: act in a bucket that does not honour conditional writes (``--no-lock``)."""
    tally: Tally | None = None


@dataclass(frozen=True)
class PruneOptions(ActOptions):
    prune: PruneSettings = field(default_factory=_prune_settings)
    """What was asked for, over ``[tool.ckptdoctor.prune]``: each None comes from there, else its default."""
    discard_journal: bool = False


@dataclass(frozen=True)
class RepairOptions(ActOptions):
    undo: bool = False
    ident: str | None = None
    """With ``undo``: the quarantine to put back (default: the latest of each run)."""
    min_age: str | None = None
    """None: the settings' ``min-age``, else ten minutes."""
    verify: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _typed(self, "min_age", (str, type(None)), "a duration as text (7d, 36h, 90min, 45s) or None")
        _typed(self, "ident", (str, type(None)), "a quarantine's name or None")
        for name in ("undo", "verify"):
            _typed(self, name, bool, "True or False")


@dataclass(frozen=True)
class RulesOptions:
    query: str | None = None
    """A rule code, a name, or a pasted error message; None: every rule."""
    full: bool = False
    """Explain every rule a message matches, not one line each."""

    def __post_init__(self) -> None:
        _typed(self, "query", (str, type(None)), "a rule code, a name or a message (text), or None")
        _typed(self, "full", bool, "True or False")


# what comes back, besides the report


@dataclass(frozen=True)
class Scanned:
    """``inspect`` or ``verify``: the report (findings as configured), and what the scan saw."""

    report: Report
    empty: tuple[str, ...]
    """The paths given where no checkpoint was found."""

    def led_outside(self, run: Run) -> str:
        """What to say where one of ``run``'s pointers leads out of its checkpoints (CKD113): the
        framework's own resume through it loads a file no scan judged; '' where none does."""
        # loaded when asked: importing the API (a trainer callback's start) loads no layout
        from ckptdoctor.layouts.base import led_outside
        from ckptdoctor.layouts.registry import layout_named

        return led_outside(layout_named(run.layout), run)


@dataclass(frozen=True)
class RuleAnswer:
    """``rules``: the rules asked for, how they matched a message, and whether to explain them whole."""

    rules: tuple[Rule, ...]
    matches: tuple[Match, ...]
    explain: bool


@dataclass(frozen=True)
class Repaired:
    """``repair``: the acting pass's outcome (its fields are read through: ``repaired.acted``),
    and the advice on where each run goes on now."""

    outcome: Outcome
    advised: tuple[Run, ...] = ()
    """Each run a repair changed, as it left it, with how its framework resumes from the resume
    point kept (``resume_path``, the framework's command): empty for an undo, a dry run or a
    repair not carried out."""
    changed: int = 0
    """How many runs the repair changed."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "outcome":  # copy and pickle ask before there is an outcome
            raise AttributeError(name)
        return getattr(self.outcome, name)


# the commands, each from its options


def run_inspect(options: InspectOptions) -> Scanned:
    """``ckptdoctor inspect``: every run under the paths from the names, sizes, head and tail of
    its files (nothing read whole), its checkpoints' status, the resume point and the findings."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor.pipelines.scan import inspect as inspect_paths

    paths = _listed(options.paths)
    with _in_force(options, paths) as settings:
        report, found = inspect_paths(paths, settings.thresholds, options.tally)
        return Scanned(_as_configured(report, settings, options), found.empty)


def run_verify(options: VerifyOptions) -> Scanned:
    """``ckptdoctor verify``: ``inspect``'s report with every checkpoint read whole (statically)."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor.pipelines import verify as verifying

    paths = _listed(options.paths)
    with _in_force(options, paths) as settings:
        how = verifying.VerifyOptions(options.deep, options.load, options.jobs, options.download, options.cluster(settings))
        report, found = (verifying.verify_resume if options.resume else verifying.verify)(paths, how, settings.thresholds, options.tally)
        return Scanned(_as_configured(report, settings, options), found.empty)


def run_diskcheck(options: DiskcheckOptions) -> Report:
    """``ckptdoctor diskcheck``: will the next save into the (one) path fit, and can it be
    written safely? See :func:`diskcheck`."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor.discover import remote
    from ckptdoctor.stores.urls import local_path

    if len(options.paths) != 1:
        raise InvalidValue(f"diskcheck checks the one folder a run saves into, not {len(options.paths)}")
    (path,) = options.paths
    model_bytes = _checked_diskcheck(options)
    if remote(path) and local_path(path) is None:
        return _bucket_diskcheck(path, model_bytes, options)
    path = local_path(path) or path
    if os.path.lexists(path) and not os.path.isdir(path):
        raise InvalidValue(f"{path} is not a folder: give the folder the run saves into")
    return _local_diskcheck(path, model_bytes, options)


def _as_configured(report: Report, settings: Settings, options: Reported) -> Report:
    """``report`` with its findings as configured: the rules selected, none ignored, severities overridden."""
    return dataclasses.replace(report, findings=settings.apply(report.findings, options.select, options.ignore))


def _checked_diskcheck(options: DiskcheckOptions) -> int | None:
    """The size of the model to plan for (None: from the run's checkpoints), once every option
    is one the check can use."""
    for name, value, least in (("model_bytes", options.model_bytes, 0), ("keep_last", options.keep_last, 1), ("runway", options.runway, 1)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not least <= value < 2**63):
            raise InvalidValue(f"{name} must be a whole number of at least {least}, not {value!r}")
    margin = options.margin
    if not isinstance(margin, int | float) or isinstance(margin, bool) or not 0 <= margin <= MAX_MARGIN:  # also refuses nan
        raise InvalidValue(f"margin must be a fraction between 0 and {MAX_MARGIN:g}, not {margin!r}")
    if not options.paths[0]:
        raise InvalidValue("run_dir must name the folder the run saves into (or '.'), not ''")
    if options.model is not None and options.model_bytes is None:
        if not os.path.isfile(options.model):
            raise InvalidValue(f"--model {options.model}: not a file")
        return os.stat(options.model).st_size
    return options.model_bytes


def _retention(options: DiskcheckOptions, settings: Settings) -> int | None:
    """The run's retention: ``keep_last``, else ``[tool.ckptdoctor.prune]`` ``keep-last`` where it keeps some."""
    table = settings.prune()  # checked even where keep_last is given: a broken table is said, never ignored
    if options.keep_last is not None:
        return options.keep_last
    return table.keep_last or None  # keep-last = 0: no keep-last rule, so no retention to count on


def _local_diskcheck(path: str, model_bytes: int | None, options: DiskcheckOptions) -> Report:
    """``diskcheck`` of a folder on this machine: the run that saves there next, and the disk under it."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor.layouts.registry import layout_named
    from ckptdoctor.pipelines.scan import scan
    from ckptdoctor.rules.context import with_runs_below
    from ckptdoctor.rules.disk import findings

    exists = os.path.isdir(path)
    with _in_force(options, [path] if exists else []) as settings:
        keep_last = _retention(options, settings)
        scanned = scan([path]) if exists else None
    runs: tuple[Run, ...] = scanned.runs if scanned else ()
    # the run in the folder named is the one that saves there next; else the biggest below it
    own = [r for r in runs if os.path.realpath(run_root(r)) == os.path.realpath(path)]
    run = own[0] if own else _largest(runs)
    layout = layout_named(run.layout) if run is not None else None
    disk = check(path, run, model_bytes, options.optimizer, keep_last, options.margin, options.model_first)
    below = run is not None and run.path in with_runs_below(runs, (folder.path for folder in scanned.unlisted) if scanned else ())
    errors = scanned.errors if scanned else ()
    return _as_configured(
        Report("diskcheck", runs, findings(disk, run, layout, options.runway, below), errors, disk=disk), settings, options
    )


def _bucket_diskcheck(url: str, model_bytes: int | None, options: DiskcheckOptions) -> Report:
    """``diskcheck`` of a run in a bucket: the probes of what the store lets this identity do, the
    bucket's settings and the run's growth; the local disk is never looked at. Raises
    ``errors.StoreError`` where the bucket cannot be used at all (one line, exit 2)."""
    # loaded when called: a bucket's check loads its client and the pipeline only for a URL
    from ckptdoctor.layouts.registry import layout_named
    from ckptdoctor.model import Access, Transfer
    from ckptdoctor.pipelines.scan import scan
    from ckptdoctor.planners.space import bucket_check
    from ckptdoctor.rules.disk import findings
    from ckptdoctor.stores import session
    from ckptdoctor.stores.probe import check_bucket
    from ckptdoctor.stores.urls import parse

    location = parse(url)  # urls.BadURL is a usage error: exit 2
    with _in_force(options, []) as settings:
        keep_last = _retention(options, settings)
        before = session.traffic()
        probed = check_bucket(location)
        scanned = scan([location.url]) if probed.has_objects and probed.access("list") is Access.GRANTED else None
    runs: tuple[Run, ...] = scanned.runs if scanned else ()
    own = [r for r in runs if r.path.rstrip("/") == location.url]
    run = own[0] if own else _largest(runs)
    layout = layout_named(run.layout) if run is not None else None
    disk = bucket_check(location.url, run, probed, model_bytes, options.optimizer, keep_last, options.margin, options.model_first)
    requests, received = session.traffic()
    transfer = Transfer(requests - before[0], received - before[1])
    errors = scanned.errors if scanned else ()
    report = Report("diskcheck", runs, findings(disk, run, layout, options.runway), errors, disk=disk, transfer=transfer)
    return _as_configured(report, settings, options)


def run_prune(options: PruneOptions) -> Outcome:
    """``ckptdoctor prune``: see :func:`prune`."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor import acting

    paths = _listed(options.paths)
    with _in_force(options, paths) as settings:
        pruning = acting.prune_from(options.prune.over(settings.prune()), options.discard_journal)
        return _carried_out(pruning, paths, options)


def run_repair(options: RepairOptions) -> Repaired:
    """``ckptdoctor repair`` (``repair --undo``): see :func:`repair`."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor import acting
    from ckptdoctor.planners.retention import MIN_AGE, parse_duration

    paths = _listed(options.paths)
    if options.ident is not None and not options.undo:
        raise InvalidValue("ident names a quarantine to put back: use it with undo=True")
    if options.verify and options.undo:
        raise InvalidValue("verify reads checkpoints before a repair: undo puts back what one moved, and reads nothing")
    with _in_force(options, paths) as settings:
        if options.undo:
            return Repaired(_carried_out(acting.Undo(options.ident), paths, options))
        age = options.min_age if options.min_age is not None else settings.min_age
        try:
            min_age = parse_duration(age) if age is not None else MIN_AGE
        except InvalidValue as error:
            raise InvalidValue(f"min-age: {error}") from error
        return _advised(_carried_out(acting.Repair(min_age, options.verify), paths, options))


def _advised(outcome: Outcome) -> Repaired:
    """A carried-out repair's outcome, with each changed run as the repair left it and how its
    framework resumes from there."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor.layouts.registry import advised
    from ckptdoctor.model import Action, Status
    from ckptdoctor.planners.repair import resume_kept

    if not outcome.acted:
        return Repaired(outcome)
    kept = {plan.run: resume_kept(plan) for plan in outcome.plans if plan.acting(Action.QUARANTINE) or plan.acting(Action.REPOINT)}
    runs = []
    for run in outcome.report.runs:
        if (resume := kept.get(run.path)) is not None:
            # the run as the repair left it: what was above the resume point is in the quarantine,
            # but for what this user cannot read, which stays, and on which the resume point still depends,
            # and what is archived, which a repair never moves
            left = tuple(c for c in run.checkpoints if c.index <= resume or c.status in (Status.UNREADABLE, Status.ARCHIVED))
            runs.append(advised(dataclasses.replace(run, checkpoints=left)))
    return Repaired(outcome, tuple(runs), len(kept))


def _carried_out(pass_: Pass, paths: list[str], options: ActOptions) -> Outcome:
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor import acting

    return acting.carry_out(
        pass_,
        paths,
        dry_run=options.dry_run,
        confirm=_answer(options.confirm),
        listener=options.listener or _ignore,
        recurse=options.recurse,
        tally=options.tally,
        lock=options.lock,
    )


def run_rules(options: RulesOptions) -> RuleAnswer:
    """``ckptdoctor rules``: the rule table, one rule asked for by code or name, or the rules
    that explain a pasted error message, best first."""
    # the rule table loads every layout: only when rules are asked for
    from ckptdoctor.rules.registry import RULES, find_rule
    from ckptdoctor.rules.search import rank

    if options.query is None:
        return RuleAnswer(RULES, (), False)
    if (exact := find_rule(options.query)) is not None:
        return RuleAnswer((exact,), (), True)
    matches = rank(options.query)
    # one line per match, even for one: its page is `rules CODE` away; pages for all with --full
    return RuleAnswer(tuple(match.rule for match in matches), matches, options.full)


# the same, from keywords


def preflight(
    run_dir: str | os.PathLike[str],
    *,
    model_bytes: int | None = None,
    model: str | os.PathLike[str] | None = None,
    optimizer: str | None = None,
    keep_last: int | None = None,
    margin: float = MARGIN,
    runway: int = RUNWAY,
) -> Report:
    """``diskcheck`` under the name training code calls it by, before a save:

    report = ckptdoctor.preflight("runs/exp1/checkpoint", keep_last=3)
    if not report.ok:
        raise SystemExit(report.findings[0].message)

    Unlike ``diskcheck``, ``model_bytes`` (or ``model``) sizes only the run's first save: once it
    has saved, its newest complete checkpoints measure the next (the training callbacks pass their
    model's size before every save). A URL (``s3://bucket/runs/exp1``) is checked in its bucket,
    never on the local disk (``report.disk.bucket``, ``report.disk.growth``).
    """
    sized = _Sized(model_bytes, model, optimizer, model_first=False)
    return _diskcheck(run_dir, None, sized, keep_last=keep_last, margin=margin, runway=runway)


def diskcheck(
    run_dir: str | os.PathLike[str],
    *,
    model_bytes: int | None = None,
    model: str | os.PathLike[str] | None = None,
    optimizer: str | None = None,
    keep_last: int | None = None,
    margin: float = MARGIN,
    runway: int = RUNWAY,
    config: str | None = None,
) -> Report:
    """Will the next save into ``run_dir`` fit, and can it be written safely? The same report as
    ``ckptdoctor diskcheck`` (``report.disk``, CKD5xx ``report.findings``; ``report.ok``).

    The next save is estimated from ``model_bytes`` (or the size of the file ``model``) and the
    ``optimizer``'s state (``adam``, ``adamw``, ``sgd``, ``sgd-momentum``, ``adagrad``,
    ``rmsprop``, ``lion``, ``adafactor``) where given, even for a run that has saved (its basis
    then says what the run's saves measure); else from the run's newest complete checkpoints. Raises ``ckptdoctor.planners.space.EstimateError`` for an unusable model or optimizer,
    and ``ckptdoctor.config.ConfigError`` for a configuration file it cannot use (both
    ``ckptdoctor.errors.UsageError``, and ``ValueError``). Role hints
    (``[tool.ckptdoctor.roles]``) and, without ``keep_last``, the retention
    (``[tool.ckptdoctor.prune]`` ``keep-last``) come from ``config``, else the configuration
    nearest ``run_dir``.

    ``run_dir`` may be a URL (``s3://``, ``gs://``, ``az://``): a bucket has no free space to
    read, so a probe object is created and deleted under the run's ``.ckptdoctor/`` prefix, the
    permissions the other commands need are tried (``report.disk.bucket.permissions``), and the
    run's growth at ``keep_last`` (``report.disk.growth``) and the bucket's lifecycle rules are
    judged (CKD503, CKD509-511; never CKD501/502). Raises ``ckptdoctor.errors.StoreError`` where
    the bucket cannot be used at all (none, credentials refused, unreachable).
    """
    sized = _Sized(model_bytes, model, optimizer, model_first=True)
    return _diskcheck(run_dir, config, sized, keep_last=keep_last, margin=margin, runway=runway)


class _Sized(NamedTuple):
    """What sizes the next save as ``diskcheck`` and ``preflight`` are given it."""

    model_bytes: int | None
    model: str | os.PathLike[str] | None
    optimizer: str | None
    model_first: bool


def _diskcheck(
    run_dir: str | os.PathLike[str], config: str | None, sized: _Sized, *, keep_last: int | None, margin: float, runway: int
) -> Report:
    """``diskcheck`` and ``preflight``, which differ in whether the model ``sized`` wins over the run's saves."""
    if not isinstance(run_dir, (str, os.PathLike)):
        raise TypeError(f"run_dir must be one folder (str or os.PathLike), not {run_dir!r}")
    (path,) = _listed(run_dir)
    model_file = None if sized.model is None else os.fspath(sized.model)
    options = DiskcheckOptions(
        (path,), config, model_bytes=sized.model_bytes, model=model_file, optimizer=sized.optimizer, keep_last=keep_last, margin=margin,
        runway=runway, model_first=sized.model_first,
    )  # fmt: skip
    return run_diskcheck(options)


def inspect(paths: Paths = ".", *, config: str | None = None) -> Report:
    """What ``ckptdoctor inspect`` reports: every run under ``paths`` from the names, sizes, head
    and tail of its files (nothing read whole), its checkpoints' status, the resume point
    (``Run.resume``) and the findings, as configured. Paths that cannot be scanned are in
    ``report.errors``."""
    return run_inspect(InspectOptions(tuple(_listed(paths)), config)).report


def verify(
    paths: Paths = ".",
    *,
    deep: bool = False,
    load: bool = False,
    jobs: int = 0,
    resume: bool = False,
    config: str | None = None,
    ray: str | None = None,
) -> Report:
    """What ``ckptdoctor verify`` reports: ``inspect``'s report with every checkpoint read whole
    (statically: nothing in a file is executed). ``deep`` checks every byte (CRC-32, NaN/Inf in
    weights); ``load`` also loads each file that passed with the real library (torch must be
    installed); ``jobs`` files at once (0: one per core).

    ``resume`` (``verify --resume``): only the files of each run's resume point are read whole,
    and ``Run.resume`` (``Run.resume_path``) is the checkpoint that verified, or None where a
    file it needs would run code or is damaged and no older one verified in its place.

    ``ray`` (``verify --deep --ray``): the Ray cluster whose tasks read what ``deep`` reads."""
    return run_verify(VerifyOptions(tuple(_listed(paths)), config, deep=deep, load=load, jobs=jobs, resume=resume, ray=ray)).report


def prune(
    paths: Paths = ".",
    *,
    keep_last: int | None = None,
    keep_best: int | None = None,
    metric: str | None = None,
    mode: str | None = None,
    keep_every: int | None = None,
    keep_within: str | None = None,
    keep: Iterable[int] | None = None,
    min_age: str | None = None,
    metrics_file: str | None = None,
    verify_kept: bool | None = None,
    max_runs: int | None = None,
    discard_journal: bool = False,
    dry_run: bool = False,
    confirm: Confirm | bool = False,
    listener: Listener | None = None,
    config: str | None = None,
) -> Outcome:
    """``ckptdoctor prune``: delete the checkpoints the policy does not keep, with every guarantee
    of the command (journalled, under the run's lock, never the resume point, fresh or open
    files). Each keyword left None comes from ``[tool.ckptdoctor.prune]``, else its default.

    Nothing is deleted unless ``confirm`` says so: ``True`` goes ahead (as ``--yes``), a function
    is asked each ``Question`` after the plans are made (``Outcome.plans``), ``False`` stops
    before deleting (``Outcome.declined``). ``dry_run`` only plans: nothing is created, locked or
    finished. ``listener`` hears each step as it happens (``acting.Planned``, ``acting.Message``).
    Raises ``acting.Refused`` for paths it cannot act on as given, ``ValueError`` (a
    ``retention.PolicyError``) for a policy it cannot use, ``actions.Locked`` when another
    ckptdoctor acts on a run: each a ``ckptdoctor.errors.CkptdoctorError``."""
    asked = _prune_settings(
        keep_last=keep_last, keep_best=keep_best, metric=metric, mode=mode, keep_every=keep_every, keep_within=keep_within,
        keep=None if keep is None else tuple(keep), min_age=min_age, metrics_file=metrics_file, verify=verify_kept, max_runs=max_runs,
    )  # fmt: skip
    listed = tuple(_listed(paths))
    return run_prune(PruneOptions(listed, config, None, dry_run, confirm, listener, prune=asked, discard_journal=discard_journal))


def repair(
    paths: Paths = ".",
    *,
    undo: bool = False,
    ident: str | None = None,
    min_age: str | None = None,
    verify: bool = False,
    dry_run: bool = False,
    confirm: Confirm | bool = False,
    listener: Listener | None = None,
    config: str | None = None,
) -> Repaired:
    """``ckptdoctor repair``: move what stands between each run and its newest complete
    checkpoint into a quarantine in the run, and re-point broken pointers; with ``undo``, put
    back the latest quarantine of each run (or the one named ``ident``). ``verify``: read the
    newest complete checkpoint whole first, as ``repair --verify`` does. ``confirm``,
    ``dry_run`` and ``listener`` as for ``prune``; ``Repaired.refused`` names the runs left
    alone, ``Repaired.advised`` how each repaired run resumes now."""
    listed = tuple(_listed(paths))
    return run_repair(
        RepairOptions(listed, config, None, dry_run, confirm, listener, undo=undo, ident=ident, min_age=min_age, verify=verify)
    )


def rules(query: str | None = None, *, full: bool = False) -> RuleAnswer:
    """``ckptdoctor rules``: every rule (``query`` None), the rule a code or name names, or the
    rules that explain a pasted error message, best first (``RuleAnswer.matches``)."""
    return run_rules(RulesOptions(query, full))


def _largest(runs: tuple[Run, ...]) -> Run | None:
    """The run whose next save is the biggest: the one that decides whether saves fit."""
    with_checkpoints = [run for run in runs if run.checkpoints and not run.single_file]
    if not with_checkpoints:
        return None
    return max(with_checkpoints, key=lambda run: max(c.bytes for c in run.checkpoints))


def _answer(confirm: Confirm | bool) -> Confirm:
    """``True``: go ahead as ``--yes`` does (never past the prune's ``max_runs``); ``False``: no.
    Nothing else is taken for a yes: ``"no"`` or ``1`` is not ``True``."""
    if callable(confirm):
        return confirm
    if not isinstance(confirm, bool):
        raise TypeError(f"confirm must be True, False or a function of a Question, not {confirm!r}")

    def answer(question: Question) -> bool:
        # loaded when called: importing the API (a trainer callback's start) loads no pipeline
        from ckptdoctor.acting import Ask

        return confirm is True and question.ask is Ask.GO

    return answer


def _ignore(event: Any) -> None:
    """The listener of a caller that reads the outcome only."""


def _listed(paths: object) -> list[str]:
    """``paths`` as a list of str; an empty list is refused, never taken for the working folder
    (an empty glob must not prune everything where the caller stands). Typed ``object``: callers
    pass what they have, and what is not a path is refused here with a clear message."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else paths
    if isinstance(items, (bytes, bytearray)) or not isinstance(items, Iterable):
        raise TypeError(f"paths must be a path (str or os.PathLike) or a list of them, not {paths!r}")
    names = [os.fspath(item) if isinstance(item, os.PathLike) else item for item in items]
    if not all(isinstance(name, str) for name in names):
        raise TypeError(f"paths must be text paths (str or os.PathLike), not {paths!r}")
    if not names:
        raise InvalidValue("no paths given: name the runs (or '.' for the working folder)")
    return [name for name in names if isinstance(name, str)]


def _start(paths: list[str]) -> str | None:
    """Where the configuration nearest the run is looked for: the first folder given."""
    first = paths[0] if paths else "."
    return first if os.path.isdir(first) else os.path.dirname(first) or "."


@contextlib.contextmanager
def _in_force(options: Configured, paths: list[str]) -> Iterator[Settings]:
    """The command's settings (as given, else read from ``config`` or the configuration nearest
    ``paths``), with their role hints and trusted globals in force inside the block: a run's own
    configuration names its checkpointers' prefixes (``[tool.ckptdoctor.roles]``) and its own
    classes (``trusted-globals``)."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor.config import check_rules, settings
    from ckptdoctor.layouts.context import hinted_roles, trusting

    if isinstance(options, Reported):
        check_rules(options.select, "select")
        check_rules(options.ignore, "ignore", "ignore")
    found = options.settings or settings(options.config, start=_start(paths) if paths else None)
    trusted = found.trusted_globals
    if trusted.names:  # the frameworks' classes, as the known libraries', are trusted only where rebuilt
        from ckptdoctor.layouts.registry import PACKAGES  # every layout: only where a class is declared trusted

        trusted = dataclasses.replace(trusted, libraries=PACKAGES)
    with hinted_roles(found.roles), trusting(trusted):
        yield found


_LATER = {
    "Ask": "ckptdoctor.acting", "Planned": "ckptdoctor.acting", "Tone": "ckptdoctor.acting", "Confirm": "ckptdoctor.acting",
    "Event": "ckptdoctor.acting", "Listener": "ckptdoctor.acting", "Outcome": "ckptdoctor.acting", "Question": "ckptdoctor.acting",
    "Pending": "ckptdoctor.records", "Settings": "ckptdoctor.config",
    "BaselineError": "ckptdoctor.baseline", "check_rules": "ckptdoctor.config", "read_settings": "ckptdoctor.config:settings",
    "RESUME_TRIES": "ckptdoctor.pipelines.verify", "write_whole": "ckptdoctor.regular", "find_rule": "ckptdoctor.rules.registry",
    "use_endpoint": "ckptdoctor.stores.session:configure", "baseline": "ckptdoctor.baseline:", "DENIED": "ckptdoctor.regular",
    "bad_endpoint": "ckptdoctor.stores.urls", "PruneSettings": "ckptdoctor.planners.retention",
}  # fmt: skip
"""What the command line uses from modules that would slow every import of the API, loaded on first use."""


def __getattr__(name: str) -> Any:
    if name not in _LATER:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = _LATER[name].partition(":")
    # loaded on first use: importing the API (a trainer callback's start) loads no pipeline
    import importlib

    loaded = importlib.import_module(module)
    return loaded if name == "baseline" else getattr(loaded, attribute or name)
