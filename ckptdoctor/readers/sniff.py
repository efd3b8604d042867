"""Which format a file holds, told from its first bytes, never from its name.

Each reader module declares how its formats are recognised (``SPECS``, see ``_registry``); this
module runs those tests in their declared order and declares what is never checkpoint content:
Git-LFS pointers, HTML pages, all-zero files. The order matters (integrity reference §2): zip
first; then those artefacts before the tar test, because an all-zero file also parses as an
empty tar.
"""

from __future__ import annotations

from ckptdoctor.readers._registry import Rank, ReaderSpec, Sniff, current
from ckptdoctor.readers.formats import Format as Format  # its name where formats are told apart: readers import it from here
from ckptdoctor.readers.sample import BytesSample, Sample

ZIP_LOCAL = b"PK\x03\x04"
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"


def sniff(sample: Sample) -> Format:
    if sample.size == 0:
        return Format.EMPTY
    head = sample.head()
    return next((kind for test, kind in current().sniffs if test(head, sample)), Format.UNKNOWN)


def sniff_payload(head: bytes) -> Format:
    """Formats that may also sit inside a gzip stream (burn's ``.gz`` recorders)."""
    sample = BytesSample(head)
    return next((kind for test, kind in current().payload_sniffs if test(head, sample)), Format.UNKNOWN)


def begins(head: bytes, magic: bytes) -> bool:
    """Whether ``head`` starts with ``magic``, or is cut before its magic was whole: still the
    format it began to be, and cut short (its reader says so)."""
    return head.startswith(magic) or (len(head) < len(magic) and magic.startswith(head))


def _is_html(head: bytes, sample: Sample) -> bool:
    start = head[:64].lstrip().lower()
    return start.startswith((b"<!doctype html", b"<html", b"<head", b"<?xml"))


def _zeros(head: bytes, sample: Sample) -> bool:
    return not head.strip(b"\0") and not sample.tail().strip(b"\0")


SPECS = (
    ReaderSpec(
        Format.GIT_LFS_POINTER,
        (Sniff(Rank.ARTEFACT, lambda head, sample: head.startswith(LFS_POINTER)),),
        not_a_checkpoint="a Git LFS pointer, not the weights: the file was never fetched (git lfs pull)",
    ),
    ReaderSpec(
        Format.HTML,
        (Sniff(Rank.ARTEFACT, _is_html),),
        not_a_checkpoint="an HTML page, not a checkpoint: a download saved an error or login page",
    ),
    ReaderSpec(
        Format.ZEROS,
        (Sniff(Rank.ARTEFACT, _zeros),),
        not_a_checkpoint="all zero bytes: space was allocated but the data never written",
    ),
)
"""What is never checkpoint content, whatever the file is called."""
