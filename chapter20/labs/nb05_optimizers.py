"""§20.3.2 and the §20.3 checklist, run and measured: the experiments behind notebook 05 and
``python -m chapter20 bench optimizers`` (the proofs of section 1 and 2 are
``chapter20.techniques.optimizer_proofs``; :func:`built_optimizers` lists what each kind builds).

The quality comparison trains the bag-of-embeddings encoder on Wikipedia next-sentence pairs
with AdamW, 8-bit AdamW and a deliberately harmful optimizer (AdamW with its moments stored in
4 linear bits, ``techniques.optimizers.CoarseStateAdamW``), the positive control that the
held-out metric must detect; the checklist is replayed and measured step by step.
"""

from __future__ import annotations

import warnings

import pandas as pd
import torch
from torch import nn

from chapter20.core.checks import check_int
from chapter20.core.claims import get_claim, judged_in
from chapter20.core.corpora import PairData, pair_data
from chapter20.core.device import size_scale
from chapter20.core.findings import compare, compare_times
from chapter20.core.measure import format_bytes, time_interleaved, timing_columns
from chapter20.core.plotting import new_figure
from chapter20.core.seed_statistics import beyond_noise
from chapter20.core.study_record import (
    provenance_line,
    read_study,
    run_or_record,
    study_output,
    write_study,
)
from chapter20.labs.common import UNTRAINED
from chapter20.techniques.memory_model import EncoderShape
from chapter20.techniques.optimizers import (
    OPTIMIZER_KINDS,
    CoarseStateAdamW,
    make_optimizer,
    optimizer_state_bytes,
)
from chapter20.training.config import TrainConfig
from chapter20.training.memory_plan import measure_step_memory, plan, plan_vs_measured
from chapter20.training.pair_training import PairRunConfig, heldout_run

__all__ = [
    "built_optimizers",
    "STATE_KINDS",
    "state_bytes_per_parameter",
    "CONTROL",
    "convergence",
    "ALL_TECHNIQUES",
    "CHECKLIST",
    "checklist_findings",
    "checklist_replay",
    "checklist_notes",
    "replay_ratios",
    "plot_state_bytes",
    "benchmark",
    "QUALITY",
    "LIVE_STEPS",
    "QUALITY_STUDY",
    "MEMORY_STUDY",
    "judged_quality",
    "quality_agreement",
    "beside_record",
    "learned_lines",
    "plot_quality",
    "quality_benchmark",
    "judged_memory",
    "memory_benchmark",
]

STATE_KINDS = ("adamw", "sgd_nesterov", "adamw8bit")


def _quiet_optimizer(params, kind: str, lr: float, **kwargs) -> torch.optim.Optimizer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallbacks are reported by make_optimizer's callers
        return make_optimizer(params, kind, lr, **kwargs)


def built_optimizers(model: nn.Module, kinds=OPTIMIZER_KINDS) -> list[str]:
    """§20.3.2, notebook 05 section 1: each of ``kinds`` built by ``make_optimizer`` for
    ``model``'s parameters: one line per kind naming the class built (and "fused"), then one
    line per warning of a fallback it took."""
    lines = []
    for kind in kinds:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # every warning, each time it is raised
            optimizer = make_optimizer(model.parameters(), kind, lr=1e-3)
        built = f"{type(optimizer).__module__.split('.')[0]}.{type(optimizer).__name__}"
        fused = " (fused)" if optimizer.defaults.get("fused") else ""
        lines.append(f"{kind:>15} -> {built}{fused}")
        lines += [f"{'':>19}warning: {caught_one.message}" for caught_one in caught]
    return lines


def state_bytes_per_parameter(sizes: tuple[int, ...] = (1_000, 4_096, 65_536, 1_048_576)):
    """Optimizer state bytes per parameter, read from the real state after one step, for a
    parameter tensor of each size and each of ``STATE_KINDS`` (§20.3.2, claims C11, C12)."""
    records = []
    for size in sizes:
        for kind in STATE_KINDS:
            parameter = torch.nn.Parameter(torch.randn(size))
            optimizer = _quiet_optimizer([parameter], kind, 1e-3)
            parameter.grad = torch.randn(size)
            optimizer.step()
            frame = optimizer_state_bytes(optimizer)
            records.append(
                {
                    "numel": size,
                    "optimizer": kind,
                    "bytes_per_parameter": float(frame["bytes"].sum()) / size,
                }
            )
    return pd.DataFrame(records)


#: The positive control of the quality comparison: AdamW whose moments are stored in 4 linear
#: bits per block of 256 (``CoarseStateAdamW``), harmful by construction — second moments below
#: half a level of their block's largest become 0, and Adam divides by their square root.
CONTROL = "adamw, 4-bit linear state (control)"
CONTROL_BITS = 4


def _coarse_state(lr: float, weight_decay: float):
    """A factory of :data:`CONTROL`'s optimizer for ``heldout_run``."""

    def build(model: torch.nn.Module) -> torch.optim.Optimizer:
        decay = {} if weight_decay is None else {"weight_decay": weight_decay}  # None: AdamW's
        return CoarseStateAdamW(model.parameters(), lr, bits=CONTROL_BITS, **decay)

    return build


#: The quality study's settings: steps of ``batch`` pairs at learning rate ``lr``.
QUALITY = {"steps": 150, "batch": 256, "lr": 3e-3}
#: The steps of the short seed-0 run of 8-bit AdamW that notebook 05 reruns live and checks
#: against its row of the record (the record holds both lengths).
LIVE_STEPS = 30
#: The committed records of notebook 05 (``data/``): the quality study (3 seeds, every
#: optimizer, the untrained encoder and the control) and the measured step memories.
QUALITY_STUDY = "optimizer_quality.csv"
MEMORY_STUDY = "checklist_memory.csv"


def convergence(
    data: PairData,
    kinds: tuple[str, ...] = (UNTRAINED, "adamw", "adamw8bit", CONTROL),
    *,
    seeds: tuple[int, ...] = (0, 1, 2),
    steps: int = QUALITY["steps"],
    batch: int = QUALITY["batch"],
    lr: float = QUALITY["lr"],
) -> pd.DataFrame:
    """Held-out quality of the bag-of-embeddings encoder trained on real next-sentence pairs
    with each optimizer kind, once per seed, the embedding table's state in the kind's own
    format (8-bit included; §20.3.2); :data:`CONTROL` is the deliberately harmful variant and
    ``"untrained"`` the encoder before any step. Same weights and data order for every kind of
    a seed. Returns a row per run (final loss, recall@1/@10 scored in float32, seconds)."""
    records = []
    for seed in seeds:
        for kind in kinds:
            control = kind == CONTROL
            config = TrainConfig(
                optimizer="adamw" if control or kind == UNTRAINED else kind,
                lr=lr,
                state_32bit_tables=False,
            )
            build = _coarse_state(lr, config.weight_decay) if control else None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # as _quiet_optimizer
                run = heldout_run(
                    PairRunConfig(steps=0 if kind == UNTRAINED else steps, batch=batch,
                                  seed=seed, vocab=data.vocab_size, training=config),
                    data, optimizer=build,
                )  # fmt: skip
            records.append(
                {
                    "optimizer": kind,
                    "seed": seed,
                    "steps": len(run.losses),
                    "final_loss": run.final_loss,
                    "recall@1": run.recall[1],
                    "recall@10": run.recall[10],
                    "seconds": run.seconds,
                }
            )
    return pd.DataFrame(records)


#: The chapter's checklist example in its order, cumulative (claim C13: 40 → 20 → 8 → 5 GB):
#: (label, precision, micro-batches, checkpointing policy, optimizer); then accumulation, which
#: the chapter's example leaves out, added on top: every memory technique of the checklist at
#: once (claim C23; ``in_chain`` False).
CHECKLIST = (
    ("fp32 + AdamW", "fp32", 1, "none", "adamw"),
    ("+ mixed precision (bf16)", "bf16", 1, "none", "adamw"),
    ("+ checkpointing (every layer)", "bf16", 1, "every_layer", "adamw"),
    ("+ 8-bit AdamW", "bf16", 1, "every_layer", "adamw8bit"),
)
ALL_TECHNIQUES = ("+ accumulation (4 micro-batches)", "bf16", 4, "every_layer", "adamw8bit")


def checklist_config(
    precision: str, optimizer: str, policy: str = "none", micro_batches: int = 1
) -> TrainConfig:
    """The composed step's settings of one row of the checklist (§20.3): 8-bit state for every
    tensor (the chapter's optimizer step), activation checkpointing ``policy``."""
    return TrainConfig(
        precision=precision,
        optimizer=optimizer,
        activation_checkpointing=policy,
        micro_batches=micro_batches,
        lr=1e-4,
        state_32bit_tables=False,
    )


def checklist_replay(shape: EncoderShape | None = None, *, batch: int = 32, seq_len: int = 64):
    """The §20.3 checklist on one configuration: each step measured (peak bytes by component)
    and planned, cumulative in the chapter's order, with the ratio to the first row (claim C13's
    40 → 20 → 8 → 5 GB); a last row, ``in_chain`` False, adds accumulation on top: every memory
    technique of the checklist at once (claim C23)."""
    shape = shape or EncoderShape(8_000, d_model=128, n_heads=4, n_layers=6, max_len=64)
    records = []
    for label, precision, micro, policy, kind in (*CHECKLIST, ALL_TECHNIQUES):
        config = checklist_config(precision, kind, policy, micro)
        report = measure_step_memory(shape, config, batch=batch, seq_len=seq_len)
        planned = plan(shape, config, batch=batch, seq_len=seq_len)
        records.append(
            {
                "step": label,
                "peak_bytes": report.peak_bytes,
                **report.breakdown,
                "planned_bytes": planned.peak_bytes,
                "measured_by": report.method,
                "in_chain": label != ALL_TECHNIQUES[0],
            }
        )
    frame = pd.DataFrame(records)
    frame["vs_start"] = frame["peak_bytes"] / frame["peak_bytes"].iloc[0]
    return frame


def checklist_findings(replay: pd.DataFrame) -> list[str]:
    """For each row of :func:`checklist_replay` after the first, two computed lines
    (``core.findings.compare``): the component that changed most against the row before, and
    the whole step's peak against the row before — what each technique removed, from this
    run's bytes."""
    components = ["parameters", "gradients", "optimizer_state", "activations"]
    rows = list(replay.itertuples(index=False))
    lines = []
    for before, row in zip(rows, rows[1:]):
        changed = max(components, key=lambda c: abs(getattr(row, c) - getattr(before, c)))
        lines.append(f"{row.step}:")
        for what in (changed, "peak_bytes"):
            now, then = getattr(row, what) / 2**20, getattr(before, what) / 2**20
            name = "whole step" if what == "peak_bytes" else what.replace("_", " ")
            lines.append("   " + compare(name, now, "the row before", then, quantity="memory",
                                         unit="MiB", tolerance=0.005))  # fmt: skip
    return lines


def checklist_notes(
    replay: pd.DataFrame, per_parameter: pd.DataFrame, plans: dict
) -> dict[str, str]:
    """The notes of claims C12, C13 and C23 in notebook 05's claims check (§20.3.2, §20.3): the
    largest tensor's state bytes per parameter (``per_parameter``: bytes by size and optimizer),
    the chain's ratios of :func:`checklist_replay`, and the planned BERT-base-like step at 256 x
    512 tokens (``plans`` of :func:`plan_grid`)."""
    size = per_parameter.index.max()
    largest = per_parameter.loc[size]
    chain = replay[replay["in_chain"]].set_index("step")["peak_bytes"]
    bert = {s: plans["BERT-base-like, long", s] for s in ("fp32 + AdamW", "checklist")}
    return {
        "C12": f"one tensor of {size:,} elements: {largest['adamw']:.3f} vs "
        f"{largest['adamw8bit']:.3f} B/param",
        "C13": "8,000 x 128, 6-layer encoder: ratios "
        + " -> ".join(f"{v / chain.iloc[0]:.2f}" for v in chain)
        + " (chapter 1 -> 0.5 -> 0.2 -> 0.125)",
        "C23": f"measured, 6-layer encoder, {replay.iloc[-1]['step']} on top of the chain; "
        "planner, BERT-base-like 256 x 512 tokens: "
        f"x{bert['fp32 + AdamW'].peak_bytes / bert['checklist'].peak_bytes:.1f}, "
        f"fits 80 GB: {bert['checklist'].fits}",
    }


def replay_ratios(replay: pd.DataFrame) -> str:
    """Notebook 05 section 4: the ratios of :func:`checklist_replay` that other notebooks judge
    (C11 weights + Adam state over weights, AdamW keeping Adam's two moments; C09 bf16 over
    fp32; C10 without over with checkpointing), one line each, with the claim in its words and
    the notebook that owns its verdict."""
    chain = replay[replay["in_chain"]].set_index("step")["peak_bytes"]
    first = replay.iloc[0]
    state = (first["parameters"] + first["optimizer_state"]) / first["parameters"]
    ratios = (
        ("C11", f"(weights + Adam state) / weights x{state:.2f}"),
        ("C09", f"bf16 / fp32 peak x{chain.iloc[1] / chain.iloc[0]:.3f}"),
        ("C10", f"step peak without / with checkpointing x{chain.iloc[1] / chain.iloc[2]:.2f}"),
    )
    return "\n".join(
        f'{ratio} ({judged_in(claim)}: "{get_claim(claim).claim}")' for claim, ratio in ratios
    )


def plot_state_bytes(frame: pd.DataFrame):
    """Optimizer state bytes per parameter, by tensor size and optimizer."""
    fig, ax = new_figure(
        "Optimizer state per parameter",
        "parameter tensor size (elements)",
        "bytes of state per parameter",
    )
    # the weight's own 4 bytes coincide with SGD-Nesterov's buffer: a wide pale band underneath
    ax.axhline(4, color="#8C8C8C", linewidth=7, alpha=0.35, zorder=1,
               label="the weight itself (fp32)")  # fmt: skip
    for kind, part in frame.groupby("optimizer", sort=False):
        ax.plot(part["numel"], part["bytes_per_parameter"], "o-", label=kind, zorder=3)
    ax.set_xscale("log")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def benchmark(size: int = 4_194_304) -> None:
    """``python -m chapter20 bench optimizers``: state bytes AdamW / AdamW8bit on one tensor of
    ``size`` parameters (target >= 3.8x) and the step-time ratio, in one run."""
    parameters = {kind: torch.nn.Parameter(torch.randn(size)) for kind in ("adamw", "adamw8bit")}
    optimizers = {kind: _quiet_optimizer([p], kind, 1e-3) for kind, p in parameters.items()}
    for parameter in parameters.values():
        parameter.grad = torch.randn(size)
    steps = {kind: optimizers[kind].step for kind in optimizers}
    timing = time_interleaved(steps, warmup=1, repeat=5, device="cpu")
    state = {kind: int(optimizer_state_bytes(o)["bytes"].sum()) for kind, o in optimizers.items()}
    ratio = state["adamw"] / state["adamw8bit"]
    print(f"one tensor of {size:,} parameters:")
    for kind in optimizers:
        print(
            f"  {kind:<10} state {format_bytes(state[kind]):>10} "
            f"({state[kind] / size:.3f} B/param)  step {timing[kind]}"
        )
    verdict = "meets" if ratio >= 3.8 else "misses"
    print(f"state AdamW / AdamW8bit = {ratio:.2f}x (target >= 3.8x: {verdict})")
    rows = {kind: pd.Series(timing_columns(t)) for kind, t in timing.items()}
    print("step time: " + compare_times("AdamW8bit", rows["adamw8bit"], "AdamW", rows["adamw"]))


# --------------------------------------------------------------------------------------------
# The committed records: one seed (or one step) rerun live, the rest read back
# --------------------------------------------------------------------------------------------


def judged_quality(data: PairData) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """§20.3.2, notebook 05 section 3: ``(live, judged, source)``. ``live``: seed 0 of the
    untrained encoder and of 8-bit AdamW trained :data:`LIVE_STEPS` steps, rows the record also
    holds; ``judged``: the study at ``QUALITY["steps"]`` (3 seeds, every optimizer, the
    untrained encoder and the control) from the committed record :data:`QUALITY_STUDY`, or with
    ``$CHAPTER20_SCALE`` >= 2 run here (``source`` says which)."""
    live = convergence(data, (UNTRAINED, "adamw8bit"), seeds=(0,), steps=LIVE_STEPS)
    live = live.drop(columns="seconds")
    if size_scale() >= 2:
        judged = convergence(data)
        return live, judged.drop(columns="seconds"), "this run"
    record = read_study(QUALITY_STUDY)
    judged = record[record["steps"].isin((0, QUALITY["steps"]))].reset_index(drop=True)
    return live, judged, provenance_line(record)


def quality_agreement(live: pd.DataFrame, tolerance: float = 0.004) -> tuple[float, str]:
    """The largest |Δ| of recall@1 and recall@10 between each live row and the committed
    record's row of the same optimizer, seed and steps, and one line with the ``tolerance`` (a
    few held-out hits: another machine's rounding moves a few) and a ✓ or ✗."""
    keys = ["optimizer", "seed", "steps"]
    merged = live.merge(read_study(QUALITY_STUDY), on=keys, suffixes=("", "_judged"))
    if len(merged) != len(live):
        raise ValueError("the record must hold a row for every live (optimizer, seed, steps)")
    gap = max((merged[c] - merged[f"{c}_judged"]).abs().max() for c in ("recall@1", "recall@10"))
    mark = "✓" if gap <= tolerance else "✗"
    return (
        gap,
        f"live run vs the record's rows of the same seed and steps: max |Δ recall| = {gap:.4f} "
        + (f"(tolerance {tolerance}) {mark}"),
    )


def beside_record(live: pd.DataFrame) -> pd.DataFrame:
    """Each row of ``live`` (:func:`judged_quality`) under the committed record's row of the
    same optimizer, seed and steps, a ``run`` column saying which is which ("recorded", "this
    run"): the rows :func:`quality_agreement` compares, side by side. ValueError when the record
    holds no such row."""
    keys = ["optimizer", "seed", "steps"]
    record = read_study(QUALITY_STUDY)[list(live.columns)]
    rows = []
    for _, row in live.iterrows():
        match = record[(record[keys] == row[keys]).all(axis=1)]
        if len(match) != 1:
            raise ValueError(f"the record must hold one row for {row[keys].to_dict()}")
        rows += [{"run": "recorded", **match.iloc[0]}, {"run": "this run", **row}]
    return pd.DataFrame(rows)


def learned_lines(summary: pd.DataFrame) -> list[str]:
    """§20.3.2: for AdamW and 8-bit AdamW, whether its mean recall@10 exceeds the untrained
    encoder's under the same evaluation beyond the seeds' noise
    (``core.seed_statistics.beyond_noise``): the check that the runs learned, which fails for a
    run that stays at its start. ``summary``: ``versus_reference`` by optimizer."""
    rows = summary.set_index("optimizer")
    lines = []
    for kind in ("adamw", "adamw8bit"):
        learned = beyond_noise(summary, kind, UNTRAINED, by="optimizer", column="recall@10")
        mean, base = rows.loc[kind, "recall@10_mean"], rows.loc[UNTRAINED, "recall@10_mean"]
        spread = 2 * max(rows.loc[kind, "recall@10_std"], rows.loc[UNTRAINED, "recall@10_std"])
        lines.append(
            f"{kind} learned (mean recall@10 {mean:.4f} vs untrained {base:.4f}, "
            f"gap > 2 std = {spread:.4f}): {learned}"
        )
    return lines


def plot_quality(judged: pd.DataFrame, live: pd.DataFrame, chance: float):
    """Held-out recall@10 of each seed by optimizer (the judged rows), the live rows of the
    same optimizer and number of steps circled, and chance as a line: the comparison section 3
    judges."""
    fig, ax = new_figure("Held-out recall@10 by optimizer", "optimizer", "recall@10 (held out)")
    kinds = list(dict.fromkeys(judged["optimizer"]))
    for index, kind in enumerate(kinds):
        values = judged.loc[judged["optimizer"] == kind, "recall@10"]
        ax.plot([index] * len(values), values, "o", color=f"C{index}", alpha=0.7)
        ax.hlines(values.mean(), index - 0.25, index + 0.25, color=f"C{index}")
        steps = judged.loc[judged["optimizer"] == kind, "steps"]
        same = (live["optimizer"] == kind) & live["steps"].isin(steps)
        mine = live.loc[same, "recall@10"]
        ax.plot([index] * len(mine), mine, "o", mfc="none", mec="black", ms=11)
    ax.axhline(chance, color="#8C8C8C", linestyle=":")
    ax.text(len(kinds) - 0.5, chance, " chance", va="bottom", ha="right", color="#8C8C8C")
    labels = [f"control: {CONTROL_BITS}-bit state" if k == CONTROL else k for k in kinds]
    ax.set_xticks(range(len(kinds)), labels, fontsize=8)
    ax.set_ylim(0, judged["recall@10"].max() * 1.25)
    key = "dots: seeds, bars: means, ring: this run (same steps)"
    ax.text(0.01, 0.98, key, transform=ax.transAxes, va="top", fontsize=8)
    return fig


def quality_benchmark(steps: int = QUALITY["steps"], out: str = "") -> None:
    """``chapter20 bench optimizer-quality``: :func:`convergence` (3 seeds, AdamW, 8-bit AdamW,
    the control and the untrained encoder) and seed 0 of 8-bit AdamW at :data:`LIVE_STEPS`
    steps (the run notebook 05 repeats live), printed; with ``out`` written as the record
    ``data/optimizer_quality.csv`` notebook 05 judges (§20.3.2)."""
    data = pair_data()
    frame = convergence(data, steps=check_int("steps", steps, 1))
    short = convergence(data, ("adamw8bit",), seeds=(0,), steps=LIVE_STEPS)
    frame = pd.concat([frame, short], ignore_index=True).drop(columns="seconds")
    print(frame.round(4).to_string(index=False))
    if study_output(out):
        command = f"chapter20 bench optimizer-quality --steps {steps}"
        print("written:", write_study(frame, study_output(out), command))


#: The planner's configurations measured in notebook 05 section 5, beside the replay's rows:
#: (shape, batch, seq_len, precision, optimizer, checkpointing policy).
PLANNER_CONFIGS = (
    (EncoderShape(8_000, 128, 4, 2, max_len=64), 32, 64, "fp32", "adamw", "none"),
    (EncoderShape(8_000, 128, 4, 6, max_len=64), 32, 64, "bf16", "adamw8bit", "every_layer"),
    (EncoderShape(50_000, 64, 4, 2, max_len=64), 16, 32, "fp32", "sgd_nesterov", "none"),
)


def _planner_cases(configs=PLANNER_CONFIGS) -> list:
    """``memory_plan.plan_vs_measured``'s cases of ``configs``, each at :func:`checklist_config`."""
    return [(shape, checklist_config(*settings), batch, seq_len)
            for shape, batch, seq_len, *settings in configs]  # fmt: skip


def _memory_study() -> pd.DataFrame:
    replay = checklist_replay().assign(study="checklist")
    versus = plan_vs_measured(_planner_cases())
    return pd.concat([replay, versus.assign(study="planner")], ignore_index=True)


def judged_memory() -> tuple[pd.DataFrame, pd.DataFrame, str, str]:
    """§20.3, notebook 05 sections 4 and 5: ``(replay, versus, source, check)``: the checklist
    replay and the planner's rows, measured here with ``$CHAPTER20_SCALE`` >= 2, else read
    from the record :data:`MEMORY_STUDY`; the planner's first configuration (the cheapest step)
    is measured live either way and ``check`` says whether its peak equals the record's (bytes
    are counted, so the tolerance is 0)."""
    own_run = size_scale() >= 2
    frame, source = run_or_record(_memory_study() if own_run else None, own_run, MEMORY_STUDY)
    replay = frame[frame["study"] == "checklist"].dropna(axis=1, how="all")
    replay = replay.assign(in_chain=replay["in_chain"].astype(bool)).reset_index(drop=True)
    versus = frame[frame["study"] == "planner"].dropna(axis=1, how="all").reset_index(drop=True)
    counts = ["batch", "seq_len", "vocab", "layers", "measured", "planned"]
    versus = versus.astype({c: int for c in counts})
    live = plan_vs_measured(_planner_cases(PLANNER_CONFIGS[:1]))
    gap = abs(int(live["measured"].iloc[0]) - int(versus["measured"].iloc[0]))
    check = f"live step vs the record, peak bytes: max |Δ| = {gap} B {'✓' if gap == 0 else '✗'}"
    return replay, versus.drop(columns="study"), source, check


def memory_benchmark(out: str = "") -> None:
    """``chapter20 bench checklist-memory``: the checklist replay and the planner's configurations
    measured (peak bytes by component, counted by the live-tensor tracker), printed; with ``out``
    written as the record ``data/checklist_memory.csv`` notebook 05 reads (§20.3)."""
    frame = _memory_study()
    print(frame.drop(columns=["measured_by"]).round(3).to_string(index=False))
    if study_output(out):
        print("written:", write_study(frame, study_output(out), "chapter20 bench checklist-memory"))
