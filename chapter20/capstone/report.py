"""§20.6 What the capstone run prints before and after training: the plan, the cost, the summary.

- :func:`memory_plan`: the memory planner (``chapter20.training.memory_plan.plan``) on one step of
  the run's own configuration, per rank;
- :func:`cost_projection`: the time and cost of the chapter's workload at its stated size on
  the cheapest catalog configuration that holds its planned step, on demand and on spot, with
  the date and commit of the catalog's prices (``chapter20.cost``);
- :func:`plan_lines`, :func:`summary_lines` and :func:`baseline_lines`: the lines
  ``chapter20 train`` prints.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from torch import nn

from chapter20.capstone.baselines import baseline_name
from chapter20.capstone.capstone_config import CapstoneConfig
from chapter20.core.checks import check_int, check_positive
from chapter20.core.findings import share
from chapter20.core.measure import format_bytes
from chapter20.core.models import WeightedBagEncoder
from chapter20.cost.catalog import load_catalog, snapshot_label
from chapter20.cost.estimates import EMBEDDING_WORKLOAD, Preemption, Workload
from chapter20.cost.fleet_choices import training_options
from chapter20.techniques.memory_model import BagShape, EncoderShape
from chapter20.training.config import TrainConfig
from chapter20.training.memory_plan import MemoryPlan, parallelism_advice, plan

__all__ = [
    "PROJECTION_PREEMPTION",
    "baseline_lines",
    "stopping_lines",
    "cost_projection",
    "memory_plan",
    "plan_lines",
    "start_lines",
    "summary_lines",
]

#: Spot preemptions of the projection, as notebook 08 assumes them: an instance is reclaimed
#: every 8 hours on average, a checkpoint takes 60 s, a restart 300 s.
PROJECTION_PREEMPTION = Preemption(mtbf_hours=8, checkpoint_seconds=60, restart_seconds=300)


def _shape(model: nn.Module) -> BagShape | EncoderShape:
    if isinstance(model, WeightedBagEncoder):
        return BagShape(model.vocab_size, model.embedding_dim, model.log_weight.requires_grad)
    return EncoderShape.of(model)


def memory_plan(config: CapstoneConfig, model: nn.Module, world_size: int = 1) -> MemoryPlan:
    """``chapter20.training.memory_plan.plan`` of one step of this run on each of
    ``world_size`` ranks (§20.3): ``batch / world_size`` documents, views of up to ``max_span``
    tokens, the table sharded as ``config.training.sharded_table`` says, checked against a GPU
    of ``config.plan_gpu_gb`` GB."""
    world_size = check_int("world_size", world_size, 1)
    if config.batch % world_size:
        raise ValueError(f"world_size ({world_size}) must divide the batch ({config.batch})")
    return plan(
        _shape(model),
        config.train_config(),
        batch=config.batch // world_size,
        seq_len=config.recipe().max_span,
        world_size=world_size,
        gpu_bytes=config.plan_gpu_gb * 1e9,
    )


def _workload_shape(workload: Workload) -> EncoderShape:
    return EncoderShape(
        vocab_size=workload.vocab,
        d_model=workload.d_model,
        n_heads=workload.n_heads,
        n_layers=workload.n_layers,
        d_ff=4 * workload.d_model,
        max_len=workload.seq_len,
    )


def cost_projection(
    workload: Workload = EMBEDDING_WORKLOAD,
    *,
    gpus: int = 8,
    preemption: Preemption = PROJECTION_PREEMPTION,
) -> dict[str, Any]:
    """Time and cost of ``workload`` (the chapter's stated size: a MiniLM-sized encoder on 1B
    pairs, ``chapter20.cost.estimates.EMBEDDING_WORKLOAD``) on ``gpus`` GPUs of the cheapest
    catalog configuration whose GPUs hold its planned step (§20.3, §20.5): on demand, and on
    spot at the region's median zone with the expected preemption overhead of ``preemption``
    (Young/Daly checkpoint interval). Only types whose GPU memory the catalog gives, and that
    the time model can time (``chapter20.cost.fleet_choices.training_options``), are candidates.
    Throughput is ``chapter20.cost.estimates``' model, calibrated on one GPU measurement.
    Returns the plan's peak, the two options (the spot one with the on-demand cost of the same
    type, ``on_demand_cost_same_type``: the two options may be different types), and the
    snapshot label with the date and commit of SkyPilot's catalog each cloud's prices come
    from."""
    gpus = check_int("gpus", gpus, 1)
    if not isinstance(preemption, Preemption):
        raise TypeError(
            f"preemption must be a chapter20.cost.estimates.Preemption, got {preemption!r}"
        )
    peak = plan(
        _workload_shape(workload),
        TrainConfig(precision=workload.precision),
        batch=workload.pairs_per_gpu,
        seq_len=workload.seq_len,
    ).peak_bytes
    catalog = load_catalog()
    memory = dict(zip(catalog["instance"], catalog["gpu_memory_gib"]))
    frames = {}
    for key, spot in (("on_demand", False), ("spot", True)):
        frame = training_options(
            workload, (gpus,), spot=spot, preemption=preemption if spot else None
        )
        frames[key] = frame[frame["instance"].map(memory) * 2**30 >= peak]  # unknown memory: out
    options: dict[str, Any] = {}
    for key, frame in frames.items():
        if frame.empty:
            options[key] = None
            continue
        best = frame.sort_values(["cost", "hours", "instance"], kind="stable").iloc[0]
        options[key] = {
            "instance": best["instance"],
            "cloud": best["cloud"],
            "gpu_model": best["gpu_model"],
            "gpu_memory_gib": float(memory[best["instance"]]),
            "gpus": int(best["gpus"]),
            "hours": float(best["hours"]),
            "price_per_hour": float(best["price_per_hour"]),
            "cost": float(best["cost"]),
        }
    if options["spot"] is not None:  # what spot saves is read on one type, not across types
        same = frames["on_demand"].set_index("instance")["cost"]
        options["spot"]["on_demand_cost_same_type"] = float(same[options["spot"]["instance"]])
    return {
        "workload": workload.name,
        "pairs": workload.pairs,
        "gpus": gpus,
        "planned_peak_bytes": int(peak),
        "preemption": asdict(preemption),
        "snapshot": snapshot_label(catalog),
        **options,
    }


def plan_lines(memory: MemoryPlan, projection: dict[str, Any], gpu_gb: float) -> list[str]:
    """The plan and the projection as the lines ``scripts/train.py`` prints before training."""
    gpu_gb = check_positive("gpu_gb", gpu_gb)
    lines = ["memory plan of one step (chapter20.training.memory_plan.plan), per rank:"]
    for name, value in memory.components.items():
        lines.append(f"  {name:<16} {format_bytes(value):>10}")
    verdict = "fits" if memory.fits else "does NOT fit"
    lines.append(
        f"  peak {format_bytes(memory.peak_bytes)} ({memory.settings['peak_phase']}): "
        f"{verdict} on one GPU of {gpu_gb:g} GB"
    )
    lines += [f"  advice: {a}" for a in parallelism_advice(memory, gpu_gb * 1e9)]
    lines.append(
        f"cost projection: {projection['workload']} on {projection['gpus']} GPUs "
        f"(step planned at {format_bytes(projection['planned_peak_bytes'])} per GPU)"
    )
    for key, label in (("on_demand", "on demand"), ("spot", "spot (median zone, preemptions)")):
        option = projection[key]
        if option is None:
            lines.append(f"  {label}: no catalog configuration fits")
            continue
        same = option.get("on_demand_cost_same_type")
        lines.append(
            f"  {label}: {option['instance']} ({option['cloud']}, "
            f"{option['gpu_model']} {option['gpu_memory_gib']:g} GiB): "
            f"{option['hours']:,.1f} h, ${option['cost']:,.0f}"
            + ("" if same is None else f" (${same:,.0f} on demand on that type)")
        )
    p = projection["preemption"]
    lines.append(
        f"  spot assumes a preemption every {p['mtbf_hours']:g} h per instance, "
        f"{p['checkpoint_seconds']:g} s per checkpoint, {p['restart_seconds']:g} s "
        f"per restart; {projection['snapshot']}"
    )
    return lines


def summary_lines(
    summary: dict[str, Any], summary_file: str | None = None, *, fingerprint: bool = True
) -> list[str]:
    """What ``scripts/train.py`` prints after training: the steps and (with ``fingerprint``) the
    weights' fingerprint, which two runs compare to prove a resume exact; the peak memory
    planned and measured, throughput, the final quality next to chance and the start, and
    where the encoder file and ``summary_file`` are (when rank 0 wrote them). Held-out means
    the next-sentence pairs of the articles held out of training (the test articles)."""
    done = (
        f"done: {summary['steps']} steps on {summary['world_size']} process(es), resumed "
        f"from step {summary['resumed_from']}"
    )
    lines = [done + (f"; fingerprint {summary['fingerprint']}" if fingerprint else "")]
    planned, measured = summary["planned_peak_bytes"], summary["measured_peak_bytes"]
    if measured is None:
        lines.append(
            f"peak memory of a step: planned {format_bytes(planned)} per rank "
            "(measured in one-process runs only)"
        )
    else:
        lines.append(
            f"peak memory of a step: planned {format_bytes(planned)}, measured "
            f"{format_bytes(measured)} (measured / planned {measured / planned:.2f})"
        )
    if summary["pairs_per_second"] is not None:
        lines.append(
            f"throughput: {summary['pairs_per_second']:,.0f} documents (view pairs) "
            f"per second over {summary['train_seconds_this_launch']:.0f} s of steps"
        )
    if summary["final"] is not None:
        final = summary["final"]
        lines.append(
            f"final: Lee Pearson {final['lee_pearson']:.3f}, Spearman "
            f"{final['lee_spearman']:.3f}; held-out recall@1 {final['recall@1']:.3f} "
            f"(chance {final['chance@1']:.4f}), recall@10 {final['recall@10']:.3f} "
            f"(chance {final['chance@10']:.4f}), MRR {final['mrr']:.3f} "
            f"(chance {final['chance_mrr']:.4f})"
        )
        lines += start_lines(summary.get("start"), final)
        lines += stopping_lines(summary)
    if "encoder_file" in summary:
        lines.append(
            f"encoder: {summary['encoder_file']} (chapter20.training.encoder_file.load_encoder)"
            + ("" if summary_file is None else f"; summary: {summary_file}")
        )
    return lines


def baseline_lines(summary: dict[str, Any]) -> list[str]:
    """The classic baselines a run scored (``summary["baselines"]``, records of
    ``chapter20.capstone.baselines.baseline_table``) as a table beside the trained encoder's
    final figures (§20.6); no lines when the run scored none."""
    if not summary.get("baselines"):
        return []
    lines = [
        "baselines (measured now; every setting chosen on the validation pairs):",
        f"  {'method':<24} {'fitted on':<15} {'Lee r':>6} {'R@1':>6} {'R@10':>6} {'MRR':>6}",
    ]
    final = summary.get("final")
    rows = [("encoder", "training text", final)] if final else []
    rows += [(baseline_name(r["method"], r["settings"]), r["corpus"], r)
             for r in summary["baselines"]]  # fmt: skip
    for method, corpus, r in rows:
        lee = "—" if r["lee_pearson"] != r["lee_pearson"] else f"{r['lee_pearson']:.3f}"
        lines.append(f"  {method:<24} {corpus:<15} {lee:>6} {r['recall@1']:>6.3f} "
                     f"{r['recall@10']:>6.3f} {r['mrr']:>6.3f}")  # fmt: skip
    tuned = [r for r in summary["baselines"]
             if r["method"] == "bm25" and r["corpus"] == "training text"]  # fmt: skip
    if final and tuned:
        lines.append(f"the encoder against the tuned BM25 of the same text: held-out MRR "
                     f"{final['mrr']:.3f} vs {tuned[0]['mrr']:.3f} "
                     f"({final['mrr'] - tuned[0]['mrr']:+.3f})")  # fmt: skip
    return lines


def stopping_lines(summary: dict[str, Any]) -> list[str]:
    """Which step's weights the run kept under early stopping (§20.5), and where it stopped;
    no lines for a run without the rule."""
    rule = summary.get("early_stopping")
    if not rule or rule.get("best_step") is None:
        return []
    stopped = rule["stopped_at"]
    end = f"stopped at step {stopped}" if stopped is not None else "trained every step"
    return [f"early stopping: the final figures are step {rule['best_step']}'s, the best "
            f"validation score ({rule['best_value']:.4f}); the run {end}"]  # fmt: skip


def start_lines(start: dict | None, final: dict) -> list[str]:
    """What the untrained start provides and what training adds, computed from a run's start
    and final evaluations (§20.6): the share of the final Lee r and MRR that the start already
    had (``chapter20.core.findings.share``) and the difference training made."""
    if start is None:
        return []
    lines = []
    for key, name in (("lee_pearson", "Lee r"), ("mrr", "held-out MRR")):
        if start[key] > 0 and final[key] > 0:
            lines.append(share(f"the untrained start ({name})", start[key], final[key],
                               of=f"the final {name}") +
                         f"; training adds {final[key] - start[key]:+.3f}")  # fmt: skip
    return lines
