"""§20.5.2 The spot demo: a contrastive training run that survives preemption, bit for bit.

The run is a preset of the shared contrastive model's run
(``chapter20.training.pair_training.PairRunConfig``): the bag-of-embeddings encoder, cross-rank
InfoNCE, AdamW with warm-up, on next-sentence pairs of the Wikipedia sample, trained by the one
run driver (``chapter20.training.driver``) through the composed step inside the resumable loop,
under ``deterministic_mode``. The techniques of that step can be switched on (precision,
gradient caching, a learned temperature, 8-bit state), so the proof covers the composed
trainer's whole state. Token dropout on the anchors draws from torch's global RNG, so the run
depends on every piece of state that ``capture_state`` saves. A killed run relaunched with the
same arguments finishes with exactly the parameters of a run that was never interrupted.

:func:`main` is its command line (``python -m chapter20.demos.spot_run``,
``chapter20/scripts/spot_demo.py``); :func:`start_spot_demo` and :func:`launch_spot_demo` run it
under ``torchrun --module``.

    python chapter20/scripts/spot_demo.py --output-dir runs/spot          # one process
    torchrun --standalone --nproc_per_node=2 --max-restarts=5 \\
        chapter20/scripts/spot_demo.py --output-dir runs/spot --chaos-kills 3   # 2 ranks
    # or a plain relaunch loop, as a cluster's requeue would do:
    until python chapter20/scripts/spot_demo.py --output-dir runs/spot --chaos-kills 3; do :; done

Every launch resumes from the newest valid checkpoint in ``OUTPUT_DIR/checkpoints`` (a fresh
directory starts from step 0). ``--chaos-kills N`` makes rank 0 SIGKILL itself N times at random
steps, like a reclaimed spot machine. SIGTERM/SIGINT or ``--notice-file`` appearing make the run
finish its step, checkpoint, and exit with status 143
(``chapter20.training.preemption.EXIT_PREEMPTED``). At the end rank 0 prints the parameter
fingerprint, equal to that of an uninterrupted run with the same arguments (and the same number
of processes), and writes ``OUTPUT_DIR/summary.json``. ``--stop-after N`` ends the launch after
N steps as a kill would: rank 0 says where it stopped and how to resume, and the exit status is
0. The options are the fields of :class:`SpotConfig`, of its ``TrainConfig`` and of its
``LoopConfig`` (``--help`` lists them).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from chapter20.core.checks import check_int, check_real
from chapter20.core.corpora import pair_data
from chapter20.core.options import add_options, option, parse_config, preset_option
from chapter20.core.paths import repo_root
from chapter20.training.config import TrainConfig
from chapter20.training.driver import Batches, FinishedRun, run_on_this_rank, run_training
from chapter20.training.loop import LoopConfig, StoppedLaunch
from chapter20.training.pair_training import PairRunConfig
from chapter20.training.run_config import RunConfig
from chapter20.training.sampler import ResumableBatchSampler
from chapter20.training.trainer import Trainer

__all__ = [
    "DEMO_MODULE",
    "PROG",
    "SPOT_TRAINING",
    "SpotConfig",
    "finished_lines",
    "launch_spot_demo",
    "main",
    "parse_args",
    "run_spot_training",
    "spot_batches",
    "start_process",
    "start_spot_demo",
    "wait_for_spot_demos",
]

#: The spot demo's command line, launched as ``python -m`` / ``torchrun --module``.
DEMO_MODULE = "chapter20.demos.spot_run"
#: The name in usage and error lines (``python -m`` or torchrun would show another).
PROG = "spot_demo.py"

#: The composed step of the spot demo: AdamW at 0.02 with 5 warm-up steps, InfoNCE at the
#: default temperature.
SPOT_TRAINING = TrainConfig(lr=0.02, weight_decay=0.0, warmup_steps=5)


@dataclass(frozen=True)
class SpotConfig(PairRunConfig):
    """One spot training run (§20.5.2); the defaults finish in seconds on a CPU.

    A preset of :class:`~chapter20.training.pair_training.PairRunConfig`: 60 steps of 64 pairs
    of a 2,000-row, 32-wide encoder; ``token_dropout`` on the anchors; the step of
    :data:`SPOT_TRAINING`, checkpoints every 5 steps under ``deterministic_mode``. The run needs
    an ``output_dir`` (the checkpoints are saved in, and resumed from,
    ``output_dir/checkpoints``); the stress test gives each of its runs its own."""

    steps: int = preset_option(RunConfig, "steps", 60)
    batch: int = preset_option(RunConfig, "batch", 64)
    training: TrainConfig = preset_option(
        RunConfig, "training", default_factory=lambda: SPOT_TRAINING
    )
    loop: LoopConfig = preset_option(RunConfig, "loop", default_factory=LoopConfig)
    vocab: int = preset_option(PairRunConfig, "vocab", 2000)
    dim: int = preset_option(PairRunConfig, "dim", 32)
    token_dropout: float = option(0.1, "anchor tokens dropped (draws from the global RNG)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("steps", self.steps, 1)
        if not 0.0 <= check_real("token_dropout", self.token_dropout, finite=True) < 1.0:
            raise ValueError(f"token_dropout must be in [0, 1), got {self.token_dropout}")


def _drop_tokens(ids: torch.Tensor, p: float) -> torch.Tensor:
    """Token dropout (augmentation) from the global RNG: each token becomes padding with
    probability ``p``, but every row keeps its first token so no text is empty."""
    if p == 0:
        return ids
    drop = torch.rand(ids.shape) < p
    drop[:, 0] = False
    return ids.masked_fill(drop, 0)


def spot_batches(config: SpotConfig, trainer: Trainer) -> Batches:
    """This rank's batches of the spot run (§20.5.2): a :class:`ResumableBatchSampler` over the
    training pairs (its position saved in every checkpoint), token dropout on the anchors."""
    data = pair_data(vocab_size=config.vocab)
    anchors, positives = data.train_anchors, data.train_positives
    sampler = ResumableBatchSampler(len(anchors), config.batch, seed=config.seed)

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        idx = sampler.next_batch()
        batch_anchors = _drop_tokens(anchors[idx], config.token_dropout)
        return batch_anchors.to(trainer.device), positives[idx].to(trainer.device)

    return Batches(next_batch, sampler)


def run_spot_training(
    config: SpotConfig, device: torch.device | None = None
) -> FinishedRun | StoppedLaunch:
    """Train from the newest checkpoint in ``config``'s output directory to ``config.steps``
    (§20.5.2); every rank of the current process group (or a single process) calls it. Returns
    the finished run (rank 0 also writes its summary, with the parameter ``fingerprint``, to
    ``summary.json``), or, when ``config.loop.stop_after`` ended this launch first, its
    :class:`~chapter20.training.loop.StoppedLaunch`. Exits with status 143 after saving when a
    preemption notice arrives."""
    if not isinstance(config, SpotConfig):
        raise TypeError(f"config must be a SpotConfig, got {type(config).__name__}")
    _needs_output_dir(config)
    return run_training(
        config, config.encoder, lambda trainer: spot_batches(config, trainer), device=device
    )


def _needs_output_dir(config: SpotConfig) -> None:
    if config.output_dir is None:
        raise ValueError("output_dir: the spot run saves its checkpoints there; give --output-dir")


def finished_lines(summary: dict) -> list[str]:
    """What the command line prints for a finished run (rank 0)."""
    return [
        f"done: {summary['steps']} steps on {summary['world_size']} process(es), resumed from "
        f"step {summary['resumed_from']}; fingerprint {summary['fingerprint']}"
    ]


def parse_args(argv: list[str] | None = None) -> SpotConfig:
    """§20.5.2 :class:`SpotConfig` from the command line (its options derived from its fields,
    its ``TrainConfig`` and ``LoopConfig`` included); a refused value exits with status 2."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    add_options(parser, SpotConfig)
    return parse_config(parser, SpotConfig, argv, check=_needs_output_dir)[0]


def main(argv: list[str] | None = None) -> FinishedRun | StoppedLaunch:
    """§20.5.2 The spot demo on this process (every rank of a torchrun group runs it): train,
    then rank 0 prints the finished run's fingerprint, or what a ``--stop-after`` launch did.
    A value the run refuses (before any collective) ends the program as a refused option does:
    one line on stderr, exit status 2."""
    config = parse_args(argv)
    return run_on_this_rank(
        PROG, lambda device: run_spot_training(config, device),
        lambda finished: finished_lines(finished.summary),
    )  # fmt: skip


def start_spot_demo(args: list[str], *, nproc: int = 1, max_restarts: int = 0) -> subprocess.Popen:
    """Start the spot demo (``python -m chapter20.demos.spot_run``) under ``torchrun`` with
    ``nproc`` processes and ``--max-restarts`` (§20.5.2) without waiting for it: torchrun's
    elastic agent restarts the whole group after a failure, which is what the demo's SIGKILLs
    are. Each launch rendezvouses on its own free port (``--standalone``), so several can run at
    once. Returns the process, its output captured as text."""
    nproc = check_int("nproc", nproc, 1)
    max_restarts = check_int("max_restarts", max_restarts, 0)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        f"--max-restarts={max_restarts}",
        "--standalone",
        "--module",
        DEMO_MODULE,
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // nproc))}
    return start_process(command, env)


def start_process(command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``command`` in the repository's root (the working directory outside a checkout)
    with ``env`` (None: this process's), its output captured as text, without waiting."""
    if not command or not all(isinstance(part, str) for part in command):
        raise TypeError(f"command must be a non-empty list of str, got {command!r}")
    return subprocess.Popen(
        command, cwd=repo_root() or Path.cwd(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip


def wait_for_spot_demos(
    launches: dict[str, subprocess.Popen], *, timeout: float = 600.0
) -> dict[str, subprocess.CompletedProcess]:
    """Wait up to ``timeout`` seconds for each of the named :func:`start_spot_demo` launches
    (they run at the same time). If one times out, or anything else goes wrong, the launches
    still running are killed before the error is raised. Returns each finished process by name."""
    timeout = check_real("timeout", timeout, minimum=0, maximum=365 * 86400, exclusive=True)
    finished = {}
    try:
        for name, process in launches.items():
            stdout, stderr = process.communicate(timeout=timeout)
            finished[name] = subprocess.CompletedProcess(
                process.args, process.returncode, stdout, stderr
            )
    finally:
        for process in launches.values():
            if process.poll() is None:
                process.kill()
                process.communicate()
    return finished


def launch_spot_demo(
    args: list[str],
    *,
    nproc: int = 1,
    max_restarts: int = 0,
    timeout: float = 600.0,
) -> subprocess.CompletedProcess:
    """Run the spot demo under ``torchrun`` (:func:`start_spot_demo`) and wait for
    it (:func:`wait_for_spot_demos`). Returns the finished process."""
    timeout = check_real("timeout", timeout, minimum=0, maximum=365 * 86400, exclusive=True)
    launch = start_spot_demo(args, nproc=nproc, max_restarts=max_restarts)
    return wait_for_spot_demos({"demo": launch}, timeout=timeout)["demo"]


if __name__ == "__main__":
    main(sys.argv[1:])
