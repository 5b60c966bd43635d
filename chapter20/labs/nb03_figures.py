"""§20.2.2 Mixed precision: the figures and tables of notebook 03 (its experiments are in
``chapter20.labs.nb03_precision``): the parity of three precisions, step time against the batch,
the matmul timing table, peak memory by component, and gradients on the fp16 number line.
"""

from __future__ import annotations

import matplotlib.ticker
import numpy as np
import pandas as pd
import torch

from chapter20.core.plotting import CATEGORY_COLORS, new_figure, new_panels, stacked_memory_bars
from chapter20.core.seed_statistics import range_text
from chapter20.techniques.precision import PRECISIONS, format_limits

__all__ = ["matmul_table", "plot_parity", "plot_step_time", "plot_memory", "plot_number_line"]


def matmul_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`~chapter20.techniques.precision.matmul_speedup` for display: median ms with the
    repeats' min–max, TFLOP/s and the speed-up over fp32."""
    return pd.DataFrame(
        {
            "precision": frame["precision"],
            "median ms": (frame["seconds"] * 1e3).round(3),
            "min–max ms": range_text(frame.seconds_min * 1e3, frame.seconds_max * 1e3, 3),
            "TFLOP/s": frame["tflops"].round(3),
            "speedup": frame["speedup"].round(3),
        }
    )


def plot_parity(losses: dict[str, np.ndarray], relative: dict[str, np.ndarray]):
    """§20.2.2, the proof of notebook 03: the training loss of :func:`parity_run` in each
    precision (left), and each 16-bit run's relative loss difference from fp32 per step against
    its format's epsilon (right, log scale). Returns the figure."""
    steps = len(next(iter(losses.values())))
    fig, (left, right) = new_panels(
        2, f"The same {steps} Adam steps in three precisions", figsize=(10, 4)
    )
    styles = {"fp32": "-", "bf16": "--", "fp16": ":"}
    colors = {"fp32": "C0", "bf16": "C1", "fp16": "C2"}  # one colour per precision, both panels
    x = np.arange(1, steps + 1)  # steps counted from 1, integer ticks
    for name, values in losses.items():
        left.plot(x, values, label=name, linestyle=styles[name], linewidth=2, color=colors[name])
    for name, values in relative.items():
        right.plot(
            x,
            np.maximum(values, 1e-8),
            "o-",
            markersize=3,
            color=colors[name],
            label=f"{name} vs fp32",
        )
        eps = torch.finfo(PRECISIONS[name]).eps
        color = colors[name]
        right.axhline(eps, color=color, linestyle=":", label=f"{name} epsilon")
    left.set(xlabel="step", ylabel="InfoNCE loss", title="training loss")
    right.set(xlabel="step", ylabel="relative loss difference", yscale="log")
    right.set(title="distance from fp32", ylim=(1e-5, 1e-1))
    for panel in (left, right):
        panel.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    left.legend(loc="upper right", fontsize=8)
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, fontsize=8)
    return fig


def plot_step_time(frame: pd.DataFrame):
    """Step time per precision vs batch size."""
    fig, ax = new_figure(
        "One training step of the Transformer encoder", "batch (pairs)", "median step time (ms)"
    )
    for name, part in frame.groupby("precision", sort=False):
        ax.plot(part["batch"], part["seconds"] * 1e3, "o-", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(frame["batch"].unique(), labels=map(str, frame["batch"].unique()))
    ax.legend(title="precision", loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    return fig


def plot_memory(frame: pd.DataFrame):
    """Peak memory per precision, stacked by component."""
    categories = [c for c in CATEGORY_COLORS if c in frame.columns]
    breakdowns = [dict(zip(categories, row)) for row in frame[categories].itertuples(index=False)]
    ax = stacked_memory_bars(
        list(frame["precision"]),
        breakdowns,
        title="Peak memory of one training step",
        unit="MiB",
        bar_labels=[f"{r:.2f}x" for r in frame["vs_fp32"]],
        legend=False,
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)  # off the bars
    return ax


def plot_number_line(magnitudes: torch.Tensor, scale: float = 2.0**16):
    """Histogram of gradient magnitudes (log scale), unscaled and times ``scale``, against fp16's
    smallest subnormal, smallest normal and largest value."""
    fig, ax = new_figure(
        "Gradient magnitudes against the fp16 number line",
        "|gradient| (log scale)",
        "share of gradient values",
    )
    values = magnitudes.double().numpy()
    bins = np.logspace(-14, 6, 81)
    weights = np.full(len(values), 1 / len(values))
    ax.hist(values, bins=bins, weights=weights, alpha=0.6, label="gradients")
    ax.hist(
        values * scale,
        bins=bins,
        weights=weights,
        alpha=0.6,
        label=f"gradients x {scale:.0f} (loss scaling)",
    )
    limits = format_limits([torch.float16]).iloc[0]
    for value, label, style in (
        (limits.largest_that_rounds_to_zero, "rounds to 0 below", ":"),
        (limits.smallest_normal, "smallest normal", "--"),
        (limits["max"], "largest fp16", "-"),
    ):
        ax.axvline(value, color="#C44E52", linestyle=style, label=f"{label} {value:.1e}")
    ax.set_xscale("log")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    return fig
