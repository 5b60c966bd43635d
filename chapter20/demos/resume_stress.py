"""§20.5.2 Stress test of bitwise resume: uninterrupted runs against runs killed from outside.

The spot demo (``chapter20.demos.spot_demo``, ``scripts/spot_demo.py``) promises that a run
killed at any moment and relaunched into the same checkpoint directory ends with exactly the
parameters of a run that was never interrupted. One comparison proves little: an arithmetic that
is only *usually* reproducible (a kernel whose summation order varies from process to process)
passes most single tries. This module repeats the comparison the way a user (or a cluster) would
meet the failure:

1. an uninterrupted demo run into a fresh directory;
2. a run into another fresh directory that is SIGKILLed from outside at random moments (during
   start-up, in the middle of a step, during a checkpoint save), relaunched after every kill
   until it finishes;

alternating, ``repetitions`` times, and counts the final fingerprints: they must all be equal.
The demo's self-inflicted ``--chaos-kills`` kills land only between steps; these land anywhere.
Each launch is ``python -m chapter20.demos.spot_demo`` and reports its fingerprint in the
``--summary-json`` file its config has (no output is parsed). :class:`StressConfig` is the one
configuration of the procedure; ``chapter20.demos.spot_stress`` (``scripts/spot_stress.py``) is
its command line; ``tests/test_spot_stress.py`` runs a short one.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from chapter20.core.checks import check_int, check_real
from chapter20.core.options import option
from chapter20.core.paths import repo_root
from chapter20.demos.spot_run import DEMO_MODULE, SpotResult
from chapter20.training.loop import read_progress

__all__ = [
    "StressConfig",
    "StressRun",
    "demo_command",
    "demo_summary_path",
    "run_killed",
    "run_uninterrupted",
    "stress_resume",
]

_POLL_SECONDS = 0.01


def _check_timeout(timeout) -> float:
    """A deadline in seconds: more than 0, at most a year."""
    return check_real("timeout", timeout, minimum=0, maximum=365 * 86400, exclusive=True)


def _check_startup_share(startup_share) -> float:
    """The share of kills aimed at start-up: a number in [0, 1]."""
    if not 0.0 <= check_real("startup_share", startup_share, finite=True) <= 1.0:
        raise ValueError(f"startup_share must be in [0, 1], got {startup_share}")
    return startup_share


@dataclass(frozen=True)
class StressConfig:
    """The stress test of bitwise resume (§20.5.2): ``repetitions`` pairs of runs of ``steps``
    steps, each killed run SIGKILLed ``kills`` times, the kill moments drawn from ``seed``,
    ``startup_share`` of them aimed at start-up; ``timeout`` seconds per run (all its launches).
    Checked on creation; the command line's options are its fields."""

    repetitions: int = option(20, "pairs of runs (one uninterrupted, one killed)")
    steps: int = option(60, "optimizer steps per run")
    kills: int = option(4, "SIGKILLs per killed run")
    seed: int = option(0, "draws the kill moments")
    startup_share: float = option(0.2, "share of kills aimed at start-up rather than at a step")
    timeout: float = option(900.0, "seconds per run")

    def __post_init__(self) -> None:
        for name in ("repetitions", "steps"):
            check_int(name, getattr(self, name), 1)
        for name in ("kills", "seed"):
            check_int(name, getattr(self, name), 0)
        _check_startup_share(self.startup_share)
        _check_timeout(self.timeout)


@dataclass
class StressRun:
    """One demo run of the stress test: ``kind`` is ``"uninterrupted"`` or ``"killed"``;
    ``kills`` lists where each SIGKILL landed (``"startup"`` or ``"step N+"``: after step N was
    logged, part-way into the next step or the save after N); ``launches`` counts processes."""

    kind: str
    fingerprint: str | None
    launches: int = 1
    kills: list[str] = field(default_factory=list)
    seconds: float = 0.0
    first_step_seconds: float | None = None


def demo_summary_path(checkpoint_dir: str | os.PathLike) -> Path:
    """Where a demo launch into ``checkpoint_dir`` writes its summary: beside the directory."""
    checkpoint_dir = Path(checkpoint_dir)
    return checkpoint_dir.with_name(checkpoint_dir.name + ".summary.json")


def demo_command(args: list[str], checkpoint_dir: str | os.PathLike) -> list[str]:
    """The command line of one single-process demo launch into ``checkpoint_dir``, its summary
    written to :func:`demo_summary_path`."""
    summary = demo_summary_path(checkpoint_dir)
    return [sys.executable, "-m", DEMO_MODULE, *args, "--checkpoint-dir", str(checkpoint_dir),
            "--summary-json", str(summary)]  # fmt: skip


def _fingerprint(checkpoint_dir: Path) -> str | None:
    """The fingerprint of the finished run's summary, or None if it wrote none."""
    summary = demo_summary_path(checkpoint_dir)
    return SpotResult.read(summary).fingerprint if summary.exists() else None


def _steps_logged(directory: Path) -> list[dict]:
    """The step records of every launch so far, in order (see ``read_progress``)."""
    return [record for record in read_progress(directory) if "step" in record]


def _launch(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        command,
        cwd=repo_root() or Path.cwd(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(process: subprocess.Popen) -> None:
    process.kill()
    process.communicate()


def _finish(process: subprocess.Popen, timeout: float) -> None:
    """Wait for ``process`` (killing it on a timeout or an interrupt); RuntimeError with the
    end of its stderr unless it exited with status 0."""
    try:
        _, stderr = process.communicate(timeout=timeout)
    except BaseException:
        _stop(process)
        raise
    if process.returncode != 0:
        raise RuntimeError(f"spot_demo exited with {process.returncode}:\n{stderr[-3000:]}")


def run_uninterrupted(
    args: list[str], directory: str | os.PathLike, *, timeout: float = StressConfig.timeout
) -> StressRun:
    """One demo run, never interrupted, into ``directory`` (which should be empty)."""
    timeout = _check_timeout(timeout)
    directory = Path(directory)
    start, wall = time.monotonic(), time.time()
    _finish(_launch(demo_command(args, directory)), timeout)
    progress = _steps_logged(directory)
    return StressRun(
        "uninterrupted",
        _fingerprint(directory),
        seconds=time.monotonic() - start,
        first_step_seconds=progress[0]["time"] - wall if progress else None,
    )


def _kill_at_random(
    process: subprocess.Popen,
    directory: Path,
    steps: int,
    kills_left: int,
    rng: random.Random,
    startup_seconds: float,
    startup_share: float,
    deadline: float,
) -> str | None:
    """Wait for a random moment of this launch and SIGKILL it; None if it finished first.

    With probability ``startup_share`` the moment is uniform over the start-up (import, data,
    checkpoint load); otherwise a step is drawn uniformly from the next stretch of the run (the
    steps left shared among the kills left, so that the kills spread over the whole run), and
    the kill lands a random fraction of one step's duration after that step was logged: inside
    the next step, or inside the checkpoint save that follows a logged step.
    """
    before = _steps_logged(directory)
    logged, done = len(before), before[-1]["step"] if before else 0
    span = max(1, 2 * (steps - done) // (kills_left + 1))
    if rng.random() < startup_share:
        moment = time.monotonic() + rng.uniform(0.0, startup_seconds)
        while process.poll() is None and time.monotonic() < moment:
            time.sleep(_POLL_SECONDS)
        where = "startup"
    else:
        target = min(steps - 1, done + rng.randrange(span)) if done < steps else steps
        while process.poll() is None:
            records = _steps_logged(directory)[logged:]
            if records and records[-1]["step"] >= target:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("spot_demo made no progress before the deadline")
            time.sleep(_POLL_SECONDS)
        records = _steps_logged(directory)[logged:]
        if len(records) >= 2:
            step_seconds = (records[-1]["time"] - records[0]["time"]) / (len(records) - 1)
        else:
            step_seconds = 0.05
        time.sleep(rng.uniform(0.0, max(step_seconds, 0.005)))
        where = f"step {records[-1]['step'] if records else done}+"
    if process.poll() is not None:
        return None
    process.send_signal(signal.SIGKILL)
    process.wait()
    return where


def run_killed(
    args: list[str],
    directory: str | os.PathLike,
    *,
    steps: int,
    kills: int,
    rng: random.Random,
    startup_seconds: float = 2.0,
    startup_share: float = StressConfig.startup_share,
    timeout: float = StressConfig.timeout,
) -> StressRun:
    """Launch the demo into ``directory``, SIGKILL it from outside ``kills`` times at random
    moments (see :func:`_kill_at_random`), relaunching after each kill as a requeue would, and
    let the last launch finish. Returns its fingerprint and where each kill landed."""
    steps = check_int("steps", steps, 1)
    kills = check_int("kills", kills, 0)
    check_real("startup_seconds", startup_seconds, minimum=0, maximum=3600, finite=True)
    _check_startup_share(startup_share)
    timeout = _check_timeout(timeout)
    directory = Path(directory)
    start = time.monotonic()
    deadline = start + timeout
    run = StressRun("killed", None, launches=0)
    while True:
        process = _launch(demo_command(args, directory))
        run.launches += 1
        if len(run.kills) < kills:
            try:
                where = _kill_at_random(
                    process,
                    directory,
                    steps,
                    kills - len(run.kills),
                    rng,
                    startup_seconds,
                    startup_share,
                    deadline,
                )
            except BaseException:
                _stop(process)
                raise
            if where is not None:
                run.kills.append(where)
                continue
        _finish(process, max(1.0, deadline - time.monotonic()))
        run.fingerprint = _fingerprint(directory)
        run.seconds = time.monotonic() - start
        return run


def stress_resume(config: StressConfig, args: list[str] | None = None, *, report=None) -> dict:
    """Alternate ``config.repetitions`` uninterrupted demo runs with as many runs SIGKILLed
    ``config.kills`` times from outside (§20.5.2); every final fingerprint must be the same.

    ``args`` are extra demo arguments (``--steps`` is added from ``config.steps``). Each run gets
    a fresh temporary directory. ``report(run)`` is called after every run (progress output).
    Returns ``{"runs": [...], "counts": {fingerprint: n}, "all_equal": bool}``; the kill
    moments are drawn from ``config.seed``, so a failure can be replayed.
    """
    if not isinstance(config, StressConfig):
        raise TypeError(f"config must be a StressConfig, got {config!r}")
    repetitions, steps, kills = config.repetitions, config.steps, config.kills
    seed, startup_share, timeout = config.seed, config.startup_share, config.timeout
    args = [*(args or []), "--steps", str(steps)]
    rng = random.Random(seed)
    runs: list[StressRun] = []
    with tempfile.TemporaryDirectory(prefix="spot-stress-") as tmp:
        for rep in range(repetitions):
            plain = run_uninterrupted(args, Path(tmp) / f"plain-{rep}", timeout=timeout)
            runs.append(plain)
            if report is not None:
                report(plain)
            startup = plain.first_step_seconds or 2.0
            killed = run_killed(
                args,
                Path(tmp) / f"killed-{rep}",
                steps=steps,
                kills=kills,
                rng=rng,
                startup_seconds=startup,
                startup_share=startup_share,
                timeout=timeout,
            )
            runs.append(killed)
            if report is not None:
                report(killed)
    counts = Counter(run.fingerprint for run in runs)
    return {
        "runs": runs,
        "counts": dict(counts),
        "all_equal": len(counts) == 1 and None not in counts,
    }
