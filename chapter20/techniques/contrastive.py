"""Contrastive losses for embedding training (§20.1, §20.2.1).

InfoNCE with in-batch negatives: row i of ``queries`` should match row i of ``keys``, and every
other key in the batch is a negative. The more rows, the more negatives (the chapter's reason
for 4K–32K batches, claim C01). Two ways to get more rows than one device holds:

- **Cross-rank negatives** (:func:`distributed_info_nce`): every rank scores its own queries
  against the keys of *all* ranks, gathered with :func:`gather_with_grad`, whose backward sends
  each key's gradient back to the rank that encoded it.
- **Gradient caching** (:func:`grad_cache_backward`, after GradCache): encode the batch in chunks
  without a graph, compute the loss on all representations at once, cache the gradient w.r.t.
  each representation, then re-encode chunk by chunk with a graph and back-propagate the cached
  gradient. Every parameter gets the full-batch gradient; activations of one chunk are alive.

Gradient *accumulation* is not one of them: each micro-batch sees only its own negatives
(``chapter20.techniques.accumulation``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from chapter20.core.checks import check_int, check_real
from chapter20.techniques.distributed import group_rank_and_size

__all__ = [
    "DEFAULT_TEMPERATURE",
    "info_nce",
    "info_nce_reference",
    "micro_batch_info_nce",
    "logit_matrix_bytes",
    "grad_cache_reference",
    "gather_with_grad",
    "distributed_info_nce",
    "grad_cache_backward",
    "recall_at_k",
    "retrieval_scores",
]

_REDUCTIONS = ("mean", "sum", "none")
#: InfoNCE's temperature where none is chosen: the composed step's default
#: (``chapter20.training.config.TrainConfig.temperature``) and these functions'.
DEFAULT_TEMPERATURE = 0.05


def _check_temperature(temperature: float | torch.Tensor) -> float | torch.Tensor:
    """``temperature`` checked: a finite number > 0 (as a float) or a scalar tensor."""
    if isinstance(temperature, torch.Tensor):
        if temperature.numel() != 1:
            raise ValueError(f"temperature must be a scalar, got shape {tuple(temperature.shape)}")
        value = temperature.detach().item()
    else:
        value = check_real("temperature", temperature)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"temperature must be a finite number > 0, got {value}")
    return temperature if isinstance(temperature, torch.Tensor) else value


def _check_pairs(queries: torch.Tensor, keys: torch.Tensor, hard_negatives) -> None:
    if queries.dim() != 2 or queries.shape != keys.shape:
        raise ValueError(
            "queries and keys must both be [batch, dim] with the same shape, got "
            f"{tuple(queries.shape)} and {tuple(keys.shape)}"
        )
    if hard_negatives is not None and (
        hard_negatives.dim() != 2 or hard_negatives.shape[1] != queries.shape[1]
    ):
        raise ValueError(
            f"hard_negatives must be [n, {queries.shape[1]}] (the queries' dim), got "
            f"{tuple(hard_negatives.shape)}"
        )


def _per_query_losses(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    labels: torch.Tensor,
    temperature: float | torch.Tensor,
) -> torch.Tensor:
    """Cross-entropy of each (normalised) query over all (normalised) candidates."""
    return F.cross_entropy(queries @ candidates.T / temperature, labels, reduction="none")


def _reduce(losses: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "mean":
        return losses.mean()
    return losses.sum() if reduction == "sum" else losses


def info_nce(
    queries: torch.Tensor,
    keys: torch.Tensor,
    temperature: float | torch.Tensor = DEFAULT_TEMPERATURE,
    *,
    symmetric: bool = False,
    hard_negatives: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """InfoNCE of ``queries[i]`` against its positive ``keys[i]`` (§20.2.1).

    Both inputs are ``[batch, dim]``; they are L2-normalised, so the logits are cosine
    similarities divided by ``temperature`` (a float or a learnable scalar tensor, > 0). The
    candidates of every query are all keys, then ``hard_negatives`` (``[n, dim]``, extra keys
    that are nobody's positive). ``symmetric=True`` averages the query→key and key→query losses
    (as in CLIP; hard negatives take part in the first only). ``reduction``: ``"mean"``,
    ``"sum"`` or ``"none"`` (one loss per query). Computed in float32 whatever the input dtype:
    the softmax over the batch is where half precision loses accuracy.
    """
    _check_pairs(queries, keys, hard_negatives)
    if queries.shape[0] == 0:
        raise ValueError("queries and keys must hold at least one pair")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    temperature = _check_temperature(temperature)
    q = F.normalize(queries.float(), dim=-1)
    k = F.normalize(keys.float(), dim=-1)
    candidates = k
    if hard_negatives is not None:
        candidates = torch.cat([k, F.normalize(hard_negatives.float(), dim=-1)])
    labels = torch.arange(q.shape[0], device=q.device)
    losses = _per_query_losses(q, candidates, labels, temperature)
    if symmetric:
        losses = (losses + _per_query_losses(k, q, labels, temperature)) / 2
    return _reduce(losses, reduction)


def info_nce_reference(
    queries: torch.Tensor, keys: torch.Tensor, temperature: float = DEFAULT_TEMPERATURE
):
    """InfoNCE in its few lines (§20.2.1), for reading: cosine similarities of every query with
    every key over the temperature, and a cross-entropy whose right answer for query i is key i
    (the diagonal). :func:`info_nce` computes the same, with input checks, float32, hard
    negatives, the symmetric form and the reductions."""
    q = F.normalize(queries, dim=-1)
    k = F.normalize(keys, dim=-1)
    logits = q @ k.T / temperature  # [B, B]: query i against every key of the batch
    labels = torch.arange(len(q), device=q.device)  # query i's positive is key i
    return F.cross_entropy(logits, labels)  # the mean over the batch


def micro_batch_info_nce(model: nn.Module, batch) -> torch.Tensor:
    """One InfoNCE loss per pair of a (micro-)batch ``(anchors, positives)``, against that batch's
    keys only (§20.2.1): what accumulation computes when each micro-batch is its own batch, as a
    ``loss(model, batch)`` of the composed step (``chapter20.training.trainer.Trainer``)."""
    anchors, positives = batch
    return info_nce(model(anchors), model(positives), DEFAULT_TEMPERATURE, reduction="none")


def logit_matrix_bytes(batch: int, bytes_per_element: int = 4) -> int:
    """Bytes of the B × B similarity matrix of in-batch InfoNCE (§20.2, claim C04's context)."""
    batch = check_int("batch", batch, 1)
    return batch * batch * check_int("bytes_per_element", bytes_per_element, 1)


# --------------------------------------------------------------------------------------------
# Cross-rank negatives
# --------------------------------------------------------------------------------------------


def _gathered_sizes(rows: int, device: torch.device, group) -> list[int]:
    _, world = group_rank_and_size(group)
    size = torch.tensor([rows], device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    return [int(s) for s in sizes]


class _GatherWithGrad(torch.autograd.Function):
    """All-gather along dim 0 (uneven sizes allowed). Backward: every rank holds a gradient for
    every gathered row, so the gradients are summed over ranks (all-reduce) and each rank keeps
    the slice of its own rows — not just its local gradient, and not divided by W."""

    @staticmethod
    def forward(ctx, x, sizes, group):
        rank, world = group_rank_and_size(group)
        ctx.sizes, ctx.rank, ctx.group = sizes, rank, group
        padded = x.new_zeros((max(sizes), *x.shape[1:]))
        padded[: x.shape[0]] = x
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded.contiguous(), group=group)
        return torch.cat([part[:n] for part, n in zip(parts, sizes)])

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start : start + ctx.sizes[ctx.rank]], None, None


def gather_with_grad(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Concatenate ``x`` from every rank of ``group`` in rank order, differentiably (§20.1).

    ``torch.distributed.all_gather`` returns tensors without a gradient path, so the negatives
    other ranks contribute would train nothing on the rank that encoded them. Here the backward
    sums every rank's gradient for a row and returns it to the row's owner. Ranks may hold
    different numbers of rows. Without a process group it returns ``x``.
    """
    _, world = group_rank_and_size(group)
    if world == 1:
        return x
    return _GatherWithGrad.apply(x, _gathered_sizes(x.shape[0], x.device, group), group)


def distributed_info_nce(
    queries: torch.Tensor,
    keys: torch.Tensor,
    temperature: float | torch.Tensor = DEFAULT_TEMPERATURE,
    *,
    symmetric: bool = False,
    hard_negatives: torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """InfoNCE with the keys (and hard negatives) of every rank as negatives (§20.1, §20.2.1).

    Each rank scores its local queries against all gathered keys, then all gathered hard
    negatives; its labels are offset by the number of rows on the ranks before it, so they
    point at its own positives. The returned value is scaled for data parallelism: averaged
    over ranks (as DDP averages gradients) its gradient, and its value, are those of
    :func:`info_nce` on the concatenated batch of all ranks — also when ranks hold different
    batch sizes. Every rank must call it together. In a world of one it is :func:`info_nce`.
    """
    _check_pairs(queries, keys, hard_negatives)
    temperature = _check_temperature(temperature)
    rank, world = group_rank_and_size(group)
    if world == 1:
        return info_nce(
            queries, keys, temperature, symmetric=symmetric, hard_negatives=hard_negatives
        )
    q = F.normalize(queries.float(), dim=-1)
    k = F.normalize(keys.float(), dim=-1)
    sizes = _gathered_sizes(q.shape[0], q.device, group)
    if sum(sizes) == 0:
        raise ValueError("queries and keys must hold at least one pair on some rank")
    candidates = [_GatherWithGrad.apply(k, sizes, group)]
    if hard_negatives is not None:
        h = F.normalize(hard_negatives.float(), dim=-1)
        candidates.append(gather_with_grad(h, group))
    labels = sum(sizes[:rank]) + torch.arange(q.shape[0], device=q.device)
    losses = _per_query_losses(q, torch.cat(candidates), labels, temperature)
    if symmetric:
        all_queries = _GatherWithGrad.apply(q, sizes, group)
        losses = (losses + _per_query_losses(k, all_queries, labels, temperature)) / 2
    return losses.sum() * world / sum(sizes)


# --------------------------------------------------------------------------------------------
# Gradient caching
# --------------------------------------------------------------------------------------------


class _RngSnapshot:
    """The CPU (and this CUDA device's) RNG state before a chunk's first forward, so that the
    re-forward draws the same dropout masks."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def replay(self):
        devices = [self.device] if self.cuda is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.device)
            yield


def _no_sync(model: nn.Module, last: bool):
    if not last and isinstance(model, nn.parallel.DistributedDataParallel):
        return model.no_sync()
    return contextlib.nullcontext()


def grad_cache_reference(
    model: nn.Module, towers: Sequence[torch.Tensor], loss_fn: Callable, chunk_size: int
) -> torch.Tensor:
    """Gradient caching's two passes and nothing else (§20.2.1), for reading: no dropout replay,
    no DDP, no loss parameters. ``towers`` are the inputs of each side (anchors, positives);
    ``loss_fn(*representations)`` sees the whole batch. :func:`grad_cache_backward` computes the
    same gradients and adds those three."""
    with torch.no_grad():  # pass 1: every chunk encoded without a graph
        reps = [torch.cat([model(c) for c in x.split(chunk_size)]) for x in towers]
    reps = [r.requires_grad_() for r in reps]
    loss = loss_fn(*reps)  # every query meets every key of the batch
    loss.backward()  # stops at the representations: r.grad is the cached gradient
    for x, r in zip(towers, reps):  # pass 2: one chunk's graph at a time
        for chunk, cached in zip(x.split(chunk_size), r.grad.split(chunk_size)):
            model(chunk).backward(cached)  # the chain rule, from the cache into the encoder
    return loss.detach()


def grad_cache_backward(
    model: nn.Module,
    inputs: Sequence[torch.Tensor],
    loss_fn: Callable[..., torch.Tensor],
    chunk_size: int,
    *,
    replay_rng: bool = True,
    forward_context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    loss_parameters: Sequence[torch.Tensor] = (),
    scale_loss: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Back-propagate ``loss_fn(model(inputs[0]), model(inputs[1]), ..., *loss_parameters)`` in
    chunks (§20.2.1, gradient caching): the gradients it accumulates in ``.grad`` equal those of
    the full batch, while only one chunk's activations are alive at a time.

    1. Encode every input in chunks of ``chunk_size`` rows under ``torch.no_grad``, recording
       the RNG state before each chunk.
    2. Compute ``loss_fn`` on the full representations and back-propagate it to them, and to
       detached copies of ``loss_parameters`` (e.g. a learnable temperature).
    3. Re-encode each chunk with a graph, the RNG replayed so dropout draws the same masks
       (``replay_rng=False`` shows what goes wrong without it), and back-propagate the cached
       gradient of its representations. Under DDP only the last chunk's backward syncs, and
       the cached gradients of ``loss_parameters`` go into that same backward, so DDP reduces
       them with the rest (a parameter that missed the synced backward would stall DDP).

    Returns the loss (detached). ``loss_fn`` may be :func:`distributed_info_nce`.
    ``forward_context`` wraps every encoder forward (e.g. ``lambda: autocast("bf16")``); the
    backward passes run outside it, as autocast recommends. ``scale_loss`` multiplies the loss
    before the backward (``GradScaler.scale`` for fp16): every cached gradient is scaled too.
    """
    chunk_size = check_int("chunk_size", chunk_size, 1)
    if not inputs:
        raise ValueError("inputs must hold at least one tensor to encode")
    chunks = [torch.split(x, chunk_size) for x in inputs]
    device = next(model.parameters()).device
    snapshots, representations = [], []
    with torch.no_grad():
        for tower in chunks:
            outputs = []
            for chunk in tower:
                snapshots.append(_RngSnapshot(device))
                with forward_context():
                    outputs.append(model(chunk))
            representations.append(torch.cat(outputs).requires_grad_())
    copies = [p.detach().requires_grad_(p.requires_grad) for p in loss_parameters]
    loss = loss_fn(*representations, *copies)
    (loss if scale_loss is None else scale_loss(loss)).backward()
    cached = [torch.split(r.grad, chunk_size) for r in representations]
    jobs = [
        (chunk, grad) for tower, grads in zip(chunks, cached) for chunk, grad in zip(tower, grads)
    ]
    for index, ((chunk, grad), snapshot) in enumerate(zip(jobs, snapshots)):
        last = index == len(jobs) - 1
        replay = snapshot.replay() if replay_rng else contextlib.nullcontext()
        with _no_sync(model, last):
            with replay, forward_context():
                encoded = model(chunk)
            outputs, grads = [encoded], [grad]
            if last:
                owned = [(p, c.grad) for p, c in zip(loss_parameters, copies) if c.grad is not None]
                outputs += [p for p, _ in owned]
                grads += [g for _, g in owned]
            torch.autograd.backward(outputs, grads)
    return loss.detach()


@torch.no_grad()
def recall_at_k(
    model: nn.Module, anchors: torch.Tensor, positives: torch.Tensor, ks: tuple[int, ...] = (1, 10)
) -> dict[int, float]:
    """Share of anchors whose own positive is among the k most similar of all ``positives``
    (cosine similarity), for each k (§20.1): the retrieval quality of a contrastive encoder on
    held-out pairs; chance is k / len(positives). The model is put back in training mode."""
    if anchors.shape[0] != positives.shape[0] or anchors.shape[0] == 0:
        raise ValueError(
            "anchors and positives must hold the same number (>= 1) of rows, got "
            f"{anchors.shape[0]} and {positives.shape[0]}"
        )
    ks = tuple(check_int("ks", k, 1) for k in ks)
    scores = retrieval_scores(model, anchors, positives)
    own = scores.diagonal().unsqueeze(1)
    rank = (scores > own).sum(dim=1)  # how many candidates beat the true positive
    return {top: float((rank < top).float().mean()) for top in ks}


def retrieval_scores(
    model: nn.Module, anchors: torch.Tensor, positives: torch.Tensor
) -> torch.Tensor:
    """The cosine similarity of every anchor with every positive, ``[anchors, positives]`` in
    float32, the model in eval mode and put back in training mode (§20.1): what recall@k and the
    mean reciprocal rank of held-out pairs are read from."""
    model.eval()
    q = F.normalize(model(anchors).float(), dim=-1)
    k = F.normalize(model(positives).float(), dim=-1)
    model.train()
    return q @ k.T
