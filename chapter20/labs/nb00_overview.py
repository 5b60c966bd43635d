"""The chapter's opening measurement (§20 overview, §20.3): what one training step holds.

A contrastive Adam step of the bag-of-embeddings encoder, measured in its two phases with
``measure.peak_memory`` — forward + backward, then ``optimizer.step()`` — and set beside the
analytic count of ``memory.training_state_bytes`` (4 bytes of weights, 4 of gradient and 8 of
Adam state per float32 parameter). Used by ``notebooks/00_overview.ipynb`` and
``python -m chapter20 bench step-memory``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from chapter20.core.checks import check_int
from chapter20.core.device import get_device, set_seed
from chapter20.core.id_streams import zipf_ids
from chapter20.core.measure import CATEGORIES, MemoryReport, peak_memory
from chapter20.core.models import BagOfEmbeddingsEncoder, count_parameters
from chapter20.core.plotting import new_panels, stacked_memory_bars
from chapter20.techniques.contrastive import info_nce
from chapter20.techniques.memory_model import training_state_bytes

STATIC = ("parameters", "gradients", "optimizer_state")
#: The table sizes notebook 00 measures (times ``CHAPTER20_SCALE``).
VOCAB_SIZES = (10_000, 30_000, 100_000)


@dataclass(frozen=True)
class StepAnatomy:
    """Measured and predicted bytes of one Adam training step of one model size.

    ``backward`` is the peak of forward + backward, ``step`` the peak of ``optimizer.step()``
    (when the gradients sit in ``.grad`` beside the weights and Adam's state).
    """

    vocab_size: int
    embedding_dim: int
    num_parameters: int
    rows_touched: int
    backward: MemoryReport
    step: MemoryReport
    predicted: dict[str, int]

    @property
    def peak_bytes(self) -> int:
        """Peak of the whole training step (the larger of the two phases)."""
        return max(self.backward.peak_bytes, self.step.peak_bytes)

    def exact_components(self) -> dict[str, bool]:
        """Whether weights, gradients and Adam state measured during the step equal the formula,
        to the byte."""
        return {k: self.step.breakdown[k] == self.predicted[k] for k in STATIC}

    def adam_memory_ratio(self) -> float:
        """(weights + Adam state) / weights, measured: the chapter's "Adam triples memory"."""
        b = self.step.breakdown
        return (b["parameters"] + b["optimizer_state"]) / b["parameters"]


def step_anatomy(
    vocab_size: int,
    embedding_dim: int = 128,
    *,
    batch_size: int = 256,
    tokens_per_example: int = 32,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> StepAnatomy:
    """Measure both phases of one contrastive Adam step of a ``vocab_size``-row encoder.

    The batch holds Zipf-distributed token ids, as real text does. One full step runs first so
    that Adam's state exists (as in any real run); the next step is the one measured.
    ``device`` defaults to ``get_device()``; on CUDA the peaks are the allocator's.
    """
    batch_size = check_int("batch_size", batch_size, 1)
    tokens_per_example = check_int("tokens_per_example", tokens_per_example, 1)
    device = get_device() if device is None else torch.device(device)
    set_seed(seed)
    model = BagOfEmbeddingsEncoder(vocab_size, embedding_dim, padding_idx=None).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    shape = (batch_size, tokens_per_example)
    anchors = zipf_ids(shape, vocab_size, seed=seed).to(device)
    positives = zipf_ids(shape, vocab_size, seed=seed + 1).to(device)

    def forward_backward() -> None:
        info_nce(model(anchors), model(positives)).backward()

    forward_backward()  # one whole step first, so that Adam's state exists as in a real run
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    tracked = {"model": model, "optimizer": optimizer, "inputs": (anchors, positives)}
    backward = peak_memory(forward_backward, **tracked)
    step = peak_memory(optimizer.step, **tracked)
    optimizer.zero_grad(set_to_none=True)
    num_parameters = count_parameters(model)
    return StepAnatomy(
        vocab_size=vocab_size,
        embedding_dim=embedding_dim,
        num_parameters=num_parameters,
        rows_touched=int(torch.cat([anchors, positives]).unique().numel()),
        backward=backward,
        step=step,
        predicted=training_state_bytes(
            num_parameters, num_tensors=len(list(model.parameters())), optimizer="adam"
        ),
    )


def anatomy_table(results: list[StepAnatomy]) -> pd.DataFrame:
    """One row per model size and phase: MiB per category at that phase's peak."""
    rows = []
    for r in results:
        for phase, report in (("forward+backward", r.backward), ("optimizer.step", r.step)):
            row: dict[str, object] = {"vocab_size": r.vocab_size, "phase": phase}
            row.update({c: report.breakdown[c] / 2**20 for c in CATEGORIES})
            row["peak MiB"] = report.peak_bytes / 2**20
            row["peak / weights"] = report.peak_bytes / report.breakdown["parameters"]
            row["peak reached at"] = report.peak_op
            rows.append(row)
        formula = {"vocab_size": r.vocab_size, "phase": "formula 4+4+8 B/param"}
        formula.update({c: r.predicted.get(c, 0) / 2**20 for c in CATEGORIES})
        formula["peak MiB"] = sum(r.predicted.values()) / 2**20
        formula["peak / weights"] = sum(r.predicted.values()) / r.predicted["parameters"]
        formula["peak reached at"] = "—"
        rows.append(formula)
    return pd.DataFrame(rows).round(2)


def plot_anatomy(results: list[StepAnatomy]):
    """One panel per model size: both measured phases beside the formula (notebook 00)."""
    fig, axes = new_panels(
        len(results), "Memory of one Adam step, bag-of-embeddings encoder (peak MiB above bars)"
    )
    for r, ax in zip(results, axes, strict=True):
        stacked_memory_bars(
            ["forward+backward", "optimizer.step", "formula"],
            [r.backward.breakdown, r.step.breakdown, r.predicted],
            title=f"V = {r.vocab_size:,} rows × {r.embedding_dim}",
            bar_labels=[
                f"{r.backward.peak_bytes / 2**20:.0f}",
                f"{r.step.peak_bytes / 2**20:.0f}",
                f"{sum(r.predicted.values()) / 2**20:.0f}",
            ],
            ax=ax,
            legend=False,
        )
        for label in ax.get_xticklabels():  # one line each, clear of the next bar's label
            label.set(rotation=15, ha="right", rotation_mode="anchor")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=4, fontsize=9)
    return fig


def benchmark(vocab_sizes: tuple[int, ...] = VOCAB_SIZES) -> None:
    """``python -m chapter20 bench step-memory``: measured / predicted bytes per component."""
    print("One contrastive Adam step of the bag-of-embeddings encoder (dim 128, batch 256)")
    print("ratios measured / predicted (weights, grads, Adam state during optimizer.step),")
    print("then the peak of each phase over the formula's 16 bytes per parameter")
    header = ("vocab", "params", "weights", "grads", "adam", "fwd+bwd/16P", "step/16P")
    print("{:>9} {:>11} {:>8} {:>8} {:>8} {:>12} {:>9}".format(*header))
    for vocab in vocab_sizes:
        r = step_anatomy(vocab)
        ratios = [r.step.breakdown[k] / r.predicted[k] for k in STATIC]
        static = sum(r.predicted.values())
        print(
            f"{vocab:>9,} {r.num_parameters:>11,} "
            + " ".join(f"{x:>8.3f}" for x in ratios)
            + f" {r.backward.peak_bytes / static:>12.3f} {r.step.peak_bytes / static:>9.3f}"
        )
    print(f"memory method: {r.step.method}")
