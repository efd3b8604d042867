"""Paths -> runs with every file read whole: what ``ckptdoctor verify`` reports.

The runs are found twice: once from headers (cheap, and it says which files matter), then again
from the whole-file reports, so that a checkpoint whose file turns out corrupt, unsafe or
inconsistent gets the status and findings it deserves from the same layout code as ``inspect``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptdoctor.discover import Listing, natural_key
from ckptdoctor.errors import UsageError
from ckptdoctor.layouts.base import led_outside
from ckptdoctor.layouts.context import trusted_globals
from ckptdoctor.layouts.registry import HARMLESS, NAMED_FILES, advised, layout_named
from ckptdoctor.model import CheckpointFile, Entry, FileReport, Problem, Report, Run, Status, Unit
from ckptdoctor.parallel import MAX_TASKS, cores, forked
from ckptdoctor.pipelines.interrupted import with_interruptions
from ckptdoctor.pipelines.scan import Scan, scan, surveys, transfer, with_leftovers
from ckptdoctor.pipelines.versions import announced
from ckptdoctor.progress import Tally
from ckptdoctor.readers import deep_scan
from ckptdoctor.readers.deep_scan import prepare
from ckptdoctor.readers.files import (
    ReadAhead,
    RecordedReads,
    expected_formats,
    holds,
    read_any_name,
    read_whole,
    unpickled_by_name,
    whole_read_bytes,
)
from ckptdoctor.readers.sample import address_path, keeping_whole, open_sample
from ckptdoctor.readers.unpickler import Budget, one_budget
from ckptdoctor.rules.context import Thresholds
from ckptdoctor.rules.registry import check, find_rule
from ckptdoctor.stores import session
from ckptdoctor.stores.leftovers import Surveyed
from ckptdoctor.units import counted

if TYPE_CHECKING:
    from ckptdoctor.fanout.ray import RayFanout

_ALSO_READ = (".pkl", ".pickle", ".npy", ".npz", ".7z", ".zip", ".joblib", ".dill")
"""Files outside checkpoints that verify reads too: they can carry code or arrays."""


OBJECT_THREADS = 8
"""Objects read whole at once (each in parallel parts of its own)."""
PROBES = 3
"""Tries of the cluster's first task where the file it reads changes meanwhile."""
FANNED_THREADS = 32
"""Files read at once where a cluster reads their deep ranges (``--ray``): each thread mostly waits
for its file's tasks, and every file's tasks must be queued for the cluster to be kept busy."""
POOL_MIN_FILES = 512
"""Below this many files a structural read takes less time than starting worker processes."""
POOL_MIN_BYTES = 64 * 1024 * 1024
"""With ``--deep``, below this many bytes one process (and its threads) is as fast as a pool."""


@dataclass(frozen=True)
class VerifyOptions:
    deep: bool = False
    """Read every byte: CRC-32 of zip members (CKD206) and NaN/Inf in float tensors (CKD304)."""
    load: bool = False
    """Also load each file that passed with the real library (torch or safetensors)."""
    jobs: int = 0
    """Files read at once (0: one per CPU core)."""
    download: Callable[[int, int], bool] | None = None
    """Asked, once the header reads are done and before any object is read whole (egress costs
    money), with the count of the objects to read whole from stores and the most bytes the
    command will then have received from stores in all (``_ask``); False stops with
    :class:`NotDownloaded`. None: read them."""
    ray: str | None = None
    """The Ray cluster whose tasks read the deep check's ranges (``auto``: ``RAY_ADDRESS``, else
    the one on this machine); None: this process reads them."""


class NotDownloaded(UsageError):
    """``verify`` stopped before reading objects from a store, as ``VerifyOptions.download`` said."""


def verify(
    paths: Iterable[str],
    options: VerifyOptions = VerifyOptions(),
    thresholds: Thresholds | None = None,
    tally: Tally | None = None,
) -> tuple[Report, Scan]:
    """What ``ckptdoctor verify`` reports; ``tally`` counts what the first scan sees and the
    files and bytes read whole as they finish (the second scan, of the same tree, is not counted)."""
    paths = list(paths)
    before = session.traffic()
    headers = RecordedReads(NAMED_FILES, HARMLESS)
    with keeping_whole():
        first = scan(paths, headers, tally=tally)
        targets = _targets(first)
        surveyed = surveys(paths)
        older = _older_to_read(first.runs, surveyed)
        _ask(options, targets, headers.made, before, older)
        budgets = _Budgets({e.os_path: run.path for run in first.runs for e in _files_of(run)})
        with _fanned(options, targets) as fanned:
            reports = _read_all(targets, options.deep, options.jobs or cores(), tally, budgets)
        if options.load:
            from ckptdoctor.readers.library import load_all  # torch is imported only here

            reports.update(load_all([e for e in targets if e.os_path in reports], reports))
        second = scan(paths, ReadAhead({**headers.made, **reports}, NAMED_FILES, HARMLESS, settled=True))
    runs = [_with_extra_files(run, reports) for run in second.runs]
    file_runs = [run for listing in second.unclaimed if (run := _file_run(listing, reports))]
    runs += file_runs
    now = time.time()
    judged = with_interruptions(with_leftovers(paths, runs, whole=frozenset(older), surveyed=surveyed), now)
    findings = check(judged, second.unlisted, thresholds or Thresholds(), whole=True, now=now)
    covered = {run.path for run in file_runs}
    empty = tuple(path for path in second.empty if not any(_within(run_path, path) for run_path in covered))
    report = Report("verify", judged, findings, second.errors, transfer=transfer(paths, before), fanned=fanned.spent() if fanned else None)
    return report, dataclasses.replace(second, empty=empty)


@contextlib.contextmanager
def _fanned(options: VerifyOptions, targets: Sequence[Entry]) -> Iterator[RayFanout | None]:
    """Within this, the deep check's ranges go to the cluster ``options.ray`` names, once a
    worker has shown it reads the files of ``targets`` as this process does; the tasks still
    pending are cancelled where this ends early (Ctrl-C)."""
    if options.ray is None:
        yield None
        return
    # the optional extra, imported only for --ray
    from ckptdoctor.fanout import ray

    fanout = ray.connect(options.ray)
    try:
        _probe(fanout, targets)
        with deep_scan.fanned_out(fanout):
            yield fanout
    finally:
        fanout.close()


def _probe(fanout: RayFanout, targets: Sequence[Entry]) -> None:
    """Have a task read the largest of ``targets`` (where anything is handed to the cluster, it
    is: an object a header read held whole is not), again where it changes meanwhile."""
    largest = max(targets, key=lambda entry: entry.size, default=None)
    for _ in range(PROBES):
        if largest is None or largest.size == 0:
            return
        try:
            with open_sample(largest.os_path) as sample:
                address = sample.address()
            if address is not None:
                fanout.probe(address)
            return
        except deep_scan.FileChanged:  # being written: addressed again, as it is now
            continue
        except OSError:  # gone since it was listed: its own read says so
            return


def _ask(
    options: VerifyOptions,
    entries: list[Entry],
    headers: dict[str, FileReport],
    before: tuple[int, int],
    older: dict[str, int] | None = None,
) -> None:
    """Ask ``options.download`` before the objects among ``entries`` are read whole, with their
    count and the most bytes the command will then have received from stores in all since
    ``before`` (``session.traffic()``): what was read already (their headers), what reading
    them whole will take (``whole_read_bytes``, from the header reads' reports ``headers``), and
    ``older``, the bytes of the older versions of damaged files it reads (CKD216), as nothing
    else is read; :class:`NotDownloaded` where it says no."""
    objects = [entry for entry in entries if session.owner(entry.os_path) is not None]
    older = older or {}
    if not (objects or older) or options.download is None:
        return
    received = session.traffic()[1] - before[1]
    most = received + sum(whole_read_bytes(entry, headers.get(entry.os_path), options.deep) for entry in objects) + sum(older.values())
    if not options.download(len(objects) + len(older), most):
        raise NotDownloaded(f"{counted(len(objects), 'object')} {'was' if len(objects) == 1 else 'were'} not read; nothing was verified")


def _older_to_read(runs: Sequence[Run], surveyed: dict[str, Surveyed]) -> dict[str, int]:
    """The files of ``runs`` in versioned buckets that their header reads found damaged, each with
    the bytes of its older versions, which ``verify`` reads whole to name one that restores it."""
    found: dict[str, int] = {}
    for survey in surveyed.values():
        if survey.versioning:
            under = survey.location.url
            held = [run for run in runs if run.path == under or run.path.startswith(under + "/")]
            found.update(announced(held, survey.location, survey.older))
    return found


def verify_newest(run: Run, count: int, options: VerifyOptions = VerifyOptions(deep=True)) -> tuple[Run, tuple[int, ...]]:
    """``run`` judged again with its ``count`` newest complete checkpoints read whole, and in turn
    the older ones that take the place of any that fail (``prune --verify``); the indices that
    failed. A checkpoint whose header looks whole but whose bytes do not is then no longer
    complete: it is neither the resume point nor counted by --keep-last."""
    reports: dict[str, FileReport] = {}
    failed: list[int] = []
    while True:
        newest = [c for c in reversed(run.checkpoints) if c.status is Status.COMPLETE][:count]
        unread = [f.entry for c in newest for f in c.files if f.entry.os_path not in reports and _readable(f.entry)]
        if not unread:
            return run, tuple(failed)
        reports.update(_read_all(unread, options.deep, options.jobs or cores(), None, _Budgets({e.os_path: run.path for e in unread})))
        again = next((found for found in scan([run.path], ReadAhead(reports, NAMED_FILES, HARMLESS)).runs if found.path == run.path), None)
        if again is None:
            raise FileNotFoundError(errno.ENOENT, "the run changed while it was verified", run.path)
        judged = {c.index: c.status for c in again.checkpoints}
        failed += [c.index for c in newest if judged.get(c.index) is not Status.COMPLETE]
        run = again


RESUME_TRIES = 3
"""Checkpoints ``verify --resume`` reads at most, newest first: where the resume point's files
turn out damaged (torn by a kill the header did not show), the next older complete one is read in
its place, as ``inspect`` falls back past damage it sees; a run whose newest few all fail has
something wrong with it that a user must look at before resuming."""


def verify_resume(
    paths: Iterable[str],
    options: VerifyOptions = VerifyOptions(),
    thresholds: Thresholds | None = None,
    tally: Tally | None = None,
) -> tuple[Report, Scan]:
    """What ``ckptdoctor verify --resume`` reports: ``inspect``'s runs with only the files of each
    run's resume point read whole (fast on a big run: no other checkpoint is read). Each run's
    ``resumable`` is narrowed to the one checkpoint that verified, so that ``Run.resume`` is that
    checkpoint or None: None where a file it needs would run code (no older checkpoint is taken
    in its place: whoever planted it may have planted more), where none of the newest
    ``RESUME_TRIES`` complete checkpoints verified, or where a pointer of the run leads out of it
    (the framework's own resume loads what it names, which is not the run's to check)."""
    paths = list(paths)
    before = session.traffic()
    headers = RecordedReads(NAMED_FILES, HARMLESS)
    reports: dict[str, FileReport] = {}
    verified: dict[str, frozenset[int]] = {}
    with keeping_whole():
        first = scan(paths, headers, tally=tally)
        with _fanned(options, [f.entry for run in first.runs if run.resume for f in run.resume.files]) as fanned:
            for run in first.runs:
                # what this user cannot read stays where the framework may resume: the answer depends on it
                resumable = _verified_resume(run, options, (headers.made, reports), before, tally)
                verified[run.path] = resumable | {c.index for c in run.resume_depends_on}
        second = scan(paths, ReadAhead({**headers.made, **reports}, NAMED_FILES, HARMLESS, settled=True)) if reports else first
    now = time.time()
    runs = with_interruptions(
        [
            advised(dataclasses.replace(run, resumable=verified.get(run.path, frozenset()), resume_how="", resume_path=None))
            for run in second.runs
        ],
        now,
    )
    findings = check(runs, second.unlisted, thresholds or Thresholds(), whole=True, now=now)
    fanned_out = fanned.spent() if fanned else None
    return Report("verify", runs, findings, second.errors, transfer=transfer(paths, before), fanned=fanned_out), second


def _verified_resume(
    run: Run,
    options: VerifyOptions,
    known: tuple[dict[str, FileReport], dict[str, FileReport]],
    before: tuple[int, int],
    tally: Tally | None,
) -> frozenset[int]:
    """The index of ``run``'s newest complete checkpoint whose files all read whole with no
    problem, reading back at most ``RESUME_TRIES`` of them; none where a file read would run
    code or could not be checked whole. ``known``: the header reads' reports, and the whole
    reads' (which gains what is read here); ``before``: the traffic when the command began."""
    headers, reports = known
    if led_outside(layout_named(run.layout), run):
        return frozenset()  # the framework's own resume loads a file outside the run, which is not read here
    tried = 0
    while (checkpoint := run.resume) is not None and not run.single_file:
        unread = [f.entry for f in checkpoint.files if f.entry.os_path not in reports and _readable(f.entry)]
        if not unread:  # read whole, and the resume point still
            checked = not any(Problem.PARTLY_CHECKED in f.report.problems for f in checkpoint.files)
            return frozenset({checkpoint.index}) if checked else frozenset()
        if tried == RESUME_TRIES:
            return frozenset()
        tried += 1
        _ask(options, unread, headers, before)
        read = _read_all(unread, options.deep, options.jobs or cores(), tally)
        if options.load:
            from ckptdoctor.readers.library import load_all  # torch is imported only here

            read.update(load_all(unread, read))
        reports.update(read)
        # as the run's findings will say: a framework's own objects, or classes the user declared, are CKD402
        own = layout_named(run.layout).own_objects
        if any(own.vouched(report, trusted_globals()).problems & _UNSAFE for report in read.values()):
            return frozenset()
        again = next(
            (
                found
                for found in scan([run.path], ReadAhead({**headers, **reports}, NAMED_FILES, HARMLESS, settled=True)).runs
                if found.path == run.path
            ),
            None,
        )
        if again is None:
            return frozenset()  # the run changed while it was read: nothing verified
        run = again
    return frozenset()


_UNSAFE = frozenset(
    problem for problem in Problem if problem.status is not None and (rule := find_rule(problem.value)) and rule.family == 400
)
"""What makes ``verify --resume`` stop rather than read an older checkpoint: a file that would run
code on load was put there by someone, who may have planted more."""


def _targets(found: Scan) -> list[Entry]:
    entries: dict[str, Entry] = {}
    for run in found.runs:
        entries.update((e.os_path, e) for e in _files_of(run) if _readable(e))
    for listing in found.unclaimed:
        entries.update((e.os_path, e) for e in listing.entries if _readable(e) and _worth_reading(e))
    return sorted(entries.values(), key=lambda e: -e.size)  # big files first: the pool ends together


def _files_of(run: Run) -> list[Entry]:
    """The files of ``run`` that verify reads whole."""
    files = [f.entry for c in run.checkpoints for f in c.files] + [f.entry for f in run.loose_files]
    return files + [e for e in run.other_files if _worth_reading(e)]


class _Budgets:
    """The command's budget of opcodes and decompressed bytes, and each run's share of it: every
    file read is charged to its run's (files outside any run share one). Forked workers each
    charge their own copy, so the command's bound holds per worker."""

    def __init__(self, run_of: dict[str, str]) -> None:
        self.command = Budget.for_command()
        self.run_of = run_of
        self.runs: dict[str, Budget] = {}

    def of(self, entry: Entry) -> Budget:
        run = self.run_of.get(entry.os_path, "")
        if run not in self.runs:
            self.runs[run] = self.command.for_run()
        return self.runs[run]


def _readable(entry: Entry) -> bool:
    return not entry.is_dir and not entry.dangling


def _worth_reading(entry: Entry) -> bool:
    """Files that can carry code or tensors, by name or else by content (``torch.load`` takes any name)."""
    name = entry.name.lower()
    if name.endswith(_ALSO_READ) or unpickled_by_name(name):
        return True
    if expected_formats(name) is not None and not name.endswith(".json"):
        return True
    # JSON by name, or a name that says nothing: pickles, archives and compressed pickles by content
    return entry.size > 0 and holds(entry, read_any_name())


def _read_all(entries: list[Entry], deep: bool, jobs: int, tally: Tally | None, budgets: _Budgets | None = None) -> dict[str, FileReport]:
    budgets = budgets or _Budgets({})
    total = sum(e.size for e in entries)
    tally = tally if tally is not None else Tally()  # counted whether or not anyone looks: a few additions per file
    tally.to_read, tally.bytes_to_read = len(entries), total
    reports: dict[str, FileReport] = {}
    if deep and deep_scan.fanout() is not None:  # no fork: the cluster's connection lives in this process
        _read_in_threads(entries, deep, tally, reports, budgets, FANNED_THREADS)
        return reports
    objects = [entry for entry in entries if session.owner(entry.os_path) is not None]
    if objects:
        entries = [entry for entry in entries if session.owner(entry.os_path) is None]
        _read_in_threads(objects, deep, tally, reports, budgets, OBJECT_THREADS)
    worth_a_pool = len(entries) >= POOL_MIN_FILES or (deep and total >= POOL_MIN_BYTES)
    # one file that outweighs the rest twice over is read soonest by every thread at once (and
    # the rest after it), not by one worker while the others finish the small files and wait
    one_big = deep and max((e.size for e in entries), default=0) * 3 > total * 2
    if jobs < 2 or len(entries) < 2 or not worth_a_pool or one_big or not hasattr(os, "fork"):
        threads = jobs if deep else 0
        for entry in entries:
            reports[entry.os_path] = _charged(budgets.of(entry), entry, threads)
            tally.read += 1
            tally.bytes_read += entry.size
        return reports
    # files shared between worker processes: walking pickles holds the GIL, so threads would not do
    if deep:
        prepare()  # numpy, where it tests the blocks, imported once before the fork: the workers share its pages
    tasks = _batches(entries, min(TASKS_PER_WORKER * jobs, MAX_TASKS))
    threads = 1 if deep else 0
    done: set[int] = set()

    def read_task(number: int) -> dict[str, FileReport]:
        return {entry.os_path: _charged(budgets.of(entry), entry, threads) for entry in tasks[number]}

    with contextlib.closing(forked(read_task, len(tasks), jobs)) as results:
        for number, batch in results:
            done.add(number)
            reports.update(batch)
            tally.read += len(batch)
            tally.bytes_read += sum(entry.size for entry in tasks[number])
    if len(done) < len(tasks):
        lost = sum(len(tasks[number]) for number in range(len(tasks)) if number not in done)
        raise RuntimeError(f"a verify worker process died (killed?): {counted(lost, 'file')} {'was' if lost == 1 else 'were'} not read")
    return reports


def _read_in_threads(
    entries: list[Entry], deep: bool, tally: Tally, reports: dict[str, FileReport], budgets: _Budgets, threads: int
) -> None:
    """Files each read whole by one of ``threads`` threads that mostly wait: on the network
    (objects in a store, where a forked worker would inherit the store client's threads
    mid-flight), or on a cluster's tasks. Each runs in a copy of this thread's context, which
    says where deep checks go."""
    # loaded only where files are read so: a local verify does not import it
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    def read(entry: Entry) -> FileReport:
        return _charged(budgets.of(entry), entry, 1 if deep else 0)

    elsewhere = deep_scan.fanout()
    if elsewhere is not None:  # the bytes a cluster's tasks read count as each task finishes
        elsewhere.counting(lambda size: tally.add_read(0, size))
    with ThreadPoolExecutor(threads) as pool:
        # each a copy of this thread's context, made here: a context is entered by one thread at a time
        futures = [pool.submit(contextvars.copy_context().run, read, entry) for entry in entries]
        try:
            for entry, future in zip(entries, futures, strict=True):
                reports[entry.os_path] = future.result()
                counted = elsewhere.settled(address_path(entry.os_path)) if elsewhere is not None else 0
                tally.add_read(1, entry.size - counted)
        except BaseException:  # Ctrl-C, or a cluster gone: no file is begun, and the threads are not waited for
            pool.shutdown(wait=False, cancel_futures=True)
            if elsewhere is not None:
                elsewhere.cancel()  # the tasks of the files under way, whose threads wait on them
            raise


TASKS_PER_WORKER = 32
"""Tasks the files are dealt into, per worker: each worker takes the next when it is done, so the
workers end together, within one small task of each other, however the machine slows one."""


def _batches(entries: list[Entry], count: int) -> list[list[Entry]]:
    """``entries`` (biggest first) dealt into about ``count`` batches of similar byte totals: one
    task per file would cost a round trip per file between processes."""
    batches: list[list[Entry]] = [[] for _ in range(min(count, len(entries)))]
    sizes = [0] * len(batches)
    for entry in entries:
        smallest = sizes.index(min(sizes))
        batches[smallest].append(entry)
        sizes[smallest] += entry.size + 4096  # a file costs an open and a directory read too
    return [batch for batch in batches if batch]


def verify_file(entry: Entry, deep: int = 0) -> FileReport:
    """One file read whole, with the files frameworks name read as the layouts say."""
    return read_whole(entry, deep, NAMED_FILES, HARMLESS)


def _charged(budget: Budget, entry: Entry, deep: int) -> FileReport:
    """``verify_file`` with the file's own budget charged to ``budget`` (its run's)."""
    with one_budget(budget):
        return verify_file(entry, deep)


def _with_extra_files(run: Run, reports: dict[str, FileReport]) -> Run:
    read = [e for e in run.other_files if e.os_path in reports]
    if not read:
        return run
    extra = tuple(CheckpointFile(e, (), "", reports[e.os_path]) for e in read)
    others = tuple(e for e in run.other_files if e.os_path not in reports)
    return dataclasses.replace(run, other_files=others, extra_files=extra)


def _file_run(listing: Listing, reports: dict[str, FileReport]) -> Run | None:
    """Files in a folder that follows no layout (a download folder, a scanner's corpus): each judged alone."""
    files = sorted(
        (CheckpointFile(e, (), "", reports[e.os_path]) for e in listing.entries if e.os_path in reports),
        key=lambda f: natural_key(f.path),
    )
    if not files:
        return None
    return Run(listing.path, "unknown", Unit.SAVE, (), (), single_file=True, extra_files=tuple(files))


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)
