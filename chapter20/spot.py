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

import hashlib
import io
import math
import os
import random
import re
import signal
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from chapter20.checks import check_int, check_real
from chapter20.distributed import group_rank_and_size

__all__ = [
    "EXIT_PREEMPTED",
    "CheckpointManager",
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
    value = check_real(name, value, finite=True)
    if value <= 0:
        raise ValueError(f"{name} must be > 0 seconds, got {value}")
    return value


def _non_negative(name: str, value: float) -> float:
    value = check_real(name, value, finite=True)
    if value < 0:
        raise ValueError(f"{name} must be >= 0 seconds, got {value}")
    return value


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

    return full * segment(tau) + (segment(rest) if rest > 0 else 0.0)


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
    rng = np.random.default_rng(seed)
    full, rest = divmod(w, tau)
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
    keeps small picklable values (epoch counters, loss history) under ``state["extra"]``. Like
    any ``state_dict``, the result holds the live tensors, not copies: save it (see
    :meth:`CheckpointManager.save`) before the next step changes them.
    """
    step = check_int("step", step, 0)
    _, world = group_rank_and_size(group)
    return {
        "step": step,
        "world_size": world,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "sampler": sampler.state_dict() if sampler is not None else None,
        "rng": _all_ranks_rng(group),
        "extra": extra,
    }


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
    """Load what :func:`capture_state` saved into fresh objects and return the step (§20.5.2).

    Every component given must be in the checkpoint (and vice versa), so a resume never runs
    with, say, a fresh optimizer by accident: a mismatch raises ``ValueError``. When the world
    size changed (elastic restart on fewer machines) the RNG streams cannot be matched to ranks:
    a warning says the run continues, but no longer bit for bit.
    """
    for name, obj in (("scheduler", scheduler), ("scaler", scaler), ("sampler", sampler)):
        if (obj is None) != (state.get(name) is None):
            where = "the checkpoint has none" if obj is not None else "none was passed"
            raise ValueError(f"{name}: {where}; pass the same components that were saved")
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
    equal fingerprints mean bitwise-equal models (§20.5.2's resume proof)."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
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
        self.seed = check_int("seed", seed)
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
_NAME = re.compile(r"^step-(\d{9})\.ckpt$")


class CorruptCheckpointError(RuntimeError):
    """A checkpoint file that is truncated, altered or not a checkpoint at all."""


def _read_checkpoint(path: Path, map_location: Any) -> dict[str, Any]:
    data = path.read_bytes()
    header_end = len(_MAGIC) + 65
    if not data.startswith(_MAGIC) or len(data) < header_end:
        raise CorruptCheckpointError("no checkpoint header (truncated or not a checkpoint)")
    expected = data[len(_MAGIC) : header_end - 1].decode("ascii", errors="replace")
    payload = data[header_end:]
    if hashlib.sha256(payload).hexdigest() != expected:
        raise CorruptCheckpointError("checksum mismatch (truncated or altered)")
    return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)


def _fsync_directory(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk (POSIX); Windows has no
    # directory handles to sync, and there os.replace is already durable enough.
    if os.name == "posix":
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class CheckpointManager:
    """Save and find training checkpoints that survive being killed at any moment (§20.5.2).

    - :meth:`save` writes ``step-<step>.ckpt`` in ``directory``: header, SHA-256 of the payload,
      payload; to a temporary file first, fsync, then an atomic rename, so the name only ever
      points to a complete file. Under DDP rank 0 writes and every rank waits at a barrier.
    - :meth:`load_latest` returns the newest checkpoint that verifies; a damaged one is skipped
      with a warning. Under DDP rank 0 chooses and every rank loads the same step.
    - Only the newest ``keep_last`` checkpoints are kept; temporary files that a kill left
      behind are removed when the manager starts.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        keep_last: int = 3,
        *,
        group: dist.ProcessGroup | None = None,
    ):
        self.directory = Path(directory)
        self.keep_last = check_int("keep_last", keep_last, 1)
        self.group = group
        self.rank, self.world_size = group_rank_and_size(group)
        self.last_save_seconds: float | None = None
        if self.rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            for leftover in self.directory.glob(".step-*.tmp-*"):
                leftover.unlink(missing_ok=True)
        self._barrier()

    def _barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier(group=self.group)

    def path_for(self, step: int) -> Path:
        return self.directory / f"step-{check_int('step', step, 0):09d}.ckpt"

    def checkpoints(self) -> list[Path]:
        """The checkpoint files present, oldest first (by step)."""
        found = [p for p in self.directory.glob("step-*.ckpt") if _NAME.match(p.name)]
        return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))

    def save(self, state: dict[str, Any]) -> Path | None:
        """Write ``state`` (from :func:`capture_state`; it must hold ``"step"``) as the newest
        checkpoint and rotate; every rank calls it. Returns the path on rank 0."""
        path = self.path_for(state["step"])
        start = time.perf_counter()
        if self.rank == 0:
            buffer = io.BytesIO()
            torch.save(state, buffer)
            payload = buffer.getvalue()
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            try:
                with open(tmp, "wb") as f:
                    f.write(_MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n")
                    f.write(payload)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            _fsync_directory(self.directory)
            for old in self.checkpoints()[: -self.keep_last]:
                old.unlink(missing_ok=True)
        self._barrier()
        self.last_save_seconds = time.perf_counter() - start
        return path if self.rank == 0 else None

    def load_latest(self, map_location: Any = "cpu") -> dict[str, Any] | None:
        """The newest checkpoint that verifies, or None when there is none; every rank calls it.

        Damaged files (a truncated write from a non-atomic writer, a flipped byte, a file that
        is not a checkpoint) are skipped with a warning naming the file and the reason.
        """
        chosen, state = -1, None
        if self.rank == 0:
            for path in reversed(self.checkpoints()):
                try:
                    state = _read_checkpoint(path, map_location)
                except (CorruptCheckpointError, OSError, RuntimeError, EOFError) as exc:
                    warnings.warn(f"skipping checkpoint {path.name}: {exc}", stacklevel=2)
                    continue
                chosen = state["step"]
                break
        if self.world_size > 1:
            box = [chosen]
            dist.broadcast_object_list(box, src=0, group=self.group)
            chosen = box[0]
            if self.rank != 0 and chosen >= 0:
                state = _read_checkpoint(self.path_for(chosen), map_location)
        return state


# --------------------------------------------------------------------------------------------
# When to save, and when to stop
# --------------------------------------------------------------------------------------------


def _agree(flag: bool, group: dist.ProcessGroup | None) -> bool:
    """True on every rank if it is true on any (a MAX all-reduce); local in a world of one."""
    if group_rank_and_size(group)[1] == 1:
        return flag
    box = torch.tensor([int(flag)])
    dist.all_reduce(box, op=dist.ReduceOp.MAX, group=group)
    return bool(box.item())


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
        return _agree(by_steps or by_time, group)

    def saved(self) -> None:
        self.last_save = self.clock()


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
        self.signals = tuple(signals)
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
        return _agree(self.requested, group)
