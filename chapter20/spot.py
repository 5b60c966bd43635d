"""§20.5.2 Spot-instance training: how often to checkpoint, and what preemptions cost.

A spot machine can be taken away at any moment. Work since the last checkpoint is lost, and each
checkpoint costs time, so there is an interval that minimises the expected wall time. With
checkpoint cost C and mean time between preemptions M (exponential, i.e. memoryless), Young's
first-order optimum is τ* = √(2·C·M); Daly's model gives the expected wall time of any interval,
and :func:`simulate_wall_time` checks both by Monte Carlo.

Listing L13 waits for a "preempted" exception, saves only the model, and writes in place. In
practice a spot machine gets a notice (SIGTERM, or a metadata endpoint that a poller turns into a
file) and then SIGKILL, and a write in progress is cut short. So:

- :class:`CheckpointManager` saves the whole training state (model, optimizer, LR scheduler,
  GradScaler, step, data position, every rank's RNG states) atomically with a checksum; rank 0
  writes, every rank waits; :meth:`~CheckpointManager.load_latest` skips a damaged file with a
  warning and falls back to the one before; only the newest ``keep_last`` are kept.
- :class:`PreemptionHandler` turns SIGTERM/SIGINT or a notice file into a flag that the training
  loop checks after each step, so it can save and exit with :data:`EXIT_PREEMPTED`.
- :class:`CheckpointSchedule` decides when to save (every N steps, every T seconds), the same
  decision on every rank; :class:`ResumableBatchSampler` makes the data order a function of
  (seed, epoch, position), so a resumed run sees exactly the batches it would have seen.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import pickle
import random
import re
import shutil
import signal
import socket
import threading
import time
import warnings
import weakref
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from chapter20.checks import check_int, check_positive
from chapter20.distributed import any_rank, group_rank_and_size
from chapter20.paths import check_weights_only
from chapter20.sharded_checkpoint import (
    METADATA_FILE,
    ShardedModelState,
    load_sharded_state,
    sharded_state_dict,
    sharded_tables,
    write_sharded_state,
)

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; two writers are not detected there
    fcntl = None

__all__ = [
    "EXIT_PREEMPTED",
    "SAVE_PHASES",
    "CheckpointDirectoryBusyError",
    "CheckpointManager",
    "CorruptCheckpointError",
    "CheckpointSchedule",
    "PreemptionHandler",
    "ResumableBatchSampler",
    "capture_state",
    "expected_wall_time",
    "parameter_fingerprint",
    "preemption_overhead",
    "restore_state",
    "rng_state",
    "set_rng_state",
    "simulate_wall_time",
    "young_daly_interval",
]


def _positive(name: str, value: float) -> float:
    return check_positive(name, value)


def _non_negative(name: str, value: float) -> float:
    return check_positive(name, value, zero=True)


def _model_arguments(work, interval, checkpoint, mtbf, restart) -> tuple[float, ...]:
    """The interval model's five times, checked: each >= 0, interval and MTBF > 0."""
    return (
        _non_negative("work_seconds", work),
        _positive("interval_seconds", interval),
        _non_negative("checkpoint_seconds", checkpoint),
        _positive("mtbf_seconds", mtbf),
        _non_negative("restart_seconds", restart),
    )


def young_daly_interval(checkpoint_seconds: float, mtbf_seconds: float) -> float:
    """The compute time between checkpoints that minimises expected wall time (§20.5.2).

    Young's first-order optimum √(2·C·M) for checkpoint cost ``checkpoint_seconds`` = C and
    mean time between preemptions ``mtbf_seconds`` = M; accurate while C ≪ M, which is where
    checkpointing pays (Daly's higher-order correction changes it by less than C).
    """
    c = _positive("checkpoint_seconds", checkpoint_seconds)
    m = _positive("mtbf_seconds", mtbf_seconds)
    return math.sqrt(2.0 * c * m)


def expected_wall_time(
    work_seconds: float,
    interval_seconds: float,
    checkpoint_seconds: float,
    mtbf_seconds: float,
    restart_seconds: float = 0.0,
) -> float:
    """Expected wall time to finish ``work_seconds`` of compute under exponential preemptions.

    §20.5.2, Daly's model: the work runs in segments of ``interval_seconds`` each followed by a
    checkpoint of ``checkpoint_seconds``; a preemption (rate 1/``mtbf_seconds``, also during a
    checkpoint or a restart) loses the segment and costs ``restart_seconds`` before it is
    retried. A segment of length s = τ + C then takes M·e^{R/M}·(e^{s/M} − 1) on average.
    """
    w, tau, c, m, r = _model_arguments(
        work_seconds, interval_seconds, checkpoint_seconds, mtbf_seconds, restart_seconds
    )
    full, rest = divmod(w, tau)

    def segment(compute: float) -> float:
        return m * math.exp(r / m) * math.expm1((compute + c) / m)

    try:
        return full * segment(tau) + (segment(rest) if rest > 0 else 0.0)
    except OverflowError:
        raise ValueError(
            "the expected wall time overflows: interval_seconds + checkpoint_seconds "
            f"({tau + c:g} s) or restart_seconds ({r:g} s) is hundreds of times mtbf_seconds "
            f"({m:g} s), so a segment would practically never finish"
        ) from None


def preemption_overhead(
    work_seconds: float,
    interval_seconds: float,
    checkpoint_seconds: float,
    mtbf_seconds: float,
    restart_seconds: float = 0.0,
) -> float:
    """Expected extra wall time as a fraction of the work (0.1 = 10% longer) (§20.5.2):
    checkpoints, lost segments and restarts, from :func:`expected_wall_time`."""
    wall = expected_wall_time(
        work_seconds, interval_seconds, checkpoint_seconds, mtbf_seconds, restart_seconds
    )
    return wall / _positive("work_seconds", work_seconds) - 1.0


_MAX_SEGMENTS = 10_000_000
_MAX_MTBFS = 30


def simulate_wall_time(
    work_seconds: float,
    interval_seconds: float,
    checkpoint_seconds: float,
    mtbf_seconds: float,
    restart_seconds: float = 0.0,
    *,
    runs: int = 1000,
    seed: int = 0,
) -> np.ndarray:
    """Wall times of ``runs`` simulated jobs, one per entry (§20.5.2, Monte Carlo).

    The same process as :func:`expected_wall_time`, played out: preemptions arrive as a
    Poisson process (exponential gaps, seeded), a preemption discards the segment in progress,
    and the restart itself can be preempted. The mean converges to the model's expectation.
    """
    w, tau, c, m, r = _model_arguments(
        work_seconds, interval_seconds, checkpoint_seconds, mtbf_seconds, restart_seconds
    )
    runs = check_int("runs", runs, 1)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    full, rest = divmod(w, tau)
    if full + (rest > 0) > _MAX_SEGMENTS:
        raise ValueError(
            f"work_seconds / interval_seconds = {w / tau:.3g} segments: more than the "
            f"{_MAX_SEGMENTS:,} this simulation plays out"
        )
    # Each attempt succeeds with probability e^{-length/M}: past ~30 M it practically never
    # does, and the loop below would not end.
    if (tau + c) / m > _MAX_MTBFS or r / m > _MAX_MTBFS:
        raise ValueError(
            f"interval_seconds + checkpoint_seconds ({tau + c:g} s) and restart_seconds "
            f"({r:g} s) must each be at most {_MAX_MTBFS} × mtbf_seconds ({m:g} s): a longer "
            "segment or restart would practically never finish"
        )
    segments = [tau] * int(full) + ([rest] if rest > 0 else [])
    times = np.zeros(runs)
    for segment in segments:
        need = segment + c
        pending = np.arange(runs)
        # Every attempt: wait for the next preemption; survive it if it comes after `need`.
        while pending.size:
            gap = rng.exponential(m, pending.size)
            done = gap >= need
            times[pending[done]] += need
            times[pending[~done]] += gap[~done]
            pending = pending[~done]
            # A restart of length r must itself survive: retry it until a gap exceeds r.
            if r > 0:
                restarting = pending
                while restarting.size:
                    gap = rng.exponential(m, restarting.size)
                    ok = gap >= r
                    times[restarting[ok]] += r
                    times[restarting[~ok]] += gap[~ok]
                    restarting = restarting[~ok]
    return times


# --------------------------------------------------------------------------------------------
# The training state: everything a resumed run needs to continue bit for bit
# --------------------------------------------------------------------------------------------

#: Exit status after a preemption notice was handled (state saved): 128 + SIGTERM, what a shell
#: reports for a process ended by SIGTERM, so a scheduler treats it as the preemption it is.
EXIT_PREEMPTED = 128 + signal.SIGTERM


def rng_state() -> dict[str, Any]:
    """This process's Python, NumPy, torch CPU and (when present) CUDA RNG states (§20.5.2), in
    types that ``torch.load(weights_only=True)`` accepts."""
    version, words, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": (version, list(words), gauss),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured (§20.5.2); the CUDA states only when this
    process has as many GPUs as the one that saved them (otherwise a warning)."""
    version, words, gauss = state["python"]
    random.setstate((version, tuple(words), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        if len(state["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda"])
        else:
            warnings.warn(
                f"checkpoint holds {len(state['cuda'])} CUDA RNG states, this process sees "
                f"{torch.cuda.device_count()} GPUs: CUDA RNG not restored",
                stacklevel=2,
            )


def _all_ranks_rng(group: dist.ProcessGroup | None) -> list[dict[str, Any]]:
    _, world = group_rank_and_size(group)
    if world == 1:
        return [rng_state()]
    states: list[Any] = [None] * world
    dist.all_gather_object(states, rng_state(), group=group)
    return states


def capture_state(
    step: int,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any = None,
    scaler: torch.amp.GradScaler | None = None,
    sampler: ResumableBatchSampler | None = None,
    group: dist.ProcessGroup | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The full training state after ``step`` optimizer steps (§20.5.2); a collective under
    DDP (every rank's RNG states are gathered), so every rank calls it.

    ``model`` is the plain module (not the DDP wrapper, whose keys carry ``module.``). ``extra``
    keeps small values (epoch counters, loss history) under ``state["extra"]``; they must be
    tensors or plain Python values (:meth:`CheckpointManager.save` checks, naming the key).
    When ``model`` holds :class:`~chapter20.sharding.ShardedEmbedding` tables, each rank has
    only its rows: model and optimizer go under ``state["sharded"]``, which
    :meth:`CheckpointManager.save` writes through DCP from every rank, so that the run resumes
    at any world size. Like any ``state_dict``, the result holds the live tensors, not copies:
    save it before the next step changes them.
    """
    step = check_int("step", step, 0)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    _, world = group_rank_and_size(group)
    sharded = None
    if sharded_tables(model):
        sharded = sharded_state_dict(model, optimizer, group=group)
    state = {
        "step": step,
        "world_size": world,
        "model": model.state_dict() if sharded is None else None,
        "optimizer": optimizer.state_dict() if sharded is None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "sampler": sampler.state_dict() if sampler is not None else None,
        "rng": _all_ranks_rng(group),
        "extra": extra,
    }
    if sharded is not None:
        state["sharded"] = sharded
    return state


def restore_state(
    state: dict[str, Any],
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any = None,
    scaler: torch.amp.GradScaler | None = None,
    sampler: ResumableBatchSampler | None = None,
    group: dist.ProcessGroup | None = None,
) -> int:
    """Load what :func:`capture_state` saved into fresh objects and return the step (§20.5.2);
    every rank calls it.

    Every component given must be in the checkpoint (and vice versa), so a resume never runs
    with, say, a fresh optimizer by accident: a mismatch raises ``ValueError``. Sharded tables
    are read back through DCP, each rank reading its own rows at the current world size. When
    the world size changed (an elastic restart on fewer or more machines) the RNG streams
    cannot be matched to ranks: a warning says the run continues, but no longer bit for bit.
    """
    if not isinstance(state, dict) or "step" not in state:
        raise TypeError("state must be a dict from capture_state / CheckpointManager.load_latest")
    for name, obj in (("scheduler", scheduler), ("scaler", scaler), ("sampler", sampler)):
        if (obj is None) != (state.get(name) is None):
            where = "the checkpoint has none" if obj is not None else "none was passed"
            raise ValueError(f"{name}: {where}; pass the same components that were saved")
    sharded = state.get("sharded")
    if isinstance(sharded, ShardedModelState):
        raise ValueError(
            "this state was captured but not saved: restore what CheckpointManager.load_latest "
            "returns (a sharded model's rows are on disk, one part per rank)"
        )
    if sharded is not None:
        load_sharded_state(sharded["directory"], model, optimizer, group=group)
    else:
        if sharded_tables(model):
            raise ValueError(
                "the model has sharded tables but the checkpoint holds an unsharded model"
            )
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    for name, obj in (("scheduler", scheduler), ("scaler", scaler), ("sampler", sampler)):
        if obj is not None:
            obj.load_state_dict(state[name])
    rank, world = group_rank_and_size(group)
    if world == state["world_size"]:
        set_rng_state(state["rng"][rank])
    else:
        warnings.warn(
            f"checkpoint was saved by {state['world_size']} ranks, this run has {world}: "
            "model, optimizer and data position restored, RNG streams reseeded (the run "
            "continues correctly, but not bit for bit like an uninterrupted one)",
            stacklevel=2,
        )
        torch.manual_seed(state["step"] * 1000 + rank)
    return state["step"]


def parameter_fingerprint(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter and buffer's bytes, in state-dict order (first 16 hex digits):
    equal fingerprints mean bitwise-equal models (§20.5.2's resume proof). Entries that are not
    tensors (a sharded table's row layout) are not part of the values and are skipped; for a
    sharded table it is this rank's rows."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        if not isinstance(tensor, torch.Tensor):
            continue
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Data order that can be resumed
# --------------------------------------------------------------------------------------------


class ResumableBatchSampler:
    """Batches of example indices whose order depends only on (seed, epoch, position) (§20.5.2).

    Each epoch is a fresh permutation of ``num_examples`` drawn from ``seed + epoch``, cut into
    global batches of ``global_batch`` (the incomplete last one is dropped, so every step has
    the same size); rank r of W takes the r-th of W equal slices. :meth:`next_batch` advances
    the position, and :meth:`state_dict` saves it, so a resumed run continues with the batch
    an uninterrupted run would take next, at any world size that divides ``global_batch``.
    Use it directly (``sampler.next_batch()``), not behind a DataLoader whose workers read ahead.
    """

    def __init__(
        self,
        num_examples: int,
        global_batch: int,
        *,
        seed: int = 0,
        group: dist.ProcessGroup | None = None,
    ):
        self.num_examples = check_int("num_examples", num_examples, 1)
        self.global_batch = check_int("global_batch", global_batch, 1)
        if global_batch > num_examples:
            raise ValueError(
                f"global_batch must be <= num_examples ({num_examples}), got {global_batch}"
            )
        self.rank, self.world_size = group_rank_and_size(group)
        if global_batch % self.world_size:
            raise ValueError(
                f"global_batch ({global_batch}) must be a multiple of the world size "
                f"({self.world_size}), so that every rank gets the same number of examples"
            )
        self.seed = check_int("seed", seed, 0)
        self.epoch = 0
        self.position = 0
        self._order: torch.Tensor | None = None

    @property
    def batches_per_epoch(self) -> int:
        return self.num_examples // self.global_batch

    def _epoch_order(self) -> torch.Tensor:
        if self._order is None:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            self._order = torch.randperm(self.num_examples, generator=generator)
        return self._order

    def next_batch(self) -> torch.Tensor:
        """This rank's indices of the next global batch; moves to a new epoch when one ends."""
        if self.position == self.batches_per_epoch:
            self.epoch, self.position, self._order = self.epoch + 1, 0, None
        per_rank = self.global_batch // self.world_size
        start = self.position * self.global_batch + self.rank * per_rank
        self.position += 1
        return self._epoch_order()[start : start + per_rank]

    def state_dict(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "num_examples": self.num_examples,
            "global_batch": self.global_batch,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue where ``state`` stopped; ValueError if it describes other data."""
        for key in ("seed", "num_examples", "global_batch"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"sampler state has {key}={state[key]}, this sampler {getattr(self, key)}: "
                    "a resumed run must read the same data in the same order"
                )
        self.epoch, self.position, self._order = state["epoch"], state["position"], None


# --------------------------------------------------------------------------------------------
# Checkpoint files: atomic, checksummed, rotated
# --------------------------------------------------------------------------------------------

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

    def path_for(self, step: int) -> Path | None:
        """The newest checkpoint file of ``step`` (None if there is none)."""
        step = check_int("step", step, 0)
        paths = [path for _, saved, path in self._entries() if saved == step]
        return paths[-1] if paths else None

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


# --------------------------------------------------------------------------------------------
# When to save, and when to stop
# --------------------------------------------------------------------------------------------


class CheckpointSchedule:
    """When to checkpoint: every ``every_steps`` steps and/or every ``every_seconds`` of wall
    time (§20.5.2; pick the time from :func:`young_daly_interval`). :meth:`due` gives the same
    answer on every rank (a time-based decision is agreed through an all-reduce), so no rank
    waits at a save barrier that another skips."""

    def __init__(
        self,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        *,
        clock=time.monotonic,
    ):
        if every_steps is None and every_seconds is None:
            raise ValueError("give every_steps, every_seconds or both")
        self.every_steps = None if every_steps is None else check_int("every_steps", every_steps, 1)
        self.every_seconds = (
            None if every_seconds is None else _positive("every_seconds", every_seconds)
        )
        self.clock = clock
        self.last_save = clock()

    def due(self, step: int, group: dist.ProcessGroup | None = None) -> bool:
        """Whether to save after ``step`` optimizer steps; call :meth:`saved` after saving."""
        by_steps = self.every_steps is not None and step % self.every_steps == 0
        if self.every_seconds is None:
            return by_steps
        by_time = self.clock() - self.last_save >= self.every_seconds
        return any_rank(by_steps or by_time, group)

    def saved(self) -> None:
        self.last_save = self.clock()


def _signal_number(sig: Any) -> signal.Signals:
    number = check_int("signals", sig, 1, maximum=1024)
    try:
        return signal.Signals(number)
    except ValueError:
        raise ValueError(
            f"signals must hold signal numbers such as signal.SIGTERM, got {number}"
        ) from None


class PreemptionHandler:
    """Turn a preemption notice into a flag the training loop checks between steps (§20.5.2).

    Used as ``with PreemptionHandler() as preemption:``. SIGTERM (what Kubernetes, SLURM and
    torchrun send, and what cloud agents send on a spot reclaim) and SIGINT set the flag instead
    of killing the process mid-step; so does the appearance of ``notice_file``, for a poller of
    a cloud metadata endpoint (AWS gives two minutes, GCP thirty seconds). The loop finishes its
    step, saves, and exits with :data:`EXIT_PREEMPTED`. :meth:`should_stop` agrees across ranks.
    The previous signal handlers come back on exit. Signals can only be caught in the main thread.
    """

    def __init__(
        self,
        signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT),
        *,
        notice_file: str | os.PathLike | None = None,
    ):
        self.signals = tuple(_signal_number(sig) for sig in signals)
        self.notice_file = None if notice_file is None else Path(notice_file)
        self.reason: str | None = None
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum, frame) -> None:
        self.reason = self.reason or signal.Signals(signum).name

    def __enter__(self) -> PreemptionHandler:
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    @property
    def requested(self) -> bool:
        """Whether this process got a notice (a signal, or the notice file exists)."""
        if self.reason is None and self.notice_file is not None and self.notice_file.exists():
            self.reason = f"notice file {self.notice_file.name}"
        return self.reason is not None

    def should_stop(self, group: dist.ProcessGroup | None = None) -> bool:
        """True on every rank once any rank got a notice (a collective under DDP)."""
        return any_rank(self.requested, group)
