"""The house style for every figure of the companion (all sections).

One idea per figure, axes labelled with units, the same colour for the same memory category in
every notebook. Notebooks call these helpers and never set styles themselves.

Every figure carries alternative text for readers who cannot see it: the ``alt`` given to
:func:`new_figure` / :func:`new_panels` (or :func:`set_alt_text`), else a description built from
its titles, axis labels and legend (:func:`alt_text`). In a notebook the text travels with the
PNG output (``metadata["image/png"]["alt"]``), where nbconvert's HTML and JupyterLab read it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import matplotlib.ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from chapter20.core.checks import check_int, check_positive
from chapter20.core.measure import CATEGORIES

#: One colour per memory category, shared by every stacked bar of the companion.
CATEGORY_COLORS = dict(zip(CATEGORIES, ("#4C72B0", "#DD8452", "#55A868", "#C44E52")))
CATEGORY_LABELS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "activations": "activations & temporaries",
}

_BYTE_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
_ALT_ATTRIBUTE = "_chapter20_alt_text"
_IMAGE_FORMATS = ("image/png", "image/jpeg")


def set_alt_text(fig: Figure, text: str) -> Figure:
    """Give ``fig`` the alternative text ``text`` (a non-empty sentence saying what it shows)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"alt text must be a non-empty string, got {text!r}")
    setattr(fig, _ALT_ATTRIBUTE, " ".join(text.split()))
    return fig


def alt_text(fig: Figure) -> str:
    """The alternative text of ``fig``: the one set with :func:`set_alt_text`, else one sentence
    per axes from its title, axis labels and legend entries (never empty)."""
    explicit = getattr(fig, _ALT_ATTRIBUTE, None)
    if explicit:
        return explicit
    parts = []
    title = getattr(fig, "_suptitle", None)  # Figure.get_suptitle() needs matplotlib >= 3.8
    suptitle = title.get_text() if title is not None else ""
    if suptitle:
        parts.append(f"{suptitle}.")
    for ax in fig.axes:
        if not ax.get_visible() or not ax.has_data():
            continue
        what = ax.get_title() or "Plot"
        y, x = ax.get_ylabel(), ax.get_xlabel()
        sentence = f"{what}: {y or 'values'} against {x}" if x else f"{what}: {y or 'values'}"
        labels = [label for label in ax.get_legend_handles_labels()[1] if not label.startswith("_")]
        if labels:
            shown = ", ".join(labels[:6]) + (
                f" and {len(labels) - 6} more" if len(labels) > 6 else ""
            )
            sentence += f"; series: {shown}"
        parts.append(sentence + ".")
    # One line: titles may break lines, an alt attribute does not.
    return " ".join(" ".join(parts).split()) or "A figure without labelled axes."


def _with_alt_text(formatter):
    """Wrap an IPython image formatter of figures so that its output carries the alt text."""

    @functools.wraps(formatter)
    def format_with_alt(fig):
        data = formatter(fig)
        if data is None:
            return None
        data, metadata = data if isinstance(data, tuple) else (data, {})
        return data, {**(metadata or {}), "alt": alt_text(fig)}

    format_with_alt.chapter20_alt_text = True
    return format_with_alt


def register_alt_text() -> bool:
    """In an IPython kernel, make every figure's PNG/JPEG output carry :func:`alt_text`
    (idempotent; re-applied when the inline backend re-registers its formatters). False outside
    IPython or when no image formatter for figures is registered."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return False
    registered = False
    for mime in _IMAGE_FORMATS:
        formatter = shell.display_formatter.formatters.get(mime)
        try:
            current = formatter.lookup_by_type(Figure) if formatter is not None else None
        except KeyError:
            continue
        if not getattr(current, "chapter20_alt_text", False):
            formatter.for_type(Figure, _with_alt_text(current))
        registered = True
    return registered


def _give_alt_text(fig: Figure, alt: str | None) -> None:
    # After the first figure: pyplot loads the inline backend, which registers its formatters.
    register_alt_text()
    if alt is not None:
        set_alt_text(fig, alt)


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
    title: str,
    xlabel: str,
    ylabel: str,
    *,
    figsize: tuple[float, float] | None = None,
    alt: str | None = None,
) -> tuple[Figure, Axes]:
    """A figure with one labelled axes in the house style; ``alt`` is its alternative text
    (default: built from the titles, labels and legend when it is shown, see :func:`alt_text`)."""
    use_house_style()
    fig, ax = plt.subplots(figsize=_figsize(figsize))
    _give_alt_text(fig, alt)
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
    n: int,
    title: str,
    *,
    figsize: tuple[float, float] | None = None,
    alt: str | None = None,
) -> tuple[Figure, list[Axes]]:
    """``n`` side-by-side axes under one title (one idea, several sizes), in the house style,
    laid out by matplotlib's constrained layout (do not call ``tight_layout`` on it); ``alt`` as
    in :func:`new_figure`."""
    n = check_int("n", n, 1, maximum=64)
    use_house_style()
    # constrained layout keeps the suptitle clear of the panels' own titles
    fig, axes = plt.subplots(
        1, n, figsize=_figsize(figsize) or (3.6 * n, 4.0), squeeze=False, layout="constrained"
    )
    _give_alt_text(fig, alt)
    fig.suptitle(title)
    return fig, list(axes[0])


def plain_log_ticks(axis) -> None:
    """Plain numbers ("0.05", "20") at 1, 2 and 5 per decade on a log ``axis`` (an ``ax.xaxis``
    or ``ax.yaxis``), no minor ticks: rather than "3×10¹", or labels that crowd each other."""
    axis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_locator(matplotlib.ticker.NullLocator())


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
