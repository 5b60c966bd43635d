"""§20.2.1 Gradient accumulation: several micro-batches, one optimizer step.

The chapter's trainer (listing L4) divides each micro-batch's mean loss by the number of
micro-batches. That is the full-batch gradient only when every micro-batch has the same size. Exact
accumulation weights each example by 1 / (examples in the whole step), counted over all ranks under
DDP, so any split — uneven micro-batches, a short last batch, ranks with different counts — gives
the full-batch gradient; under DDP the gradient all-reduce runs once, on the last micro-batch
(``no_sync`` on the others), and clipping comes after accumulation. That step is
``chapter20.training.trainer.Trainer`` with ``TrainConfig(micro_batches=k)`` and a per-example loss;
this module holds the pieces it is made of: :func:`split_batch`, :func:`num_examples` and the
weights of the two rules, :func:`example_weights`.

What accumulation does not do is add negatives to a contrastive loss: a per-example InfoNCE
loss computed inside each micro-batch only sees that micro-batch's keys. For that, see
``chapter20.techniques.contrastive`` (gradient caching, cross-rank negatives).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

from chapter20.core.checks import check_int

__all__ = [
    "RULES",
    "num_examples",
    "split_batch",
    "example_weights",
    "accumulate_reference",
    "listing_l4_backward",
]

#: How a micro-batch's summed loss is weighted: by the examples of the whole step (exact), or
#: listing L4's mean per micro-batch / number of micro-batches (exact only for equal sizes).
RULES = ("examples", "micro_batches")


def num_examples(batch: Any) -> int:
    """Examples in a micro-batch: the length of its first tensor (a tensor, or a tuple / dict
    of tensors that share their first dimension)."""
    tensors = [leaf for leaf in tree_leaves(batch) if isinstance(leaf, torch.Tensor)]
    if not tensors or tensors[0].dim() == 0:
        raise ValueError("a micro-batch must hold at least one tensor with a batch dimension")
    return int(tensors[0].shape[0])


def split_batch(batch: Any, micro_batches: int) -> list[Any]:
    """``batch`` (a tensor, or a tuple / list / dict of tensors sharing their first dimension)
    cut along that dimension into ``micro_batches`` parts of sizes differing by at most one
    (fewer parts if the batch holds fewer examples; never an empty one)."""
    micro_batches = check_int("micro_batches", micro_batches, 1)
    n = num_examples(batch)
    leaves, spec = tree_flatten(batch)
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor) and (leaf.dim() == 0 or leaf.shape[0] != n):
            raise ValueError(
                f"every tensor of a batch must have the batch size {n} as its first dimension, "
                f"got shape {tuple(leaf.shape)}"
            )
    parts = max(1, min(micro_batches, n))
    pieces = [
        torch.tensor_split(leaf, parts) if isinstance(leaf, torch.Tensor) else [leaf] * parts
        for leaf in leaves
    ]
    return [tree_unflatten([piece[i] for piece in pieces], spec) for i in range(parts)]


def example_weights(counts: Sequence[int], rule: str = "examples") -> list[float]:
    """The weight of one example's loss in each micro-batch of sizes ``counts`` (§20.2.1):
    ``"examples"`` gives 1 / sum(counts) to every example (the full batch's mean);
    ``"micro_batches"`` gives 1 / (count × number of micro-batches), listing L4's rule."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    counts = [check_int("counts", c, 1) for c in counts]
    if not counts:
        raise ValueError("counts must hold at least one micro-batch size")
    if rule == "examples":
        return [1.0 / sum(counts)] * len(counts)
    return [1.0 / (c * len(counts)) for c in counts]


def accumulate_reference(model: torch.nn.Module, micro_batches: Sequence[Any], loss_fn) -> None:
    """Exact accumulation in its few lines (§20.2.1), for reading: ``loss_fn(model, batch)``
    returns one loss per example, and each micro-batch's *sum* is divided by the examples of
    the whole step, so every example weighs 1 / total, as in the full batch's mean, whatever the
    split. The gradients add up in ``.grad``; the optimizer steps once after the loop. The step
    of the package (``Trainer`` with ``micro_batches``) does the same, plus DDP's ``no_sync``
    and the counts over ranks."""
    total = sum(num_examples(batch) for batch in micro_batches)  # examples in the whole step
    for batch in micro_batches:
        (loss_fn(model, batch).sum() / total).backward()  # adds into .grad


def listing_l4_backward(model: torch.nn.Module, micro_batches: list, loss_fn) -> None:
    """Listing L4's accumulation, for comparison: each micro-batch's mean loss divided by the
    number of micro-batches (§20.2.1). Exact only when every micro-batch has the same size."""
    model.zero_grad(set_to_none=True)
    counts = [len(batch[0]) for batch in micro_batches]
    for batch, weight in zip(micro_batches, example_weights(counts, "micro_batches")):
        (loss_fn(model, batch).sum() * weight).backward()
