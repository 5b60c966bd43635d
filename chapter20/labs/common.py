"""What several labs share (ARCHITECTURE.md): the quality run of notebooks 02, 03 and 05, and
the quartiles a timing table prints next to its medians.

:func:`heldout_run` trains the bag-of-embeddings encoder through the composed trainer on the
next-sentence pairs and scores held-out recall; the batch-strategy (§20.2.1), precision
(§20.2.2) and optimizer (§20.3.2) comparisons are this run with one option changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from chapter20.core.checks import check_int
from chapter20.core.corpora import PairData, shuffled_batches
from chapter20.core.device import set_seed
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.techniques.contrastive import recall_at_k
from chapter20.training.config import TrainConfig
from chapter20.training.trainer import StepResult, Trainer

__all__ = ["LOCAL_GROUP_TIMEOUT_S", "HeldoutRun", "heldout_run", "train_on_pairs", "quartiles_ms"]


def train_on_pairs(
    trainer: Trainer,
    anchors: torch.Tensor,
    positives: torch.Tensor,
    *,
    steps: int,
    batch: int,
    seed: int = 0,
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> list[StepResult]:
    """``steps`` contrastive steps of ``trainer`` on batches of (``anchors``, ``positives``)
    drawn by a seeded epoch sampler (``chapter20.core.corpora.shuffled_batches``); ``transform`` is
    applied to each batch of anchors (e.g. token dropout). Returns every step's result."""
    steps = check_int("steps", steps, 1)
    seed = check_int("seed", seed, 0)
    batches = shuffled_batches(len(anchors), batch, torch.Generator().manual_seed(seed))
    results = []
    for _ in range(steps):
        ids = next(batches)
        chosen = anchors[ids] if transform is None else transform(anchors[ids])
        results.append(trainer.step((chosen.to(trainer.device), positives[ids].to(trainer.device))))
    return results


@dataclass(frozen=True)
class HeldoutRun:
    """One :func:`heldout_run`: the loss of every step, held-out recall@k (k = 1, 10), the
    steps skipped for non-finite gradients, the training seconds and the final weights."""

    losses: list[float]
    recall: dict[int, float]
    skipped_steps: int
    seconds: float
    state: dict[str, torch.Tensor]

    @property
    def final_loss(self) -> float:
        """Mean loss of the last 10 steps (fewer if the run was shorter)."""
        return float(sum(self.losses[-10:]) / len(self.losses[-10:]))


def heldout_run(
    data: PairData,
    config: TrainConfig,
    *,
    steps: int,
    batch: int,
    seed: int = 0,
    dim: int = 128,
    loss: Callable | None = None,
) -> HeldoutRun:
    """Train the bag-of-embeddings encoder (``dim`` wide, seeded with ``seed``) on ``data``'s
    training pairs for ``steps`` steps of ``batch`` pairs through the composed trainer with
    ``config`` (and a per-example ``loss`` where the config accumulates), then score recall@1
    and @10 on the held-out pairs (chance: k / number of held-out pairs). The quality runs of
    §20.2.1 (batch strategies), §20.2.2 (precisions) and §20.3.2 (optimizers) are this run with
    one option changed.

    Recall is scored in float32 whatever precision trained the weights: the question is what
    training did to the model. (Scored under 16-bit autocast, the coarser similarities tie
    more often, and a tie with the true positive counts as a hit.)"""
    steps, batch = check_int("steps", steps, 1), check_int("batch", batch, 1)
    set_seed(check_int("seed", seed, 0))
    model = BagOfEmbeddingsEncoder(data.vocab_size, check_int("dim", dim, 1))
    trainer = Trainer(model, config, loss=loss)
    start = time.perf_counter()
    results = train_on_pairs(
        trainer, data.train_anchors, data.train_positives, steps=steps, batch=batch, seed=seed
    )
    seconds = time.perf_counter() - start
    return HeldoutRun(
        [r.loss for r in results],
        recall_at_k(model, data.test_anchors, data.test_positives),
        trainer.skipped_steps,
        seconds,
        {k: v.detach().clone() for k, v in model.state_dict().items()},
    )


#: Seconds a local gloo group of a lab may take: generous, because a machine shared with other
#: jobs starts processes slowly (on an idle 2-core machine each group takes a few seconds).
LOCAL_GROUP_TIMEOUT_S = 600.0


def quartiles_ms(seconds: Sequence[float]) -> dict[str, float]:
    """The median and the interquartile range (25th–75th percentile) of repeated timings, in
    milliseconds: ``{"ms", "q25_ms", "q75_ms", "iqr_ms"}``. The median is the figure a table
    reports; the IQR is its spread, and the threshold under which two medians are reported as
    indistinguishable (``chapter20.core.findings.compare(spread=...)``)."""
    values = 1e3 * np.asarray(list(seconds), dtype=float)
    if values.size == 0:
        raise ValueError("seconds must hold at least one timing")
    q25, median, q75 = np.percentile(values, [25, 50, 75])
    return {"ms": float(median), "q25_ms": float(q25), "q75_ms": float(q75),
            "iqr_ms": float(q75 - q25)}  # fmt: skip
