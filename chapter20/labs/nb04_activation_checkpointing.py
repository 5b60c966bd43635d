"""§20.3.1 Activation checkpointing, run and measured: the experiments behind notebook 04 and
``python -m chapter20 bench checkpointing``.

Memory is measured with ``chapter20.core.measure.peak_memory``: ``retained_bytes`` of a forward pass
is what autograd keeps for backward (it also sees the selective policy's cache, which
``saved_tensors_hooks`` do not), and the peak of a whole step is the figure that must fit. The
policies compared, what each keeps, their gradient proof and one layer's measured bytes are
``chapter20.techniques.checkpointing_policies``.
"""

from __future__ import annotations

import math

import matplotlib.ticker
import pandas as pd
import torch
from torch import nn
from torch.utils.checkpoint import set_checkpoint_early_stop
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from chapter20.core.device import get_device, size_scale
from chapter20.core.findings import compare, compare_times
from chapter20.core.measure import (
    CATEGORIES,
    format_bytes,
    peak_memory,
    time_interleaved,
    timing_columns,
)
from chapter20.core.paths import data_file
from chapter20.core.plotting import new_figure, plain_log_ticks, stacked_memory_bars
from chapter20.core.seed_statistics import range_text
from chapter20.core.study_record import run_or_record
from chapter20.techniques.activation_checkpointing import predicted_activation_bytes
from chapter20.techniques.checkpointing_policies import (
    POLICY_CASES,
    ROLES,
    checkpointed,
    encoder_ids,
    layer_measurements,
    make_encoder,
    predicted_time_ratio,
    retained_bytes,
)
from chapter20.techniques.contrastive import info_nce

__all__ = [
    "activation_vs_depth",
    "DEPTHS",
    "LIVE_DEPTHS",
    "DEPTH_STUDY",
    "judged_depth",
    "record_agreement",
    "plot_policy_map",
    "depth_table",
    "step_report",
    "step_flops",
    "versus_none",
    "timing_table",
    "time_findings",
    "checkpointing_ratio",
    "depth_reaching",
    "activation_saving_note",
    "plot_activation_vs_depth",
    "POLICY_COLOURS",
    "plot_trade",
    "plot_step_memory",
    "benchmark",
]

#: One colour per policy label, the same in every figure of notebook 04 (kept apart from the
#: colours of the memory components and of the policy map's roles).
POLICY_COLOURS = {
    "none": "#4D4D4D",
    "every_layer": "#8172B3",
    "every_k (k=4)": "#937860",
    "sqrt": "#DA8BC3",
    "selective": "#CCB974",
    "listing L7": "#64B5CD",
}


def _train_step(model: nn.Module, optimizer: torch.optim.Optimizer, ids: torch.Tensor):
    def step():
        optimizer.zero_grad(set_to_none=True)
        info_nce(model(ids), model(ids.flip(0))).backward()
        optimizer.step()

    return step


def activation_vs_depth(
    depths: tuple[int, ...] = (2, 4, 8, 16, 32, 64),
    batch: int = 16,
    seq_len: int = 64,
    cases=POLICY_CASES,
) -> pd.DataFrame:
    """Activation bytes per policy of ``cases`` and depth, measured (forward ``retained``, and
    ``activation_peak``: the activations at their own peak during forward + backward, claim
    C10's quantity) next to :func:`predicted_activation_bytes`."""
    unit = layer_measurements(batch, seq_len)
    ids = encoder_ids(batch, seq_len, 1_000)
    records = []
    for depth in depths:
        base = make_encoder(depth)
        for label, policy, k in cases:
            if policy == "L7":
                continue
            model = checkpointed(base, policy, k)
            # Gradients allocated before the step stay the same size through it, so its peak
            # above the start is the activations' own peak (with backward's transient buffers).
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
            own = peak_memory(lambda m=model: m(ids).sum().backward(), model=model, inputs=ids)
            predicted = predicted_activation_bytes(policy, depth, k=k, **unit)
            records.append(
                {
                    "layers": depth,
                    "policy": label,
                    "retained_bytes": retained_bytes(model, ids),
                    "predicted_retained": predicted["saved"],
                    "predicted_backward_peak": predicted["backward_peak"],
                    "activation_peak": own.peak_bytes - own.baseline_bytes,
                }
            )
    return pd.DataFrame(records)


#: The depths of section 2's sweep, the ones rerun live, its batch (pairs × tokens) and the
#: committed record of the whole sweep (byte counts: the same on every machine).
DEPTHS = (2, 4, 8, 16, 32, 64)
LIVE_DEPTHS = (2, 4, 8)
DEPTH_SIZES = {"batch": 8, "seq_len": 32}
DEPTH_STUDY = "checkpointing_depth.csv"


def judged_depth():
    """Section 2 of notebook 04: ``(live, judged, own_run, source)``. The live run measures
    :data:`LIVE_DEPTHS` (every depth of :data:`DEPTHS` with ``CHAPTER20_SCALE`` >= 2, ``own_run``:
    it is then the judged run); the judged sweep is otherwise the committed record
    :data:`DEPTH_STUDY`, which :func:`record_agreement` checks against the live depths."""
    try:
        data_file(DEPTH_STUDY)
    except FileNotFoundError:  # no record yet: measure every depth
        own_run = True
    else:
        own_run = size_scale() >= 2
    live = activation_vs_depth(DEPTHS if own_run else LIVE_DEPTHS, **DEPTH_SIZES)
    judged, source = run_or_record(live, own_run, DEPTH_STUDY)
    return live, judged[list(live.columns)], own_run, source


def record_agreement(live: pd.DataFrame, judged: pd.DataFrame) -> tuple[int, int]:
    """``(rows compared, largest |difference| in bytes)`` between the live measurements and the
    judged sweep, over every depth and policy they share and every byte column."""
    keys = ["layers", "policy"]
    both = live.merge(judged, on=keys, suffixes=("", "_judged"))
    columns = [c for c in live.columns if c not in keys]
    gaps = [(both[c] - both[f"{c}_judged"]).abs().max() for c in columns]
    return len(both), int(max(gaps))


def depth_table(depth: pd.DataFrame, column: str) -> pd.DataFrame:
    """Section 2 of notebook 04: ``column`` of :func:`activation_vs_depth` in whole KiB, one row
    per depth and one column per policy, the policies in the order they were measured."""
    policies = list(depth["policy"].unique())
    table = depth.pivot(index="layers", columns="policy", values=column)[policies]
    return (table / 1024).round().astype(int)


def step_report(
    layers: int = 12,
    *,
    vocab: int = 1_000,
    d_model: int = 64,
    batch: int = 16,
    seq_len: int = 64,
    repeat: int = 3,
    cases=POLICY_CASES,
) -> pd.DataFrame:
    """One Adam training step per policy (§20.3.1): peak memory by component (parameters,
    gradients, optimizer state, activations) and median time, both as ratios to no
    checkpointing. ``vocab`` large makes an embedding-table-heavy model; ``repeat=0`` measures
    memory only (no time columns), after one untimed step."""
    base = make_encoder(layers, vocab=vocab, d_model=d_model)
    ids = encoder_ids(batch, seq_len, vocab)
    device = get_device()
    models = {label: checkpointed(base, policy, k).to(device) for label, policy, k in cases}
    optimizers = {label: torch.optim.Adam(m.parameters(), lr=1e-4) for label, m in models.items()}
    ids = ids.to(device)
    steps = {label: _train_step(models[label], optimizers[label], ids) for label in models}
    timing = time_interleaved(steps, warmup=1, repeat=repeat, device=device) if repeat else {}
    for step in steps.values() if not repeat else ():
        step()  # one step first, as timing does: gradients and state exist, as mid-training
    records = []
    for label, model in models.items():
        report = peak_memory(steps[label], model=model, optimizer=optimizers[label], inputs=ids)
        records.append(
            {
                "policy": label,
                "peak_bytes": report.peak_bytes,
                **report.breakdown,
                **(timing_columns(timing[label]) if timing else {}),
                "measured_by": report.method,
            }
        )
    frame = pd.DataFrame(records)
    none = frame.iloc[0]
    frame["memory_vs_none"] = frame["peak_bytes"] / none["peak_bytes"]
    frame["activations_vs_none"] = frame["activations"] / none["activations"]
    if timing:
        frame["time_vs_none"] = frame["seconds"] / none["seconds"]
    return frame


def _cpu_attention(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query, key, value)


def _cpu_attention_backward(grad, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad, query, key, value)


#: FLOP formulas for the CPU's fused attention kernels, which ``FlopCounterMode`` does not know:
#: the same counts as for the GPU's (two batched matrix multiplies forward, four backward).
_CPU_ATTENTION_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward,
}


def _counted_flops(run) -> int:
    with FlopCounterMode(display=False, custom_mapping=_CPU_ATTENTION_FLOPS) as counter:
        run()
    return counter.get_total_flops()


def step_flops(
    layers: int = 8,
    *,
    batch: int = 8,
    seq_len: int = 64,
    cases=POLICY_CASES,
    early_stop: bool = True,
) -> pd.DataFrame:
    """Floating-point operations of one InfoNCE step's forward + backward under each policy of
    ``cases`` (section 3 of notebook 04), counted by ``torch.utils.flop_counter.FlopCounterMode``:
    matrix multiplies and attention, where a step's FLOPs are (pointwise operations count 0).
    The count sees every operator that runs, so the forward pass a checkpoint reruns inside
    backward is counted, and the selective policy's saved outputs, replayed from its cache, are
    not. Columns: ``flops``, ``vs_none`` and ``recomputed_forwards`` (the FLOPs above no
    checkpointing, in forward passes of the plain model). Shapes alone decide the counts, so
    they are the same on every machine. ``early_stop=False`` makes a checkpoint rerun its whole
    segment instead of stopping once backward has every tensor it needs."""
    base = make_encoder(layers)
    ids = encoder_ids(batch, seq_len, 1_000)
    forward = _counted_flops(lambda: info_nce(base(ids), base(ids.flip(0))))
    records = []
    for label, policy, k in cases:
        model = checkpointed(base, policy, k)
        with set_checkpoint_early_stop(early_stop):
            flops = _counted_flops(lambda m=model: info_nce(m(ids), m(ids.flip(0))).backward())
        records.append({"policy": label, "flops": flops})
    frame = pd.DataFrame(records)
    none = frame["flops"].iloc[0]
    frame["vs_none"] = frame["flops"] / none
    frame["recomputed_forwards"] = (frame["flops"] - none) / forward
    return frame


def versus_none(
    frame: pd.DataFrame, policy: str, column: str, name: str, *, tolerance: float = 0.02
) -> str:
    """Section 4 of notebook 04: one :func:`chapter20.core.findings.compare` line for the memory
    ``column`` of :func:`step_report` (in MiB), ``policy`` against no checkpointing, labelled
    ``"<policy>, <name>"``."""
    rows = frame.set_index("policy")
    return compare(
        f"{policy}, {name}",
        rows.loc[policy, column] / 2**20,
        "none",
        frame[column].iloc[0] / 2**20,
        quantity="memory",
        unit="MiB",
        tolerance=tolerance,
    )


def timing_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`step_report`'s times for display: the median step in ms with its repeats' min–max,
    and the median as a ratio to no checkpointing."""
    return pd.DataFrame(
        {
            "policy": frame["policy"],
            "median ms": (frame["seconds"] * 1e3).round(1),
            "min–max ms": range_text(frame.seconds_min * 1e3, frame.seconds_max * 1e3, 1),
            "time_vs_none": frame["time_vs_none"].round(2),
            "predicted": [round(predicted_time_ratio(p), 2) for p in frame["policy"]],
        }
    )


def time_findings(frame: pd.DataFrame) -> list[str]:
    """Each policy's step time against no checkpointing, one computed line per policy
    (``core.findings.compare_times``: indistinguishable within the repeats' spread)."""
    rows = list(frame.itertuples(index=False))
    return [compare_times(row.policy, row, "none", rows[0]) for row in rows[1:]]


def checkpointing_ratio(depth: pd.DataFrame) -> pd.DataFrame:
    """Per depth of :func:`activation_vs_depth`: the activations' own peak without checkpointing
    over the lowest peak of any policy (claim C10's quantity), which policy that is, and the
    same ratio predicted by :func:`predicted_activation_bytes`."""
    records = []
    for layers, part in depth.groupby("layers"):
        part = part.set_index("policy")
        best = part.drop(index="none")["activation_peak"].idxmin()
        records.append(
            {
                "layers": layers,
                "best_policy": best,
                "ratio": part.loc["none", "activation_peak"] / part.loc[best, "activation_peak"],
                "predicted": part.loc["none", "predicted_backward_peak"]
                / part.loc[best, "predicted_backward_peak"],
            }
        )
    return pd.DataFrame(records)


def depth_reaching(ratios: pd.DataFrame, target: float = 10.0) -> float | None:
    """The depth at which the measured ratio of :func:`checkpointing_ratio` first reaches
    ``target``: a measured depth if one hits it exactly, else interpolated linearly in log-depth
    between the two measured depths around it; None when no measured depth reaches it (the
    sweep would have to be extended, nothing is extrapolated)."""
    layers, ratio = list(ratios["layers"]), list(ratios["ratio"])
    for index, value in enumerate(ratio):
        if value < target:
            continue
        if index == 0 or value == target:
            return float(layers[index])
        low, high = math.log(layers[index - 1]), math.log(layers[index])
        share = (target - ratio[index - 1]) / (value - ratio[index - 1])
        return float(math.exp(low + share * (high - low)))
    return None


def activation_saving_note(ratios: pd.DataFrame, limit: float, deep: pd.DataFrame) -> str:
    """Claim C10's note in notebook 04 (§5): the best policy at the deepest encoder of
    :func:`checkpointing_ratio`'s sweep (batch 8 × 32), the depth at which the ratio reaches 10×
    (:func:`depth_reaching`), the deep-encoder ``limit`` and the whole Adam step's factor of the
    encoder of :func:`step_report` ``deep`` (section 4)."""
    deepest, reached = ratios.iloc[-1], depth_reaching(ratios, 10.0)
    return (
        f"{deepest['best_policy']} at {deepest['layers']} layers, batch 8x32; reaches 10x at "
        + (f"L ≈ {reached:.0f} (interpolated)" if reached else "no measured depth")
        + f"; limit for deep encoders {limit:.1f}x; whole Adam step of section 4's encoder: "
        f"x{1 / deep['memory_vs_none'].min():.1f}"
    )


#: How :func:`plot_policy_map` draws a role inside its policy's colour: (opacity, hatch); the
#: more a layer keeps, the more solid its cell, and a layer that keeps nothing is hatched.
_ROLE_STYLE = {
    "kept": (1.0, ""),
    "selective": (0.7, ""),
    "blocks": (0.45, ".."),
    "input": (0.45, ""),
    "inside": (0.12, "///"),
}


def _role_cell(corner, colour, alpha, hatch):
    """One cell of the policy map: the policy's colour at the role's opacity and hatch."""
    import matplotlib.colors
    import matplotlib.patches as patches

    face = matplotlib.colors.to_rgba(colour, alpha)
    return patches.Rectangle(
        corner, 1, 0.8, facecolor=face, edgecolor=colour, hatch=hatch, linewidth=0.8
    )


def plot_policy_map(roles: pd.DataFrame):
    """What each policy keeps and recomputes, layer by layer (:func:`policy_roles`): one row
    per policy in its colour of :data:`POLICY_COLOURS`, one cell per layer shaded by its role
    (:data:`_ROLE_STYLE`), each checkpointed segment outlined."""
    import matplotlib.patches as patches

    policies = list(dict.fromkeys(roles["policy"]))
    layers = int(roles["layer"].max())
    fig, ax = new_figure(
        f"What each policy keeps for backward ({layers}-layer encoder)", "layer", "",
        alt=f"A grid of {len(policies)} policies by {layers} layers, each row in its policy's "
        "colour, each cell shaded by what that layer keeps between the forward and the backward "
        "pass (solid: everything, hatched: nothing), segments outlined.",
    )  # fmt: skip
    for row, policy in enumerate(policies):
        part = roles[roles["policy"] == policy]
        colour = POLICY_COLOURS.get(policy, "#999999")
        for cell in part.itertuples():
            alpha, hatch = _ROLE_STYLE[cell.role]
            ax.add_patch(_role_cell((cell.layer - 0.5, row - 0.4), colour, alpha, hatch))
        if part["role"].iloc[0] != "kept":
            for _, seg in part.groupby("segment"):
                start, width = seg["layer"].min() - 0.5, len(seg)
                ax.add_patch(
                    patches.Rectangle(
                        (start, row - 0.4), width, 0.8, fill=False, edgecolor="black", linewidth=1.5
                    )
                )
    ax.set(xlim=(0.5, layers + 0.5), ylim=(len(policies) - 0.5, -0.5))
    ax.set_xticks(range(1, layers + 1))
    ax.set_yticks(range(len(policies)), labels=policies)
    for tick in ax.get_yticklabels():
        tick.set_color(POLICY_COLOURS.get(tick.get_text(), "black"))
    ax.grid(False)
    used = list(dict.fromkeys(roles["role"]))
    handles = [_role_cell((0, 0), "#707070", *_ROLE_STYLE[role]) for role in used]
    ax.legend(handles, [ROLES[role] for role in used], loc="upper center",
              bbox_to_anchor=(0.5, -0.15), fontsize=8, ncol=2, frameon=False)  # fmt: skip
    return fig


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def plot_activation_vs_depth(frame: pd.DataFrame, column: str = "retained_bytes"):
    """Measured activation bytes (markers) and prediction (lines) vs depth, per policy."""
    predicted = {
        "retained_bytes": "predicted_retained",
        "activation_peak": "predicted_backward_peak",
    }[column]
    title = {
        "retained_bytes": "Activations kept from forward to backward",
        "activation_peak": "Activations at their own peak (forward + backward)",
    }[column]
    fig, ax = new_figure(title, "encoder layers L", "MiB")
    for label, part in frame.groupby("policy", sort=False):
        color = POLICY_COLOURS.get(label, "#999999")
        ax.plot(part["layers"], part[predicted] / 2**20, "-", color=color, alpha=0.6)
        ax.plot(part["layers"], part[column] / 2**20, "o", color=color, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(frame["layers"].unique(), labels=map(str, frame["layers"].unique()))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    plain_log_ticks(ax.yaxis)
    ax.legend(
        title="measured (o), predicted (—)", loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8
    )
    return fig


def plot_trade(frame: pd.DataFrame):
    """Section 3 of notebook 04: each policy of :func:`step_report` as one point, activations at
    the step's peak against step time, both relative to no checkpointing; returns the axes."""
    fig, ax = new_figure(
        "The trade: activations at the step's peak against step time",
        "step time / no checkpointing",
        "activations / no checkpointing",
    )
    for row in frame.itertuples():
        ax.plot(
            row.time_vs_none,
            row.activations_vs_none,
            "o",
            color=POLICY_COLOURS.get(row.policy, "#999999"),
            markersize=9,
            label=row.policy,
        )
    ax.set_yscale("log")
    plain_log_ticks(ax.yaxis)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    return ax


def plot_step_memory(frame: pd.DataFrame, title: str):
    """Peak memory of one training step per policy, stacked by component."""
    breakdowns = [{c: row[c] for c in CATEGORIES} for _, row in frame.iterrows()]
    ax = stacked_memory_bars(
        list(frame["policy"]),
        breakdowns,
        title=title,
        unit="MiB",
        bar_labels=[f"{r:.2f}x" for r in frame["memory_vs_none"]],
        legend=False,
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)  # off the bars
    for tick in ax.get_xticklabels():  # each policy's name in its colour, as in every figure
        tick.set_color(POLICY_COLOURS.get(tick.get_text(), "black"))
    return ax


# --------------------------------------------------------------------------------------------
# Benchmark
# --------------------------------------------------------------------------------------------


def benchmark(layers: int = 12, out: str = "") -> None:
    """``python -m chapter20 bench checkpointing``: activation-memory and step-time ratios of
    each policy to no checkpointing for a ``layers``-deep encoder, in one run; with ``out``, also
    section 2's sweep over :data:`DEPTHS` written there (``data/checkpointing_depth.csv``)."""
    from chapter20.core.study_record import study_output, write_study

    if study_output(out):
        depth = activation_vs_depth(DEPTHS, **DEPTH_SIZES)
        command = "chapter20 bench checkpointing --out data/" + DEPTH_STUDY
        print("written:", write_study(depth, study_output(out), command))
    frame = step_report(layers, repeat=5)
    print(
        f"{layers}-layer Transformer encoder (d_model 64, batch 16 x 64 tokens), one Adam step, "
        f"{frame['measured_by'].iloc[0]}:"
    )
    for row in frame.itertuples():
        print(
            f"  {row.policy:<14} activations {format_bytes(row.activations):>10} "
            f"({row.activations_vs_none:4.2f}x)  whole step {format_bytes(row.peak_bytes):>10} "
            f"({row.memory_vs_none:4.2f}x)  time {row.time_vs_none:4.2f}x"
        )
    print("step time, median of 5 (indistinguishable within the repeats' min-max range):")
    for line in time_findings(frame):
        print(f"  {line}")
