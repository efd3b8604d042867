"""Each error names the path it is about (issue 32, item 10): an OSError from a call relative to
an open folder names only the entry (a trash item ``000008``, a journal's id) or the folder's
descriptor number (a bare ``8:``), never where it is; ckptdoctor's folders put the path back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NO_DAC = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]
"""Root without the capabilities that read and search any folder: the modes apply to it."""

PROBE = """
import os, sys
from ckptdoctor.actions._confine import Folder
folder = Folder(os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY), sys.argv[1])
for step in (lambda: folder.lstat("journal.json"), lambda: folder.child("20250101-000000-abcdef12")):
    try:
        step()
    except OSError as error:
        print(repr(error.filename), error.strerror)
"""


def test_an_unreadable_folder_of_ckptdoctor_is_named_by_its_path(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("dropping root's capabilities to read any folder needs root")
    folder = tmp_path / "trash" / "20250101-000000-abcdef12"
    folder.mkdir(parents=True)
    os.chown(folder, 65534, 65534)
    folder.chmod(0o704)  # others may list it, not reach what is in it: root without DAC override is another
    done = subprocess.run(
        [*NO_DAC, sys.executable, "-c", PROBE, str(folder)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))},
    )
    if "setpriv" in done.stderr:
        pytest.skip(f"setpriv refused: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{str(folder / 'journal.json')!r} Permission denied",
        f"{str(folder / '20250101-000000-abcdef12')!r} Permission denied",
    ], done.stdout
