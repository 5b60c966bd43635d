"""§20.2 and §20.6 contrastive training on (anchor, positive) pairs through the composed step,
and its held-out score: the quality run that §20.2.1 (batch strategies), §20.2.2 (precisions)
and §20.3.2 (optimizers) change one option of.

- :func:`train_on_pairs`: ``steps`` steps of a :class:`~chapter20.training.trainer.Trainer` on
  seeded batches of pairs (the one loop the labs and tests share);
- :func:`heldout_run` / :class:`HeldoutRun`: the bag-of-embeddings encoder (or a given one)
  trained through it from a seed, scored by held-out recall@1, @10 and MRR in float32.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from chapter20.core.checks import check_int
from chapter20.core.corpora import PairData, shuffled_batches
from chapter20.core.device import set_seed
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.techniques.contrastive import recall_at_k, retrieval_scores
from chapter20.training.config import TrainConfig
from chapter20.training.trainer import StepResult, Trainer

__all__ = ["HeldoutRun", "heldout_run", "train_on_pairs"]


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
    steps skipped for non-finite gradients, the training seconds, the final weights and the
    held-out mean reciprocal rank (``mrr``: every query's rank counts, not only the top 10)."""

    losses: list[float]
    recall: dict[int, float]
    skipped_steps: int
    seconds: float
    state: dict[str, torch.Tensor]
    mrr: float = float("nan")

    @property
    def final_loss(self) -> float:
        """Mean loss of the last 10 steps (fewer if the run was shorter; NaN for no step)."""
        last = self.losses[-10:]
        return float(sum(last) / len(last)) if last else float("nan")


def heldout_run(
    data: PairData,
    config: TrainConfig,
    *,
    steps: int,
    batch: int,
    seed: int = 0,
    dim: int = 128,
    loss: Callable | None = None,
    encoder: Callable[[int, int], torch.nn.Module] | None = None,
    optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer] | None = None,
) -> HeldoutRun:
    """Train the bag-of-embeddings encoder (``dim`` wide, seeded with ``seed``; or
    ``encoder(vocab_size, dim)``, built right after the seed) on ``data``'s
    training pairs for ``steps`` steps of ``batch`` pairs through the composed trainer with
    ``config`` (and a per-example ``loss`` where the config accumulates; ``steps=0``: the
    untrained encoder, the level that training must rise above), then score recall@1
    and @10 on the held-out pairs (chance: k / number of held-out pairs). The quality runs of
    §20.2.1 (batch strategies), §20.2.2 (precisions) and §20.3.2 (optimizers) are this run with
    one option changed. ``optimizer(model)``, if given, builds the optimizer instead of the
    config's (a deliberately harmful variant, for a positive control).

    Recall is scored in float32 whatever precision trained the weights (weights kept in 16 bits
    are cast to float32 first): the question is what training did to the model; a model whose
    weights are not finite scores 0. (Scored under 16-bit autocast, the coarser similarities tie
    more often, and a tie with the true positive counts as a hit.)"""
    steps, batch = check_int("steps", steps, 0), check_int("batch", batch, 1)
    for name, given in (("loss", loss), ("encoder", encoder), ("optimizer", optimizer)):
        if given is not None and not callable(given):
            raise TypeError(f"{name} must be callable or None, got {type(given).__name__}")
    set_seed(check_int("seed", seed, 0))
    build = BagOfEmbeddingsEncoder if encoder is None else encoder
    model = build(data.vocab_size, check_int("dim", dim, 1))
    given = optimizer(model) if optimizer is not None else None
    trainer = Trainer(model, config, loss=loss, optimizer=given)
    start = time.perf_counter()
    results = (
        train_on_pairs(
            trainer, data.train_anchors, data.train_positives, steps=steps, batch=batch, seed=seed
        )
        if steps
        else []
    )
    seconds = time.perf_counter() - start
    model.float()  # weights trained in 16 bits (no fp32 master copy) are scored in float32 too
    # A NaN similarity beats no candidate, so recall_at_k would count every anchor of a model
    # whose weights are not finite as a hit: such a model retrieves nothing.
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    recall = recall_at_k(model, data.test_anchors, data.test_positives) if finite else None
    return HeldoutRun(
        [r.loss for r in results],
        recall or {1: 0.0, 10: 0.0},
        trainer.skipped_steps,
        seconds,
        {k: v.detach().clone() for k, v in model.state_dict().items()},
        _heldout_mrr(model, data) if finite else 0.0,
    )


def _heldout_mrr(model: torch.nn.Module, data: PairData) -> float:
    """Mean reciprocal rank of each held-out anchor's own positive among all held-out
    positives (cosine similarity, float32), ties counted against the positive as
    ``chapter20.capstone.metrics.positive_ranks`` counts them (that layer sits above this one)."""
    with torch.no_grad():
        scores = retrieval_scores(model, data.test_anchors, data.test_positives).numpy()
    ranks = (scores >= scores.diagonal()[:, None]).sum(axis=1)  # the positive counts once
    return float((1.0 / ranks).mean())
