"""§20.1 / §20.2.1 Contrastive training at scale, run and measured: the proofs of the composed
step's accumulation and the experiments behind notebook 02 and ``python -m chapter20 bench
contrastive``. The proofs of the losses alone are ``chapter20.techniques.contrastive_proofs``.
"""

from __future__ import annotations

from collections.abc import Callable

import matplotlib.ticker
import pandas as pd
import torch
from torch import nn

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
from chapter20.techniques.contrastive import micro_batch_info_nce
from chapter20.training.config import TrainConfig
from chapter20.training.trainer import Trainer

__all__ = [
    "accumulation_proof",
    "naive_info_nce_accumulation_gap",
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
    naive = _frozen_trainer(model, loss=micro_batch_info_nce).step(chunks)
    return {
        "full_batch_loss": full.loss,
        "accumulated_loss": naive.loss,
        "max_grad_diff": max_grad_diff(named_gradients(model), full_grads),
        "negatives_full": batch - 1,
        "negatives_accumulated": micro - 1,
    }


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
            model, loss=micro_batch_info_nce, config={"micro_batches": -(-len(anchors) // micro)}
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
