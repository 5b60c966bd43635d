"""The house style for every figure of the companion (all sections).

One idea per figure, axes labelled with units, the same colour for the same memory category in
every notebook. Notebooks call these helpers and never set styles themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from chapter20.checks import check_int, check_positive
from chapter20.measure import CATEGORIES

#: One colour per memory category, shared by every stacked bar of the companion.
CATEGORY_COLORS = dict(zip(CATEGORIES, ("#4C72B0", "#DD8452", "#55A868", "#C44E52")))
CATEGORY_LABELS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "activations": "activations & temporaries",
}

_BYTE_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def use_house_style() -> None:
    """Apply the companion's matplotlib style (idempotent)."""
    mpl.rcParams.update(
        {
            "figure.figsize": (7.0, 4.0),
            "figure.dpi": 100,
            "savefig.bbox": "tight",
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.titlesize": 12,
            "axes.labelsize": 11,
            "legend.frameon": False,
        }
    )


def new_figure(
    title: str, xlabel: str, ylabel: str, *, figsize: tuple[float, float] | None = None
) -> tuple[Figure, Axes]:
    """A figure with one labelled axes in the house style."""
    use_house_style()
    fig, ax = plt.subplots(figsize=_figsize(figsize))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return fig, ax


def _figsize(figsize: tuple[float, float] | None) -> tuple[float, float] | None:
    if figsize is None:
        return None
    if not isinstance(figsize, (tuple, list)) or len(figsize) != 2:
        raise TypeError(f"figsize must be (width, height) in inches, got {figsize!r}")
    return (check_positive("figsize", figsize[0]), check_positive("figsize", figsize[1]))


def new_panels(
    n: int, title: str, *, figsize: tuple[float, float] | None = None
) -> tuple[Figure, list[Axes]]:
    """``n`` side-by-side axes under one title (one idea, several sizes), in the house style."""
    n = check_int("n", n, 1, maximum=64)
    use_house_style()
    fig, axes = plt.subplots(1, n, figsize=_figsize(figsize) or (3.6 * n, 4.0), squeeze=False)
    fig.suptitle(title)
    return fig, list(axes[0])


def byte_scale(unit: str) -> int:
    """Bytes in one ``unit`` (B, KiB, MiB, GiB); ValueError for anything else."""
    if unit not in _BYTE_UNITS:
        raise ValueError(f"unit must be one of {list(_BYTE_UNITS)}, got {unit!r}")
    return _BYTE_UNITS[unit]


def stacked_memory_bars(
    labels: Sequence[str],
    breakdowns: Sequence[Mapping[str, float]],
    *,
    title: str,
    unit: str = "MiB",
    xlabel: str = "",
    bar_labels: Sequence[str] | None = None,
    ax: Axes | None = None,
    legend: bool = True,
) -> Axes:
    """Stacked bars of memory by category (§20.3), one bar per breakdown, in ``unit``.

    ``breakdowns[i]`` maps categories of ``measure.CATEGORIES`` to bytes. ``bar_labels`` (e.g.
    "measured" / "predicted") are written above the bars.
    """
    for breakdown in breakdowns:
        for value in breakdown.values():
            check_positive("breakdowns", value, zero=True)
    if len(labels) != len(breakdowns):
        raise ValueError(
            f"labels ({len(labels)}) and breakdowns ({len(breakdowns)}) differ in length"
        )
    scale = byte_scale(unit)
    if ax is None:
        _, ax = new_figure(title, xlabel, f"memory ({unit})")
    else:
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"memory ({unit})")
    positions = range(len(labels))
    bottoms = [0.0] * len(labels)
    for category in CATEGORIES:
        heights = [b.get(category, 0) / scale for b in breakdowns]
        ax.bar(
            positions,
            heights,
            bottom=bottoms,
            color=CATEGORY_COLORS[category],
            label=CATEGORY_LABELS[category],
            width=0.7,
        )
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    if bar_labels is not None:
        for x, top, text in zip(positions, bottoms, bar_labels):
            ax.annotate(
                text,
                (x, top),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )
    ax.set_xticks(list(positions), labels)
    ax.set_ylim(0, max(bottoms) * 1.12 if max(bottoms) > 0 else 1)
    if legend:
        ax.legend(loc="upper left", fontsize=8)
    return ax
