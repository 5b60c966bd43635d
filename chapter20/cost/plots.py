"""§20.5 The cost model's figures (house style): time and cost to train over the GPU count, every
option against the Pareto frontier, the spot overhead against the checkpoint interval, the spot
saving by GPU model and the catalog's price history (§20.5.2). matplotlib is imported when a
figure is drawn, not with the cost model.
"""

from __future__ import annotations

import pandas as pd

__all__ = [
    "plot_pareto",
    "plot_price_history",
    "plot_spot_discounts",
    "plot_spot_overhead",
    "plot_time_and_cost",
]


#: One colour per GPU model in every figure of the cost model (matplotlib's tab20 shades: a
#: model and its larger-memory variant share a hue).
GPU_COLOURS = {
    "A100": "#1f77b4", "A100-80GB": "#aec7e8", "H100": "#d62728", "H200": "#ff9896",
    "V100": "#2ca02c", "V100-32GB": "#98df8a", "A10G": "#ff7f0e", "A10": "#ffbb78",
    "T4": "#9467bd", "T4g": "#c5b0d5", "A6000": "#e377c2", "RTX6000": "#f7b6d2",
    "K80": "#7f7f7f", "M60": "#c7c7c7", "Radeon Pro V520": "#bcbd22",
}  # fmt: skip


def gpu_colour(gpu_model: str) -> str:
    """The colour of ``gpu_model`` in every cost figure (:data:`GPU_COLOURS`; dark grey for a
    model it does not list)."""
    return GPU_COLOURS.get(gpu_model, "#333333")


def _plain_log_axis(axis, values) -> None:
    """Log scale with the given values as plain-number ticks (1, 8, 64 rather than 2^3)."""
    ticks = sorted({float(v) for v in values})
    axis.set_ticks(ticks, [f"{t:g}" for t in ticks])
    import matplotlib.ticker  # the plots import matplotlib; the cost model does not need it

    axis.set_minor_locator(matplotlib.ticker.NullLocator())


def plot_time_and_cost(options: pd.DataFrame, caption: str = ""):
    """Two panels over GPU count (§20.5): wall time in hours (log) and cost in USD, one line
    per instance type, coloured by its GPU model (:func:`gpu_colour`). ``caption`` (the price
    snapshot) goes under the figure."""
    from chapter20.core.plotting import new_panels, plain_log_ticks

    fig, (left, right) = new_panels(2, "Time and cost to train one workload", figsize=(11, 4.2))
    styles = ("-", "--", "-.", ":")
    markers = ("o", "s", "^", "D", "v", "P")
    for index, (instance, group) in enumerate(options.groupby("instance", sort=False)):
        label = f"{instance} ({group['gpu_model'].iloc[0]})"
        # distinct dashes and markers: instances with the same GPUs draw the same curve
        style = dict(
            linestyle=styles[index % 4], marker=markers[index % 6], markersize=4, label=label,
            color=gpu_colour(group["gpu_model"].iloc[0]),
        )  # fmt: skip
        left.plot(group["gpus"], group["hours"], **style)
        right.plot(group["gpus"], group["cost"], **style)
    for ax in (left, right):
        ax.set_xscale("log")
        _plain_log_axis(ax.xaxis, options["gpus"])
        ax.set_xlabel("GPUs")
    left.set(ylabel="wall time (hours)", yscale="log")
    plain_log_ticks(left.yaxis)
    right.set(ylabel="cost of the run (USD)", ylim=(0, 1.1 * options["cost"].max()))
    right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if caption:
        fig.text(0.5, -0.02, caption, ha="center", fontsize=8, color="#555555")
    return fig


def plot_pareto(
    options: pd.DataFrame,
    frontier: pd.DataFrame,
    caption: str = "",
    highlight: dict[str, tuple[float, float]] | None = None,
):
    """Every option as a point of (wall time, cost) coloured by GPU model, the Pareto frontier
    as a line labelled with its GPU counts, and ``highlight`` points (label: (hours, cost))
    as stars (§20.5)."""
    from chapter20.core.plotting import new_figure

    fig, ax = new_figure(
        "Time vs cost: every option and the Pareto frontier",
        "wall time (hours, log scale)",
        "cost of the run (USD)",
    )
    for gpu_model, group in options.groupby("gpu_model"):
        ax.scatter(
            group["hours"], group["cost"], s=14, alpha=0.6, label=gpu_model,
            color=gpu_colour(gpu_model),
        )  # fmt: skip
    ax.plot(frontier["hours"], frontier["cost"], "k-", lw=1.2, label="Pareto frontier (GPUs)")
    for row in frontier.itertuples():
        ax.annotate(
            f"{row.gpus}",
            (row.hours, row.cost),
            fontsize=7,
            ha="center",
            va="top",
            xytext=(0, -4),
            textcoords="offset points",
        )
    for label, (hours, cost) in (highlight or {}).items():
        ax.plot(hours, cost, "*", color="black", markersize=11)
        ax.annotate(label, (hours, cost), fontsize=8, xytext=(6, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.1 * options["cost"].max())
    ax.legend(fontsize=8, loc="lower left", ncol=2)
    if caption:
        ax.text(0.0, -0.2, caption, transform=ax.transAxes, fontsize=8, color="#555555")
    return fig


def plot_spot_overhead(curves: dict[str, pd.DataFrame], optima: dict[str, tuple[float, float]]):
    """Preemption overhead (%) against the checkpoint interval (minutes), one curve per mean
    time between preemptions; ``optima[label]`` = (Young/Daly interval in seconds, its
    overhead) is marked with a dot (§20.5.2). The y axis stops at 10x the largest optimum."""
    from chapter20.core.plotting import new_figure, plain_log_ticks

    fig, ax = new_figure(
        "Spot: expected overhead vs checkpoint interval",
        "checkpoint interval (minutes)",
        "expected overhead (% of the work)",
    )
    for label, frame in curves.items():
        (line,) = ax.plot(frame["interval_seconds"] / 60, 100 * frame["overhead"], label=label)
        interval, overhead = optima[label]
        ax.plot(interval / 60, 100 * overhead, "o", color=line.get_color())
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax.xaxis)
    plain_log_ticks(ax.yaxis)
    lowest = min(overhead for _, overhead in optima.values())
    ax.set_ylim(50 * lowest, 1000 * max(overhead for _, overhead in optima.values()))
    ax.legend(fontsize=8, title="dots: Young/Daly interval", title_fontsize=8)
    return fig


def plot_price_history(history: pd.DataFrame, caption: str = ""):
    """Two panels over the catalog's history (§20.5.2): the spot saving, 1 − spot / on-demand
    in % (median zone as a line, the highest- to the lowest-priced zone shaded), and the
    on-demand price (log scale), one line per instance type of ``history``
    (``chapter20.cost.catalog.load_price_history``), coloured by its GPU model
    (:func:`gpu_colour`; types with the same GPUs differ by dashes); the legend sits right of
    the panels."""
    from chapter20.core.plotting import new_panels

    fig, (left, right) = new_panels(
        2, "Spot and on-demand prices over the catalog's history", figsize=(12, 4.2)
    )
    from chapter20.cost.catalog import load_catalog

    models = load_catalog().drop_duplicates("instance").set_index("instance")["gpu_model"]
    lines, seen = [], {}
    for instance, group in history.groupby("instance", sort=False):
        od = group["on_demand_per_hour"]
        gpu = models.get(instance, "")
        label = f"{instance} ({gpu}, {group['region'].iloc[0]})"
        dashes = ("-", "--", ":")[min(seen.get(gpu, 0), 2)]
        seen[gpu] = seen.get(gpu, 0) + 1
        style = dict(lw=1.2, color=gpu_colour(gpu), linestyle=dashes)
        (line,) = left.plot(group["date"], 100 * (1 - group["spot_median_per_hour"] / od), **style)
        left.fill_between(
            group["date"],
            100 * (1 - group["spot_high_per_hour"] / od),
            100 * (1 - group["spot_low_per_hour"] / od),
            color=line.get_color(),
            alpha=0.15,
            lw=0,
        )
        right.plot(group["date"], od, **style)
        lines.append((line, label))
    left.set(ylabel="spot saving over on-demand (%)", ylim=(0, 100))
    right.set(ylabel="on-demand price (USD per hour, log)", yscale="log")
    for ax in (left, right):
        ax.set_xlabel("date of the catalog version")
        ax.tick_params(axis="x", labelrotation=30)
    right.legend(
        [line for line, _ in lines],
        [label for _, label in lines],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        title="saving: median zone,\nband: every zone",
        title_fontsize=7,
    )
    if caption:
        fig.text(0.5, -0.04, caption, ha="center", fontsize=8, color="#555555")
    return fig


def plot_spot_discounts(discounts: pd.DataFrame, claimed: tuple[float, float] | None = None):
    """The saving of spot over on-demand in every zone of the snapshot, one box per GPU model
    (§20.5.2, ``chapter20.cost.catalog.spot_discounts``), filled with the model's colour
    (:func:`gpu_colour`); ``claimed`` (low, high) in % is shaded as the chapter's range."""
    from chapter20.core.plotting import new_figure

    fig, ax = new_figure(
        "Spot saving by GPU model, every region and zone",
        "spot saving over on-demand (%)",
        "GPU model (zones with a spot price)",
        figsize=(7, 4.5),
    )
    order = discounts.groupby("gpu_model")["saving %"].median().sort_values().index
    groups = [discounts.loc[discounts["gpu_model"] == m, "saving %"] for m in order]
    boxes = ax.boxplot(
        groups, whis=(5, 95), showfliers=False, orientation="horizontal", patch_artist=True,
        medianprops={"color": "black"},
    )  # fmt: skip
    for box, model in zip(boxes["boxes"], order):
        box.set(facecolor=gpu_colour(model), alpha=0.7)  # each GPU model's colour
    ax.set_yticks(range(1, len(order) + 1), [f"{m} ({len(g)})" for m, g in zip(order, groups)])
    if claimed is not None:
        ax.axvspan(*claimed, color="#2a9d8f", alpha=0.12, label="the chapter's range")
        ax.legend(fontsize=8, loc="upper left")  # the lowest savings are at the bottom
    ax.set_xlim(0, 100)
    return fig
