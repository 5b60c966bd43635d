"""§20.5.2 Spot-instance training that survives preemption: resume, bit for bit.

    python chapter20/scripts/spot_demo.py --checkpoint-dir runs/spot          # one process
    torchrun --standalone --nproc_per_node=2 --max-restarts=5 \\
        chapter20/scripts/spot_demo.py --checkpoint-dir runs/spot --chaos-kills 3   # 2 ranks
    # or a plain relaunch loop, as a cluster's requeue would do:
    until python chapter20/scripts/spot_demo.py --checkpoint-dir runs/spot --chaos-kills 3
    do :; done

Every launch resumes from the newest valid checkpoint in --checkpoint-dir (a fresh directory starts
from step 0). ``--chaos-kills N`` makes rank 0 SIGKILL itself N times at random steps, like a
reclaimed spot machine. SIGTERM/SIGINT or ``--notice-file`` appearing make the run finish its step,
checkpoint, and exit with status 143 (``chapter20.training.preemption.EXIT_PREEMPTED``). At the end,
rank 0 prints the parameter fingerprint, equal to that of an uninterrupted run with the same
arguments (and the same number of processes). ``--summary-json`` writes the summary.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

import torch.distributed as dist

from chapter20.core.options import add_options, parse_config
from chapter20.techniques.distributed import distributed
from chapter20.training.spot_run import SpotConfig, run_spot_training

#: The name in usage and error lines (``python -m`` or torchrun would show another).
PROG = "spot_demo.py"


def parse_args(argv: list[str] | None = None) -> tuple[SpotConfig, argparse.Namespace]:
    """:class:`SpotConfig` from the command line (its options derived from its fields, its
    ``TrainConfig`` and ``LoopConfig`` included), and ``--summary-json``."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    add_options(parser, SpotConfig)
    parser.add_argument("--summary-json", type=Path, default=None)
    return parse_config(parser, SpotConfig, argv)


def main(argv: list[str] | None = None) -> dict:
    config, args = parse_args(argv)
    with distributed() as ctx:
        summary = run_spot_training(config, ctx.device)
        gc.collect()  # DDP objects go before the process group (gloo threads abort otherwise)
        if ctx.world_size > 1:
            dist.barrier()
    if ctx.is_main:
        print(
            f"done: {summary['steps']} steps on {summary['world_size']} process(es), resumed from "
            f"step {summary['resumed_from']}; fingerprint {summary['fingerprint']}"
        )
        if args.summary_json is not None:
            args.summary_json.write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except ValueError as exc:  # a bad argument: say which, without a traceback
        sys.exit(f"spot_demo: {exc}")
