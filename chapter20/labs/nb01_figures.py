"""§20.1 Sharded embedding tables: the figures of notebook 01 (bytes per collective, load under
Zipf ids, throughput against ``nn.Embedding``, memory per rank of a 100M-row table), drawn from
the frames of ``chapter20.labs.nb01_sharding``."""

from __future__ import annotations

import pandas as pd

from chapter20.core.plotting import new_figure, new_panels
from chapter20.techniques.sharding import INPUT_MODES, PARTITIONS

__all__ = ["plot_comm_bytes", "plot_load", "plot_throughput", "plot_table_memory"]


def plot_comm_bytes(frame: pd.DataFrame):
    """Bytes one rank sends per step vs world size, measured (markers) and formula (line)."""
    fig, ax = new_figure(
        "Traffic of one lookup + backward, same global batch",
        "world size W",
        "KiB sent per rank per step",
    )
    step = frame.groupby(["inputs", "W", "rank"])[["measured_bytes", "formula_bytes"]].sum()
    per_rank = step.groupby(["inputs", "W"]).mean().reset_index()
    for inputs, marker, color in zip(INPUT_MODES, ("o", "s"), ("#4C72B0", "#DD8452")):
        part = per_rank[per_rank["inputs"] == inputs]
        kw = {"color": color}
        ax.plot(part["W"], part["formula_bytes"] / 2**10, "-", label=f"{inputs}: formula", **kw)
        ax.plot(
            part["W"], part["measured_bytes"] / 2**10, marker, label=f"{inputs}: measured", **kw
        )
    ax.set_xticks(sorted(frame["W"].unique()))
    ax.legend()
    return fig


def plot_load(frame: pd.DataFrame, world_size: int = 8):
    """Per-rank lookups under Zipf ids at ``world_size`` (left) and imbalance vs W (right)."""
    fig, (left, right) = new_panels(2, "Zipf ids: who serves the lookups", figsize=(9, 4))
    for offset, kind in zip((-0.2, 0.2), PARTITIONS):
        row = frame[(frame["W"] == world_size) & (frame["partition"] == kind)].iloc[0]
        left.bar([r + offset for r in range(world_size)], row["load"], width=0.4, label=kind)
        part = frame[frame["partition"] == kind]
        right.plot(part["W"], part["imbalance"], "o-", label=kind)
    left.set(xlabel="rank", ylabel="lookups served", title=f"{world_size} ranks")
    right.set(xlabel="world size W", ylabel="busiest rank / mean", title="load imbalance")
    right.set_xscale("log", base=2)
    right.set_xticks(frame["W"].unique(), labels=[str(w) for w in frame["W"].unique()])
    left.legend()
    right.legend()
    return fig


def plot_throughput(frame: pd.DataFrame):
    """Lookup + backward throughput of each table, same ids: the median, with the rates of the
    slowest and fastest step as error bars."""
    fig, ax = new_figure(
        "Throughput on this machine", "", "million lookups / s (forward + backward)"
    )
    labels = [f"{t}\nW={w}" for t, w in zip(frame["table"], frame["W"])]
    colors = ["#8C8C8C"] + ["#4C72B0"] * (len(frame) - 1)
    rate = frame["lookups_per_s"] / 1e6
    batch = frame["lookups_per_s"] * frame["ms"] / 1e3  # lookups per step
    low, high = batch / frame["max_ms"] * 1e3 / 1e6, batch / frame["min_ms"] * 1e3 / 1e6
    ax.bar(labels, rate, color=colors, yerr=[rate - low, high - rate], capsize=4)
    return fig


def plot_table_memory(frame: pd.DataFrame, gpu_bytes: float = 80e9):
    """Bytes per rank of the sharded table vs world size, next to one GPU's memory."""
    rows = int(frame["rows_per_rank"].iloc[0] * frame["W"].iloc[0])
    fig, ax = new_figure(f"A {rows:,}-row table, sharded by rows", "world size W", "GB per rank")
    ax.plot(frame["W"], frame["weights_bytes"] / 1e9, "o-", label="weights")
    ax.plot(frame["W"], frame["training_bytes"] / 1e9, "s-", label="weights + grads + Adam")
    gpu_label = f"one {gpu_bytes / 1e9:.0f} GB GPU"
    ax.axhline(gpu_bytes / 1e9, color="#C44E52", linestyle="--", label=gpu_label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(frame["W"], labels=[str(w) for w in frame["W"]])
    ax.set_yscale("log")
    ax.legend()
    return fig
