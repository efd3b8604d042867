"""The Python API: every command as a function returning the objects its JSON is made from.

    import ckptdoctor.api as ckd

    report = ckd.inspect(["runs/exp1"])           # ckptdoctor inspect
    report = ckd.verify(["runs/exp1"], deep=True)  # ckptdoctor verify --deep
    outcome = ckd.prune(["runs/exp1"], keep_last=3, confirm=True)
    outcome = ckd.repair(["runs/exp1"], confirm=True)
    report = ckd.diskcheck("runs/exp1", keep_last=3)   # = ckptdoctor.preflight

Settings (``select``, ``ignore``, severities, thresholds, role hints, ``[tool.ckptdoctor.prune]``)
come from ``config`` when given, else from the configuration nearest the first path, as the
command line reads them. ``docs/api.md`` has the details and examples.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ckptdoctor.model import Report, Run
from ckptdoctor.planners.space import MARGIN, MAX_MARGIN, check
from ckptdoctor.rules.disk import RUNWAY

if TYPE_CHECKING:
    from ckptdoctor.acting import Confirm, Listener, Outcome, Pass, Question
    from ckptdoctor.config import Settings

Paths = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]
"""One path or several: run folders, folders holding runs, or single checkpoint files."""


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

    A URL (``s3://bucket/runs/exp1``) is checked in its bucket, never on the local disk
    (``report.disk.bucket``, ``report.disk.growth``).
    """
    return diskcheck(run_dir, model_bytes=model_bytes, model=model, optimizer=optimizer, keep_last=keep_last, margin=margin, runway=runway)


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

    The next save is estimated from the run's newest complete checkpoints; for a run with none,
    from ``model_bytes`` (or the size of the file ``model``) and the ``optimizer``'s state
    (``adam``, ``adamw``, ``sgd``, ``sgd-momentum``, ``adagrad``, ``rmsprop``, ``lion``,
    ``adafactor``). Raises ``ckptdoctor.planners.space.EstimateError`` for an unusable model or optimizer,
    and ``ckptdoctor.config.ConfigError`` for a configuration file it cannot use. Role hints
    (``[tool.ckptdoctor.roles]``) and, without ``keep_last``, the retention
    (``[tool.ckptdoctor.prune]`` ``keep-last``) come from ``config``, else the configuration
    nearest ``run_dir``.

    ``run_dir`` may be a URL (``s3://``, ``gs://``, ``az://``): a bucket has no free space to
    read, so a probe object is created and deleted under the run's ``.ckptdoctor/`` prefix, the
    permissions the other commands need are tried (``report.disk.bucket.permissions``), and the
    run's growth at ``keep_last`` (``report.disk.growth``) and the bucket's lifecycle rules are
    judged (CKD503, CKD509-511; never CKD501/502). Raises
    ``ckptdoctor.stores.session.StoreError`` where the bucket cannot be used at all (none,
    credentials refused, unreachable).
    """
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor.config import prune_settings
    from ckptdoctor.discover import remote
    from ckptdoctor.layouts.registry import layout_named
    from ckptdoctor.pipelines.scan import scan
    from ckptdoctor.places import run_root
    from ckptdoctor.rules._context import with_runs_below
    from ckptdoctor.rules.disk import findings
    from ckptdoctor.stores.urls import local_path

    if not isinstance(run_dir, (str, os.PathLike)):
        raise TypeError(f"run_dir must be one folder (str or os.PathLike), not {run_dir!r}")
    (path,) = _listed(run_dir)
    for name, value, least in (("model_bytes", model_bytes, 0), ("keep_last", keep_last, 1), ("runway", runway, 1)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not least <= value < 2**63):
            raise ValueError(f"{name} must be a whole number of at least {least}, not {value!r}")
    if not isinstance(margin, int | float) or isinstance(margin, bool) or not 0 <= margin <= MAX_MARGIN:  # also refuses nan
        raise ValueError(f"margin must be a fraction between 0 and {MAX_MARGIN:g}, not {margin!r}")
    if not os.fspath(run_dir):
        raise ValueError("run_dir must name the folder the run saves into (or '.'), not ''")
    if model is not None and model_bytes is None:
        if not os.path.isfile(model):
            raise ValueError(f"--model {os.fspath(model)}: not a file")
        model_bytes = os.stat(model).st_size
    if remote(path) and local_path(path) is None:
        return _bucket_diskcheck(path, model_bytes, optimizer, keep_last, margin, runway, config)
    path = local_path(path) or path
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ValueError(f"{path} is not a folder: give the folder the run saves into")
    start = path if os.path.isdir(path) else None
    if keep_last is None:
        retention = prune_settings(config, start)[0].get("keep-last")
        keep_last = retention if isinstance(retention, int) and not isinstance(retention, bool) and retention > 0 else None
    with _configured([path] if start else [], config):
        scanned = scan([path]) if start else None
    runs: tuple[Run, ...] = scanned.runs if scanned else ()
    # the run in the folder named is the one that saves there next; else the biggest below it
    own = [r for r in runs if os.path.realpath(run_root(r)) == os.path.realpath(path)]
    run = own[0] if own else _largest(runs)
    layout = layout_named(run.layout) if run is not None else None
    disk = check(path, run, model_bytes, optimizer, keep_last, margin)
    below = run is not None and run.path in with_runs_below(runs, (folder.path for folder in scanned.unlisted) if scanned else ())
    return Report("diskcheck", runs, findings(disk, run, layout, runway, below), scanned.errors if scanned else (), disk=disk)


def _bucket_diskcheck(
    url: str, model_bytes: int | None, optimizer: str | None, keep_last: int | None, margin: float, runway: int, config: str | None
) -> Report:
    """``diskcheck`` of a run in a bucket: the probes of what the store lets this identity do, the
    bucket's settings and the run's growth; the local disk is never looked at. Raises
    ``stores.session.StoreError`` where the bucket cannot be used at all (one line, exit 2)."""
    # loaded when called: a bucket's check loads its client and the pipeline only for a URL
    from ckptdoctor.config import prune_settings
    from ckptdoctor.layouts.registry import layout_named
    from ckptdoctor.model import Access, Transfer
    from ckptdoctor.pipelines.scan import scan
    from ckptdoctor.planners.space import bucket_check
    from ckptdoctor.rules.disk import findings
    from ckptdoctor.stores import session
    from ckptdoctor.stores.probe import check_bucket
    from ckptdoctor.stores.urls import parse

    location = parse(url)  # urls.BadURL is a ValueError: exit 2
    if keep_last is None:
        retention = prune_settings(config, None)[0].get("keep-last")
        keep_last = retention if isinstance(retention, int) and not isinstance(retention, bool) and retention > 0 else None
    before = session.traffic()
    probed = check_bucket(location)
    scanned = None
    if probed.has_objects and probed.access("list") is Access.GRANTED:
        with _configured([], config):
            scanned = scan([location.url])
    runs: tuple[Run, ...] = scanned.runs if scanned else ()
    own = [r for r in runs if r.path.rstrip("/") == location.url]
    run = own[0] if own else _largest(runs)
    layout = layout_named(run.layout) if run is not None else None
    disk = bucket_check(location.url, run, probed, model_bytes, optimizer, keep_last, margin)
    requests, received = session.traffic()
    transfer = Transfer(requests - before[0], received - before[1])
    errors = scanned.errors if scanned else ()
    return Report("diskcheck", runs, findings(disk, run, layout, runway), errors, disk=disk, transfer=transfer)


def _largest(runs: tuple[Run, ...]) -> Run | None:
    """The run whose next save is the biggest: the one that decides whether saves fit."""
    with_checkpoints = [run for run in runs if run.checkpoints and not run.single_file]
    if not with_checkpoints:
        return None
    return max(with_checkpoints, key=lambda run: max(c.bytes for c in run.checkpoints))


def inspect(paths: Paths = ".", *, config: str | None = None) -> Report:
    """What ``ckptdoctor inspect`` reports: every run under ``paths`` from the names, sizes, head
    and tail of its files (nothing read whole), its checkpoints' status, the resume point
    (``Run.resume``) and the findings, as configured. Paths that cannot be scanned are in
    ``report.errors``."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor.pipelines.scan import inspect as inspect_paths

    listed = _listed(paths)
    with _configured(listed, config) as settings:
        report, _ = inspect_paths(listed, settings.thresholds)
    return dataclasses.replace(report, findings=settings.apply(report.findings))


def verify(
    paths: Paths = ".", *, deep: bool = False, load: bool = False, jobs: int = 0, resume: bool = False, config: str | None = None
) -> Report:
    """What ``ckptdoctor verify`` reports: ``inspect``'s report with every checkpoint read whole
    (statically: nothing in a file is executed). ``deep`` checks every byte (CRC-32, NaN/Inf in
    weights); ``load`` also loads each file that passed with the real library (torch must be
    installed); ``jobs`` files at once (0: one per core).

    ``resume`` (``verify --resume``): only the files of each run's resume point are read whole,
    and ``Run.resume`` (``Run.resume_path``) is the checkpoint that verified, or None where a
    file it needs would run code or is damaged and no older one verified in its place."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor.pipelines.verify import VerifyOptions, verify_resume
    from ckptdoctor.pipelines.verify import verify as verify_paths

    listed = _listed(paths)
    with _configured(listed, config) as settings:
        report, _ = (verify_resume if resume else verify_paths)(listed, VerifyOptions(deep, load, jobs), settings.thresholds)
    return dataclasses.replace(report, findings=settings.apply(report.findings))


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
    Raises ``acting.Refused`` for paths it cannot act on as given, ``ValueError`` for a policy it
    cannot use, ``actions.Locked`` when another ckptdoctor acts on a run."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor import acting
    from ckptdoctor.config import prune_settings

    listed = _listed(paths)
    given = {
        "keep-last": keep_last, "keep-best": keep_best, "metric": metric, "mode": mode, "keep-every": keep_every,
        "keep-within": keep_within, "keep": None if keep is None else list(keep), "min-age": min_age,
        "metrics-file": metrics_file, "verify": verify_kept, "max-runs": max_runs,
    }  # fmt: skip
    table, _ = prune_settings(config, _start(listed))
    pruning = acting.prune_from({**table, **{key: value for key, value in given.items() if value is not None}}, discard_journal)
    return _act(pruning, listed, dry_run, confirm, listener, config)


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
) -> Outcome:
    """``ckptdoctor repair``: move what stands between each run and its newest complete
    checkpoint into a quarantine in the run, and re-point broken pointers; with ``undo``, put
    back the latest quarantine of each run (or the one named ``ident``). ``verify``: read the
    newest complete checkpoint whole first, as ``repair --verify`` does. ``confirm``,
    ``dry_run`` and ``listener`` as for ``prune``; ``Outcome.refused`` names the runs left alone."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor import acting
    from ckptdoctor.planners.retention import MIN_AGE, parse_duration

    listed = _listed(paths)
    if undo:
        if verify:
            raise ValueError("verify reads checkpoints before a repair: undo puts back what one moved, and reads nothing")
        return _act(acting.Undo(ident), listed, dry_run, confirm, listener, config)
    if ident is not None:
        raise ValueError("ident names a quarantine to put back: use it with undo=True")
    with _configured(listed, config) as settings:
        age = min_age if min_age is not None else settings.min_age
    return _act(acting.Repair(parse_duration(age) if age is not None else MIN_AGE, verify), listed, dry_run, confirm, listener, config)


def _act(pass_: Pass, paths: list[str], dry_run: bool, confirm: Confirm | bool, listener: Listener | None, config: str | None) -> Outcome:
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor import acting

    with _configured(paths, config):
        return acting.carry_out(pass_, paths, dry_run=dry_run, confirm=_answer(confirm), listener=listener or _ignore)


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
        raise ValueError("no paths given: name the runs (or '.' for the working folder)")
    return [name for name in names if isinstance(name, str)]


def _start(paths: list[str]) -> str | None:
    """Where the configuration nearest the run is looked for: the first folder given."""
    first = paths[0] if paths else "."
    return first if os.path.isdir(first) else os.path.dirname(first) or "."


@contextlib.contextmanager
def _configured(paths: list[str], config: str | None) -> Iterator[Settings]:
    """The settings for ``paths`` (``config``, else the nearest configuration), with their role
    hints and trusted globals in force inside the block: a run's own configuration names its
    checkpointers' prefixes (``[tool.ckptdoctor.roles]``) and its own classes (``trusted-globals``)."""
    # loaded when called: importing the API (a trainer callback's start) loads no pipeline
    from ckptdoctor.config import settings
    from ckptdoctor.layouts.context import hinted_roles, trusting

    found = settings(config, start=_start(paths) if paths else None)
    with hinted_roles(found.roles), trusting(found.trusted_globals):
        yield found
