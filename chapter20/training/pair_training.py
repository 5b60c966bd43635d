"""§20.2 and §20.6 the short contrastive run on (anchor, positive) pairs, and its held-out score:
the quality run that §20.2.1 (batch strategies), §20.2.2 (precisions) and §20.3.2 (optimizers)
change one option of.

:class:`PairRunConfig` is the preset of the one run specification
(``chapter20.training.run_config.RunConfig``) for the shared contrastive model: the
bag-of-embeddings encoder on next-sentence pairs of the Wikipedia sample. The DDP demo and the
spot demo (``chapter20.demos``) are presets of it too. :func:`heldout_run` trains it through the
one run driver (``chapter20.training.driver``) on seeded batches of pairs (:func:`pair_batches`),
then scores held-out recall@1, @10 and MRR in float32 (:class:`HeldoutRun`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from chapter20.core.checks import check_int
from chapter20.core.corpora import PairData, pair_data, shuffled_batches
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.core.options import option, preset_option
from chapter20.techniques.contrastive import recall_at_k, retrieval_scores
from chapter20.training.driver import Batches, run_training
from chapter20.training.loop import LoopConfig
from chapter20.training.run_config import RunConfig
from chapter20.training.trainer import Trainer

__all__ = ["HeldoutRun", "PairRunConfig", "heldout_run", "pair_batches"]


@dataclass(frozen=True)
class PairRunConfig(RunConfig):
    """A run of the shared contrastive model (§20.2, §20.6): a ``vocab``-row, ``dim``-wide
    bag-of-embeddings encoder on next-sentence pairs of the Wikipedia sample
    (``chapter20.core.corpora.pair_data`` with that vocabulary), InfoNCE against in-batch (and,
    under DDP, every rank's) negatives. No progress bar and no deterministic mode by default:
    a short run in a notebook, at the machine's own thread count."""

    progress: bool = preset_option(RunConfig, "progress", False)
    loop: LoopConfig = preset_option(
        RunConfig, "loop", default_factory=lambda: LoopConfig(deterministic=False)
    )
    vocab: int = option(10_000, "rows of the embedding table (the pairs' vocabulary)")
    dim: int = option(128, "embedding width")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("vocab", self.vocab, 3)
        check_int("dim", self.dim, 1)

    def encoder(self) -> BagOfEmbeddingsEncoder:
        """The untrained encoder of this run (seed it first: the driver does)."""
        return BagOfEmbeddingsEncoder(self.vocab, self.dim)


def pair_batches(
    trainer: Trainer, anchors: torch.Tensor, positives: torch.Tensor, *, batch: int, seed: int
) -> Batches:
    """Batches of ``batch`` (``anchors``, ``positives``) rows on ``trainer``'s device, drawn by a
    seeded epoch sampler (``chapter20.core.corpora.shuffled_batches``: each epoch a fresh
    permutation from one generator seeded with ``seed``). One process; not resumable."""
    seed = check_int("seed", seed, 0)
    indices = shuffled_batches(len(anchors), batch, torch.Generator().manual_seed(seed))

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        ids = next(indices)
        return anchors[ids].to(trainer.device), positives[ids].to(trainer.device)

    return Batches(next_batch)


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
    config: PairRunConfig,
    data: PairData | None = None,
    *,
    loss: Callable | None = None,
    encoder: Callable[[int, int], torch.nn.Module] | None = None,
    optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer] | None = None,
) -> HeldoutRun:
    """Train the run's encoder (or ``encoder(vocab, dim)``) on the training pairs of ``data``
    (default: ``pair_data`` of the run's vocabulary) as ``config`` says — its ``steps`` of
    ``batch`` pairs through the composed step, seeded by its ``seed``, one process; ``steps=0``:
    the untrained encoder, the level that training must rise above — with a per-example ``loss``
    where the step accumulates, then score recall@1 and @10 on the held-out pairs (chance:
    k / number of held-out pairs). ``optimizer(model)``, if given, builds the optimizer instead
    of the step's (a deliberately harmful variant, for a positive control).

    Recall is scored in float32 whatever precision trained the weights (weights kept in 16 bits
    are cast to float32 first): the question is what training did to the model; a model whose
    weights are not finite scores 0. (Scored under 16-bit autocast, the coarser similarities tie
    more often, and a tie with the true positive counts as a hit.)"""
    if not isinstance(config, PairRunConfig):
        raise TypeError(f"config must be a PairRunConfig, got {type(config).__name__}")
    data = pair_data(vocab_size=config.vocab) if data is None else data
    if not isinstance(data, PairData) or data.vocab_size != config.vocab:
        raise ValueError(f"data must be PairData of the run's vocabulary ({config.vocab} rows)")
    if encoder is not None and not callable(encoder):
        raise TypeError(f"encoder must be callable or None, got {type(encoder).__name__}")
    finished = run_training(
        config,
        config.encoder if encoder is None else lambda: encoder(config.vocab, config.dim),
        lambda trainer: pair_batches(
            trainer, data.train_anchors, data.train_positives, batch=config.batch, seed=config.seed
        ),  # fmt: skip
        loss=loss,
        optimizer=optimizer,
    )
    model = finished.trainer.encoder
    model.float()  # weights trained in 16 bits (no fp32 master copy) are scored in float32 too
    # A NaN similarity beats no candidate, so recall_at_k would count every anchor of a model
    # whose weights are not finite as a hit: such a model retrieves nothing.
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    recall = recall_at_k(model, data.test_anchors, data.test_positives) if finite else None
    return HeldoutRun(
        list(finished.losses),
        recall or {1: 0.0, 10: 0.0},
        finished.trainer.skipped_steps,
        finished.summary["train_seconds_this_launch"],
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
