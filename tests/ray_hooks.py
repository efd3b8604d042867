"""A Ray worker setup hook for tests/test_ray.py: the worker that reads a range dies, as a node
killed mid-task does, as often as the file ``CKPTDOCTOR_TEST_DEATHS`` names says. Ray runs it in
each new worker process (``runtime_env={"worker_process_setup_hook": "ray_hooks.dying_reads"}``)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any


def dying_reads() -> None:
    from ckptdoctor.readers import deep_scan

    deaths = Path(os.environ["CKPTDOCTOR_TEST_DEATHS"])
    check_at = deep_scan.check_at

    def dying(*args: Any) -> Any:
        with open(deaths, "r+") as counter:
            fcntl.flock(counter, fcntl.LOCK_EX)  # workers die one at a time
            left = int(counter.read() or 0)
            if left > 0:
                counter.seek(0)
                counter.truncate()
                counter.write(str(left - 1))
                counter.flush()
                os._exit(9)  # as SIGKILL leaves it: no cleanup, no exception for Ray to see
        return check_at(*args)

    deep_scan.check_at = dying
