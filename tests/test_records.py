"""The records ckptdoctor keeps in a run's own folder (issue 15, item 7): prune's journal and
repair's quarantine manifest are typed, and decoded in one place that takes exactly what
ckptdoctor writes and refuses everything else; what earlier versions wrote is still read and
undone, byte for byte as they wrote it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from test_prune import burn_run, epochs_left
from test_repair import broken_burn_run, deepspeed_run, tree

from ckptdoctor.actions._home import MAX_RECORD
from ckptdoctor.model import PointerKind
from ckptdoctor.records import (
    MANIFEST_VERSION,
    BadRecord,
    EntryLine,
    Journal,
    Manifest,
    Phase,
    PointerLine,
)

# A manifest exactly as the release before issue 15 wrote it (`repair --yes` on `deepspeed_run`):
# global_step300 quarantined, `latest` re-pointed at global_step200. Only the run's path differs.
PREVIOUS_MANIFEST = (
    '{"version": 2, "run": RUN, "created": 1796170726.7256556, "state": "done", "entries": [{"path": "global_step300", '
    '"index": 300, "reasons": ["incomplete and newer than the resume point (step 200)", "fixes CKD105 missing-shard, '
    'CKD114 unsafe-auto-resume"], "bytes": 3392, "identity": [65024, 2564255, 4096, 1796084324709733009, '
    '1796170724709697537]}], "pointers": [{"path": "latest", "index": 200, "reasons": ["latest names \'global_step300\', '
    'which is incomplete: fixes CKD113 stale-pointer", "will name \'global_step200\', the resume point"], '
    '"text": "global_step200", "kind": "text", "existed": true}]}'
)
# and a journal as `prune` writes it (it has no version field)
PREVIOUS_JOURNAL = '{"run": "/r", "entries": ["model-1.bpk", "optim-1.bpk"], "identities": {"model-1.bpk": [1, 2, 3, 4, 5], "optim-1.bpk": [1, 6, 7, 8, 9]}}'


def _manifest(**changes: object) -> dict:
    document = json.loads(PREVIOUS_MANIFEST.replace("RUN", '"/r"'))
    return {**document, **changes}


def _entry(**changes: object) -> dict:
    return {**_manifest()["entries"][0], **changes}


def _pointer(**changes: object) -> dict:
    return {**_manifest()["pointers"][0], **changes}


# --- round trips ------------------------------------------------------------------------------------


def test_the_previous_releases_records_decode_and_encode_byte_for_byte() -> None:
    data = PREVIOUS_MANIFEST.replace("RUN", '"/r"').encode()
    manifest = Manifest.decode(data)
    assert manifest.encode() == data
    assert manifest.version == 2 and manifest.state is Phase.DONE and manifest.created == 1796170726.7256556
    assert manifest.entries == (
        EntryLine(
            "global_step300", 300, tuple(_entry()["reasons"]), 3392, (65024, 2564255, 4096, 1796084324709733009, 1796170724709697537)
        ),
    )
    assert (
        manifest.pointers[0].write.text == "global_step200"
        and manifest.pointers[0].kind is PointerKind.TEXT
        and manifest.pointers[0].existed
    )
    journal = Journal.decode(PREVIOUS_JOURNAL.encode())
    assert journal.encode() == PREVIOUS_JOURNAL.encode() and journal.identity("optim-1.bpk") == (1, 6, 7, 8, 9)


@pytest.mark.parametrize("kind", list(PointerKind))
def test_every_record_ckptdoctor_builds_reads_back_as_itself(kind: PointerKind) -> None:
    manifest = Manifest(
        MANIFEST_VERSION,
        "/r\udcff",  # a run path that is not UTF-8
        12.5,
        Phase.REPAIRING,
        (
            EntryLine("a/b\udcfe", None, (), 0, (0, 0, 0, -(1 << 63), (1 << 63) - 1)),
            EntryLine("c", 7, ("x",), (1 << 63) - 1, ((1 << 64) - 1,) * 2 + (0,) * 3),
        ),
        (PointerLine("latest", None, ("r",), "step\n", kind, False),),
    )
    assert Manifest.decode(manifest.encode()) == manifest
    journal = Journal("/r", ("a", "b/c"), {"a": (1, 2, 3, 4, 5)})
    assert Journal.decode(journal.encode()) == journal


def test_version_3_manifests_carry_a_fingerprint_or_null_and_version_2_reads_on() -> None:
    fingerprinted = _manifest(version=3, entries=[_entry(content="0123456789abcdef" * 4), {**_entry(content=None), "path": "unread"}])
    manifest = Manifest.from_json(fingerprinted)
    assert [line.content for line in manifest.entries] == ["0123456789abcdef" * 4, None]
    assert manifest.to_json() == fingerprinted
    assert (
        Manifest.from_json(_manifest()).entries[0].content is None
        and "content" not in Manifest.from_json(_manifest()).to_json()["entries"][0]
    )


def test_version_1_manifests_are_read_without_identities_and_rewritten_as_version_1() -> None:
    document = _manifest(version=1, entries=[{key: value for key, value in _entry().items() if key != "identity"}])
    manifest = Manifest.from_json(document)
    assert manifest.entries[0].identity is None
    assert manifest.to_json() == document


def test_journals_of_earlier_versions_have_no_identities_and_finish_nothing_unmoved() -> None:
    journal = Journal.decode(b'{"run": "/r", "entries": ["model-1.bpk"]}')
    assert journal.identities is None and journal.identity("model-1.bpk") is None
    assert journal.encode() == b'{"run": "/r", "entries": ["model-1.bpk"]}'


def test_a_record_that_would_not_read_back_is_never_written() -> None:
    with pytest.raises(BadRecord, match="its identity is missing"):
        Manifest(MANIFEST_VERSION, "/r", 1.0, Phase.DONE, (EntryLine("a", 1, ("r",), 1, None),), ()).encode()  # version 2 needs identities
    with pytest.raises(BadRecord, match="would not read back"):
        Manifest(MANIFEST_VERSION, "/r", 1.0, Phase.DONE, (EntryLine("a", 1, ["r"], 1, (1, 2, 3, 4, 5)),), ()).encode()  # type: ignore[arg-type]
    with pytest.raises(BadRecord, match="not a ckptdoctor journal"):
        Journal("/r", ("a\0b",), None).encode()


def test_what_a_repair_and_a_prune_write_is_the_format_earlier_versions_read(tmp_path: Path, cli) -> None:
    folder = deepspeed_run(tmp_path / "ds")
    assert cli("repair", "--yes", folder).exit_code == 0
    written = next((folder / ".ckptdoctor" / "quarantine").glob("*/manifest.json")).read_bytes()
    document = json.loads(written)
    assert written == json.dumps(document).encode(), "json.dump's own spacing, as before"
    assert (
        document["version"] == 3
        and list(document) == list(_manifest())
        and list(document["entries"][0]) == [*_entry(), "content"]  # version 3: version 2's fields and the fingerprint
        and list(document["pointers"][0]) == list(_pointer())
    )
    assert re.fullmatch("[0-9a-f]{64}", document["entries"][0]["content"])
    journal = Journal("/r", ("a",), {"a": (1, 2, 3, 4, 5)}).encode()
    assert journal == json.dumps({"run": "/r", "entries": ["a"], "identities": {"a": [1, 2, 3, 4, 5]}}).encode()


# --- refusals ---------------------------------------------------------------------------------------

DEEP = b"[" * 100_000 + b"]" * 100_000

REFUSED_MANIFESTS = {
    "not an object": ([], "not a ckptdoctor quarantine manifest"),
    "entries not a list": (_manifest(entries={}), "not a ckptdoctor quarantine manifest"),
    "no pointers": ({k: v for k, v in _manifest().items() if k != "pointers"}, "not a ckptdoctor quarantine manifest"),
    "a newer version": (_manifest(version=4), "version 4 is not one this ckptdoctor reads"),
    "a fingerprint in version 2": (_manifest(entries=[_entry(content="0" * 64)]), "holds 'content', which ckptdoctor never writes"),
    "no fingerprint in version 3": (_manifest(version=3), "its content is missing or wrong"),
    "a short fingerprint": (_manifest(version=3, entries=[_entry(content="0" * 63)]), "its content is missing or wrong"),
    "a fingerprint in capitals": (_manifest(version=3, entries=[_entry(content="A" * 64)]), "its content is missing or wrong"),
    "no version": ({k: v for k, v in _manifest().items() if k != "version"}, "version None"),
    "version as text": (_manifest(version="2"), "version '2'"),
    "version true": (_manifest(version=True), "version True"),
    "run not text": (_manifest(run=5), "its run, created or state field is missing or wrong"),
    "created as text": (_manifest(created="today"), "its run, created or state field"),
    "created true": (_manifest(created=True), "its run, created or state field"),
    "created huge": (_manifest(created=10**30), "its run, created or state field"),
    "unknown state": (_manifest(state="half"), "its run, created or state field"),
    "an extra field": (_manifest(owner="me"), "'owner', which ckptdoctor never writes"),
    "a path out of the run": (_manifest(entries=[_entry(path="../../victim.txt")]), "not a path inside the run"),
    "an absolute path": (_manifest(entries=[_entry(path="/etc/passwd")]), "not a path inside the run"),
    "a path into ckptdoctor's own folder": (_manifest(entries=[_entry(path=".ckptdoctor/lock")]), "not a path inside the run"),
    "an empty path": (_manifest(entries=[_entry(path="")]), "not a path inside the run"),
    "a path with a NUL": (_manifest(entries=[_entry(path="a\0b")]), "not a path inside the run"),
    "a path no OS takes": (_manifest(entries=[_entry(path="\ud800")]), "not a path inside the run"),
    "a line that is no object": (_manifest(entries=["global_step300"]), "an entry names None"),
    "a pointer out of the run": (_manifest(pointers=[_pointer(path="../latest")]), "not a path inside the run"),
    "no identity in version 2": (
        _manifest(entries=[{k: v for k, v in _entry().items() if k != "identity"}]),
        "its identity is missing or wrong",
    ),
    "a short identity": (_manifest(entries=[_entry(identity=[1, 2, 3])]), "its identity is missing or wrong"),
    "an identity of booleans": (_manifest(entries=[_entry(identity=[True] * 5)]), "its identity is missing or wrong"),
    "an inode past 64 bits": (_manifest(entries=[_entry(identity=[1, 1 << 64, 3, 4, 5])]), "its identity is missing or wrong"),
    "negative bytes": (_manifest(entries=[_entry(bytes=-1)]), "the entry line for 'global_step300' is incomplete: its bytes"),
    "bytes past 63 bits": (_manifest(entries=[_entry(bytes=1 << 63)]), "its bytes is missing or wrong"),
    "no bytes": (_manifest(entries=[{k: v for k, v in _entry().items() if k != "bytes"}]), "its bytes is missing or wrong"),
    "index as text": (_manifest(entries=[_entry(index="300")]), "its index is missing or wrong"),
    "reasons not text": (_manifest(entries=[_entry(reasons=[1])]), "its reasons is missing or wrong"),
    "an extra line field": (
        _manifest(entries=[_entry(mode=0o777)]),
        "the entry line for 'global_step300' holds 'mode', which ckptdoctor never writes",
    ),
    "a pointer without text": (
        _manifest(pointers=[{k: v for k, v in _pointer().items() if k != "text"}]),
        "the pointer line for 'latest' is incomplete",
    ),
    "a pointer of an unknown kind": (
        _manifest(pointers=[_pointer(kind="hardlink")]),
        "the pointer line for 'latest' is incomplete: its kind",
    ),
    "existed as a number": (_manifest(pointers=[_pointer(existed=1)]), "the pointer line for 'latest' is incomplete: its existed"),
    "a pointer text with a NUL": (_manifest(pointers=[_pointer(text="a\0")]), "its text is missing or wrong"),
}


@pytest.mark.parametrize("name", REFUSED_MANIFESTS)
def test_a_manifest_ckptdoctor_never_writes_is_refused_saying_why(name: str) -> None:
    document, said = REFUSED_MANIFESTS[name]
    with pytest.raises(BadRecord) as refused:
        Manifest.decode(json.dumps(document).encode())
    assert said in str(refused.value)


REFUSED_JOURNALS = {
    "not an object": (b'["a"]', "not a ckptdoctor journal"),
    "a version": (b'{"version": 2, "run": "/r", "entries": []}', "version 2 is not one this ckptdoctor reads"),
    "no run": (b'{"entries": ["a"]}', "not a ckptdoctor journal"),
    "no entries": (b'{"run": "/r"}', "not a ckptdoctor journal"),
    "an entry not text": (b'{"run": "/r", "entries": [1]}', "not a ckptdoctor journal"),
    "an entry with a NUL": (b'{"run": "/r", "entries": ["a\\u0000"]}', "not a ckptdoctor journal"),
    "identities null": (b'{"run": "/r", "entries": [], "identities": null}', "not a ckptdoctor journal"),
    "an identity of what it does not list": (
        b'{"run": "/r", "entries": ["a"], "identities": {"b": [1, 2, 3, 4, 5]}}',
        "its identity of 'b'",
    ),
    "an identity of text": (b'{"run": "/r", "entries": ["a"], "identities": {"a": "12345"}}', "its identity of 'a'"),
    "an extra field": (b'{"run": "/r", "entries": [], "policy": "all"}', "'policy', which ckptdoctor never writes"),
}


@pytest.mark.parametrize("name", REFUSED_JOURNALS)
def test_a_journal_ckptdoctor_never_writes_is_refused_saying_why(name: str) -> None:
    data, said = REFUSED_JOURNALS[name]
    with pytest.raises(BadRecord) as refused:
        Journal.decode(data)
    assert said in str(refused.value)


@pytest.mark.parametrize("decode", [Manifest.decode, Journal.decode])
@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b'{"run": NaN}', "NaN"),
        (b'{"run": "/r", "run": "/s"}', "names a field twice"),
        (DEEP, "nested far deeper"),
        (b'{"run": 1' + b"0" * 5000 + b"}", ""),  # json's own limit on a number's length (3.11), or no run
        (b'{"run": "\xff"}', "utf-8"),
        (b"{not json", "Expecting property name"),
    ],
)
def test_hostile_json_is_a_value_error_never_a_crash(decode, data: bytes, said: str) -> None:
    with pytest.raises(ValueError) as refused:
        decode(data)
    assert said in str(refused.value)


def test_a_journal_listing_a_path_out_of_the_run_is_read_and_the_path_skipped_where_it_is_acted_on() -> None:
    """As before: such an entry is never reached (``_confine`` refuses it), and the rest is finished."""
    assert Journal.decode(b'{"run": "/r", "entries": ["../../outside.txt"]}').entries == ("../../outside.txt",)


# --- on disk: every refusal leaves the run as it is ------------------------------------------------


def _quarantine_of(folder: Path) -> Path:
    quarantine = folder / ".ckptdoctor" / "quarantine" / "20260101-000000-deadbeef"
    (quarantine / "files").mkdir(parents=True)
    return quarantine


def test_a_manifest_the_previous_release_wrote_is_undone(tmp_path: Path, cli) -> None:
    folder = deepspeed_run(tmp_path / "ds")
    before = tree(folder)
    # what that release's `repair --yes` left: the step moved, the old `latest` kept, the new one written
    quarantine = _quarantine_of(folder)
    moved = os.lstat(folder / "global_step300")
    os.rename(folder / "global_step300", quarantine / "files" / "global_step300")
    os.link(folder / "latest", quarantine / "files" / "latest")
    (folder / "latest.new").write_text("global_step200")
    os.replace(folder / "latest.new", folder / "latest")
    # the literal's bytes, with the identity this machine gives the folder it moved (undo checks it)
    found = [moved.st_dev, moved.st_ino, moved.st_size, moved.st_mtime_ns, moved.st_ctime_ns]
    written = PREVIOUS_MANIFEST.replace("65024, 2564255, 4096, 1796084324709733009, 1796170724709697537", ", ".join(map(str, found)))
    (quarantine / "manifest.json").write_bytes(written.replace("RUN", json.dumps(str(folder))).encode())
    result = cli("repair", "--undo", "--yes", folder)
    assert result.exit_code == 0, result.stderr
    assert tree(folder) == before and (folder / "latest").read_text() == "global_step300"
    assert not quarantine.exists()


@pytest.mark.parametrize("name", ["a newer version", "a path out of the run", "an extra line field", "a pointer of an unknown kind"])
def test_a_refused_manifest_stops_repair_and_undo_with_a_clear_message_and_nothing_moves(tmp_path: Path, cli, name: str) -> None:
    folder = broken_burn_run(tmp_path)
    before = tree(folder)
    quarantine = _quarantine_of(folder)
    manifest = quarantine / "manifest.json"
    manifest.write_text(json.dumps({**REFUSED_MANIFESTS[name][0], "run": str(folder), "state": "repairing"}))
    kept = manifest.read_bytes()
    for command in (("repair", "--yes"), ("repair", "--undo", "--yes")):
        result = cli(*command, folder)
        assert result.exit_code == 1 and "Traceback" not in result.stderr
        assert "manifest.json" in result.stderr and REFUSED_MANIFESTS[name][1] in result.stderr
    assert tree(folder) == before and manifest.read_bytes() == kept


@pytest.mark.parametrize("name", ["a version", "an identity of text", "an extra field", "an entry with a NUL"])
def test_a_refused_journal_stops_prune_with_a_clear_message_and_nothing_is_deleted(tmp_path: Path, cli, name: str) -> None:
    folder = burn_run(tmp_path)
    trash = folder / ".ckptdoctor" / "trash" / "20260101-000000-deadbeef"
    trash.mkdir(parents=True)
    (trash / "journal.json").write_bytes(REFUSED_JOURNALS[name][0])
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert "interrupted prune left" in result.stderr and REFUSED_JOURNALS[name][1] in result.stderr
    assert epochs_left(folder) == list(range(1, 8)) and (trash / "journal.json").read_bytes() == REFUSED_JOURNALS[name][0]


def _symlinked(record: Path, tmp_path: Path, data: bytes) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(data)
    record.symlink_to(elsewhere)


def _fifo(record: Path, tmp_path: Path, data: bytes) -> None:
    os.mkfifo(record)


def _too_long(record: Path, tmp_path: Path, data: bytes) -> None:
    with open(record, "wb") as handle:
        handle.truncate(MAX_RECORD + 1)  # sparse: no disk used


@pytest.mark.parametrize("make", [_symlinked, _fifo, _too_long])
def test_a_manifest_that_is_no_regular_file_of_ckptdoctors_is_not_read(tmp_path: Path, cli, make) -> None:
    folder = broken_burn_run(tmp_path)
    before = tree(folder)
    data = PREVIOUS_MANIFEST.replace("RUN", json.dumps(str(folder))).replace('"done"', '"repairing"').encode()
    make(_quarantine_of(folder) / "manifest.json", tmp_path, data)
    for command in (("repair", "--yes"), ("repair", "--undo", "--yes")):
        result = cli(*command, folder)
        assert result.exit_code == 1 and "Traceback" not in result.stderr
        assert "manifest.json" in result.stderr and "cannot be read" in result.stderr
    assert tree(folder) == before


@pytest.mark.parametrize("make", [_symlinked, _fifo, _too_long])
def test_a_journal_that_is_no_regular_file_of_ckptdoctors_is_not_read(tmp_path: Path, cli, make) -> None:
    folder = burn_run(tmp_path)
    trash = folder / ".ckptdoctor" / "trash" / "20260101-000000-deadbeef"
    trash.mkdir(parents=True)
    make(trash / "journal.json", tmp_path, json.dumps({"run": str(folder), "entries": ["model-1.bpk"]}).encode())
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert "interrupted prune left" in result.stderr and "cannot be completed" in result.stderr
    assert epochs_left(folder) == list(range(1, 8))
