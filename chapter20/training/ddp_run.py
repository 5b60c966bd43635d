"""§20.4 The DDP demo's run: the shared contrastive embedding model trained on real text, on any
number of processes, CPUs or GPUs, one node or several (``scripts/ddp_demo.py`` launches it).

The bag-of-embeddings encoder (listing L2's model) is trained with InfoNCE whose negatives are
the keys of every rank, under DistributedDataParallel (gloo on CPU, nccl on CUDA), through the
composed step (``chapter20.training.trainer``). The global batch is split over the ranks by a
DistributedSampler, so the run equals one process with the same global batch and seed. The
learning rate of ``training`` is the rate at ``base_batch`` pairs, scaled linearly to ``batch``
with a warm-up; ``training.chunk_size`` splits each rank's batch into chunks by gradient caching
(the full batch's negatives; plain accumulation would not keep them). Rank 0 shows a progress
bar and prints a summary.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm

from chapter20.core.checks import check_int
from chapter20.core.corpora import pair_data
from chapter20.core.device import set_seed
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.core.options import option
from chapter20.techniques.distributed import (
    COMPRESSIONS,
    compress_gradients,
    distributed_loader,
    main_print,
    scale_lr,
    set_epoch,
)
from chapter20.training.checkpoints import CheckpointManager
from chapter20.training.config import TrainConfig
from chapter20.training.trainer import Trainer

__all__ = ["DEMO_TRAINING", "DemoConfig", "run_ddp_demo"]

#: The demo's composed step: AdamW at 1e-3 for 256 pairs, 10 warm-up steps, InfoNCE at 0.05.
DEMO_TRAINING = TrainConfig(lr=1e-3, weight_decay=0.0, warmup_steps=10, temperature=0.05)


@dataclass(frozen=True)
class DemoConfig:
    """The DDP demo (§20.4): ``steps`` of ``batch`` pairs (global, split evenly over the ranks)
    of a ``vocab``-row, ``dim``-wide bag encoder seeded by ``seed``; ``training.lr`` is the rate
    at ``base_batch`` pairs; ``compress`` the gradient all-reduce's compression hook;
    ``checkpoint_dir`` (the final state, written by rank 0) and ``summary_json`` are optional."""

    steps: int = option(40, "optimizer steps")
    batch: int = option(256, "pairs per step, over all ranks")
    base_batch: int = option(256, "the batch at which --lr is the rate (scaled linearly)")
    vocab: int = option(10_000, "rows of the embedding table")
    dim: int = option(128, "embedding width")
    seed: int = option(0, "seed of the weights and the data order")
    compress: str = option(
        "none", "gradient all-reduce compression (a DDP communication hook)", choices=COMPRESSIONS
    )
    checkpoint_dir: str | None = option(None, "save the final training state here")
    summary_json: str | None = option(None, "write the summary to this file (rank 0)")
    progress: bool = option(True, "progress bar on rank 0")
    training: TrainConfig = option(
        help="the composed step (chapter20.training.config.TrainConfig)",
        default_factory=lambda: DEMO_TRAINING,
    )

    def __post_init__(self) -> None:
        for name in ("steps", "batch", "base_batch", "vocab", "dim"):
            check_int(name, getattr(self, name), 1)
        check_int("seed", self.seed, 0)
        if self.compress not in COMPRESSIONS:
            raise ValueError(f"compress must be one of {COMPRESSIONS}, got {self.compress!r}")
        if not isinstance(self.training, TrainConfig):
            raise TypeError(f"training must be a TrainConfig, got {self.training!r}")

    def train_config(self) -> TrainConfig:
        """The composed step at the rate of this run's batch (§20.4.1)."""
        return replace(self.training, lr=scale_lr(self.training.lr, self.base_batch, self.batch))


def _batches(loader, epochs_seen: list[int]):
    while True:
        set_epoch(loader, epochs_seen[0])
        yield from loader
        epochs_seen[0] += 1


def run_ddp_demo(config: DemoConfig, ctx) -> dict:
    """The training run of one rank of the DDP demo (§20.4); ``ctx`` is the
    ``chapter20.techniques.distributed.distributed`` context. Returns the summary (the same on
    every rank). A batch that does not split evenly over the ranks raises ValueError on every
    rank before any collective."""
    if config.batch % ctx.world_size:
        raise ValueError(
            f"batch ({config.batch}) must be a multiple of the world size {ctx.world_size}, "
            "so that every rank holds the same number of pairs"
        )
    data = pair_data(vocab_size=config.vocab)
    dataset = torch.utils.data.TensorDataset(data.train_anchors, data.train_positives)
    loader = distributed_loader(dataset, config.batch // ctx.world_size, seed=config.seed)
    set_seed(config.seed)
    model = BagOfEmbeddingsEncoder(config.vocab, config.dim).to(ctx.device)
    trainer = Trainer(model, config.train_config())
    stats = compress_gradients(trainer.model, config.compress) if ctx.world_size > 1 else None
    epochs = [0]
    batches = _batches(loader, epochs)
    progress = tqdm(
        total=config.steps,
        disable=not ctx.is_main or not config.progress,
        desc=f"DDP x{ctx.world_size} ({ctx.backend or 'one process'})",
    )
    losses, start = [], time.perf_counter()
    for _ in range(config.steps):
        batch = tuple(t.to(ctx.device, non_blocking=True) for t in next(batches))
        losses.append(trainer.step(batch).loss)  # the loss of the global batch, on every rank
        progress.update()
        progress.set_postfix(loss=f"{losses[-1]:.3f}")
    progress.close()
    seconds = time.perf_counter() - start
    if config.checkpoint_dir is not None:  # the whole state, written by rank 0, atomically
        CheckpointManager(config.checkpoint_dir, keep_last=1).save(trainer.capture_state())
    summary = _summary(config, ctx, trainer, losses, seconds, epochs[0] + 1, stats)
    if ctx.is_main and config.summary_json is not None:
        path = Path(config.summary_json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2))
    return summary


def _summary(config, ctx, trainer, losses, seconds, epochs, stats) -> dict:
    """The run's figures, the same on every rank; rank 0 prints one line of them."""
    checksum = sum(float(p.detach().double().abs().sum()) for p in trainer.encoder.parameters())
    lr = trainer.config.lr
    summary = {
        "world_size": ctx.world_size,
        "backend": ctx.backend,
        "device": str(ctx.device),
        "steps": config.steps,
        "global_batch": config.batch,
        "lr": lr,
        "epochs_started": epochs,
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "pairs_per_second": config.steps * config.batch / seconds,
        "seconds": seconds,
        "parameter_abs_sum": checksum,
        "compression_ratio": stats.ratio if stats else None,
        # what this rank handed to gradient all-reduces per step, as counted by the DDP
        # communication hook (claim C02); the ring moves 2(W-1)/W of it over each link
        "allreduce_bytes_per_step": stats.sent_bytes / config.steps if stats else None,
    }
    main_print(
        f"done: {config.steps} steps x {config.batch} pairs on {ctx.world_size} process(es) "
        f"[{ctx.backend or 'no process group'}, {ctx.device}]: loss {losses[0]:.3f} -> "
        f"{losses[-1]:.3f}, {summary['pairs_per_second']:,.0f} pairs/s, lr {lr:.2e}"
        + (f", all-reduce bytes x{stats.ratio:.2f} ({config.compress})" if stats else "")
    )
    return summary
