"""§20.5.2 The one resumable training loop: any run that must survive preemption trains here.

:func:`resumable_loop` trains a ``chapter20.training.trainer.Trainer`` from the newest checkpoint
in a directory to a number of steps. Checkpoints hold the whole training state
(``chapter20.training.state.capture_state``: weights, optimizer, schedule, scaler, data
position, every rank's RNG), written atomically by
``chapter20.training.checkpoints.CheckpointManager`` on a schedule; a preemption notice
(SIGTERM, SIGINT, a notice file) finishes the step, saves, and exits with status 143. A run
killed at any moment and launched again with the same arguments finishes with exactly the
parameters of a run that was never interrupted. How to checkpoint and how to be killed are
one :class:`LoopConfig`.

Chaos (``chaos_kills``) makes the fault injection part of the run: rank 0 draws a step, records
the kill in ``chaos.json``, and sends itself SIGKILL, as a reclaimed spot machine would be.
Each launch draws from ``chaos_seed`` + the kills so far, so a relaunch does not repeat a kill
forever. ``progress.jsonl`` logs (launch, step, wall time) for the timeline in notebook 07.

The spot demo (``chapter20.demos.spot_run``, ``scripts/spot_demo.py``) and the capstone run
(``chapter20.capstone.run``, ``scripts/train.py``) both train through this loop.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chapter20.core.checks import check_int, check_optional_int, check_optional_positive, check_real
from chapter20.core.device import deterministic_mode
from chapter20.core.options import option
from chapter20.training.checkpoints import CheckpointManager
from chapter20.training.preemption import EXIT_PREEMPTED, CheckpointSchedule, PreemptionHandler
from chapter20.training.trainer import StepResult, Trainer

__all__ = [
    "CHAOS_FILE",
    "PROGRESS_FILE",
    "LoopConfig",
    "LoopResult",
    "StoppedLaunch",
    "read_progress",
    "resumable_loop",
]

CHAOS_FILE = "chaos.json"
PROGRESS_FILE = "progress.jsonl"


@dataclass(frozen=True)
class LoopConfig:
    """How a run saves its state and survives being killed (§20.5.2); checked on creation.

    Checkpoints every ``checkpoint_every`` steps and/or ``checkpoint_seconds``, the newest
    ``keep_last`` kept; ``chaos_kills`` SIGKILLs placed by ``chaos_seed``; ``step_delay``
    seconds slept per step (to give an outside killer time); ``notice_file``: a preemption
    notice to watch; ``stop_after``: end this launch after that many steps as if killed;
    ``deterministic``: train under :func:`chapter20.core.device.deterministic_mode`, without
    which bitwise resume is not guaranteed. (Activation checkpointing, which recomputes
    activations, is ``TrainConfig.activation_checkpointing``.)"""

    checkpoint_every: int | None = option(5, "save the training state every N steps")
    checkpoint_seconds: float | None = option(None, "... and/or every T seconds")
    keep_last: int = option(3, "checkpoints kept")
    chaos_kills: int = option(0, "SIGKILLs injected over the run (rank 0 kills itself)")
    chaos_seed: int = option(0, "seed of the steps the kills land on")
    step_delay: float = option(0.0, "seconds slept per step (gives an outside killer time)")
    notice_file: str | None = option(None, "a preemption notice file to watch")
    stop_after: int | None = option(None, "end this launch after N steps, as if killed")
    deterministic: bool = option(True, "deterministic_mode: bitwise resume")

    def __post_init__(self) -> None:
        check_int("keep_last", self.keep_last, 1)
        for name in ("chaos_kills", "chaos_seed"):
            check_int(name, getattr(self, name), 0)
        for name in ("checkpoint_every", "stop_after"):
            check_optional_int(name, getattr(self, name), 1)
        check_optional_positive("checkpoint_seconds", self.checkpoint_seconds)
        if check_real("step_delay", self.step_delay, finite=True) < 0:
            raise ValueError(f"step_delay must be >= 0 seconds, got {self.step_delay}")
        if self.checkpoint_every is None and self.checkpoint_seconds is None:
            raise ValueError("give checkpoint_every (steps), checkpoint_seconds, or both")
        if self.notice_file is not None and not isinstance(self.notice_file, str):
            raise TypeError(f"notice_file must be a str path or None, got {self.notice_file!r}")
        if not isinstance(self.deterministic, bool):
            raise TypeError(f"deterministic must be True or False, got {self.deterministic!r}")


def _read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def _write_json_atomic(path: Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def _planned_kill(loop: LoopConfig, steps: int, start_step: int, directory: Path) -> int | None:
    """The step after which this launch kills itself, or None (rank 0 only)."""
    kills = _read_json(directory / CHAOS_FILE, {"kills": []})["kills"]
    if len(kills) >= loop.chaos_kills or start_step + 1 >= steps:
        return None
    rng = np.random.default_rng([loop.chaos_seed, len(kills)])
    # Spread the remaining kills over the remaining steps (on average).
    remaining = loop.chaos_kills - len(kills)
    span = max(2, 2 * (steps - start_step) // (remaining + 1))
    return int(rng.integers(start_step + 1, min(steps, start_step + span)))


def _kill_self(directory: Path, step: int) -> None:
    chaos = _read_json(directory / CHAOS_FILE, {"kills": []})
    chaos["kills"].append({"step": step, "time": time.time()})
    _write_json_atomic(directory / CHAOS_FILE, chaos)
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class LoopResult:
    """How one launch of :func:`resumable_loop` went: the step it ``resumed_from``, the step it
    reached, whether ``stop_after`` ended it (``stopped``: that step not saved), the seconds of each
    checkpoint save, the ``extra`` entries of the checkpoint it resumed from, and ``launch``
    (the SIGKILLs recorded before it started)."""

    resumed_from: int
    steps: int
    stopped: bool
    save_seconds: list[float]
    restored_extra: dict[str, Any]
    launch: int


def resumable_loop(
    trainer: Trainer,
    sampler: Any,
    next_batch: Callable[[], Any],
    loop: LoopConfig,
    *,
    steps: int,
    directory: str | os.PathLike | None,
    after_step: Callable[[int, StepResult], None] | None = None,
    extra_state: Callable[[], dict[str, Any]] | None = None,
    on_restore: Callable[[dict[str, Any]], None] | None = None,
    finished: Callable[[], bool] | None = None,
) -> LoopResult:
    """Train ``trainer`` from the newest checkpoint in ``directory`` to ``steps`` steps,
    surviving preemption as ``loop`` says (§20.5.2); every rank calls it.

    Each iteration takes ``next_batch()`` (which must draw from ``sampler``, whose position the
    checkpoints save), runs ``trainer.step(batch)`` and then ``after_step(step, result)``
    (progress, periodic evaluation: it must not draw from the RNG the training uses).
    Checkpoints go through :class:`~chapter20.training.checkpoints.CheckpointManager` on
    ``loop``'s schedule and at the last step, holding ``trainer.capture_state(sampler,
    **extra_state())``; ``on_restore(extra)`` sees those entries of the checkpoint it resumes
    from, before the first step (e.g. the evaluations made before a kill). ``finished()`` True
    ends the run before ``steps`` (early stopping, ``chapter20.training.early_stopping``): it is
    asked after each step, whose checkpoint is then saved as a last step's, and before the first
    (a launch that resumes a finished run trains nothing). Chaos kills, the
    progress log and preemption notices (SIGTERM, SIGINT, the notice file: save, then exit with
    :data:`~chapter20.training.preemption.EXIT_PREEMPTED`) are those of the module docstring.
    ``directory=None`` keeps nothing: no checkpoint is read or written, no progress is logged,
    and a signal ends the run as it would any program (chaos kills and a notice file, which
    need a checkpoint to resume from, are refused).
    """
    if not isinstance(loop, LoopConfig):
        raise TypeError(f"loop must be a LoopConfig, got {type(loop).__name__}")
    steps = check_int("steps", steps, 1)
    if directory is None and (loop.chaos_kills or loop.notice_file is not None):
        raise ValueError("chaos_kills and notice_file need a directory to save and resume from")
    keeper = None if directory is None else _Keeper(Path(directory), loop, trainer)
    state = keeper.manager.load_latest() if keeper else None
    start = trainer.restore_state(state, sampler) if state is not None else 0
    restored = dict(state["extra"]) if state is not None else {}
    if on_restore is not None and state is not None:
        on_restore(restored)
    launch = keeper.launch if keeper else 0
    kill_at = keeper.planned_kill(steps, start) if keeper else None
    done, save_seconds = start, []
    with (
        deterministic_mode(enabled=loop.deterministic),
        keeper.progress_log() if keeper else contextlib.nullcontext() as progress,
        PreemptionHandler(notice_file=loop.notice_file) if keeper else _NoNotice() as preemption,
    ):
        while done < steps and not (finished is not None and finished()):
            result = trainer.step(next_batch())
            done += 1
            time.sleep(loop.step_delay)
            if after_step is not None:
                after_step(done, result)
            if progress is not None:
                record = {"launch": launch, "step": done, "time": time.time()}
                progress.write(json.dumps(record) + "\n")
                progress.flush()
            if done == kill_at:
                _kill_self(keeper.directory, done)
            if loop.stop_after is not None and done - start >= loop.stop_after:
                return LoopResult(start, done, True, save_seconds, restored, launch)
            stop = preemption.should_stop(trainer.group)
            last = done == steps or (finished is not None and finished())
            if keeper and (stop or keeper.schedule.due(done, trainer.group) or last):
                extra = extra_state() if extra_state is not None else {}
                save_seconds.append(keeper.save(trainer.capture_state(sampler, **extra)))
            if stop:
                sys.exit(EXIT_PREEMPTED)
    return LoopResult(start, done, False, save_seconds, restored, launch)


class _Keeper:
    """What a loop with a directory keeps there: checkpoints on a schedule, rank 0's progress
    log, and the chaos kills recorded so far."""

    def __init__(self, directory: Path, loop: LoopConfig, trainer: Trainer):
        self.directory, self.loop, self.rank = directory, loop, trainer.rank
        self.manager = CheckpointManager(directory, loop.keep_last, group=trainer.group)
        self.schedule = CheckpointSchedule(loop.checkpoint_every, loop.checkpoint_seconds)
        self.launch = len(_read_json(directory / CHAOS_FILE, {"kills": []})["kills"])

    def planned_kill(self, steps: int, start: int) -> int | None:
        if self.rank != 0 or not self.loop.chaos_kills:
            return None
        return _planned_kill(self.loop, steps, start, self.directory)

    def progress_log(self):
        if self.rank != 0:
            return contextlib.nullcontext()
        return open(self.directory / PROGRESS_FILE, "a")

    def save(self, state: dict[str, Any]) -> float:
        """Save ``state``; the seconds the save took."""
        self.manager.save(state)
        self.schedule.saved()
        return self.manager.last_save_seconds


class _NoNotice:
    """The preemption handler of a loop that keeps nothing: never asks to stop."""

    def __enter__(self) -> _NoNotice:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def should_stop(self, group=None) -> bool:
        return False


def read_progress(directory: str | os.PathLike) -> list[dict]:
    """The (launch, step, time) records of a run's ``progress.jsonl`` (a line cut short by a
    kill is skipped), plus the recorded kills as ``{"kill": step, "time": t}`` entries."""
    directory = Path(directory)
    records = []
    path = directory / PROGRESS_FILE
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    for kill in _read_json(directory / CHAOS_FILE, {"kills": []})["kills"]:
        records.append({"kill": kill["step"], "time": kill["time"]})
    return sorted(records, key=lambda r: r["time"])


@dataclass(frozen=True)
class StoppedLaunch:
    """A launch of :func:`resumable_loop` that ``stop_after`` ended (§20.5.2), as a run returns it
    in place of a finished run's summary.

    The loop returns right after step ``stopped_at`` (its ``after_step`` and progress record
    done) as a kill at that moment would: that step's state is not saved. The checkpoints the
    schedule saved earlier in the launch stay in ``checkpoint_dir``, so the next launch with the
    same arguments resumes from the newest of them, retrains the steps after it, and ends
    bitwise equal to an uninterrupted run. ``resumed_from``: the step this launch resumed from,
    None when it started from scratch.
    """

    stopped_at: int
    resumed_from: int | None
    checkpoint_dir: str

    def __post_init__(self) -> None:
        check_int("stopped_at", self.stopped_at, 1)
        check_optional_int("resumed_from", self.resumed_from, 1)
        if not isinstance(self.checkpoint_dir, str) or not self.checkpoint_dir:
            raise TypeError(f"checkpoint_dir must be a non-empty str, got {self.checkpoint_dir!r}")

    @classmethod
    def from_loop(cls, result: LoopResult, checkpoint_dir: str | os.PathLike) -> StoppedLaunch:
        """The stopped launch that ``result`` (``result.stopped`` true) describes."""
        if not isinstance(result, LoopResult) or not result.stopped:
            raise ValueError(f"result must be a stopped LoopResult, got {result!r}")
        return cls(result.steps, result.resumed_from or None, str(checkpoint_dir))

    def lines(self) -> list[str]:
        """What a command line prints for this launch: the step it stopped at, where the
        checkpoints are, and how to resume (the same command without ``--stop-after``)."""
        start = "from scratch" if self.resumed_from is None else f"from step {self.resumed_from}"
        return [
            f"stopped after step {self.stopped_at} (--stop-after; this launch started "
            f"{start}); step {self.stopped_at} itself was not saved",
            f"checkpoints: {self.checkpoint_dir} (the next launch resumes from the newest one "
            "there, from scratch if there is none)",
            "to resume: run the same command again without --stop-after",
        ]
