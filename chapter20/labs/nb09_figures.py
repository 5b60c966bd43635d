"""Notebook 09's figures (note, topic 1): the Huffman tree of a small vocabulary, the cost of a
pair as the vocabulary grows, and the word-similarity quality of each run of the recorded study.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from chapter20.core.plotting import new_figure
from chapter20.word2vec.huffman import build_huffman_tree
from chapter20.word2vec.skipgram_config import Word2VecConfig

__all__ = [
    "plot_huffman_tree",
    "plot_quality",
    "plot_step_time",
]


#: Colours and names of the objectives in the cost figure.
_COLORS = {"negative": "#4C72B0", "hierarchical": "#55A868", "softmax": "#C44E52"}
_LABELS = {
    "negative": "negative sampling",
    "hierarchical": "hierarchical softmax",
    "softmax": "full softmax",
}


def plot_step_time(frame: pd.DataFrame, negative: int = Word2VecConfig.negative):
    """Time per pair vs vocabulary size, log-log (median, the repeats' min–max range shaded
    where the frame has it), with O(n), O(log n) and O(k) references (``negative`` = k)."""
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


def _children(tree) -> dict[tuple[str, int], dict[int, tuple[str, int]]]:
    """Each inner node's two children, ``("node", point)`` or ``("leaf", word)``, by branch."""
    children: dict[tuple[str, int], dict[int, tuple[str, int]]] = {}
    for word, length in enumerate(tree.lengths):
        for step in range(length):
            child = (
                ("node", int(tree.points[word, step + 1])) if step + 1 < length else ("leaf", word)
            )
            children.setdefault(("node", int(tree.points[word, step])), {})[
                int(tree.codes[word, step])
            ] = child
    return children


def plot_huffman_tree(words: list[str], counts, highlight: str):
    """The Huffman tree of ``words`` with ``counts`` (``build_huffman_tree``, the trainer's):
    the words at the leaves with their counts, each edge marked with its bit (0 = left), each
    inner node with the id of its output vector, and the path of ``highlight`` drawn over it."""
    tree = build_huffman_tree(np.asarray(counts))
    children, target = _children(tree), words.index(highlight)
    on_path = {("node", int(p)) for p in tree.points[target, : tree.lengths[target]]}
    on_path.add(("leaf", target))
    position: dict[tuple[str, int], tuple[float, float]] = {}

    def place(node, depth, next_x):  # leaves left to right, a parent above its children
        if node[0] == "leaf":
            position[node] = (next_x, -depth)
            return next_x + 1
        for bit in (0, 1):
            next_x = place(children[node][bit], depth + 1, next_x)
        kids = [position[children[node][bit]][0] for bit in (0, 1)]
        position[node] = (sum(kids) / 2, -depth)
        return next_x

    place(("node", len(words) - 2), 0, 0)
    code = tree.code(target)
    fig, ax = new_figure(
        f"Huffman tree of {len(words)} words: the path of {highlight!r} is its code {code}",
        "leaves: the words and their counts in the corpus", "depth (edges from the root)",
        figsize=(9, 4.8),
        alt=f"A binary tree with {len(words)} words at its leaves; frequent words sit near the "
        f"root. The path to {highlight!r} is highlighted: code {code}, {len(code)} inner nodes.",
    )  # fmt: skip
    for parent, kids in children.items():
        x0, y0 = position[parent]
        for bit, child in kids.items():
            x1, y1 = position[child]
            hot = parent in on_path and child in on_path
            ax.plot([x0, x1], [y0, y1], color="#C44E52" if hot else "#999999", lw=3 if hot else 1)
            box = {"boxstyle": "round", "fc": "white", "ec": "none"}
            ax.text((x0 + x1) / 2, (y0 + y1) / 2, str(bit), ha="center", va="center",
                    fontsize=9, bbox=box)  # fmt: skip
    for node, (x, y) in position.items():
        hot = node in on_path
        if node[0] == "node":
            ax.text(x, y, f"v{node[1]}", ha="center", va="center", fontsize=8, color="white",
                    bbox={"boxstyle": "circle", "fc": "#C44E52" if hot else "#4C72B0"})  # fmt: skip
        else:
            ax.text(x, y - 0.15, f"{words[node[1]]}\n{int(counts[node[1]]):,}", ha="center",
                    va="top", fontsize=8, fontweight="bold" if hot else "normal")  # fmt: skip
    ax.set_xticks([])
    depth = tree.max_depth
    ax.set_yticks(range(0, -depth - 1, -1), [str(d) for d in range(depth + 1)])
    ax.set_ylim(-depth - 0.9, 0.5)
    ax.set_xlim(-0.6, len(words) - 0.4)
    return ax


def plot_quality(trainers: pd.DataFrame):
    """WordSim-353 and SimLex-999 ρ per run of the recorded study (mean over the seeds, the
    standard deviation as error bars), the untrained vectors included: how far each trainer
    got from its start."""
    stats = trainers.groupby("trainer", sort=False)[["wordsim353", "simlex999"]]
    mean, std = stats.mean(), stats.std()
    _, ax = new_figure(
        "Word-similarity quality of each run, recorded study",
        "Spearman ρ with human ratings (mean ± std over 3 seeds)",
        "",
        figsize=(8, 4),
        alt="Horizontal bars of WordSim-353 and SimLex-999 Spearman rho per trainer; the "
        "untrained vectors sit near zero, the trained ones above.",
    )
    y = np.arange(len(mean))
    for offset, column, color in ((-0.2, "wordsim353", "#4C72B0"), (0.2, "simlex999", "#DD8452")):
        ax.barh(y + offset, mean[column], 0.38, xerr=std[column], color=color, label=column)
    ax.set_yticks(y, list(mean.index))
    ax.invert_yaxis()
    ax.axvline(0, color="black", lw=0.8)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax
