"""§20.5 The throughput the cost model scales: pairs per second of one real training step.

:func:`measure_throughput` builds the workload's encoder and times one step of the composed
trainer (``chapter20.training.Trainer``: both towers, InfoNCE, backward, AdamW) on this machine;
``chapter20.cost.estimates`` turns pairs per second into hours and dollars.
"""

from __future__ import annotations

import torch

from chapter20.core.checks import check_int
from chapter20.core.device import get_device, set_seed
from chapter20.core.measure import time_fn
from chapter20.core.models import TransformerEncoder
from chapter20.cost.estimates import EMBEDDING_WORKLOAD, Workload
from chapter20.training.config import TrainConfig
from chapter20.training.trainer import Trainer

__all__ = ["measure_throughput"]


def measure_throughput(
    workload: Workload = EMBEDDING_WORKLOAD,
    *,
    batch: int | None = None,
    precision: str | None = None,
    device: torch.device | str | None = None,
    warmup: int = 1,
    repeat: int = 3,
    seed: int = 0,
) -> float:
    """Pairs per second of one training step of ``workload``'s encoder on ``device`` (§20.5,
    the cost model's throughput): the composed step with both towers, InfoNCE, backward and
    AdamW in ``precision`` (default: the workload's), timed by
    :func:`chapter20.core.measure.time_fn` (median of ``repeat``). ``batch`` defaults to the
    workload's pairs per GPU; a small batch keeps a CPU measurement short."""
    batch = check_int("batch", workload.pairs_per_gpu if batch is None else batch, 1)
    device = get_device() if device is None else torch.device(device)
    set_seed(seed)
    model = TransformerEncoder(
        workload.vocab,
        d_model=workload.d_model,
        n_heads=workload.n_heads,
        n_layers=workload.n_layers,
        max_len=workload.seq_len,
        dropout=0.0,
    ).to(device)
    config = TrainConfig(lr=1e-4, precision=precision or workload.precision)
    trainer = Trainer(model, config)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, workload.vocab, (2, batch, workload.seq_len), generator=generator)
    pairs = (ids[0].to(device), ids[1].to(device))
    timing = time_fn(lambda: trainer.step(pairs), warmup=warmup, repeat=repeat, device=device)
    return batch / timing.median
