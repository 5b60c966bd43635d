"""§20.6 The ablation of notebook 11: the composed step with each memory technique off in turn.

The composed step (``chapter20.capstone.capstone_config.CAPSTONE_COMPOSED``: bf16 autocast,
gradient caching, activation checkpointing, 8-bit optimizer state) against each technique off,
against plain fp32 (all off), and against a positive control (the batch that fits without
gradient caching: one chunk, so fewer in-batch negatives), on the capstone encoder:

- :func:`composed_equivalence`: the proof first: activation checkpointing recomputes exactly
  and gradient caching computes the full batch's gradient, so switching either off must leave
  the trained weights equal (bitwise, or to float32 rounding);
- :func:`ablation_costs`: one step's peak memory (measured, and planned by
  ``chapter20.training.memory_plan``) and its time, per variant, measured now;
- :func:`ablation_quality`: each variant trained from the same start for several seeds; the
  seed noise of the composed row is measured first, and
  ``chapter20.capstone.evaluation.ablation_summary`` reports each variant's effect next to it
  (``chapter20 bench ablation`` writes the committed record);
- :func:`cross_rank_ablation`: the composed run on 2 ranks with and without cross-rank
  negatives (whole ``run_capstone`` runs under DDP).
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from chapter20.capstone.capstone_config import CAPSTONE_COMPOSED, CapstoneConfig
from chapter20.capstone.evaluation import ablation_summary, heldout_sentence_pairs
from chapter20.capstone.recipe import RECIPE_RUN, EncoderRecipe, build_encoder, train_encoder
from chapter20.capstone.report import memory_plan
from chapter20.capstone.run import run_capstone
from chapter20.core.checks import check_int
from chapter20.core.measure import time_interleaved
from chapter20.core.plotting import new_panels
from chapter20.core.study_record import study_output, write_study
from chapter20.techniques.distributed import group_rank_and_size, run_local_group
from chapter20.training.driver import FinishedRun
from chapter20.training.loop import LoopConfig
from chapter20.training.trainer import Trainer, step_peak_memory

__all__ = [
    "cost_breakdown",
    "ABLATION",
    "ABLATION_FILE",
    "CONTROL",
    "ablation_benchmark",
    "ablation_config",
    "ablation_costs",
    "ablation_quality",
    "composed_equivalence",
    "cross_rank_ablation",
    "plot_ablation",
]

#: The committed record of ``chapter20 bench ablation``.
ABLATION_FILE = "capstone_ablation.csv"
#: The positive control: a variant that must hurt, so a metric that cannot see it cannot judge.
CONTROL = "no gradient caching: one chunk per step (fewer negatives)"
#: Variant → the ``TrainConfig`` fields that differ from the composed step (``batch``: the
#: documents per step, ``"chunk"`` for one chunk).
ABLATION: dict[str, dict] = {
    "composed": {},
    "fp32 (no bf16)": {"precision": "fp32"},
    "no gradient caching (same batch)": {"chunk_size": None},
    "no activation checkpointing": {"activation_checkpointing": "none"},
    "32-bit optimizer state (no 8-bit)": {"optimizer": "adamw_fused", "state_32bit_tables": True},
    "plain fp32 (every technique off)": {
        "precision": "fp32",
        "chunk_size": None,
        "activation_checkpointing": "none",
        "optimizer": "adamw_fused",
        "state_32bit_tables": True,
    },
    CONTROL: {"chunk_size": None, "batch": "chunk"},
}


def ablation_config(name: str, batch: int, chunk: int, *, dim: int = 256, seed: int = 0):
    """The :class:`~chapter20.capstone.capstone_config.CapstoneConfig` of variant ``name`` at
    ``batch`` documents in chunks of ``chunk`` (§20.6), at the step's rate (not scaled)."""
    if name not in ABLATION:
        raise ValueError(f"name must be one of {list(ABLATION)}, got {name!r}")
    batch, chunk = check_int("batch", batch, 2), check_int("chunk", chunk, 1)
    changes = dict(ABLATION[name])
    size = chunk if changes.pop("batch", None) == "chunk" else batch
    training = replace(CAPSTONE_COMPOSED, chunk_size=chunk, warmup_steps=0, base_batch=None)
    training = replace(training, **changes)
    return CapstoneConfig(output_dir="-", dim=dim, seed=seed, batch=size, training=training)


def _setup(init: str, dim: int, seed: int):
    setup = build_encoder(EncoderRecipe(init=init, dim=dim, seed=seed))
    return setup, copy.deepcopy(setup.model.state_dict())


def _restart(setup, start: dict) -> None:
    """A fresh, unwrapped model with the start's weights (a Trainer rewires the model it gets:
    checkpointing, DDP), as ``setup.model``."""
    setup.model = type(setup.model)(**setup.model_kwargs)
    setup.model.load_state_dict(start)


def composed_equivalence(
    steps: int = 3, batch: int = 128, chunk: int = 32, recipe: EncoderRecipe | None = None
) -> dict[str, float]:
    """The largest difference between the weights after ``steps`` steps of the composed step
    and of the same step with activation checkpointing off, and with gradient caching off,
    from the same start on the same batches (§20.6); ``recipe`` defaults to the capstone's from
    a random start, 64 wide. Returns ``{variant: max |Δ|}``."""
    recipe = recipe or EncoderRecipe(init="random", dim=64)
    setup = build_encoder(recipe)
    start = copy.deepcopy(setup.model.state_dict())
    out, reference = {}, None
    for name in ("composed", "no activation checkpointing", "no gradient caching (same batch)"):
        _restart(setup, start)
        config = ablation_config(name, batch, chunk, dim=recipe.dim)
        trainer = Trainer(setup.model, config.train_config())
        sampler = setup.sampler(batch)
        for _ in range(check_int("steps", steps, 1)):
            trainer.step(sampler.next_batch())
        weights = torch.cat([p.detach().flatten() for p in setup.model.parameters()])
        if reference is None:
            reference = weights
        else:
            out[name] = float((weights - reference).abs().max())
    return out


def ablation_costs(
    batch: int = 256, chunk: int = 64, dim: int = 256, repeat: int = 3, init: str = "lsa"
):
    """Per variant, measured now on the capstone encoder from its ``init`` start (the costs do
    not depend on the weights' values): one step's peak memory (``step_peak_memory``, by the
    live-tensor tracker on a CPU), the plan's peak, and the median and range of ``repeat`` step
    times, the variants timed in alternation (§20.3)."""
    setup, start = _setup(init, dim, 0)
    trainers, batches, rows = {}, {}, []
    for name in ABLATION:
        config = ablation_config(name, batch, chunk, dim=dim)
        _restart(setup, start)
        model = setup.model
        trainers[name] = Trainer(model, config.train_config())
        batches[name] = setup.sampler(config.batch).batch_at(0)
        peak = step_peak_memory(trainers[name], batches[name])
        rows.append(
            {
                "variant": name,
                "batch": config.batch,
                "peak_MB": peak.peak_bytes / 1e6,
                "planned_MB": memory_plan(config, model).peak_bytes / 1e6,
                "measured_by": peak.method,
            }
        )
    timing = time_interleaved(
        {n: (lambda n=n: trainers[n].step(batches[n])) for n in trainers},
        warmup=0,  # step_peak_memory has already run two steps of every trainer
        repeat=check_int("repeat", repeat, 1),
    )
    frame = pd.DataFrame(rows)
    frame["step_ms"] = [1e3 * timing[n].median for n in frame["variant"]]
    frame["step_ms_min"] = [1e3 * min(timing[n].times) for n in frame["variant"]]
    frame["step_ms_max"] = [1e3 * max(timing[n].times) for n in frame["variant"]]
    return frame


def cost_breakdown(costs: pd.DataFrame) -> list[str]:
    """What each technique adds to the composed step's time (§20.6): the composed step's median
    minus the median with that technique alone off, then all of them off (plain fp32), from
    :func:`ablation_costs`. The single differences need not add up to the whole: the techniques
    interact (the chunks of gradient caching run under autocast, for one)."""
    medians = costs.set_index("variant")["step_ms"]
    composed = float(medians["composed"])
    lines = [f"composed step: {composed:.1f} ms (median); with one technique off:"]
    for name in ABLATION:
        if name in ("composed", CONTROL):
            continue
        added = composed - float(medians[name])
        what = "all of them together add" if name.startswith("plain") else "so it adds"
        lines.append(f"  {name}: {medians[name]:.1f} ms; {what} {added:+.1f} ms")
    if {"step_ms_min", "step_ms_max"} <= set(costs.columns):
        spread = float((costs["step_ms_max"] - costs["step_ms_min"]).max())
        lines.append(f"the repeats of one variant spread up to {spread:.1f} ms: a smaller "
                     "difference is noise")  # fmt: skip
    return lines


def ablation_quality(
    names: Sequence[str] | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    *,
    steps: int = 200,
    batch: int = 256,
    chunk: int = 64,
    dim: int = 256,
    init: str = "random",
    log: Callable[[dict], None] | None = None,
) -> pd.DataFrame:
    """Each variant trained ``steps`` steps from the ``init`` start for each seed (§20.6): one
    row per (variant, seed) with the final test, validation and Lee figures, and the mean step
    time of the run. The seed noise comes from the same rows (``ablation_summary``)."""
    test = heldout_sentence_pairs(None)
    validation = heldout_sentence_pairs(None, split="validation")
    rows = []
    for seed in seeds:
        setup, start = _setup(init, dim, check_int("seeds", seed, 0))
        for name in names or list(ABLATION):
            config = ablation_config(name, batch, chunk, dim=dim, seed=seed)
            _restart(setup, start)
            run = replace(RECIPE_RUN, steps=check_int("steps", steps, 1), batch=config.batch,
                          training=config.training)  # fmt: skip
            record = train_encoder(
                setup, run, retrieval=test, validation=validation, evaluate_start=False
            )[-1]
            rows.append(
                {
                    "variant": name,
                    "seed": seed,
                    "batch": config.batch,
                    **record,
                    "step_ms": 1e3 * record["seconds"] / steps,
                }
            )
            if log is not None:
                log(rows[-1])
    return pd.DataFrame(rows)


def _rank_of_a_run(config: CapstoneConfig) -> dict | None:
    """One rank of :func:`cross_rank_ablation`'s runs (``run_local_group`` calls it)."""
    result = run_capstone(config, log=lambda *_: None)
    if not isinstance(result, FinishedRun):
        raise ValueError(f"the run must train to its last step, got {result}")
    return result.summary if group_rank_and_size()[0] == 0 else None


def cross_rank_ablation(
    steps: int = 10, batch: int = 128, chunk: int = 32, dim: int = 256, ranks: int = 2
) -> pd.DataFrame:
    """The composed run on ``ranks`` processes (gloo, DDP) with and without cross-rank
    negatives (§20.2.1, §20.6): the same global batch, so each query meets ``batch``
    candidates with them and its rank's ``batch / ranks`` without. Whole ``run_capstone``
    runs; one row each with the final figures, step time and the plan per rank."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="chapter20-ablation-") as tmp:
        for name, cross in (
            (f"composed, {ranks} ranks", True),
            (f"no cross-rank negatives, {ranks} ranks", False),
        ):
            base = ablation_config("composed", batch, chunk, dim=dim)
            config = replace(
                base,
                training=replace(base.training, cross_rank_negatives=cross),
                output_dir=f"{tmp}/{cross}",
                steps=steps,
                eval_every=None,
                loop=LoopConfig(checkpoint_every=steps),
                progress=False,
            )
            summary = run_local_group(_rank_of_a_run, ranks, (config,), timeout_s=900)[0]
            rows.append(
                {
                    "variant": name,
                    "batch": batch,
                    **summary["final"],
                    "step_ms": 1e3 * summary["train_seconds_this_launch"] / steps,
                    "planned_MB": summary["planned_peak_bytes"] / 1e6,
                }
            )
    return pd.DataFrame(rows)


def plot_ablation(costs: pd.DataFrame, summary: pd.DataFrame, column: str = "mrr"):
    """Three panels, one bar per variant: the quality (mean ± std over seeds, the composed
    row's noise band shaded), the step time (median, min–max) and the peak memory (the plan
    as a tick)."""
    fig, axes = new_panels(
        3, "The composed step with each technique off in turn", figsize=(14, 4.2)
    )
    names = list(summary["variant"])
    y = np.arange(len(names))
    base = summary.set_index("variant").loc["composed"]
    axes[0].barh(y, summary["mean"], xerr=summary["std"].fillna(0.0), color="tab:blue", capsize=3)
    axes[0].axvspan(
        base["mean"] - 2 * base["std"],
        base["mean"] + 2 * base["std"],
        color="grey",
        alpha=0.25,
        label="composed ± 2 std",
    )
    axes[0].set_xlim(left=0.0)  # a bar's length is its value: the axis starts at zero
    axes[0].set_title(f"held-out {column.upper() if column == 'mrr' else column} (mean ± std)")
    costs = costs.set_index("variant").loc[names]
    spread = [costs["step_ms"] - costs["step_ms_min"], costs["step_ms_max"] - costs["step_ms"]]
    axes[1].barh(y, costs["step_ms"], xerr=spread, color="tab:orange", capsize=3)
    axes[1].set_title("ms per step (median, min–max)")
    axes[2].barh(y, costs["peak_MB"], color="tab:green")
    axes[2].scatter(
        costs["planned_MB"], y, marker="|", s=300, color="black", label="plan", zorder=3
    )
    axes[2].set_title("peak MB of a step")
    for ax in axes:
        ax.set_yticks(y, names if ax is axes[0] else [""] * len(names))
        ax.invert_yaxis()
    for ax in (axes[0], axes[2]):  # off the bars
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), frameon=False, fontsize=8)
    return fig


def ablation_benchmark(steps: int = 200, batch: int = 256, chunk: int = 64, out: str = ""):
    """``chapter20 bench ablation``: :func:`ablation_quality` (3 seeds), its summary against
    the seed noise, and the cross-rank negatives on 2 ranks (a quarter of the steps), printed;
    with ``out`` the quality rows are written as ``data/capstone_ablation.csv`` reads."""

    def log(row):
        print(
            f"{row['variant']:<60} seed {row['seed']}  mrr {row['mrr']:.4f}  recall@1 "
            f"{row['recall@1']:.4f}  Lee {row['lee_pearson']:.3f}  {row['step_ms']:.0f} ms/step",
            flush=True,
        )

    frame = ablation_quality(steps=steps, batch=batch, chunk=chunk, log=log)
    print(ablation_summary(frame).round(4).to_string(index=False))
    if study_output(out):
        command = f"chapter20 bench ablation --steps {steps} --batch {batch} --chunk {chunk}"
        print("written:", write_study(frame, study_output(out), command))
    print("cross-rank negatives, 2 ranks (a quarter of the steps, one seed):")
    crossed = cross_rank_ablation(steps=max(1, steps // 4), batch=batch, chunk=chunk)
    print(crossed.round(4).to_string(index=False))
