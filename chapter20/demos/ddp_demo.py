"""§20.4 DDP demo: train the shared contrastive embedding model on real text, on any number of
processes, CPUs or GPUs, one node or several.

    torchrun chapter20/scripts/ddp_demo.py                       # one process
    torchrun --nproc_per_node=2 chapter20/scripts/ddp_demo.py    # two processes, one node
    torchrun --nproc_per_node=2 -m chapter20.demos.ddp_demo      # the same, as a module
    # two nodes (here both on localhost; on a cluster use node 0's address):
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=1 \\
        --master_addr=127.0.0.1 --master_port=29511 chapter20/scripts/ddp_demo.py
    torchrun --nnodes=2 --node_rank=1 --nproc_per_node=1 \\
        --master_addr=127.0.0.1 --master_port=29511 chapter20/scripts/ddp_demo.py

The run is ``chapter20.demos.ddp_run.run_ddp_demo``; its options are the fields of
``DemoConfig`` and of its ``TrainConfig`` (``--help`` lists them): ``--batch`` is global, the
rate ``--lr`` at ``--base-batch`` is scaled linearly with ``--warmup-steps``, ``--chunk-size``
splits each rank's batch by gradient caching, ``--precision bf16`` autocasts, ``--compress
fp16`` compresses the gradient all-reduce, ``--summary-json`` writes rank 0's summary.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys

import torch.distributed as dist

from chapter20.core.options import add_options, parse_config
from chapter20.demos.ddp_run import DemoConfig, run_ddp_demo
from chapter20.techniques.distributed import distributed

__all__ = ["PROG", "main", "parse_args"]

#: The name in usage and error lines (``python -m`` or torchrun would show another).
PROG = "ddp_demo.py"


def parse_args(argv: list[str] | None = None) -> DemoConfig:
    """§20.4 :class:`DemoConfig` from the command line (options derived from its fields); a
    refused value exits with status 2."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    add_options(parser, DemoConfig)
    return parse_config(parser, DemoConfig, argv)[0]


def main(argv: list[str] | None = None) -> dict:
    """§20.4 The DDP demo on this process (every rank of a torchrun group runs it); returns the
    summary. A global batch the ranks cannot share exits with status 2 and one line on stderr."""
    config = parse_args(argv)
    with distributed() as ctx:
        try:
            summary = run_ddp_demo(config, ctx)
        except ValueError as exc:  # a batch the ranks cannot share: every rank refuses it
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        # Every DDP object is gone before the group is: gloo threads that outlive the
        # interpreter's tensors abort the process at exit.
        gc.collect()
        if ctx.world_size > 1:
            dist.barrier()
    return summary


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main(sys.argv[1:])
