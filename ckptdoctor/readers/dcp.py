"""torch.distributed.checkpoint (DCP): ``.metadata`` and the ``__<rank>_<n>.distcp`` files it names.

``.metadata`` is a pickle of torch's ``Metadata``; its storage entries carry the relative path of
every data file. The file names are read off the pickle's opcodes with ``pickletools``, never
by unpickling. Data files are raw tensor bytes with no format of their own.
"""

from __future__ import annotations

import re

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers._sample import MAX_HEADER, Sample
from ckptdoctor.readers.sniff import Format

METADATA = ".metadata"
DATA_SUFFIX = ".distcp"
_DATA_FILE = re.compile(r"^__\d+_\d+\.distcp$")


def is_data_file(name: str) -> bool:
    return name.endswith(DATA_SUFFIX)


def read_data_file(sample: Sample) -> FileReport:
    return FileReport(Format.DISTCP.value)


def read_metadata(sample: Sample) -> FileReport:
    if sample.size > MAX_HEADER:
        return _report(Problem.MALFORMED, f"{sample.size} bytes: larger than ckptdoctor reads for metadata")
    import pickletools  # only DCP runs need it: kept off every other start-up

    names: set[str] = set()
    try:
        for _, argument, _ in pickletools.genops(sample.head(sample.size)):
            if isinstance(argument, str) and _DATA_FILE.match(argument):
                names.add(argument)
    except (ValueError, KeyError, IndexError, EOFError, UnicodeDecodeError) as error:
        return _report(Problem.TRUNCATED, f"the metadata pickle breaks off ({error})")
    return FileReport(Format.PICKLE.value, (), (("references", "\n".join(sorted(names))),))


def _report(problem: Problem, detail: str) -> FileReport:
    return FileReport(Format.PICKLE.value, (FileIssue(problem, detail),))
