"""§20.5.2 Stress test of bitwise resume: uninterrupted spot_demo runs alternating with runs
SIGKILLed from outside at random moments; every final fingerprint must be the same.

    python chapter20/scripts/spot_stress.py --repetitions 20            # the issue-24 procedure
    python chapter20/scripts/spot_stress.py --repetitions 3 --steps 24 --kills 2 --seed 7

Each repetition is one uninterrupted run into a fresh directory and one run killed ``--kills``
times (during start-up, inside a step, or inside a checkpoint save) and relaunched after every
kill until it finishes. One line per run, then the count of each fingerprint; the exit status is
0 only if they are all equal. ``--seed`` replays the same kill moments (as far as the timing of
the machine allows).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from chapter20.training.resume_stress import StressRun, stress_resume


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=20, help="pairs of runs")
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps per run")
    parser.add_argument("--kills", type=int, default=4, help="SIGKILLs per killed run")
    parser.add_argument("--seed", type=int, default=0, help="draws the kill moments")
    parser.add_argument(
        "--startup-share",
        type=float,
        default=0.2,
        help="share of kills aimed at start-up rather than at a step",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument("demo_args", nargs="*", help="extra spot_demo arguments (after --)")
    return parser.parse_args(argv)


def _report(run: StressRun) -> None:
    kills = f" killed at {', '.join(run.kills)};" if run.kills else ""
    print(
        f"{run.kind:>13}: {run.launches} launch(es),{kills} {run.seconds:.1f} s; "
        f"fingerprint {run.fingerprint}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.monotonic()
    result = stress_resume(
        args.repetitions,
        args.demo_args,
        steps=args.steps,
        kills=args.kills,
        seed=args.seed,
        startup_share=args.startup_share,
        timeout=args.timeout,
        report=_report,
    )
    runs, counts = result["runs"], result["counts"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{len(runs)} runs ({args.repetitions} uninterrupted, {args.repetitions} killed, "
        f"{sum(len(r.kills) for r in runs)} kills) in {time.monotonic() - start:.0f} s, "
        f"load average {load:.1f}"
    )
    for fingerprint, count in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {fingerprint}: {count}")
    print("all equal ✓" if result["all_equal"] else "DIFFERENT ✗")
    return 0 if result["all_equal"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ValueError as exc:  # a bad argument: say which, without a traceback
        sys.exit(f"spot_stress: {exc}")
