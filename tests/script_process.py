"""A script of the package run as ``__main__`` in a process of the ranks' fork server
(``chapter20.techniques.distributed.preloaded_process_context``: PyTorch already imported), for
the tests that need a separate process to kill, signal or restart: ``python script.py`` without
a fresh interpreter's seconds of imports. The target lives in this module, not in a test module,
so that the fork server's process can import it by name."""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from chapter20.techniques.distributed import preloaded_process_context


def run_as_main(
    script: str, argv: list[str], log: str, environment: dict[str, str] | None = None
) -> None:
    """``python script *argv`` in this process, stdout and stderr appended to ``log`` (the fork
    server's own streams belong to no test); with ``environment``, in that one (a fork server's
    process starts with the environment of the fork server)."""
    if environment is not None:
        os.environ.clear()
        os.environ.update(environment)
    descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for stream in (1, 2):
        os.dup2(descriptor, stream)
    os.close(descriptor)
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")


def start_script(script: str | Path, argv: list[str], log: str | Path):
    """Start :func:`run_as_main` in a new process with the caller's environment; the started
    ``multiprocessing.Process``: its ``exitcode`` is the script's exit status, or minus the
    signal that ended it."""
    process = preloaded_process_context().Process(
        target=run_as_main,
        args=(str(script), [str(a) for a in argv], str(log), dict(os.environ)),
    )
    process.start()
    return process
