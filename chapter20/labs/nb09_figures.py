"""Notebook 09's figures (note, topic 1): the cost of a pair as the vocabulary grows, and quality
against speed on the real corpus. One palette for both, so that an objective keeps its colour
from one figure to the other.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from chapter20.core.plotting import new_figure

__all__ = [
    "plot_step_time",
    "plot_quality_vs_speed",
]


#: Colours by objective as trainer names spell it (``negative``, ``negative-plain``, ...), the plain
#: path a lighter shade of its objective's; ``hierarchical-gensim_tree`` has none (notebook 09
#: does not plot it).
_COLORS = {
    "negative": "#4C72B0",
    "negative-plain": "#64B5CD",
    "negative-shared": "#8172B2",
    "hierarchical": "#55A868",
    "hierarchical-plain": "#8CC084",
    "softmax": "#C44E52",
}
_LABELS = {
    "negative": "negative sampling",
    "hierarchical": "hierarchical softmax",
    "softmax": "full softmax",
}


def plot_step_time(frame: pd.DataFrame, negative: int = 5):
    """Time per pair vs vocabulary size, log-log (median, the repeats' quartiles shaded), with
    O(n), O(log n) and O(k) references."""
    _, ax = new_figure(
        "Cost of one (word, context) pair as the vocabulary grows",
        "vocabulary size n (words)",
        "time per pair (µs)",
    )
    n = np.logspace(math.log10(frame.vocab.min()), math.log10(frame.vocab.max()), 50)
    for objective, group in frame.groupby("objective", sort=False):
        group = group.sort_values("vocab")
        color = _COLORS[objective]
        ax.plot(group.vocab, group.us_per_pair, "o-", color=color, label=_LABELS[objective])
        if "us_min" in group:  # the repeats' min–max range
            ax.fill_between(group.vocab, group.us_min, group.us_max, color=color, alpha=0.2)
        first, last = group.iloc[0], group.iloc[-1]
        if objective == "softmax":
            ax.plot(n, last.us_per_pair * n / last.vocab, ":", color=color, label="O(n)")
        elif objective == "hierarchical":
            ref = first.us_per_pair * np.log2(n) / math.log2(first.vocab)
            ax.plot(n, ref, ":", color=color, label="O(log n)")
        else:
            ax.plot(
                n, np.full_like(n, first.us_per_pair), ":", color=color, label=f"O(k), k={negative}"
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.legend(fontsize=8, ncol=2)
    return ax


def plot_quality_vs_speed(summary: pd.DataFrame):
    """Spearman ρ against raw words per second, one point per trainer and similarity set."""
    _, ax = new_figure(
        "Quality against speed on the real corpus",
        "training speed (raw words per second, log scale)",
        "Spearman ρ (mean over seeds)",
    )
    for trainer, row in summary.iterrows():
        source, _, objective = trainer.partition(" ")
        color = _COLORS[objective]
        marker = "o" if source == "ours" else "s"
        # named in the legend, not by labels beside the points, which overlap where two
        # trainers reach the same ρ at the same speed
        ax.scatter(row.words_per_second, row.wordsim353, color=color, marker=marker, s=60,
                   label=trainer)  # fmt: skip
        ax.scatter(
            row.words_per_second, row.simlex999, color=color, marker=marker, s=60, facecolors="none"
        )
    ax.set_xscale("log")
    ax.scatter([], [], color="grey", marker="o", label="WordSim-353 (filled)")
    ax.scatter([], [], color="grey", marker="o", facecolors="none", label="SimLex-999 (open)")
    ax.scatter([], [], color="grey", marker="s", label="gensim (squares)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax
