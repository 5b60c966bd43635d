"""§20.5.2 Stress test of bitwise resume: uninterrupted spot_demo runs alternating with runs
SIGKILLed from outside at random moments; every final fingerprint must be the same.

    python chapter20/scripts/spot_stress.py --repetitions 20            # the issue-24 procedure
    python chapter20/scripts/spot_stress.py --repetitions 3 --steps 24 --kills 2 --seed 7
    python -m chapter20.demos.spot_stress --repetitions 3 -- --batch 32  # extra demo flags

Each repetition is one uninterrupted run into a fresh directory and one run killed ``--kills``
times (during start-up, inside a step, or inside a checkpoint save) and relaunched after every
kill until it finishes. One line per run, then the count of each fingerprint; the exit status is
0 only if they are all equal. ``--seed`` replays the same kill moments (as far as the timing of
the machine allows). The options are the fields of
:class:`chapter20.demos.resume_stress.StressConfig`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from chapter20.core.options import add_options, parse_config
from chapter20.demos.resume_stress import StressConfig, StressRun, stress_resume

__all__ = ["PROG", "main", "parse_args"]

#: The name in usage and error lines.
PROG = "spot_stress.py"


def parse_args(argv: list[str] | None = None) -> tuple[StressConfig, list[str]]:
    """§20.5.2 :class:`StressConfig` from the command line (its options derived from its
    fields) and the extra spot_demo arguments given after ``--``."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    add_options(parser, StressConfig)
    parser.add_argument("demo_args", nargs="*", help="extra spot_demo arguments (after --)")
    config, namespace = parse_config(parser, StressConfig, argv)
    return config, namespace.demo_args


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
    config, demo_args = parse_args(argv)
    start = time.monotonic()
    result = stress_resume(config, demo_args, report=_report)
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
