"""§20.4 listing L11's multi-node launch on one machine: the DDP demo (``chapter20.demos.ddp_run``)
as two single-process "nodes" on localhost, two torchrun agents that meet at one rendezvous
(:func:`two_node_torchrun`; notebook 12 shows its record).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading

from chapter20.core.checks import check_int, check_positive
from chapter20.techniques.distributed import free_port
from chapter20.training.run_config import RunConfig

__all__ = ["two_node_torchrun"]


def two_node_torchrun(steps: int = 4, timeout: float = 240.0) -> dict:
    """The DDP demo (``python -m chapter20.demos.ddp_run``) launched as two single-process
    "nodes" on localhost (two torchrun agents, ``--nnodes=2 --node_rank=0/1``, one rendezvous):
    listing L11's multi-node launch, cheaply. Returns node 0's command (shortened), its summary
    line and the run's summary dict."""
    steps, timeout = check_int("steps", steps, 1), check_positive("timeout", timeout)
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="chapter20-nodes-")
    run = RunConfig(output_dir=os.path.join(workdir, "run"))
    args = ["--steps", str(steps), "--batch", "64", "--vocab", "2000", "--dim", "32",
            "--lr", "0.02", "--warmup-steps", "2", "--no-progress"]  # fmt: skip
    results = {}

    def node(rank: int) -> None:
        launch = ["--nnodes=2", f"--node_rank={rank}", "--nproc_per_node=1",
                  "--master_addr=127.0.0.1", f"--master_port={port}"]  # fmt: skip
        command = [sys.executable, "-m", "torch.distributed.run", *launch, "-m",
                   "chapter20.demos.ddp_run", *args, "--output-dir", run.output_dir]  # fmt: skip
        results[rank] = subprocess.run(command, cwd=workdir, capture_output=True, text=True,
                                       timeout=timeout)  # fmt: skip

    threads = [threading.Thread(target=node, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for rank, result in results.items():
        if result.returncode != 0:
            raise RuntimeError(f"node {rank} failed:\n{result.stderr[-2000:]}")
    with open(run.summary_file, encoding="utf-8") as fh:
        data = json.load(fh)
    lines = [line for line in results[0].stdout.splitlines() if line.startswith("done:")]
    shown = "torchrun --nnodes=2 --node_rank=0 --nproc_per_node=1 --master_addr=127.0.0.1 ..."
    return {"command": shown, "line": lines[-1] if lines else "", "summary": data}
