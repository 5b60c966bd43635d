"""Notebook 08's experiments (§20.5): the chapter's prices and listing L12 on SkyPilot's catalog,
the catalog's spot discounts and their history, mixed precision's saving on both fp32
baselines, and the claims that depend on a workload (C17) or a scenario (C22) over a stated
range; ``bench cost-throughput`` re-measures the step times the cost model scales.

Every table here is computed from the data files of ``chapter20.cost`` (the catalog, its
sources and history, the datasheets, the GPU record); the notebook prints them, and the
verdicts it shows beside a range are :func:`chapter20.core.claims.check` of each row.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from chapter20.core.checks import check_int, check_positive
from chapter20.core.claims import check
from chapter20.core.gpu_record import code_version, current_gpu_ratio
from chapter20.cost.catalog import (
    load_catalog,
    load_snapshot,
    load_sources,
    snapshot_label,
    spot_discounts,
)
from chapter20.cost.estimates import (
    EMBEDDING_WORKLOAD,
    H200_MEASUREMENT,
    THROUGHPUT_CODE,
    DataFootprint,
    ThroughputRecord,
    cost_breakdown,
    mixed_precision_saving,
)
from chapter20.cost.fleet_choices import cheapest_fleet
from chapter20.cost.hardware import PRECISIONS, load_gpu_datasheets
from chapter20.cost.selection import CHAPTER_PRICES, cheapest_config
from chapter20.cost.trainable import trainable_catalog, trainable_gpu_models

__all__ = [
    "benchmark",
    "training_cost_over_workloads",
    "compute_share_over_scenarios",
    "chapter_prices",
    "current_speedup",
    "datasheet_table",
    "discount_stability",
    "stability_lines",
    "catalog_summary",
    "cheapest_config_by_menu",
    "excluded_gpus",
    "mixed_precision_table",
    "timed_step_line",
    "spot_by_type",
    "catalog_choice_note",
    "spot_saving_note",
    "mixed_precision_note",
    "spot_figure",
    "pareto_figure",
]


def chapter_prices() -> tuple[pd.DataFrame, float, bool]:
    """C18: the chapter's price of each L12 type beside the catalog's in us-east-1 (the region
    the chapter's prices are from) and the spread over every region that offers it; returns
    the table, the largest relative gap in us-east-1, and whether the GPU counts agree."""
    snapshot = load_snapshot()
    aws = snapshot[snapshot["cloud"] == "aws"]
    records = []
    for instance, (price, gpus, label) in CHAPTER_PRICES.items():
        rows = aws[aws["instance"] == instance]
        by_region = rows.groupby("region")["on_demand_per_hour"].median()
        here = float(by_region["us-east-1"])
        records.append(
            {
                "instance": instance,
                "chapter $/h": price,
                "catalog us-east-1 $/h": here,
                "gap %": 100 * (here / price - 1),
                "regions": len(by_region),
                "lowest region $/h": by_region.min(),
                "highest region $/h": by_region.max(),
                "GPUs (chapter)": gpus,
                "GPUs (catalog)": int(rows["gpus"].iloc[0]),
                "GPU (L12's label)": label,
                "GPU (catalog)": rows["gpu_model"].iloc[0],
            }
        )
    table = pd.DataFrame(records).set_index("instance")
    gap = float((table["gap %"].abs() / 100).max())
    counts_match = bool((table["GPUs (chapter)"] == table["GPUs (catalog)"]).all())
    return table, gap, counts_match


def cheapest_config_by_menu(target_gpus: int = 8, budget_per_hour: float = 50.0) -> pd.DataFrame:
    """C19: L12's selection (the cheapest ``target_gpus`` GPUs within ``budget_per_hour``) on
    three menus: L12's own three types (aws us-east-1, what the chapter did), the whole catalog
    on the GPUs this package can train on (``cost.trainable_catalog``: what C19 is judged on),
    and the whole catalog with every GPU, trainable or not."""
    catalog = load_catalog()
    menus = {
        "L12's three types (aws us-east-1)": catalog[catalog["instance"].isin(CHAPTER_PRICES)],
        "the whole catalog, trainable GPUs": trainable_catalog(catalog),
        "the whole catalog, every GPU": catalog,
    }
    records = []
    for menu, frame in menus.items():
        choice = cheapest_config(target_gpus, budget_per_hour, catalog=frame)
        records.append(
            {
                "menu": menu,
                "choice": f"{choice.n_instances} x {choice.instance}",
                "GPU": choice.gpu_model,
                "$/h": round(choice.price_per_hour, 4),
                "cloud": choice.cloud,
                "prices of": choice.snapshot_date,
            }
        )
    return pd.DataFrame(records).set_index("menu")


def excluded_gpus(target_gpus: int = 8, budget_per_hour: float = 50.0) -> pd.DataFrame:
    """C19: the GPU models the trainable menu leaves out (``cost.trainable_gpu_models``), each
    with the cheapest configuration of ``target_gpus`` of it within ``budget_per_hour`` (None
    where none fits), its compute capability and why it is excluded, cheapest first."""
    catalog = load_catalog()
    models = trainable_gpu_models(catalog)
    records = []
    for model, row in models[~models["trainable"]].iterrows():
        try:
            choice = cheapest_config(target_gpus, budget_per_hour, gpu_model=model, catalog=catalog)
            name, price = f"{choice.n_instances} x {choice.instance}", choice.price_per_hour
        except ValueError:  # nothing of this GPU fits the budget
            name, price = None, None
        records.append(
            {
                "GPU": model,
                "would give": name,
                "$/h": price,
                "compute capability": row["compute_capability"] or "—",
                "why excluded": row["reason"],
            }
        )
    return pd.DataFrame(records).sort_values("$/h").set_index("GPU")


def spot_by_type(snapshot: pd.DataFrame | None = None) -> pd.DataFrame:
    """C20: per instance type with spot prices, the saving of spot over on-demand across every
    region and zone of the snapshot: zones, median, 10th and 90th percentile, lowest, highest."""
    discounts = spot_discounts(snapshot)
    grouped = discounts.groupby(["cloud", "instance", "gpu_model"])["saving %"]
    table = pd.DataFrame(
        {
            "zones": grouped.size(),
            "median %": grouped.median(),
            "p10 %": grouped.quantile(0.1),
            "p90 %": grouped.quantile(0.9),
            "lowest %": grouped.min(),
            "highest %": grouped.max(),
        }
    )
    return table.reset_index().set_index("instance")


def discount_stability(history: pd.DataFrame) -> pd.DataFrame:
    """How stable the spot discount was over the catalog's history (§20.5.2): per instance
    type, the first and last day, the number of daily versions (one per day on which the file
    changed), how many on-demand prices it had, and the saving at the median zone (median,
    lowest, highest over the versions), with the largest change from one version to the next
    (in points), the share of versions within 5 points of the median, and its
    median over the first and over the last 30 days of the history (a shift that lasts)."""
    records, month = [], pd.Timedelta(days=30)
    for (cloud, instance), group in history.groupby(["cloud", "instance"], sort=False):
        group = group.dropna(subset=["spot_median_per_hour"])
        saving = 100 * (1 - group["spot_median_per_hour"] / group["on_demand_per_hour"])
        moves = saving.diff().abs()  # from one daily version to the next, in points
        first = saving[group["date"] < group["date"].min() + month]
        last = saving[group["date"] > group["date"].max() - month]
        records.append(
            {
                "cloud": cloud,
                "instance": instance,
                "first day": group["date"].min().date(),
                "last day": group["date"].max().date(),
                "daily versions": len(group),
                "on-demand prices": group["on_demand_per_hour"].nunique(),
                "saving median %": saving.median(),
                "lowest %": saving.min(),
                "highest %": saving.max(),
                "largest move between versions, points": moves.max(),
                "versions within 5 points of the median %": 100
                * ((saving - saving.median()).abs() <= 5).mean(),
                "first 30 days %": first.median(),
                "last 30 days %": last.median(),
            }
        )
    return pd.DataFrame(records).set_index("instance")


def stability_lines(stability: pd.DataFrame) -> list[str]:
    """One sentence per instance type of :func:`discount_stability`: the band its median zone
    saved in, over how many daily versions and days, how often within 5 points of its median,
    its first and last 30 days, and whether its on-demand price changed."""
    lines = []
    for name, row in stability.iterrows():
        n_prices = row["on-demand prices"]
        changes = "unchanged" if n_prices == 1 else f"{n_prices} different prices"
        within = row["versions within 5 points of the median %"]
        lines.append(
            f"{name}: the median zone saved {row['lowest %']:.0f}-{row['highest %']:.0f}% in "
            f"{row['daily versions']} daily versions, {row['first day']} to {row['last day']} "
            f"(within 5 points of its median {row['saving median %']:.0f}% in {within:.0f}% of "
            f"them); first 30 days {row['first 30 days %']:.0f}%, last 30 days "
            f"{row['last 30 days %']:.0f}%; on-demand {changes}"
        )
    return lines


def catalog_summary() -> str:
    """Section 1 of notebook 08: where each cloud's catalog file comes from (its path, commit
    date, rows read and kept as GPU rows), then the rows, GPU instance types per cloud, regions
    and zones with a spot price of the snapshot, and the catalog's label and source."""
    sources, snapshot = load_sources(), load_snapshot()
    table = sources[["source", "path", "commit_date", "rows_read", "rows_kept"]]
    types = snapshot.groupby("cloud")["instance"].nunique()
    return (
        f"{table.to_string(index=False)}\n\n{len(snapshot)} rows; GPU instance types: "
        f"{', '.join(f'{cloud} {n}' for cloud, n in types.items())}; "
        f"{snapshot['region'].nunique()} regions, "
        f"{snapshot['spot_per_hour'].notna().sum()} zones with a spot price\n"
        f"{snapshot_label()}; source: github.com/skypilot-org/skypilot-catalog"
    )


def datasheet_table() -> pd.DataFrame:
    """The datasheet peaks the time model scales by, TFLOP/s, one row per GPU and one column
    per precision; a precision a GPU has no units for is empty (§20.5)."""
    frame = load_gpu_datasheets()
    peaks = frame[frame["quantity"] == "peak"]
    table = peaks.pivot(index="gpu_model", columns="precision", values="value")
    return table.reindex(columns=list(PRECISIONS))


def current_speedup(baseline: str = "fp32", batch: int = 1024) -> float | None:
    """bf16 over ``baseline`` step time of the workload at ``batch`` from GPU record rows of the
    current code (``THROUGHPUT_CODE``), or None when the record has none: the only figure C21's
    verdict may read (the one GPU rule, ``chapter20.core.gpu_record.current_gpu_ratio``)."""
    quantity = "step seconds, {}, " + f"{batch} pairs"
    ratio = current_gpu_ratio(quantity.format(baseline), quantity.format("bf16"), THROUGHPUT_CODE)
    return None if ratio is None else ratio[0]


def timed_step_line(current: float | None, baseline: str = "fp32") -> str:
    """The line under notebook 08's mixed-precision table: whether the training step the
    notebook shows has been timed on a GPU, and if so its bf16 speed-up over ``baseline`` and
    the cost that saves (``current``: :func:`current_speedup`, None when it has not been)."""
    head = "timed on a GPU with the training step shown here: "
    if current is None:
        return head + "not yet, so the claim of 40–60% saved needs a GPU"
    saving = 100 * mixed_precision_saving(current)
    return head + f"bf16 x{current:.2f} over {baseline}, {saving:.0f}% of the cost saved"


def mixed_precision_table(record: ThroughputRecord = H200_MEASUREMENT, batch: int = 1024):
    """C21 on both fp32 baselines: the speed-up of bf16 over plain fp32 (PyTorch's default,
    no TF32) and over fp32 with TF32 matrix multiplies, from the GPU record, the cost each
    saves (1 − 1/speed-up). Shown, never judged: these rows carry no code version
    (:func:`current_speedup` is what C21 is judged on)."""
    records = []
    for baseline in ("fp32", "tf32"):
        speedup = record.speedup("bf16", baseline, batch)
        saving = 100 * mixed_precision_saving(speedup)
        records.append({"baseline": baseline, "speed-up": speedup, "cost saved %": saving})
    return pd.DataFrame(records).set_index("baseline")


def training_cost_over_workloads(
    pairs: Sequence[float] = (1e8, 1e9, 1e10, 1e11, 1e12),
    gpu_models: Sequence[str] = ("A100", "H100"),
) -> pd.DataFrame:
    """C17 over a range of workloads: the notebook's encoder trained on ``pairs`` pairs on the
    cheapest timed fleet of >= 100 GPUs of each of ``gpu_models`` (the time scales with the
    pairs), with the hours, the cost and the verdict of each row."""
    records = []
    for gpu_model in gpu_models:
        fleet = cheapest_fleet(100, gpu_model)
        name = f"{fleet['n_instances']} x {fleet['instance']} ({fleet['gpus']} x {gpu_model})"
        for n in pairs:
            scale = n / EMBEDDING_WORKLOAD.pairs
            cost = float(fleet["cost"]) * scale
            records.append(
                {
                    "fleet": name,
                    "pairs": n,
                    "hours": float(fleet["hours"]) * scale,
                    "cost $": cost,
                    "verdict": check("C17", cost).judgement,
                }
            )
    return pd.DataFrame(records)


def compute_share_over_scenarios(
    retention_months: Sequence[float] = (1, 6, 24),
    egress_copies: Sequence[int] = (0, 1),
    pairs: Sequence[float] = (1e9, 1e11),
) -> pd.DataFrame:
    """C22 over a range of scenarios: the compute share of the bill of C17's A100 run
    (compute from the time model; the data set of ``pairs`` pairs of 64 two-byte token ids
    twice, and 5 checkpoints of the weights and AdamW state, 12 bytes per parameter, kept for
    the run plus ``retention_months``; the data set copied out of the cloud ``egress_copies``
    times at the egress list price), with the verdict of each row."""
    fleet = cheapest_fleet(100, "A100")
    params = EMBEDDING_WORKLOAD.parameters
    records = []
    for n in pairs:
        scale = n / EMBEDDING_WORKLOAD.pairs
        dataset_gb = n * 2 * EMBEDDING_WORKLOAD.seq_len * 2 / 1e9
        for months in retention_months:
            for copies in egress_copies:
                data = DataFootprint(
                    dataset_gb, 12 * params / 1e9, checkpoints_kept=5, retention_months=months,
                    egress_gb=copies * dataset_gb,
                )  # fmt: skip
                parts = cost_breakdown(
                    float(fleet["cost"]) * scale, float(fleet["hours"]) * scale, data
                )
                shares = parts.shares()
                records.append(
                    {
                        "pairs": n,
                        "kept, months": months,
                        "copies out": copies,
                        "total $": parts.total,
                        "compute %": shares["compute"],
                        "storage %": shares["storage"],
                        "network %": shares["network"],
                        "verdict": check("C22", shares["compute"]).judgement,
                    }
                )
    return pd.DataFrame(records)


def catalog_choice_note(choice) -> str:
    """Claim C19's note in notebook 08's claims check: the whole catalog's trainable choice
    ``choice`` (a ``cheapest_config`` result) described, beside what L12's own three types
    pick (:func:`cheapest_config_by_menu`)."""
    l12 = cheapest_config_by_menu().iloc[0]
    return f"{choice.describe()}; L12's three types pick {l12['choice']} at ${l12['$/h']:.3f}/h"


def spot_saving_note(
    by_type: pd.DataFrame, zones: pd.DataFrame, savings: pd.DataFrame, label: str
) -> str:
    """Claim C20's note in notebook 08's claims check: how many types (:func:`spot_by_type`) and
    zones (``cost.spot_discounts``), the share of zones saving 50-90%, and section 7's model
    net of preemptions (``savings``: ``cost.spot_savings``, one region per cloud), with the
    gross saving it is the net of, so that the net is never read against the claim's figure,
    which is over every region, and the catalog's ``label``."""
    inside = zones["saving %"].between(50, 90).mean()
    gross = savings["saving_at_median %"].median()
    net = savings["net_saving_at_median %"].median()
    return (
        f"{len(by_type)} types, {len(zones)} zones, {inside:.0%} of zones within 50-90%; "
        f"section 7's model, one region per cloud: {gross:.0f}% saved at the median zone, "
        f"{net:.0f}% net of preemptions; {label}"
    )


def mixed_precision_note(
    record: ThroughputRecord = H200_MEASUREMENT, current: float | None = None
) -> str:
    """Claim C21's note in notebook 08's claims check: the GPU record's bf16 speed-up and cost
    saved over both fp32 baselines (:func:`mixed_precision_table`), and what would count;
    ``current``: the speed-up of the current code's rows (:func:`current_speedup`), if any."""
    table = mixed_precision_table(record)
    fp32, tf32 = table.loc["fp32"], table.loc["tf32"]
    shown = (
        f"GPU record {record.date}: "
        f"vs fp32 x{fp32['speed-up']:.2f} = {fp32['cost saved %']:.0f}%, "
        f"vs TF32 x{tf32['speed-up']:.2f} = {tf32['cost saved %']:.0f}%"
    )
    if current is None:
        return f"{shown}; no GPU row with a recorded code version yet"
    return f"{shown}; judged on the current code's rows: x{current:.2f}"


def named_extreme(values: pd.Series, which: str, digits: int = 0, unit: str = "") -> str:
    """``'70% (g4dn.xlarge, g5.xlarge, p4d.24xlarge: tied)'``: the smallest (``which="min"``) or
    largest value of ``values`` at the precision printed (``digits``, then ``unit``), with every
    label that reaches it, in the series' order — a tie is named, not broken by position."""
    if which not in ("min", "max"):
        raise ValueError(f"which must be 'min' or 'max', got {which!r}")
    rounded = values.round(check_int("digits", digits, 0, 12))
    best = rounded.min() if which == "min" else rounded.max()
    names = list(rounded.index[rounded == best])
    tied = ": tied" if len(names) > 1 else ""
    return f"{best:.{digits}f}{unit} ({', '.join(map(str, names))}{tied})"


def wall_time_text(hours: float) -> str:
    """A wall time in the unit that shows it: minutes under an hour, else hours."""
    hours = check_positive("hours", hours, zero=True)
    return f"{hours * 60:.1f} min" if hours < 1 else f"{hours:,.1f} h"


def spot_figure(zones: pd.DataFrame, claimed: tuple[float, float] = (50, 90)):
    """``cost.plot_spot_discounts`` of ``zones`` with every box of no width (the middle half of
    a GPU model's zones at one saving) drawn as a diamond in the model's colour, labelled with
    the share of its zones at that saving, so that the box is visible and says why it is flat."""
    from chapter20.cost.plots import gpu_colour, plot_spot_discounts

    fig = plot_spot_discounts(zones, claimed=claimed)
    ax = fig.axes[0]
    order = zones.groupby("gpu_model")["saving %"].median().sort_values().index
    for y, model in enumerate(order, start=1):
        saving = zones.loc[zones["gpu_model"] == model, "saving %"].round(1)
        low, high = saving.quantile([0.25, 0.75])
        if high - low >= 0.5:
            continue
        share = (saving == saving.median()).mean()
        ax.plot(low, y, "D", color=gpu_colour(model), mec="black", ms=7, zorder=5)
        text = f"{share:.0%} of zones at one saving, {low:.0f}%"
        ax.annotate(text, (low, y), xytext=(-8, 0), textcoords="offset points", ha="right",
                    va="center", fontsize=7)  # fmt: skip
    return fig


def pareto_figure(options: pd.DataFrame, frontier: pd.DataFrame, caption: str = ""):
    """``cost.plot_pareto`` with each GPU-count label of the frontier above its point where the
    frontier drops by more than 10% right after it (below, the falling line would cross it),
    below elsewhere."""
    from chapter20.cost.plots import plot_pareto

    fig = plot_pareto(options, frontier, caption=caption)
    costs = frontier["cost"].tolist()
    labels = fig.axes[0].texts[: len(costs)]  # the frontier's labels, in its order
    for label, cost, after in zip(labels, costs, costs[1:] + [None]):
        if after is not None and after < 0.9 * cost:
            label.xyann = (0, 4)
            label.set_va("bottom")
    return fig


def benchmark(
    batches: tuple[int, ...] = (256, 512, 1024, 2048, 4096),
    precisions: tuple[str, ...] = ("bf16", "fp16", "tf32", "fp32"),
    warmup: int = 5,
    repeat: int = 20,
) -> list[dict]:
    """``python -m chapter20 bench cost-throughput``: step seconds of notebook 08's workload
    (``cost.throughput.measure_throughput``) per precision and batch on CUDA, as rows for the
    GPU record with the version of the code they measure (``THROUGHPUT_CODE``), so that C21
    and the throughput model read current figures. Without CUDA it says so and returns no
    rows. ``fp32`` runs with PyTorch's default (no TF32 matrix multiplies), ``tf32`` is fp32
    with TF32 matrix multiplies allowed."""
    if not torch.cuda.is_available():
        print("no CUDA GPU here: bench cost-throughput needs one")
        return []
    from chapter20.cost.throughput import measure_throughput

    version = code_version(*THROUGHPUT_CODE)
    rows = []
    default_tf32 = torch.backends.cuda.matmul.allow_tf32
    for precision in precisions:
        for batch in batches:
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            try:
                rate = measure_throughput(
                    EMBEDDING_WORKLOAD,
                    batch=batch,
                    device="cuda",
                    warmup=warmup,
                    repeat=repeat,
                    precision="fp32" if precision == "tf32" else precision,
                )
            finally:
                torch.backends.cuda.matmul.allow_tf32 = default_tf32
            rows.append(
                {
                    "quantity": f"step seconds, {precision}, {batch} pairs",
                    "value": round(batch / rate, 5),
                    "unit": "s",
                    "code": version,
                    "notes": f"median of {repeat} steps after {warmup}; eager, AdamW",
                }
            )
            print(f"{precision} {batch:>5} pairs: {batch / rate * 1e3:7.1f} ms/step")
    return rows
