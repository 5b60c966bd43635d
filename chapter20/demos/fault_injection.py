"""§20.5.2 The faults a checkpoint writer meets, injected for real, and what the next run finds:
the faults of notebook 07's matrix (the children they strike are ``fault_writer``).

- :func:`writer_faults`: a writer process per fault, two good saves, then a SIGKILL at a phase
  of the third save (:data:`WRITER_FAULTS`, ``chapter20.training.checkpoints.SAVE_PHASES``) or
  a SIGTERM in its middle, with or without a ``PreemptionHandler``;
- :func:`damaged_newest`: the newest checkpoint truncated or one byte of it flipped;
- :func:`disk_full_during_save`: a save whose write hits ENOSPC half-way;
- :func:`two_writers`: a second process saving into a directory that a running one writes.

Each returns what the next run finds when it resumes the directory: the files before and after
it starts, the step it loads, whether the values are intact, its warnings, and the files after
one more save.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import warnings
from pathlib import Path

import torch

from chapter20.core.checks import check_int, check_real
from chapter20.core.paths import repo_root
from chapter20.demos import fault_writer
from chapter20.techniques.distributed import preloaded_process_context
from chapter20.training.checkpoints import (
    SAVE_PHASES,
    CheckpointDirectoryBusyError,
    CheckpointManager,
)

__all__ = [
    "WRITER_FAULTS",
    "writer_faults",
    "damaged_newest",
    "disk_full_during_save",
    "two_writers",
]


#: The writer processes that the faults strike: ``fault`` (two good saves, then a third that a
#: fault strikes at a phase) and ``hold`` (one save, then holds the directory until its standard
#: input closes).
_WRITER = "chapter20.demos.fault_writer"


def _check_timeout(timeout: float) -> float:
    """Seconds to wait for a child: > 0 and at most a day."""
    return check_real("timeout", timeout, minimum=0, maximum=86400, exclusive=True)


def _child_env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _start_child(mode: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", _WRITER, mode, *map(str, args)],
        cwd=repo_root() or Path.cwd(),
        env=_child_env(),
        text=True,
        **kwargs,
    )


def _resume(directory: Path, keep_last: int) -> dict:
    """What the next run finds: files before and after it starts, the step it loads, the
    warnings, and the files after one more save (step 4)."""
    before = sorted(p.name for p in directory.iterdir() if p.name != ".lock")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager = CheckpointManager(directory, keep_last=keep_last)
        state = manager.load_latest()
    loaded = None if state is None else state["step"]
    intact = state is None or bool((state["w"] == float(loaded)).all())
    manager.save({"step": 4, "w": torch.full((50_000,), 4.0)})
    after = [p.name for p in manager.checkpoints()]
    manager.close()
    return {
        "files_before": before,
        "loaded_step": loaded,
        "loaded_intact": intact,
        "warnings": [str(w.message) for w in caught],
        "files_after_next_save": after,
    }


#: The writer faults: name -> (phase of the third save, what strikes there).
WRITER_FAULTS = {
    **{f"SIGKILL {phase}": (phase, "kill") for phase in SAVE_PHASES},
    "SIGTERM mid-write, PreemptionHandler": ("mid-write", "term-handled"),
    "SIGTERM mid-write, default action": ("mid-write", "term-default"),
}


def writer_faults(directory: str | Path, faults=tuple(WRITER_FAULTS), timeout: float = 120.0):
    """Run a writer process per fault in ``faults`` (all at once): two good saves, then the
    fault strikes the third (a SIGKILL at a phase of the save, or a SIGTERM in its middle);
    then resume each directory as the next run would (:func:`_resume`). Returns, per fault,
    the writer's exit status and what the resume found."""
    timeout = _check_timeout(timeout)
    unknown = [name for name in faults if name not in WRITER_FAULTS]
    if unknown:
        raise ValueError(f"faults must be names of WRITER_FAULTS, got {unknown}")
    directory = Path(directory)
    # Forked from a server that has torch imported (a fresh interpreter per writer spent most
    # of its life importing torch); each writer is still its own process, killed for real.
    context = preloaded_process_context()
    children = {}
    for number, name in enumerate(faults):
        phase, action = WRITER_FAULTS[name]
        where = directory / str(number)
        where.mkdir(parents=True, exist_ok=True)
        argv = ["fault", str(where), phase, action, "2"]
        children[name] = (where, context.Process(target=fault_writer.main, args=(argv,)))
        children[name][1].start()
    results = {}
    for name, (where, child) in children.items():
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            raise TimeoutError(f"the writer of fault {name!r} did not finish in {timeout} s")
        results[name] = {"exit": child.exitcode, **_resume(where, 2)}
    return results


def damaged_newest(directory: str | Path, keep_last: int, damage: str = "truncate") -> dict:
    """Three saves, the newest then damaged (``"truncate"``: cut in half; ``"corrupt"``: one
    byte flipped); then the resume of the next run."""
    keep_last = check_int("keep_last", keep_last, 1)
    if damage not in ("truncate", "corrupt"):
        raise ValueError(f"damage must be 'truncate' or 'corrupt', got {damage!r}")
    directory = Path(directory)
    manager = CheckpointManager(directory, keep_last=keep_last)
    for step in (1, 2, 3):
        newest = manager.save({"step": step, "w": torch.full((50_000,), float(step))})
    manager.close()
    data = newest.read_bytes()
    if damage == "truncate":
        newest.write_bytes(data[: len(data) // 2])
    else:  # corrupt
        newest.write_bytes(data[:-100] + bytes([data[-100] ^ 0xFF]) + data[-99:])
    return _resume(directory, keep_last)


@contextlib.contextmanager
def _disk_full_at(phase: str):
    """Make the next save's write fail with ENOSPC at ``phase``, as a full disk would."""
    import chapter20.training.checkpoints as checkpoints

    def fail(at: str) -> None:
        if at == phase:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    original, checkpoints._fault_point = checkpoints._fault_point, fail
    try:
        yield
    finally:
        checkpoints._fault_point = original


def disk_full_during_save(directory: str | Path) -> dict:
    """Two saves, then a third whose write hits ENOSPC half-way: the error it raises, the files
    left, and the resume of the next run."""
    directory = Path(directory)
    manager = CheckpointManager(directory, keep_last=2)
    for step in (1, 2):
        manager.save({"step": step, "w": torch.full((50_000,), float(step))})
    error = None
    with _disk_full_at("mid-write"):
        try:
            manager.save({"step": 3, "w": torch.full((50_000,), 3.0)})
        except OSError as exc:
            error = exc
    manager.close()
    return {
        "error": None if error is None else f"{type(error).__name__}: {error}",
        "errno": None if error is None else error.errno,
        **_resume(directory, 2),
    }


def two_writers(directory: str | Path, timeout: float = 120.0) -> dict:
    """A second process saving into a directory that a running process writes: the error it
    gets; then, once the first process has ended, its save."""
    timeout = _check_timeout(timeout)
    directory = Path(directory)
    holder = _start_child("hold", directory, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        if holder.stdout.readline().strip() != "saved":
            raise RuntimeError("the first writer did not start")
        error = None
        manager = CheckpointManager(directory)
        try:
            manager.save({"step": 2, "w": torch.zeros(4)})
        except CheckpointDirectoryBusyError as exc:
            error = str(exc)
    finally:
        holder.communicate(input="", timeout=timeout)
    saved_after = manager.save({"step": 2, "w": torch.zeros(4)}).name
    manager.close()
    return {"error": error, "saved_after_first_ended": saved_after}
