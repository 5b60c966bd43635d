"""§20.1 and §20.2.1 The contrastive losses proven against their references: the proofs that
notebook 02 runs and the tests hold (``chapter20.techniques.contrastive``).

- :func:`info_nce_proof`: ``info_nce`` equal to ``info_nce_reference``, loss and gradients;
- :func:`grad_cache_reference_proof`: ``grad_cache_reference`` (the two passes alone) equal to
  ``grad_cache_backward`` and to the full batch back-propagated at once;
- :func:`grad_cache_proof`: gradient caching equal to the full batch with dropout on, when the
  random state of each chunk is replayed (and not, when it is not);
- :func:`distributed_proof_on_rank` / :func:`distributed_proof`: cross-rank InfoNCE on real gloo
  groups equal to InfoNCE on all ranks' rows in one process, even and uneven batches, with and
  without hard negatives.

Functions named ``*_on_rank`` run inside a process group (see
:func:`chapter20.techniques.distributed.run_local_group`); the others run in the calling process.
"""

from __future__ import annotations

import pandas as pd
import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.checks import check_int, check_real
from chapter20.core.device import set_seed
from chapter20.core.measure import max_grad_diff, named_gradients
from chapter20.core.models import TransformerEncoder
from chapter20.techniques.contrastive import (
    DEFAULT_TEMPERATURE,
    distributed_info_nce,
    gather_with_grad,
    grad_cache_backward,
    grad_cache_reference,
    info_nce,
    info_nce_reference,
)
from chapter20.techniques.distributed import group_rank_and_size, run_local_group

__all__ = [
    "info_nce_proof",
    "grad_cache_reference_proof",
    "grad_cache_proof",
    "distributed_proof_on_rank",
    "distributed_proof",
]


def info_nce_proof(batch: int = 16, dim: int = 8, seed: int = 0) -> float:
    """``info_nce`` against ``info_nce_reference`` (§20.2.1) on random queries and keys: the
    largest absolute difference of the loss and of both inputs' gradients."""
    batch, dim = check_int("batch", batch, 1), check_int("dim", dim, 1)
    set_seed(check_int("seed", seed, 0))
    inputs = torch.randn(2, batch, dim)
    results = []
    for loss_fn in (info_nce, info_nce_reference):
        q, k = inputs.clone().requires_grad_().unbind(0)
        loss = loss_fn(q, k, DEFAULT_TEMPERATURE)
        results.append([loss.detach(), *torch.autograd.grad(loss, (q, k))])
    return max(float((a - b).abs().max()) for a, b in zip(*results))


def grad_cache_reference_proof(batch: int = 22, chunk_size: int = 5, seed: int = 0) -> dict:
    """``grad_cache_reference`` (the two passes alone) against ``grad_cache_backward`` and
    against the full batch back-propagated at once (§20.2.1): a small Transformer encoder
    without dropout, chunks of ``chunk_size`` that do not divide ``batch``."""
    batch, chunk_size = check_int("batch", batch, 1), check_int("chunk_size", chunk_size, 1)
    set_seed(check_int("seed", seed, 0))
    model = TransformerEncoder(300, d_model=32, n_heads=4, n_layers=2, max_len=16, dropout=0.0)
    towers = tuple(torch.randint(1, 300, (2, batch, 16)))

    def loss_fn(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return info_nce(q, k, DEFAULT_TEMPERATURE)

    grads = []
    for backward in (
        lambda: loss_fn(*(model(x) for x in towers)).backward(),
        lambda: grad_cache_reference(model, towers, loss_fn, chunk_size),
        lambda: grad_cache_backward(model, towers, loss_fn, chunk_size),
    ):
        model.zero_grad(set_to_none=True)
        backward()
        grads.append(named_gradients(model))
    full, reference, package = grads
    return {"vs_full_batch": max_grad_diff(reference, full),
            "vs_package": max_grad_diff(reference, package)}  # fmt: skip


def grad_cache_proof(
    batch: int = 22, chunk_size: int = 5, dropout: float = 0.1, seed: int = 0
) -> dict[str, float]:
    """Gradient caching vs the full batch with the same dropout masks (§20.2.1): a small
    Transformer encoder with dropout on and a learnable temperature; the chunk size does not
    divide the batch. Returns the max gradient difference (every parameter and the temperature)
    with the RNG replayed (float32 rounding) and without (wrong masks: a real difference)."""
    batch, chunk_size = check_int("batch", batch, 1), check_int("chunk_size", chunk_size, 1)
    dropout = check_real("dropout", dropout, minimum=0.0, maximum=1.0)
    set_seed(check_int("seed", seed, 0))
    model = TransformerEncoder(300, d_model=32, n_heads=4, n_layers=2, max_len=16, dropout=dropout)
    log_temperature = nn.Parameter(torch.tensor(DEFAULT_TEMPERATURE).log())
    model.train()
    anchors, positives = torch.randint(1, 300, (2, batch, 16))

    def loss_fn(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return info_nce(q, k, log_temperature.exp())

    def grads() -> dict[str, torch.Tensor]:
        found = named_gradients(model)
        found["log_temperature"] = log_temperature.grad.detach().clone()
        model.zero_grad(set_to_none=True)
        log_temperature.grad = None
        return found

    # The reference draws its dropout masks chunk by chunk too, in the same order, with a graph.
    state = torch.get_rng_state()
    reps = [torch.cat([model(c) for c in x.split(chunk_size)]) for x in (anchors, positives)]
    loss_fn(*reps).backward()
    reference = grads()
    result = {}
    for replay in (True, False):
        torch.set_rng_state(state)
        grad_cache_backward(model, (anchors, positives), loss_fn, chunk_size, replay_rng=replay)
        result["replayed" if replay else "not_replayed"] = max_grad_diff(grads(), reference)
    return result


def distributed_proof_on_rank(
    sizes: tuple[int, ...], hard: int, seed: int = 0, group: dist.ProcessGroup | None = None
) -> dict:
    """On every rank of ``group`` (default: the whole world): cross-rank InfoNCE of this rank's
    ``sizes[rank]`` pairs (and ``hard`` hard negatives) vs :func:`info_nce` on all ranks' rows in
    one process (§20.1). Gradients (w.r.t. the encoder, a linear layer) are summed over ranks /
    W, as DDP averages."""
    sizes = tuple(check_int("sizes", s, 1) for s in sizes)
    hard, seed = check_int("hard", hard, 0), check_int("seed", seed, 0)
    rank, world = group_rank_and_size(group)
    if len(sizes) != world:
        raise ValueError(f"sizes must hold one size per rank ({world}), got {sizes}")
    set_seed(seed)
    encoder = nn.Linear(8, 6)
    total = sum(sizes)
    queries, keys = torch.randn(2, total, 8)
    negatives = torch.randn(hard * world, 8) if hard else None
    start = sum(sizes[:rank])
    mine = slice(start, start + sizes[rank])
    local_negatives = negatives[rank * hard : (rank + 1) * hard] if hard else None
    result: dict = {"rank": rank, "W": world, "hard": hard}
    for symmetric in (False, True):
        encoder.zero_grad(set_to_none=True)
        loss = distributed_info_nce(
            encoder(queries[mine]),
            encoder(keys[mine]),
            DEFAULT_TEMPERATURE,
            symmetric=symmetric,
            hard_negatives=encoder(local_negatives) if hard else None,
            group=group,
        )
        loss.backward()
        for p in encoder.parameters():
            dist.all_reduce(p.grad, group=group)
            p.grad /= world
        averaged = torch.tensor([loss.item()])
        dist.all_reduce(averaged, group=group)
        got = named_gradients(encoder), float(averaged) / world
        encoder.zero_grad(set_to_none=True)
        expected_loss = info_nce(
            encoder(queries),
            encoder(keys),
            DEFAULT_TEMPERATURE,
            symmetric=symmetric,
            hard_negatives=encoder(negatives) if hard else None,
        )
        expected_loss.backward()
        key = "symmetric" if symmetric else "one_way"
        result[f"{key}_loss_diff"] = abs(got[1] - expected_loss.item())
        result[f"{key}_grad_diff"] = max_grad_diff(got[0], named_gradients(encoder))
    # A plain all-gather gives the other ranks' keys no gradient path at all.
    plain = [torch.empty(sizes[rank], 6) for _ in range(world)] if len(set(sizes)) == 1 else None
    if plain is not None:
        k = encoder(keys[mine])
        dist.all_gather(plain, k.detach(), group=group)
        result["plain_gather_requires_grad"] = any(t.requires_grad for t in plain)
        result["gather_with_grad_requires_grad"] = gather_with_grad(k, group).requires_grad
    return result


def distributed_proof(world_sizes: tuple[int, ...] = (2, 3)) -> pd.DataFrame:
    """:func:`distributed_proof_on_rank` on real gloo groups of each size in ``world_sizes``:
    even and uneven batch sizes, with and without hard negatives. One local group of the
    largest size is started once; a smaller world is its sub-group of the first ranks
    (``dist.new_group``). One record per rank and case."""
    sizes = sorted({check_int("world_sizes", w, 2) for w in world_sizes})
    records = run_local_group(_proof_cases_on_rank, sizes[-1], (tuple(sizes),))
    return pd.DataFrame([r for rank in records for r in rank])


def _proof_cases_on_rank(world_sizes: tuple[int, ...]) -> list[dict]:
    records = []
    rank, world = group_rank_and_size()
    for size in world_sizes:
        # every rank takes part in creating each group, as torch.distributed requires
        group = None if size == world else dist.new_group(list(range(size)))
        if rank >= size:
            continue
        even, uneven = tuple([4] * size), tuple(range(2, 2 + size))
        for sizes, hard in ((even, 0), (even, 2), (uneven, 3)):
            record = distributed_proof_on_rank(sizes, hard, group=group)
            record["sizes"] = str(sizes)
            records.append(record)
    return records
