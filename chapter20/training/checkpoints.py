"""§20.5.2 Saved checkpoints of the training state: atomic, checksummed, rotated.

Listing L13 waits for a "preempted" exception, saves only the model, and writes in place. In
practice a spot machine gets a notice (SIGTERM) and then SIGKILL, and a write in progress is cut
short. :class:`CheckpointManager` saves the whole training state
(``chapter20.training.state.capture_state``) atomically with a checksum; rank 0 writes, every
rank waits; :meth:`~CheckpointManager.load_latest` sets a damaged file aside with a warning and
falls back to the one before; only the newest ``keep_last`` are kept. (Activation
checkpointing, which recomputes activations, is ``chapter20.techniques.activation_checkpointing``.)
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
import re
import shutil
import signal
import socket
import threading
import time
import warnings
import weakref
import zipfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from chapter20.core.checks import check_int
from chapter20.core.paths import check_weights_only
from chapter20.techniques.distributed import any_rank, group_rank_and_size
from chapter20.training.sharded_checkpoint import (
    METADATA_FILE,
    ShardedModelState,
    write_sharded_state,
)

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; two writers are not detected there
    fcntl = None

__all__ = [
    "SAVE_PHASES",
    "CorruptCheckpointError",
    "CheckpointDirectoryBusyError",
    "CheckpointManager",
]


_MAGIC = b"chapter20-checkpoint v1\n"
_NAME = re.compile(r"^ckpt-(\d+)-step-(\d+)\.ckpt$")
_SEQUENCE = re.compile(r"^\.?ckpt-(\d+)-")
_LOCK_FILE = ".lock"
#: The moments of :meth:`CheckpointManager.save` at which a fault can strike; the fault tests
#: (and notebook 07's matrix) kill or fail the writer at each through :func:`_fault_point`.
SAVE_PHASES = ("before-temporary", "mid-write", "after-fsync", "after-rename")


class CorruptCheckpointError(RuntimeError):
    """A checkpoint file that is truncated, altered or not a checkpoint at all."""


class CheckpointDirectoryBusyError(RuntimeError):
    """Another process is saving checkpoints into the same directory."""


def _fault_point(phase: str) -> None:
    """Does nothing. Each phase of a save passes through here (:data:`SAVE_PHASES`), so a test
    can replace it to kill the writer, or fail its disk, at exactly that moment."""


def _read_checkpoint(path: Path, map_location: Any) -> dict[str, Any]:
    """The state in ``path``; CorruptCheckpointError for damage (header, checksum, archive,
    unpickling, not a checkpoint, a sharded part missing), anything else propagates."""
    data = path.read_bytes()
    header_end = len(_MAGIC) + 65
    if not data.startswith(_MAGIC) or len(data) < header_end:
        raise CorruptCheckpointError("no checkpoint header (truncated or not a checkpoint)")
    expected = data[len(_MAGIC) : header_end - 1].decode("ascii", errors="replace")
    payload = data[header_end:]
    if hashlib.sha256(payload).hexdigest() != expected:
        raise CorruptCheckpointError("checksum mismatch (truncated or altered)")
    if not zipfile.is_zipfile(io.BytesIO(payload)):
        raise CorruptCheckpointError("the payload is not a torch.save archive")
    try:
        state = torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, EOFError) as exc:
        raise CorruptCheckpointError(f"the payload does not unpickle: {exc}") from None
    if not isinstance(state, dict) or "step" not in state:
        raise CorruptCheckpointError("not a training checkpoint (no step)")
    sharded = state.get("sharded")
    if sharded is not None:
        metadata = path.parent / sharded["directory"] / METADATA_FILE
        if not metadata.is_file():
            raise CorruptCheckpointError(f"its sharded part {sharded['directory']} is missing")
        if _sha256_file(metadata) != sharded["metadata_sha256"]:
            raise CorruptCheckpointError(f"the metadata of {sharded['directory']} was altered")
    return state


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fsync_directory(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk (POSIX); Windows has no
    # directory handles to sync, and there os.replace is already durable enough.
    if os.name == "posix":
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _signals_deferred(signals=(signal.SIGTERM, signal.SIGINT)):
    """Hold SIGTERM/SIGINT back while a checkpoint is written, then deliver them to whatever
    handled them before: a preemption notice lets the save finish instead of cutting it short
    (the process then stops as it would have, e.g. status 143). Only the main thread can."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in signals
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        for sig in dict.fromkeys(received):
            signal.raise_signal(sig)


# Directory locks held by this process: realpath -> [file descriptor, managers using it].
_HELD: dict[str, list[int]] = {}


def _release_lock(key: str) -> None:
    held = _HELD.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        del _HELD[key]
        os.close(held[0])  # closing the descriptor releases the flock


def _try_lock(path: Path) -> int | None:
    """An open descriptor holding an exclusive flock on ``path``, or None if another process
    holds it. (No locking where fcntl is missing, i.e. on Windows.)"""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    if fcntl is None:
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


class CheckpointManager:
    """Save and find training checkpoints that survive being killed at any moment (§20.5.2).

    - :meth:`save` writes ``ckpt-<n>-step-<step>.ckpt`` in ``directory``, where n counts the
      saves: header, SHA-256 of the payload, payload; to a temporary file first, fsync, then an
      atomic rename, so the name only ever points to a complete file. The state is checked to
      load with ``weights_only=True`` before anything is written (a TypeError names the key).
      Under DDP rank 0 writes and every rank waits; a model with sharded tables
      (:func:`capture_state` notices them) also gets a DCP directory next to the file, to which
      every rank writes its own rows. SIGTERM/SIGINT arriving during a save are held until it
      is complete. A failed write (a full disk) raises on every rank, and nothing else changes.
    - Only the newest ``keep_last`` checkpoints *by save order* are kept, so the file just
      written is never the one deleted, even when a run fell back to an earlier step.
    - :meth:`load_latest` returns the newest checkpoint that verifies. A damaged one (checksum,
      truncation, unpickling, not a checkpoint) is renamed aside to ``*.corrupt`` with a
      warning and the one before is tried; any other error (out of memory, a device error)
      is raised, never silently traded for an older checkpoint.
    - The first :meth:`save` locks the directory for this process until :meth:`close` (or the
      process ends, also by SIGKILL): a second process saving into it gets
      :class:`CheckpointDirectoryBusyError` instead of rotating away the first one's files.
      Temporary files and unfinished sharded parts left by a kill are removed when no other
      process holds the lock.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        keep_last: int = 3,
        *,
        group: dist.ProcessGroup | None = None,
    ):
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"directory must be a path, got {type(directory).__name__}")
        self.directory = Path(directory)
        self.keep_last = check_int("keep_last", keep_last, 1)
        self.group = group
        self.rank, self.world_size = group_rank_and_size(group)
        self.last_save_seconds: float | None = None
        self._lock_key: str | None = None
        failure = None
        if self.rank == 0:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._remove_leftovers()
            except OSError as exc:
                failure = exc
        self._raise_if_any_failed(failure, "could not prepare the checkpoint directory")

    # -- files -----------------------------------------------------------------------------

    def _entries(self) -> list[tuple[int, int, Path]]:
        found = []
        for path in self.directory.glob("ckpt-*-step-*.ckpt"):
            match = _NAME.match(path.name)
            if match:
                found.append((int(match.group(1)), int(match.group(2)), path))
        return sorted(found)

    def checkpoints(self) -> list[Path]:
        """The checkpoint files present, oldest first (in the order they were saved)."""
        return [path for _, _, path in self._entries()]

    def _next_name(self, step: int) -> str:
        numbers = [
            int(m.group(1)) for p in self.directory.iterdir() if (m := _SEQUENCE.match(p.name))
        ]
        return f"ckpt-{max(numbers, default=0) + 1:06d}-step-{step:09d}.ckpt"

    @staticmethod
    def _sharded_part(path: Path) -> Path:
        return path.with_name(path.name[: -len(".ckpt")] + ".dcp")

    def _remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        shutil.rmtree(self._sharded_part(path), ignore_errors=True)

    def _remove_leftovers(self) -> None:
        """Temporary files and sharded parts whose save never committed, if no other process is
        writing here (then they are its work in progress)."""
        key = str(self.directory.resolve())
        fd = None
        if key not in _HELD:
            fd = _try_lock(self.directory / _LOCK_FILE)
            if fd is None:
                return
        try:
            for leftover in self.directory.glob(".ckpt-*.tmp-*"):
                leftover.unlink(missing_ok=True)
            for part in self.directory.glob("ckpt-*.dcp"):
                if not part.with_suffix(".ckpt").exists():
                    shutil.rmtree(part, ignore_errors=True)
        finally:
            if fd is not None:
                os.close(fd)

    def _set_aside(self, path: Path, reason: Exception) -> None:
        aside = path.with_name(path.name + ".corrupt")
        os.replace(path, aside)
        part = self._sharded_part(path)
        if part.exists():
            os.replace(part, part.with_name(part.name + ".corrupt"))
        warnings.warn(
            f"checkpoint {path.name} is damaged ({reason}): renamed to {aside.name}, "
            "falling back to the one saved before it",
            stacklevel=3,
        )

    # -- the writer's lock -------------------------------------------------------------------

    def _acquire(self) -> None:
        if self._lock_key is not None:
            return
        key = str(self.directory.resolve())
        if key in _HELD:
            _HELD[key][1] += 1
        else:
            lock = self.directory / _LOCK_FILE
            fd = _try_lock(lock)
            if fd is None:
                holder = lock.read_text(errors="replace").strip() or "unknown"
                raise CheckpointDirectoryBusyError(
                    f"another process ({holder}) is saving checkpoints into {self.directory}: "
                    "two runs saving into one directory would rotate away each other's "
                    "checkpoints. Give each run its own directory, or stop the other run."
                )
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode())
            _HELD[key] = [fd, 1]
        self._lock_key = key
        self._finalizer = weakref.finalize(self, _release_lock, key)

    def close(self) -> None:
        """Release the directory for other processes (also done when the manager is garbage
        collected and when the process ends)."""
        if self._lock_key is not None:
            self._finalizer()
            self._lock_key = None

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- agreement -------------------------------------------------------------------------

    def _raise_if_any_failed(self, failure: BaseException | None, what: str) -> None:
        """Raise ``failure`` here, and an error on every other rank, if any rank failed: no
        rank is left waiting in a collective that a failed rank never reaches."""
        if any_rank(failure is not None, self.group):
            if failure is not None:
                raise failure
            raise RuntimeError(f"{what} on another rank (see its error)")

    def _from_rank_zero(self, value: Any) -> Any:
        if self.world_size == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    # -- save and load ---------------------------------------------------------------------

    def save(self, state: dict[str, Any]) -> Path | None:
        """Write ``state`` (from :func:`capture_state`; it must hold ``"step"``) as the newest
        checkpoint and rotate; every rank calls it. Returns the path on rank 0.

        Raises TypeError naming the key if ``state`` holds a value that ``torch.load(...,
        weights_only=True)`` refuses, OSError if the disk fails (e.g. full: the previous
        checkpoints stay as they were), CheckpointDirectoryBusyError if another process saves
        into the same directory — on every rank.
        """
        if not isinstance(state, dict) or "step" not in state:
            raise TypeError("state must be a dict with a 'step' entry (see capture_state)")
        step = check_int("state['step']", state["step"], 0)
        start = time.perf_counter()
        sharded = state.get("sharded")
        plain = {key: value for key, value in state.items() if key != "sharded"}
        name, failure = None, None
        if self.rank == 0:
            try:
                self._acquire()
                check_weights_only(plain, "state")
                name = self._next_name(step)
            except (CheckpointDirectoryBusyError, TypeError, OSError) as exc:
                failure = exc
        self._raise_if_any_failed(failure, "the checkpoint could not be saved")
        path = self.directory / self._from_rank_zero(name)
        with _signals_deferred():
            if sharded is not None:
                plain["sharded"] = self._save_sharded(path, sharded)
            failure = None
            if self.rank == 0:
                try:
                    self._write(path, plain)
                    self._rotate()
                except OSError as exc:
                    failure = exc
            self._raise_if_any_failed(failure, "the checkpoint could not be saved")
        self.last_save_seconds = time.perf_counter() - start
        return path if self.rank == 0 else None

    def _save_sharded(self, path: Path, sharded: ShardedModelState) -> dict[str, str] | None:
        part = self._sharded_part(path)
        try:
            write_sharded_state(part, sharded, group=self.group)
        except Exception as exc:
            if self.rank == 0:
                shutil.rmtree(part, ignore_errors=True)
            raise OSError(
                f"the sharded part of checkpoint {path.name} could not be written ({exc}); "
                "the previous checkpoints are unchanged"
            ) from exc
        if self.rank != 0:
            return None
        return {"directory": part.name, "metadata_sha256": _sha256_file(part / METADATA_FILE)}

    def _write(self, path: Path, state: dict[str, Any]) -> None:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        payload = buffer.getvalue()
        header = _MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n"
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        _fault_point("before-temporary")
        try:
            with open(tmp, "wb") as f:
                f.write(header + payload[: len(payload) // 2])
                _fault_point("mid-write")
                f.write(payload[len(payload) // 2 :])
                f.flush()
                os.fsync(f.fileno())
            _fault_point("after-fsync")
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            shutil.rmtree(self._sharded_part(path), ignore_errors=True)
            newest = self.checkpoints()
            raise OSError(
                exc.errno,
                f"checkpoint {path.name} not saved in {self.directory} "
                f"({len(header) + len(payload):,} bytes): {exc.strerror or exc}. Nothing was "
                "replaced or deleted; the newest checkpoint is still "
                f"{newest[-1].name if newest else 'none'}",
            ) from exc
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_directory(self.directory)
        _fault_point("after-rename")

    def _rotate(self) -> None:
        for old in self.checkpoints()[: -self.keep_last]:
            self._remove(old)

    def load_latest(self, map_location: Any = "cpu") -> dict[str, Any] | None:
        """The newest checkpoint that verifies, or None when there is none; every rank calls it.

        A damaged file (a truncated write from a non-atomic writer, a flipped byte, a file that
        is not a checkpoint, a sharded part missing) is renamed to ``<name>.corrupt`` with a
        warning and the one saved before it is tried. Any other error (an unreadable disk, out
        of memory, a device error) is raised on every rank. For a sharded model the state holds
        the location of its DCP part; :func:`restore_state` reads it.
        """
        chosen, state, failure = None, None, None
        if self.rank == 0:
            try:
                for path in reversed(self.checkpoints()):
                    try:
                        state = _read_checkpoint(path, map_location)
                    except CorruptCheckpointError as exc:
                        self._set_aside(path, exc)
                        continue
                    chosen = path.name
                    break
            except Exception as exc:  # raised on every rank below, not only here
                failure = exc
        self._raise_if_any_failed(failure, "the checkpoint could not be loaded")
        chosen = self._from_rank_zero(chosen)
        if self.rank != 0 and chosen is not None:
            try:
                state = _read_checkpoint(self.directory / chosen, map_location)
            except Exception as exc:
                failure = exc
        self._raise_if_any_failed(failure, "the checkpoint could not be loaded")
        if state is not None and state.get("sharded") is not None:
            state["sharded"] = {
                **state["sharded"],
                "directory": str(self.directory / state["sharded"]["directory"]),
            }
        return state
