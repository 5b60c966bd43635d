"""§20.5.2 Spot-instance training that survives preemption: resume, bit for bit.

    python chapter20/scripts/spot_demo.py --checkpoint-dir runs/spot          # one process
    python -m chapter20.demos.spot_demo --checkpoint-dir runs/spot            # the same
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
``--stop-after N`` ends the launch after N steps as a kill would: rank 0 says where it stopped
and how to resume, and the exit status is 0.

The run is :func:`chapter20.demos.spot_run.run_spot_training`; its options are the fields of
``SpotConfig``, of its ``TrainConfig`` and of its ``LoopConfig`` (``--help`` lists them).
"""

from __future__ import annotations

import argparse
import gc
import sys

import torch.distributed as dist

from chapter20.core.options import add_options, parse_config
from chapter20.demos.spot_run import SpotConfig, SpotResult, run_spot_training
from chapter20.techniques.distributed import distributed
from chapter20.training.loop import StoppedLaunch

__all__ = ["PROG", "main", "parse_args"]

#: The name in usage and error lines (``python -m`` or torchrun would show another).
PROG = "spot_demo.py"


def parse_args(argv: list[str] | None = None) -> SpotConfig:
    """§20.5.2 :class:`SpotConfig` from the command line (its options derived from its fields,
    its ``TrainConfig`` and ``LoopConfig`` included); a refused value exits with status 2."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    add_options(parser, SpotConfig)
    return parse_config(parser, SpotConfig, argv)[0]


def main(argv: list[str] | None = None) -> SpotResult | StoppedLaunch:
    """§20.5.2 The spot demo on this process (every rank of a torchrun group runs it): train,
    then rank 0 prints the finished run's fingerprint, or what a ``--stop-after`` launch did.
    Returns the run's result (see :func:`~chapter20.demos.spot_run.run_spot_training`); a value
    the run refuses ends the program with one line on stderr, without a traceback."""
    config = parse_args(argv)
    try:
        with distributed() as ctx:
            result = run_spot_training(config, ctx.device)
            gc.collect()  # DDP objects go before the process group (gloo threads abort otherwise)
            if ctx.world_size > 1:
                dist.barrier()
    except ValueError as exc:  # a bad argument: say which, without a traceback
        sys.exit(f"spot_demo: {exc}")
    if ctx.is_main:
        print("\n".join(result.lines()), flush=True)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
