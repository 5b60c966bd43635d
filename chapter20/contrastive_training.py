"""§20.1 The distributed contrastive trainer of listing L2, done right.

Listing L2 trains an embedding + projection with an MSE placeholder, no negatives from other
ranks, no DDP wrapper, and a world size it ignores. :class:`ContrastiveTrainer` trains the same
shared encoder (``chapter20.models.BagOfEmbeddingsEncoder``) with InfoNCE whose negatives are the
keys of every rank (:func:`chapter20.contrastive.distributed_info_nce`), wraps it in
``DistributedDataParallel`` when there is more than one rank, optionally caches gradients to fit
large batches, and saves checkpoints from rank 0 only, atomically, with a barrier after.
Its steps on W ranks equal the steps of one process on the concatenated batch.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from chapter20.checks import check_int
from chapter20.contrastive import _check_temperature, distributed_info_nce, grad_cache_backward
from chapter20.distributed import group_rank_and_size
from chapter20.paths import atomic_torch_save
from chapter20.precision import autocast

__all__ = ["ContrastiveTrainer"]


class ContrastiveTrainer:
    """Train a shared encoder on (anchor, positive) pairs with cross-rank InfoNCE (§20.1).

    Every rank passes its own slice of the global batch to :meth:`step`; the update equals one
    process training on the concatenation (DDP averages the gradients and the loss is scaled
    for that). ``chunk_size`` turns on gradient caching (§20.2.1); ``precision="bf16"`` runs the
    encoder under autocast (§20.2.2; the loss stays fp32). ``group=None`` uses the default
    process group, or none.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        temperature: float = 0.05,
        chunk_size: int | None = None,
        clip_norm: float | None = None,
        precision: str = "fp32",
        group: dist.ProcessGroup | None = None,
    ):
        _check_temperature(temperature)
        if precision not in ("fp32", "bf16"):
            raise ValueError(
                f"precision must be 'fp32' or 'bf16' (fp16 needs loss scaling: use "
                f"chapter20.precision.MixedPrecisionTrainer), got {precision!r}"
            )
        if chunk_size is not None:
            check_int("chunk_size", chunk_size, 1)
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"clip_norm must be None or > 0, got {clip_norm}")
        self.rank, self.world_size = group_rank_and_size(group)
        self.group = group
        self.module = model
        self.model = (
            nn.parallel.DistributedDataParallel(model, process_group=group)
            if self.world_size > 1
            else model
        )
        self.optimizer = optimizer
        self.temperature = temperature
        self.chunk_size = chunk_size
        self.clip_norm = clip_norm
        device = next(model.parameters()).device
        self.forward_context = lambda: autocast(precision, device)
        self.steps = 0

    @property
    def is_main(self) -> bool:
        """True on the rank that logs and saves (rank 0)."""
        return self.rank == 0

    def _loss(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return distributed_info_nce(queries, keys, self.temperature, group=self.group)

    def step(self, anchors: torch.Tensor, positives: torch.Tensor) -> float:
        """One update on this rank's pairs; returns this rank's loss (averaged over ranks it is
        the loss of the global batch)."""
        if anchors.shape[0] != positives.shape[0]:
            raise ValueError(
                f"anchors and positives must hold the same number of rows, got "
                f"{anchors.shape[0]} and {positives.shape[0]}"
            )
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        if self.chunk_size is None:
            with self.forward_context():
                loss = self._loss(self.model(anchors), self.model(positives))
            loss.backward()
        else:
            loss = grad_cache_backward(
                self.model,
                (anchors, positives),
                self._loss,
                self.chunk_size,
                forward_context=self.forward_context,
            )
        if self.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_norm)
        self.optimizer.step()
        self.steps += 1
        return loss.item()

    def save_checkpoint(self, path: str | os.PathLike) -> Path | None:
        """Rank 0 writes model, optimizer and step count atomically; every rank waits at a
        barrier until it is on disk (§20.4 best practices). Returns the path on rank 0."""
        written = None
        if self.is_main:
            state = {
                "model": self.module.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "steps": self.steps,
            }
            written = atomic_torch_save(state, path)
        if self.world_size > 1:
            dist.barrier(group=self.group)
        return written

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Every rank loads the checkpoint rank 0 saved (model, optimizer, step count)."""
        state = torch.load(
            path, map_location=next(self.module.parameters()).device, weights_only=True
        )
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = state["steps"]
