"""§20.1 / §20.2.1 Contrastive training at scale, run and measured: the proofs and experiments
behind notebook 02 and ``python -m chapter20 bench contrastive``.

Functions named ``*_on_rank`` run inside a process group (see
:func:`chapter20.techniques.distributed.run_local_group`); the others run in the calling process.
"""

from __future__ import annotations

from collections.abc import Callable

import matplotlib.ticker
import pandas as pd
import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.checks import check_int
from chapter20.core.device import set_seed
from chapter20.core.measure import (
    format_bytes,
    max_grad_diff,
    named_gradients,
    peak_memory,
    time_interleaved,
)
from chapter20.core.models import BagOfEmbeddingsEncoder, TransformerEncoder
from chapter20.core.plotting import new_figure, plain_log_ticks
from chapter20.techniques.accumulation import accumulate_reference, listing_l4_backward
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
from chapter20.training.config import TrainConfig
from chapter20.training.trainer import Trainer

__all__ = [
    "accumulation_proof",
    "naive_info_nce_accumulation_gap",
    "grad_cache_proof",
    "info_nce_proof",
    "grad_cache_reference_proof",
    "distributed_proof_on_rank",
    "distributed_proof",
    "memory_vs_batch",
    "plot_memory_vs_batch",
    "benchmark",
]


# --------------------------------------------------------------------------------------------
# Proofs
# --------------------------------------------------------------------------------------------


def _mse_per_example(model: nn.Module, batch) -> torch.Tensor:
    inputs, targets = batch
    return ((model(inputs) - targets) ** 2).mean(dim=1)


def _frozen_trainer(model: nn.Module, **options) -> Trainer:
    """A trainer whose optimizer is SGD at lr 0: its step leaves the gradients in ``.grad`` and
    the weights as they were, so that two ways of computing one gradient can be compared."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    return Trainer(model, TrainConfig(**options.pop("config", {})), optimizer=optimizer, **options)


def accumulation_proof(sizes: tuple[int, ...] = (7, 3, 5, 1), seed: int = 0) -> dict[str, float]:
    """Accumulating uneven micro-batches vs one full batch, for a mean per-example loss
    (§20.2.1). Returns the max gradient difference of the trainer's exact accumulation (weights
    by examples: float32 rounding), of ``accumulate_reference`` (the same rule in a few lines)
    and of listing L4's rule (mean / number of micro-batches)."""
    set_seed(seed)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    inputs, targets = torch.randn(sum(sizes), 6), torch.randn(sum(sizes), 3)
    trainer = _frozen_trainer(model, loss=_mse_per_example)
    trainer.step([(inputs, targets)])
    full = named_gradients(model)
    micro = list(zip(inputs.split(list(sizes)), targets.split(list(sizes))))
    trainer.step(micro)
    exact = max_grad_diff(named_gradients(model), full)
    model.zero_grad(set_to_none=True)
    accumulate_reference(model, micro, _mse_per_example)
    reference = max_grad_diff(named_gradients(model), full)
    listing_l4_backward(model, micro, _mse_per_example)
    return {
        "examples": exact,
        "reference": reference,
        "micro_batches": max_grad_diff(named_gradients(model), full),
    }


def _pair_loss(model: nn.Module, batch) -> torch.Tensor:
    anchors, positives = batch
    return info_nce(model(anchors), model(positives), DEFAULT_TEMPERATURE, reduction="none")


def naive_info_nce_accumulation_gap(
    batch: int = 64, micro: int = 16, vocab: int = 500, seed: int = 0
) -> dict[str, float]:
    """What accumulation does to InfoNCE (§20.2.1, claim C05): full-batch loss and gradient vs
    the same examples accumulated in micro-batches, each with its own in-batch negatives."""
    set_seed(seed)
    model = BagOfEmbeddingsEncoder(vocab, 32)
    anchors, positives = torch.randint(1, vocab, (2, batch, 12))
    full = _frozen_trainer(model).step((anchors, positives))
    full_grads = named_gradients(model)
    chunks = list(zip(anchors.split(micro), positives.split(micro)))
    naive = _frozen_trainer(model, loss=_pair_loss).step(chunks)
    return {
        "full_batch_loss": full.loss,
        "accumulated_loss": naive.loss,
        "max_grad_diff": max_grad_diff(named_gradients(model), full_grads),
        "negatives_full": batch - 1,
        "negatives_accumulated": micro - 1,
    }


def grad_cache_proof(
    batch: int = 22, chunk_size: int = 5, dropout: float = 0.1, seed: int = 0
) -> dict[str, float]:
    """Gradient caching vs the full batch with the same dropout masks (§20.2.1): a small
    Transformer encoder with dropout on and a learnable temperature; the chunk size does not
    divide the batch. Returns the max gradient difference (every parameter and the temperature)
    with the RNG replayed (float32 rounding) and without (wrong masks: a real difference)."""
    set_seed(seed)
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


def info_nce_proof(batch: int = 16, dim: int = 8, seed: int = 0) -> float:
    """``info_nce`` against ``info_nce_reference`` (§20.2.1) on random queries and keys: the
    largest absolute difference of the loss and of both inputs' gradients."""
    set_seed(seed)
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
    set_seed(seed)
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


def distributed_proof_on_rank(
    sizes: tuple[int, ...], hard: int, seed: int = 0, group: dist.ProcessGroup | None = None
) -> dict:
    """On every rank of ``group`` (default: the whole world): cross-rank InfoNCE of this rank's
    ``sizes[rank]`` pairs (and ``hard`` hard negatives) vs :func:`info_nce` on all ranks' rows in
    one process (§20.1). Gradients (w.r.t. the encoder, a linear layer) are summed over ranks /
    W, as DDP averages."""
    rank, world = group_rank_and_size(group)
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
    sizes = sorted({check_int("world size", w, 2) for w in world_sizes})
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


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


def _memory_model(seed: int = 0) -> TransformerEncoder:
    set_seed(seed)
    return TransformerEncoder(2_000, d_model=64, n_heads=4, n_layers=2, max_len=32, dropout=0.0)


def _strategy_steps(
    model: nn.Module, anchors: torch.Tensor, positives: torch.Tensor, micro: int
) -> dict[str, Callable[[], object]]:
    """One training step of the whole batch per strategy, through the trainer with SGD at lr 0
    (the weights stay as they are): at once, naive accumulation in micro-batches of ``micro``
    pairs, gradient caching in chunks of ``micro`` rows."""
    trainers = {
        "large batch": _frozen_trainer(model),
        "naive accumulation": _frozen_trainer(
            model, loss=_pair_loss, config={"micro_batches": -(-len(anchors) // micro)}
        ),
        "gradient caching": _frozen_trainer(model, config={"chunk_size": micro}),
    }
    return {name: (lambda t=t: t.step((anchors, positives))) for name, t in trainers.items()}


def memory_vs_batch(
    batch_sizes: tuple[int, ...] = (64, 128, 256, 512), micro: int = 32, seq_len: int = 32
) -> pd.DataFrame:
    """Peak memory of one InfoNCE training step at each effective batch (§20.2.1), for a
    large batch at once, naive accumulation in micro-batches and gradient caching in chunks of
    ``micro`` (a small Transformer encoder; measured with
    ``chapter20.core.measure.peak_memory``)."""
    model = _memory_model()
    records = []
    for batch in batch_sizes:
        anchors, positives = torch.randint(1, 2_000, (2, batch, seq_len))
        runs = _strategy_steps(model, anchors, positives, micro)
        for method, run in runs.items():
            model.zero_grad(set_to_none=True)
            report = peak_memory(run, model=model, inputs=(anchors, positives))
            records.append(
                {
                    "effective batch": batch,
                    "method": method,
                    "peak_bytes": report.peak_bytes,
                    "activations_bytes": report.breakdown["activations"],
                    "measured_by": report.method,
                }
            )
    return pd.DataFrame(records)


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def plot_memory_vs_batch(frame: pd.DataFrame):
    """Peak memory vs effective batch for the three strategies, on log-log axes: the batch
    doubles from point to point, so memory that grows in proportion to it is a line of slope 1
    (a linear memory axis would make proportional growth look exponential)."""
    fig, ax = new_figure(
        "One InfoNCE step: peak memory (log-log)", "effective batch (pairs)", "peak memory (MiB)"
    )
    for method, part in frame.groupby("method", sort=False):
        ax.plot(part["effective batch"], part["peak_bytes"] / 2**20, "o-", label=method)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(
        frame["effective batch"].unique(), labels=map(str, frame["effective batch"].unique())
    )
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    plain_log_ticks(ax.yaxis)
    ax.legend()
    return fig


# --------------------------------------------------------------------------------------------
# Benchmark
# --------------------------------------------------------------------------------------------


def benchmark(batch: int = 512, chunk: int = 32) -> None:
    """``python -m chapter20 bench contrastive``: peak memory and step time of gradient caching
    relative to the same batch at once (target: memory <= 1/k of the direct batch plus the
    representations with k = batch / chunk; time <= 1.5x)."""
    memory = memory_vs_batch((batch,), micro=chunk)
    direct = memory[memory["method"] == "large batch"].iloc[0]
    cached = memory[memory["method"] == "gradient caching"].iloc[0]
    model = _memory_model()
    anchors, positives = torch.randint(1, 2_000, (2, batch, 32))
    steps = _strategy_steps(model, anchors, positives, chunk)
    del steps["naive accumulation"]
    timing = time_interleaved(steps, warmup=1, repeat=7, device="cpu")
    k = batch // chunk
    representations = 2 * batch * 64 * 4  # anchors + positives, d_model 64, float32
    budget = direct.peak_bytes / k + representations
    print(f"InfoNCE forward + backward, Transformer encoder, batch {batch}, chunks of {chunk}")
    print(f"peak memory, {direct.measured_by}:")
    share = cached.peak_bytes / direct.peak_bytes
    print(
        f"  large batch {format_bytes(direct.peak_bytes)}, gradient caching "
        f"{format_bytes(cached.peak_bytes)} = {share:.3f}x"
    )
    verdict = "meets" if cached.peak_bytes <= budget else "misses"
    print(f"  target <= large batch / {k} + representations = {format_bytes(budget)}: {verdict}")
    ratio = timing["gradient caching"].median / timing["large batch"].median
    verdict = "meets" if ratio <= 1.5 else "misses"
    print(f"step time: large batch {timing['large batch']}")
    print(f"  gradient caching {timing['gradient caching']} = {ratio:.2f}x")
    print(f"  target <= 1.5x: {verdict} (the extra forward pass alone costs about 4/3)")
