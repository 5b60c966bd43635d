"""§20.5.2 The spot demo: a contrastive training run that survives preemption, bit for bit.

The run trains the shared contrastive embedding model (bag-of-embeddings encoder, cross-rank
InfoNCE, AdamW with warm-up) on next-sentence pairs of the Wikipedia sample, through the composed
step (``chapter20.training.trainer``) inside the resumable loop (``chapter20.training.loop``).
The techniques of that step can be switched on (precision, gradient caching, a learned
temperature, 8-bit state), so the proof covers the composed trainer's whole state. Token dropout
on the anchors draws from torch's global RNG, so the run depends on every piece of state that
``capture_state`` saves. A killed run relaunched with the same arguments finishes with exactly
the parameters of a run that was never interrupted. ``chapter20.demos.spot_demo`` is its
command line (``scripts/spot_demo.py`` calls it); :func:`start_spot_demo` and
:func:`launch_spot_demo` run it under ``torchrun --module``.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from chapter20.core.checks import check_int, check_real
from chapter20.core.corpora import pair_data
from chapter20.core.device import set_seed
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.core.options import option
from chapter20.core.paths import repo_root
from chapter20.techniques.distributed import group_rank_and_size
from chapter20.training.config import TrainConfig
from chapter20.training.loop import LoopConfig, StoppedLaunch, resumable_loop
from chapter20.training.sampler import ResumableBatchSampler
from chapter20.training.state import parameter_fingerprint
from chapter20.training.trainer import Trainer

__all__ = [
    "DEMO_MODULE",
    "SPOT_TRAINING",
    "SpotConfig",
    "SpotResult",
    "launch_spot_demo",
    "run_spot_training",
    "start_spot_demo",
    "wait_for_spot_demos",
]

#: The spot demo's command line, launched as ``python -m`` / ``torchrun --module``.
DEMO_MODULE = "chapter20.demos.spot_demo"

#: The composed step of the spot demo: AdamW at 0.02 with 5 warm-up steps, InfoNCE at 0.05.
SPOT_TRAINING = TrainConfig(lr=0.02, weight_decay=0.0, warmup_steps=5, temperature=0.05)


@dataclass(frozen=True)
class SpotConfig:
    """One spot training run (§20.5.2); the defaults finish in seconds on a CPU.

    ``checkpoint_dir`` (where the state is saved and resumed from), ``steps`` of
    ``batch`` pairs (over all ranks) of a ``vocab``-row, ``dim``-wide bag encoder,
    ``token_dropout`` on the anchors, ``seed``; ``summary_json``: where rank 0 writes a
    finished run's :class:`SpotResult` (optional); ``training`` the composed step's settings
    (``TrainConfig``; a cosine schedule ends at ``steps`` unless it gives ``total_steps``) and
    ``loop`` how the run checkpoints and is killed (``LoopConfig``)."""

    checkpoint_dir: str = option(help="checkpoints are saved in, and resumed from, here")
    steps: int = option(60, "optimizer steps in all")
    batch: int = option(64, "pairs per step, over all ranks")
    vocab: int = option(2000, "rows of the embedding table")
    dim: int = option(32, "embedding width")
    token_dropout: float = option(0.1, "anchor tokens dropped (draws from the global RNG)")
    seed: int = option(0, "seed of the weights and of the data order")
    summary_json: str | None = option(None, "write the summary to this file (rank 0)")
    training: TrainConfig = option(
        help="the composed step (chapter20.training.config.TrainConfig)",
        default_factory=lambda: SPOT_TRAINING,
    )
    loop: LoopConfig = option(
        help="checkpoints and preemption (chapter20.training.loop.LoopConfig)",
        default_factory=LoopConfig,
    )

    def __post_init__(self):
        if not isinstance(self.checkpoint_dir, str) or not self.checkpoint_dir:
            raise TypeError(f"checkpoint_dir must be a non-empty str, got {self.checkpoint_dir!r}")
        if self.summary_json is not None and not isinstance(self.summary_json, str):
            raise TypeError(f"summary_json must be a str path or None, got {self.summary_json!r}")
        for name in ("steps", "batch", "vocab", "dim"):
            check_int(name, getattr(self, name), 1)
        check_int("seed", self.seed, 0)
        if not 0.0 <= check_real("token_dropout", self.token_dropout, finite=True) < 1.0:
            raise ValueError(f"token_dropout must be in [0, 1), got {self.token_dropout}")
        if not isinstance(self.training, TrainConfig):
            raise TypeError(f"training must be a TrainConfig, got {self.training!r}")
        if not isinstance(self.loop, LoopConfig):
            raise TypeError(f"loop must be a LoopConfig, got {self.loop!r}")
        # A cosine schedule without total_steps ends at this run's last step.
        object.__setattr__(self, "training", self.training.for_steps(self.steps))


@dataclass(frozen=True)
class SpotResult:
    """A spot run that reached its last step (§20.5.2): the parameter ``fingerprint``
    (:func:`chapter20.training.state.parameter_fingerprint`; equal to an uninterrupted run's
    with the same arguments and number of processes), the step this launch ``resumed_from``
    (0: from scratch), the ``steps`` reached, the ``world_size``, the median seconds of a
    checkpoint save of this launch (None: it saved none) and the run's ``config`` as a dict."""

    fingerprint: str
    resumed_from: int
    steps: int
    world_size: int
    checkpoint_seconds: float | None
    config: dict[str, Any]

    @classmethod
    def read(cls, path: str | os.PathLike) -> SpotResult:
        """The result a run wrote to ``path`` (``SpotConfig.summary_json``)."""
        return cls(**json.loads(Path(path).read_text()))

    def lines(self) -> list[str]:
        """What the command line prints for the finished run (rank 0)."""
        return [
            f"done: {self.steps} steps on {self.world_size} process(es), resumed from "
            f"step {self.resumed_from}; fingerprint {self.fingerprint}"
        ]


@functools.lru_cache(maxsize=2)
def _training_pairs(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    data = pair_data(vocab_size=vocab)
    return data.train_anchors, data.train_positives


def _drop_tokens(ids: torch.Tensor, p: float) -> torch.Tensor:
    """Token dropout (augmentation) from the global RNG: each token becomes padding with
    probability ``p``, but every row keeps its first token so no text is empty."""
    if p == 0:
        return ids
    drop = torch.rand(ids.shape) < p
    drop[:, 0] = False
    return ids.masked_fill(drop, 0)


def run_spot_training(
    config: SpotConfig, device: torch.device | None = None
) -> SpotResult | StoppedLaunch:
    """Train from the newest checkpoint in ``config.checkpoint_dir`` to ``config.steps`` (§20.5.2).

    Every rank of the current process group (or a single process) calls it. Returns the finished
    run's :class:`SpotResult` (rank 0 also writes it to ``config.summary_json`` as JSON), or, when
    ``config.loop.stop_after`` ended this launch first, its
    :class:`~chapter20.training.loop.StoppedLaunch`. Exits with :data:`EXIT_PREEMPTED` after
    saving when a preemption notice arrives.
    """
    rank, world = group_rank_and_size()
    device = device or torch.device("cpu")
    anchors, positives = _training_pairs(config.vocab)
    set_seed(config.seed)
    model = BagOfEmbeddingsEncoder(config.vocab, config.dim).to(device)
    trainer = Trainer(model, config.training)
    sampler = ResumableBatchSampler(len(anchors), config.batch, seed=config.seed)

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        idx = sampler.next_batch()
        batch_anchors = _drop_tokens(anchors[idx], config.token_dropout)
        return batch_anchors.to(device), positives[idx].to(device)

    run = resumable_loop(
        trainer, sampler, next_batch, config.loop, steps=config.steps,
        directory=config.checkpoint_dir,
    )  # fmt: skip
    if run.stopped:
        return StoppedLaunch.from_loop(run, config.checkpoint_dir)
    result = SpotResult(
        fingerprint=parameter_fingerprint(trainer.module),
        resumed_from=run.resumed_from,
        steps=run.steps,
        world_size=world,
        checkpoint_seconds=float(np.median(run.save_seconds)) if run.save_seconds else None,
        config=asdict(config),
    )
    if rank == 0 and config.summary_json is not None:
        path = Path(config.summary_json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(result), indent=2))
    return result


def start_spot_demo(args: list[str], *, nproc: int = 1, max_restarts: int = 0) -> subprocess.Popen:
    """Start the spot demo (``python -m chapter20.demos.spot_demo``) under ``torchrun`` with
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
    return subprocess.Popen(
        command,
        cwd=repo_root() or Path.cwd(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


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
