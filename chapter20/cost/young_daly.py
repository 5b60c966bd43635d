"""§20.5.2 What preemptions cost, and how often to checkpoint against them.

A spot machine can be taken away at any moment. Work since the last checkpoint is lost, and each
checkpoint costs time, so there is an interval that minimises the expected wall time. With
checkpoint cost C and mean time between preemptions M (exponential, i.e. memoryless), Young's
first-order optimum is τ* = √(2·C·M) (:func:`young_daly_interval`); Daly's model gives the
expected wall time of any interval (:func:`expected_wall_time`, :func:`preemption_overhead`),
and :func:`simulate_wall_time` checks both by Monte Carlo. Each takes the work, the interval and
the model's inputs (:class:`PreemptionModel`: C, M and the restart time). The saving side is
``chapter20.training.checkpoints``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from chapter20.core.checks import check_int, check_positive

__all__ = [
    "PreemptionModel",
    "young_daly_interval",
    "expected_wall_time",
    "preemption_overhead",
    "simulate_wall_time",
]


def _positive(name: str, value: float) -> float:
    return check_positive(name, value)


def _non_negative(name: str, value: float) -> float:
    return check_positive(name, value, zero=True)


@dataclass(frozen=True)
class PreemptionModel:
    """The inputs of Daly's model of a run under preemptions (§20.5.2): a checkpoint takes
    ``checkpoint_seconds`` (C); preemptions of the job arrive at random, ``mtbf_seconds`` (M)
    apart on average (exponential, i.e. memoryless); each one costs ``restart_seconds`` (R)
    before the lost segment is retried."""

    checkpoint_seconds: float
    mtbf_seconds: float
    restart_seconds: float = 0.0

    def __post_init__(self):
        _non_negative("checkpoint_seconds", self.checkpoint_seconds)
        _positive("mtbf_seconds", self.mtbf_seconds)
        _non_negative("restart_seconds", self.restart_seconds)


def _model_arguments(work, interval, model) -> tuple[float, ...]:
    """The interval model's five times as floats: the work (>= 0) and the interval (> 0),
    checked, and the three of ``model`` (a :class:`PreemptionModel` checks its own)."""
    if not isinstance(model, PreemptionModel):
        raise TypeError(f"model must be a PreemptionModel, got {type(model).__name__}")
    return (
        _non_negative("work_seconds", work),
        _positive("interval_seconds", interval),
        float(model.checkpoint_seconds),
        float(model.mtbf_seconds),
        float(model.restart_seconds),
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
    work_seconds: float, interval_seconds: float, model: PreemptionModel
) -> float:
    """Expected wall time to finish ``work_seconds`` of compute under exponential preemptions.

    §20.5.2, Daly's model: the work runs in segments of ``interval_seconds`` each followed by a
    checkpoint of C = ``model.checkpoint_seconds``; a preemption (rate 1/M, M =
    ``model.mtbf_seconds``, also during a checkpoint or a restart) loses the segment and costs
    R = ``model.restart_seconds`` before it is retried. A segment of length s = τ + C then takes
    M·e^{R/M}·(e^{s/M} − 1) on average.
    """
    w, tau, c, m, r = _model_arguments(work_seconds, interval_seconds, model)
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
    work_seconds: float, interval_seconds: float, model: PreemptionModel
) -> float:
    """Expected extra wall time as a fraction of the work (0.1 = 10% longer) (§20.5.2):
    checkpoints, lost segments and restarts, from :func:`expected_wall_time`."""
    wall = expected_wall_time(work_seconds, interval_seconds, model)
    return wall / _positive("work_seconds", work_seconds) - 1.0


_MAX_SEGMENTS = 10_000_000
_MAX_MTBFS = 30


def simulate_wall_time(
    work_seconds: float,
    interval_seconds: float,
    model: PreemptionModel,
    *,
    runs: int = 1000,
    seed: int = 0,
) -> np.ndarray:
    """Wall times of ``runs`` simulated jobs, one per entry (§20.5.2, Monte Carlo).

    The same process as :func:`expected_wall_time`, played out: preemptions arrive as a
    Poisson process (exponential gaps, seeded), a preemption discards the segment in progress,
    and the restart itself can be preempted. The mean converges to the model's expectation.
    """
    w, tau, c, m, r = _model_arguments(work_seconds, interval_seconds, model)
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
        pending = np.arange(runs)
        while pending.size:  # the segment and its checkpoint, until a preemption spares it
            pending = _attempt(rng, m, times, pending, segment + c)
            if r > 0:  # a restart of length r must itself survive: retry it until a gap exceeds r
                restarting = pending
                while restarting.size:
                    restarting = _attempt(rng, m, times, restarting, r)
    return times


def _attempt(rng, m: float, times: np.ndarray, runs: np.ndarray, length: float) -> np.ndarray:
    """One attempt of ``length`` seconds by each of ``runs``: each waits for its next preemption
    (an exponential gap of mean ``m``) and survives it if the gap is at least ``length``. Adds
    the seconds spent to ``times``; returns the runs a preemption cut short."""
    gap = rng.exponential(m, runs.size)
    done = gap >= length
    times[runs[done]] += length
    times[runs[~done]] += gap[~done]
    return runs[~done]
