"""§20.4 DDP demo on any number of processes: ``chapter20.demos.ddp_run``.

    torchrun chapter20/scripts/ddp_demo.py                       # one process
    torchrun --nproc_per_node=2 chapter20/scripts/ddp_demo.py    # two processes, one node
    # two nodes (here both on localhost; on a cluster use node 0's address):
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=1 \\
        --master_addr=127.0.0.1 --master_port=29511 chapter20/scripts/ddp_demo.py
    torchrun --nnodes=2 --node_rank=1 --nproc_per_node=1 \\
        --master_addr=127.0.0.1 --master_port=29511 chapter20/scripts/ddp_demo.py

``--help`` lists the options; the module's docstring says what the run does.
"""

import contextlib
import sys

from chapter20.demos.ddp_run import main

if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main(sys.argv[1:])
