"""§20.5.2 The chaos run of notebook 07: 2 processes under torchrun's elastic agent, one SIGKILL,
a restart, and the uninterrupted run to compare with, cheaply. The agent is the one the
``torchrun`` command runs (``torch.distributed.launcher.api.elastic_launch``), started from Python
so that its workers can be forked from the launcher instead of started as fresh interpreters:
forking saves every worker the seconds of importing PyTorch and loading the data, which on a
small machine are most of a launch. The restart, the rendezvous, the process group and the
SIGKILL are the real ones. Each worker runs the spot demo's ``main``; rank 0 SIGKILLs itself and
the agent restarts the whole group, which resumes from the newest valid checkpoint. The same
launcher then runs the uninterrupted reference on the same number of processes;
:func:`restart_seconds` reads the restart time R from the run's progress records.

    python -m chapter20.demos.chaos_launch DIRECTORY STEPS BATCH EVERY NPROC KILLS
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from chapter20.core.checks import check_int
from chapter20.core.paths import repo_root
from chapter20.training.loop import read_progress
from chapter20.training.run_config import RunConfig

__all__ = ["chaos_run", "launch", "main", "restart_seconds"]


def _worker(argv: list[str]) -> None:
    from chapter20.demos.spot_run import main as spot_main

    spot_main(argv)


def launch(argv: list[str], *, nproc: int, max_restarts: int) -> None:
    """The spot demo with ``argv`` on ``nproc`` workers forked by torchrun's elastic agent, with
    ``max_restarts`` (a standalone rendezvous on localhost, as ``torchrun --standalone``)."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    nproc, max_restarts = check_int("nproc", nproc, 1), check_int("max_restarts", max_restarts, 0)
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=nproc,  # one node, nproc workers
        rdzv_backend="c10d", rdzv_endpoint="localhost:0", run_id=str(uuid.uuid4()),
        max_restarts=max_restarts,  # torchrun --max-restarts
        monitor_interval=0.05,  # how often the agent looks for a dead worker (s)
        start_method="fork",  # workers share the agent's imported modules
    )  # fmt: skip
    elastic_launch(config, _worker)(argv)


def main(args: list[str]) -> None:
    """The chaos launch and its uninterrupted reference, in ``directory`` (``chaos/``,
    ``clean/``, each with its checkpoints and summary)."""
    import torch
    import torch._dynamo  # noqa: F401  (DDP's first use imports it: once here, not per worker)

    from chapter20.core.corpora import pair_data
    from chapter20.demos.spot_run import SpotConfig

    directory, steps, batch, every, nproc, kills = args
    directory = Path(directory)
    # The data loaded once, before the workers fork, on one thread: a forked child must not
    # inherit a parent's OpenMP thread team (it would wait for threads it does not have).
    torch.set_num_threads(1)
    pair_data(vocab_size=SpotConfig.vocab)
    common = ["--steps", steps, "--batch", batch, "--checkpoint-every", every]
    for name, extra, restarts in (("chaos", ["--chaos-kills", kills], int(kills) + 1),
                                  ("clean", [], 0)):  # fmt: skip
        argv = [*common, *extra, "--output-dir", str(directory / name)]
        launch(argv, nproc=int(nproc), max_restarts=restarts)


def chaos_run(directory: str | Path, run: dict, *, nproc: int = 2, kills: int = 1) -> dict:
    """§20.5.2 the spot run ``run`` (``steps``, ``batch``, ``checkpoint_every``) on ``nproc``
    processes twice, in one launcher process (:func:`main`): with ``kills`` SIGKILLs and
    torchrun's restarts, then uninterrupted. Returns both fingerprints and both runs' progress
    records (launch, step, wall time, kills)."""
    nproc, kills = check_int("nproc", nproc, 1), check_int("kills", kills, 0)
    directory = Path(directory)
    args = [str(directory), *(str(run[k]) for k in ("steps", "batch", "checkpoint_every")),
            str(nproc), str(kills)]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", __name__, *args], capture_output=True,
                          text=True, cwd=repo_root() or Path.cwd(), timeout=600)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the chaos run failed:\n{done.stderr[-3000:]}")
    runs = {name: RunConfig(output_dir=str(directory / name)) for name in ("chaos", "clean")}
    prints = {name: json.loads(Path(run.summary_file).read_text())["fingerprint"]
              for name, run in runs.items()}  # fmt: skip
    return {**prints, "progress": read_progress(runs["chaos"].checkpoint_dir),
            "clean_progress": read_progress(runs["clean"].checkpoint_dir)}  # fmt: skip


def restart_seconds(progress: list[dict]) -> list[float]:
    """§20.5.2 for each kill in a run's progress records (:func:`chaos_run`'s), the seconds from
    the kill to the first step that the next launch completed: the restart time R as this machine
    pays it (the agent's restart, a new process group, the checkpoint load, one step)."""
    waits = []
    for i, record in enumerate(progress):
        if "kill" in record:
            later = [r for r in progress[i + 1 :] if "step" in r]
            if later:
                waits.append(later[0]["time"] - record["time"])
    return waits


if __name__ == "__main__":
    main(sys.argv[1:])
