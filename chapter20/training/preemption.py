"""§20.5.2 When to save, and when to stop.

In practice a spot machine gets a notice (SIGTERM, or a metadata endpoint that a poller turns
into a file) and then SIGKILL. :class:`PreemptionHandler` turns the notice into a flag that the
training loop checks after each step, so it can save and exit with :data:`EXIT_PREEMPTED`;
:class:`CheckpointSchedule` decides when to save (every N steps, every T seconds), the same
decision on every rank.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch.distributed as dist

from chapter20.core.checks import check_int, check_positive
from chapter20.techniques.distributed import any_rank

__all__ = [
    "EXIT_PREEMPTED",
    "CheckpointSchedule",
    "PreemptionHandler",
]


#: Exit status after a preemption notice was handled (state saved): 128 + SIGTERM, what a shell
#: reports for a process ended by SIGTERM, so a scheduler treats it as the preemption it is.
EXIT_PREEMPTED = 128 + signal.SIGTERM

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
            None if every_seconds is None else check_positive("every_seconds", every_seconds)
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
