"""§20.5.2 Spot-instance training that survives preemption: resume, bit for bit.

    python chapter20/scripts/spot_demo.py --checkpoint-dir runs/spot           # one process
    torchrun --standalone --nproc_per_node=2 --max-restarts=5 \\
        chapter20/scripts/spot_demo.py --checkpoint-dir runs/spot --chaos 3   # 2 ranks, 3 kills
    # or a plain relaunch loop, as a cluster's requeue would do:
    until python chapter20/scripts/spot_demo.py --checkpoint-dir runs/spot --chaos 3; do :; done

Every launch resumes from the newest valid checkpoint in --checkpoint-dir (a fresh directory starts
from step 0). ``--chaos N`` makes rank 0 SIGKILL itself N times at random steps, like a reclaimed
spot machine. SIGTERM/SIGINT or ``--notice-file`` appearing make the run finish its step,
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

from chapter20.techniques.distributed import distributed
from chapter20.training.loop import SpotConfig, run_spot_training


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps in all")
    parser.add_argument("--batch-size", type=int, default=64, help="global batch (pairs)")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps between saves")
    parser.add_argument("--checkpoint-seconds", type=float, default=None, help="or seconds")
    parser.add_argument("--keep-last", type=int, default=3, help="checkpoints kept")
    parser.add_argument("--chaos", type=int, default=0, help="SIGKILLs injected over the run")
    parser.add_argument("--chaos-seed", type=int, default=0)
    parser.add_argument("--step-delay", type=float, default=0.0, help="sleep per step (s)")
    parser.add_argument("--notice-file", type=Path, default=None, help="preemption notice")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--summary-json", type=Path, default=None)
    composed = parser.add_argument_group(
        "techniques of the composed step (chapter20.training.trainer)"
    )
    composed.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    composed.add_argument("--chunk-size", type=int, default=None, help="gradient caching rows")
    composed.add_argument("--learn-temperature", action="store_true")
    composed.add_argument("--optimizer", default="adamw", help="adamw, adamw8bit, ...")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    config = SpotConfig(
        checkpoint_dir=str(args.checkpoint_dir),
        steps=args.steps,
        global_batch=args.batch_size,
        checkpoint_every=args.checkpoint_every,
        checkpoint_seconds=args.checkpoint_seconds,
        keep_last=args.keep_last,
        chaos_kills=args.chaos,
        chaos_seed=args.chaos_seed,
        step_delay=args.step_delay,
        notice_file=None if args.notice_file is None else str(args.notice_file),
        seed=args.seed,
        precision=args.precision,
        chunk_size=args.chunk_size,
        learn_temperature=args.learn_temperature,
        optimizer=args.optimizer,
    )
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
