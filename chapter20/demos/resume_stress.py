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
Each launch is ``python -m chapter20.demos.spot_run`` with the options of the stressed spot run
(``chapter20.core.options.config_argv``) and reports its fingerprint in the ``summary.json`` of
its output directory (no output is parsed). :class:`StressConfig` is the one configuration of
the procedure: how to kill, and the spot run it kills
(:class:`~chapter20.demos.spot_run.SpotConfig`). :func:`main` is its command line:

    python chapter20/scripts/spot_stress.py --repetitions 20
    python chapter20/scripts/spot_stress.py --repetitions 3 --steps 24 --kills 2 --kill-seed 7
    python -m chapter20.demos.resume_stress --repetitions 3 --batch 32   # spot run options too

One line per run, then the count of each fingerprint; the exit status is 0 only if they are all
equal. ``--kill-seed`` replays the same kill moments (as far as the timing of the machine allows).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from chapter20.core.checks import check_int, check_real
from chapter20.core.options import add_options, config_argv, option, parse_config
from chapter20.demos.spot_run import DEMO_MODULE, SpotConfig, start_process
from chapter20.training.loop import read_progress
from chapter20.training.run_config import RunConfig

__all__ = [
    "PROG",
    "StressConfig",
    "StressRun",
    "demo_command",
    "main",
    "parse_args",
    "run_killed",
    "run_uninterrupted",
    "stress_resume",
]

#: The name in usage and error lines.
PROG = "spot_stress.py"

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
    """The stress test of bitwise resume (§20.5.2): ``repetitions`` pairs of runs of the spot
    run ``run`` (its output directory is the test's own, one per run), each killed run
    SIGKILLed ``kills`` times, the kill moments drawn from ``kill_seed``, ``startup_share`` of
    them aimed at start-up; ``timeout`` seconds per run (all its launches). Checked on creation;
    the command line's options are its fields and the spot run's."""

    repetitions: int = option(20, "pairs of runs (one uninterrupted, one killed)")
    kills: int = option(4, "SIGKILLs per killed run")
    kill_seed: int = option(0, "draws the kill moments")
    startup_share: float = option(0.2, "share of kills aimed at start-up rather than at a step")
    timeout: float = option(900.0, "seconds per run")
    run: SpotConfig = option(
        help="the spot run (chapter20.demos.spot_run.SpotConfig)", default_factory=SpotConfig
    )

    def __post_init__(self) -> None:
        check_int("repetitions", self.repetitions, 1)
        for name in ("kills", "kill_seed"):
            check_int(name, getattr(self, name), 0)
        _check_startup_share(self.startup_share)
        _check_timeout(self.timeout)
        if not isinstance(self.run, SpotConfig):
            raise TypeError(f"run must be a SpotConfig, got {self.run!r}")


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


def demo_command(run: SpotConfig, output_dir: str | os.PathLike) -> list[str]:
    """The command line of one single-process launch of the spot run ``run`` into
    ``output_dir`` (its options those of ``run``, but the output directory)."""
    if not isinstance(run, SpotConfig):
        raise TypeError(f"run must be a SpotConfig, got {run!r}")
    options = config_argv(replace(run, output_dir=str(output_dir)))
    return [sys.executable, "-m", DEMO_MODULE, *options]


def _fingerprint(output_dir: Path) -> str | None:
    """The fingerprint of the finished run's summary, or None if it wrote none."""
    summary = output_dir / "summary.json"
    return json.loads(summary.read_text())["fingerprint"] if summary.exists() else None


def _steps_logged(output_dir: Path) -> list[dict]:
    """The step records of every launch so far, in order (see ``read_progress``)."""
    checkpoints = RunConfig(output_dir=str(output_dir)).checkpoint_dir
    return [record for record in read_progress(checkpoints) if "step" in record]


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
    run: SpotConfig, directory: str | os.PathLike, *, timeout: float = StressConfig.timeout
) -> StressRun:
    """One launch of the spot run ``run``, never interrupted, into ``directory`` (which should be
    empty)."""
    timeout = _check_timeout(timeout)
    directory = Path(directory)
    start, wall = time.monotonic(), time.time()
    _finish(start_process(demo_command(run, directory)), timeout)
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
    run: SpotConfig,
    directory: str | os.PathLike,
    *,
    kills: int,
    rng: random.Random,
    startup_seconds: float = 2.0,
    startup_share: float = StressConfig.startup_share,
    timeout: float = StressConfig.timeout,
) -> StressRun:
    """Launch the spot run ``run`` into ``directory``, SIGKILL it from outside ``kills`` times at
    random moments (see :func:`_kill_at_random`), relaunching after each kill as a requeue
    would, and let the last launch finish. Returns its fingerprint and where each kill landed."""
    if not isinstance(run, SpotConfig):
        raise TypeError(f"run must be a SpotConfig, got {run!r}")
    steps = run.steps
    kills = check_int("kills", kills, 0)
    check_real("startup_seconds", startup_seconds, minimum=0, maximum=3600, finite=True)
    _check_startup_share(startup_share)
    timeout = _check_timeout(timeout)
    directory = Path(directory)
    start = time.monotonic()
    deadline = start + timeout
    stressed = StressRun("killed", None, launches=0)
    while True:
        process = start_process(demo_command(run, directory))
        stressed.launches += 1
        if len(stressed.kills) < kills:
            left = kills - len(stressed.kills)
            try:
                where = _kill_at_random(process, directory, steps, left, rng, startup_seconds,
                                        startup_share, deadline)  # fmt: skip
            except BaseException:
                _stop(process)
                raise
            if where is not None:
                stressed.kills.append(where)
                continue
        _finish(process, max(1.0, deadline - time.monotonic()))
        stressed.fingerprint = _fingerprint(directory)
        stressed.seconds = time.monotonic() - start
        return stressed


def stress_resume(config: StressConfig, *, report=None) -> dict:
    """Alternate ``config.repetitions`` uninterrupted launches of the spot run ``config.run``
    with as many launches SIGKILLed ``config.kills`` times from outside (§20.5.2); every final
    fingerprint must be the same.

    Each run gets a fresh temporary directory. ``report(run)`` is called after every run
    (progress output). Returns ``{"runs": [...], "counts": {fingerprint: n}, "all_equal":
    bool}``; the kill moments are drawn from ``config.kill_seed``, so a failure can be replayed.
    """
    if not isinstance(config, StressConfig):
        raise TypeError(f"config must be a StressConfig, got {config!r}")
    rng = random.Random(config.kill_seed)
    runs: list[StressRun] = []
    with tempfile.TemporaryDirectory(prefix="spot-stress-") as tmp:
        for rep in range(config.repetitions):
            plain = run_uninterrupted(
                config.run, Path(tmp) / f"plain-{rep}", timeout=config.timeout
            )
            runs.append(plain)
            if report is not None:
                report(plain)
            killed = run_killed(
                config.run, Path(tmp) / f"killed-{rep}", kills=config.kills, rng=rng,
                startup_seconds=plain.first_step_seconds or 2.0,
                startup_share=config.startup_share, timeout=config.timeout,
            )  # fmt: skip
            runs.append(killed)
            if report is not None:
                report(killed)
    counts = Counter(run.fingerprint for run in runs)
    return {
        "runs": runs,
        "counts": dict(counts),
        "all_equal": len(counts) == 1 and None not in counts,
    }


def parse_args(argv: list[str] | None = None) -> StressConfig:
    """§20.5.2 :class:`StressConfig` from the command line: its fields and those of the spot run
    it stresses (all but the output directory, which is the test's own)."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    add_options(parser, StressConfig, exclude=("output_dir",))
    return parse_config(parser, StressConfig, argv)[0]


def _report(run: StressRun) -> None:
    kills = f" killed at {', '.join(run.kills)};" if run.kills else ""
    print(
        f"{run.kind:>13}: {run.launches} launch(es),{kills} {run.seconds:.1f} s; "
        f"fingerprint {run.fingerprint}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    """§20.5.2 Run the stress test and print one line per run and the fingerprint counts;
    returns the exit status: 0 only if every fingerprint is the same."""
    config = parse_args(argv)
    start = time.monotonic()
    result = stress_resume(config, report=_report)
    runs, counts = result["runs"], result["counts"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{len(runs)} runs ({config.repetitions} uninterrupted, {config.repetitions} killed, "
        f"{sum(len(r.kills) for r in runs)} kills) in {time.monotonic() - start:.0f} s, "
        f"load average {load:.1f}"
    )
    for fingerprint, count in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {fingerprint}: {count}")
    print("all equal ✓" if result["all_equal"] else "DIFFERENT ✗")
    return 0 if result["all_equal"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
