"""§20.4 The DDP demo's run: the shared contrastive embedding model trained on real text, on any
number of processes, CPUs or GPUs, one node or several (``chapter20.demos.ddp_demo`` is its
command line, ``scripts/ddp_demo.py`` calls it).

The bag-of-embeddings encoder (listing L2's model) is trained with InfoNCE whose negatives are
the keys of every rank, under DistributedDataParallel (gloo on CPU, nccl on CUDA), through the
composed step (``chapter20.training.trainer``). The global batch is split over the ranks by a
DistributedSampler, so the run equals one process with the same global batch and seed. The
learning rate of ``training`` is the rate at ``base_batch`` pairs, scaled linearly to ``batch``
with a warm-up; ``training.chunk_size`` splits each rank's batch into chunks by gradient caching
(the full batch's negatives; plain accumulation would not keep them). Rank 0 shows a progress
bar and prints a summary: the final loss next to ln(batch), the loss of a uniform guess over the
batch's candidates, and held-out recall@1/@10 next to chance (k / held-out pairs).

The defaults learn within seconds on two CPU cores: AdamW at 1e-2 for 256 pairs (a bag of
embeddings tolerates a high rate; at 1e-3 forty steps barely leave the uniform guess),
temperature 0.1, 60 steps (about 1.5 epochs of the 9,953 training pairs).
"""

from __future__ import annotations

import json
import math
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
from chapter20.techniques.contrastive import recall_at_k
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

#: The demo's composed step: AdamW at 1e-2 for 256 pairs, 10 warm-up steps, InfoNCE at 0.1.
DEMO_TRAINING = TrainConfig(lr=1e-2, weight_decay=0.0, warmup_steps=10, temperature=0.1)


@dataclass(frozen=True)
class DemoConfig:
    """The DDP demo (§20.4): ``steps`` of ``batch`` pairs (global, split evenly over the ranks)
    of a ``vocab``-row, ``dim``-wide bag encoder seeded by ``seed``; ``training.lr`` is the rate
    at ``base_batch`` pairs; ``compress`` the gradient all-reduce's compression hook;
    ``checkpoint_dir`` (the final state, written by rank 0) and ``summary_json`` are optional;
    ``report`` prints rank 0's summary line; a cosine schedule of ``training`` ends at ``steps``
    unless it gives ``total_steps``."""

    steps: int = option(60, "optimizer steps")
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
    report: bool = option(True, "print the summary line on rank 0")
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
        # A cosine schedule without total_steps ends at this run's last step.
        object.__setattr__(self, "training", self.training.for_steps(self.steps))

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
    held_out = (data.test_anchors.to(ctx.device), data.test_positives.to(ctx.device))
    recall = recall_at_k(trainer.encoder, *held_out)  # the same on every rank: replicas agree
    if config.checkpoint_dir is not None:  # the whole state, written by rank 0, atomically
        CheckpointManager(config.checkpoint_dir, keep_last=1).save(trainer.capture_state())
    summary = _summary(config, ctx, trainer, losses, seconds, epochs[0] + 1, stats)
    summary.update(_quality(config, losses, recall, len(data.test_anchors)))
    if ctx.is_main and config.report:
        main_print(_report_line(config, ctx, summary))
    if ctx.is_main and config.summary_json is not None:
        path = Path(config.summary_json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2))
    return summary


def _summary(config, ctx, trainer, losses, seconds, epochs, stats) -> dict:
    """The run's figures, the same on every rank (but ``seconds`` and the rates)."""
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
        "pairs_per_second": config.steps * config.batch / seconds,  # first step included
        "seconds": seconds,
        "parameter_abs_sum": checksum,
        "compression_ratio": stats.ratio if stats else None,
        # what this rank handed to gradient all-reduces per step, as counted by the DDP
        # communication hook (claim C02); the ring moves 2(W-1)/W of it over each link
        "allreduce_bytes_per_step": stats.sent_bytes / config.steps if stats else None,
    }
    return summary


def _quality(config: DemoConfig, losses: list[float], recall: dict, heldout: int) -> dict:
    """What the run learned: the mean loss of the last 5 steps next to ln(batch) (the
    InfoNCE of a uniform guess over the batch's candidates), held-out recall next to chance."""
    last = losses[-5:]
    return {
        "final_loss_mean5": sum(last) / len(last),
        "uniform_guess_loss": math.log(config.batch),
        "recall_at_1": recall[1],
        "recall_at_10": recall[10],
        "heldout_pairs": heldout,
        "chance_at_1": 1 / heldout,
        "chance_at_10": min(1.0, 10 / heldout),
    }


def _report_line(config: DemoConfig, ctx, summary: dict) -> str:
    """Rank 0's summary: loss against the uniform guess, recall against chance, throughput."""
    compression = (
        f", all-reduce bytes x{summary['compression_ratio']:.2f} ({config.compress})"
        if summary["compression_ratio"] is not None
        else ""
    )
    return (
        f"done: {config.steps} steps x {config.batch} pairs on {ctx.world_size} process(es) "
        f"[{ctx.backend or 'no process group'}, {ctx.device}], lr {summary['lr']:.2e}: "
        f"loss {summary['first_loss']:.2f} -> {summary['final_loss_mean5']:.2f} (mean of the last "
        f"{min(5, config.steps)} steps; "
        f"a uniform guess: ln {config.batch} = {summary['uniform_guess_loss']:.2f}); held-out "
        f"recall@1 {summary['recall_at_1']:.3f}, @10 {summary['recall_at_10']:.3f} "
        f"(chance {summary['chance_at_1']:.4f}, {summary['chance_at_10']:.4f}; "
        f"{summary['heldout_pairs']:,} pairs); {summary['pairs_per_second']:,.0f} pairs/s"
        + compression
    )
