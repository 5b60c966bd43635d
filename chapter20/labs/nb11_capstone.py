"""§20.6–§20.8 Putting it together: the tables and figures of notebook 11.

- §20.6's key takeaways, each next to the verdicts that the earlier notebooks measured for the
  claims behind it (read from the claims audit, never retyped): :func:`takeaways_table`;
- the audit of all 30 claims per section: :func:`verdicts_by_section`,
  :func:`plot_verdicts_by_section`;
- the quality of the composed run's encoder next to the baselines measured in the same run:
  :func:`quality_table`, :func:`plot_quality`;
- §20.8's further reading as references: :data:`FURTHER_READING`;
- the ablation of the composed run (§20.6: each technique switched off in turn, one model,
  one task): :func:`ablation`, :func:`plot_ablation`, the cross-rank negatives on 2 ranks
  (:func:`cross_rank_ablation`), and the heavier version ``python -m chapter20 bench ablation``
  (:func:`ablation_benchmark`).
"""

from __future__ import annotations

import copy
import tempfile
from dataclasses import replace

import pandas as pd

from chapter20.capstone.config import CAPSTONE_TRAINING, RunConfig
from chapter20.capstone.evaluation import (
    LEE_INTER_RATER,
    baseline_scores,
    heldout_sentence_pairs,
    summarize_seeds,
)
from chapter20.capstone.recipe import EncoderRecipe, build_encoder, recipe_study, train_encoder
from chapter20.capstone.report import memory_plan
from chapter20.capstone.run import run_capstone
from chapter20.core.claims import NOT_YET_MEASURED, VERDICTS, audit
from chapter20.core.paths import data_file
from chapter20.core.plotting import new_figure, new_panels
from chapter20.techniques.distributed import group_rank_and_size, run_local_group
from chapter20.training.loop import LoopConfig
from chapter20.training.trainer import Trainer, step_peak_memory

#: The recipe study as measured once (see data/README.md for when and how).
RECIPE_STUDY_FILE = "capstone_recipe_study.csv"

__all__ = [
    "ABLATION",
    "FURTHER_READING",
    "ablation",
    "ablation_benchmark",
    "cross_rank_ablation",
    "composed_run",
    "plot_ablation",
    "saved_and_loaded_difference",
    "benchmark",
    "TAKEAWAYS",
    "plot_quality",
    "plot_verdicts_by_section",
    "quality_runs",
    "quality_table",
    "recipe_study_table",
    "takeaways_table",
    "verdicts_by_section",
]

#: §20.6's key takeaways in our words, each with the claims (C01–C30) that measure it.
TAKEAWAYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Contrastive training wants thousands of negatives; reach them with gradient caching, "
     "not naive accumulation", ("C01", "C05")),
    ("Mixed precision: half the bytes, faster matrix multiplies on tensor cores, no loss of "
     "accuracy", ("C06", "C07", "C08", "C09", "C27")),
    ("Activation checkpointing trades recomputation for activation memory", ("C10",)),
    ("Optimizer state is a large share of memory; 8-bit state cuts it", ("C11", "C12", "C13")),
    ("Together the memory techniques fit a much larger model on one GPU", ("C23",)),
    ("Data parallelism scales when communication keeps up: gradient traffic, links, LR "
     "scaling", ("C02", "C03", "C14", "C15", "C16")),
    ("Cost is price × time: pick instances by time-to-train, use spot with checkpoints",
     ("C17", "C18", "C19", "C20", "C21", "C22")),
)  # fmt: skip

#: §20.8 (and §20.7's evaluation) as references: (topic, reference).
FURTHER_READING: tuple[tuple[str, str], ...] = (
    ("PyTorch DDP", "Li et al., PyTorch Distributed: Experiences on Accelerating Data "
     "Parallel Training, VLDB 2020"),
    ("Megatron-LM", "Shoeybi et al., Megatron-LM: Training Multi-Billion Parameter Language "
     "Models Using Model Parallelism, 2019"),
    ("ZeRO", "Rajbhandari et al., ZeRO: Memory Optimizations Toward Training Trillion "
     "Parameter Models, SC 2020"),
    ("Mixed precision", "Micikevicius et al., Mixed Precision Training, ICLR 2018"),
    ("8-bit optimizers", "Dettmers et al., 8-bit Optimizers via Block-wise Quantization, "
     "ICLR 2022"),
    ("Sublinear memory", "Chen et al., Training Deep Nets with Sublinear Memory Cost, 2016"),
    ("Horovod", "Sergeev and Del Balso, Horovod: fast and easy distributed deep learning in "
     "TensorFlow, 2018"),
    ("Evaluation (§20.7): Lee similarity", "Lee, Pincombe and Welsh, An Empirical Evaluation "
     "of Models of Text Document Similarity, CogSci 2005"),
    ("Evaluation (§20.7): LSA baseline", "Deerwester et al., Indexing by Latent Semantic "
     "Analysis, JASIS 1990"),
    ("Evaluation (§20.7): Doc2Vec baseline", "Le and Mikolov, Distributed Representations of "
     "Sentences and Documents, ICML 2014"),
    ("Training signal: cropped views", "Izacard et al., Unsupervised Dense Information "
     "Retrieval with Contrastive Learning (Contriever), TMLR 2022"),
)  # fmt: skip


def takeaways_table(frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per takeaway of :data:`TAKEAWAYS` with each of its claims' verdicts as
    ``"C05: holds"`` (the audit's latest verdict per claim; every notebook that logged it)."""
    frame = audit() if frame is None else frame
    verdicts = frame.groupby("id", sort=False)["verdict"].agg(
        lambda v: " / ".join(dict.fromkeys(v))
    )
    rows = []
    for takeaway, claims in TAKEAWAYS:
        rows.append({"takeaway (§20.6)": takeaway,
                     "verdicts": "; ".join(f"{c}: {verdicts.get(c, NOT_YET_MEASURED)}"
                                           for c in claims)})  # fmt: skip
    return pd.DataFrame(rows)


def verdicts_by_section(frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """Claims per section and verdict (sections in the chapter's order; one count per claim
    and notebook that logged it; "not yet measured" when none did)."""
    frame = audit() if frame is None else frame
    columns = [*VERDICTS, NOT_YET_MEASURED]
    table = pd.crosstab(frame["section"], frame["verdict"]).reindex(columns=columns, fill_value=0)
    order = list(dict.fromkeys(frame["section"]))
    return table.loc[order]


def plot_verdicts_by_section(table: pd.DataFrame):
    """Stacked bars: claims per section by verdict."""
    fig, ax = new_figure("The chapter's claims, audited", "section", "claims (per notebook)")
    bottom = pd.Series(0, index=table.index)
    for verdict in table.columns:
        if table[verdict].any():
            ax.bar(table.index, table[verdict], bottom=bottom, label=verdict)
            bottom = bottom + table[verdict]
    ax.legend()
    ax.tick_params(axis="x", rotation=45)
    return fig


def quality_table(runs: pd.DataFrame, column: str = "lee_pearson") -> pd.DataFrame:
    """Mean ± std over seeds of ``column`` per method (rows of ``runs``: method, seed, value),
    with the inter-rater agreement as the last row for reference (Lee Pearson only)."""
    summary = summarize_seeds(runs.rename(columns={column: "value"}), columns=("value",))
    summary = summary.rename(columns={"value_mean": "mean", "value_std": "std"})
    if column == "lee_pearson":
        summary.loc[len(summary)] = {"method": "inter-rater agreement", "seeds": 0,
                                     "mean": LEE_INTER_RATER, "std": 0.0}  # fmt: skip
    return summary


def plot_quality(summary: pd.DataFrame, title: str = "Lee document similarity"):
    """Bars of mean Pearson per method with ± std error bars; the inter-rater line."""
    fig, ax = new_figure(title, "method", "Pearson r with human judgments")
    bars = summary[summary["method"] != "inter-rater agreement"]
    ax.bar(bars["method"], bars["mean"], yerr=bars["std"], capsize=4)
    ax.axhline(LEE_INTER_RATER, color="grey", linestyle="--", label="inter-rater agreement")
    ax.legend()
    return fig


def quality_runs(
    recipe: EncoderRecipe | None = None, *, steps: int = 60, batch: int = 512,
    seeds: tuple[int, ...] = (0, 1, 2),
) -> pd.DataFrame:  # fmt: skip
    """The encoder of ``recipe`` trained ``steps`` steps for each seed, and the baselines for
    the same seeds, measured now (§20.7): one row per (method, seed) with ``lee_pearson``,
    ``lee_spearman`` and, for the encoder (before and after training), held-out recall@1/@10
    and their chance levels."""
    recipe = recipe or EncoderRecipe()
    retrieval = heldout_sentence_pairs(2_000)
    rows = []
    for seed in seeds:
        setup = build_encoder(EncoderRecipe(**{**recipe.__dict__, "seed": seed}))
        records = train_encoder(setup, steps=steps, batch=batch, retrieval=retrieval)
        for method, record in (("encoder, untrained (LSA start)", records[0]),
                               ("encoder", records[-1])):  # fmt: skip
            rows.append({"method": method, "seed": seed, **record})
    baselines = baseline_scores(seeds).rename(
        columns={"pearson": "lee_pearson", "spearman": "lee_spearman"}
    )
    return pd.concat([pd.DataFrame(rows), baselines], ignore_index=True)


def recipe_study_table(path=None) -> pd.DataFrame:
    """The recipe study measured once (``data/capstone_recipe_study.csv``, written by
    ``chapter20.capstone.recipe.recipe_study``): per variant the Lee Pearson at the start and after
    training, its change against the final recipe, and held-out recall@1 — rounded to 3
    decimals for display."""
    frame = pd.read_csv(path or data_file(RECIPE_STUDY_FILE))
    final = frame.loc[frame["variant"] == "final recipe", "lee_pearson"].iloc[0]
    table = pd.DataFrame({
        "variant": frame["variant"],
        "Lee r at start": frame["start_lee_pearson"],
        "Lee r trained": frame["lee_pearson"],
        "vs final": frame["lee_pearson"] - final,
        "recall@1": frame["recall@1"],
    })  # fmt: skip
    return table.round(3)


def benchmark(steps: int = 120, batch: int = 256, out: str = "") -> None:
    """``python -m chapter20 bench recipe``: :func:`chapter20.capstone.recipe.recipe_study` (every
    variant, one seed), printed as it goes; with ``out`` (a path; or ``CHAPTER20_STUDY_OUT``) also
    written as the CSV that :func:`recipe_study_table` reads, with when and where it ran."""
    import datetime
    import os

    import torch

    out = out or os.environ.get("CHAPTER20_STUDY_OUT")
    stamp = {"measured_on": datetime.date.today().isoformat(),
             "torch_threads": torch.get_num_threads(),
             "load_average": round(os.getloadavg()[0], 1)}  # fmt: skip

    def log(record: dict) -> None:
        print(f"{record['variant']:<40} Lee r {record['start_lee_pearson']:.3f} -> "
              f"{record['lee_pearson']:.3f}   recall@1 {record['recall@1']:.3f}   "
              f"{record['seconds']:.0f} s", flush=True)  # fmt: skip

    records = recipe_study(steps=steps, batch=batch, log=log)
    if out:
        pd.DataFrame([{**r, **stamp} for r in records]).to_csv(out, index=False)
        print(f"written: {out}")


#  The ablation (§20.6): the composed run's techniques, and each one switched off in turn —  variant
# → the ``TrainConfig`` fields (or the batch) that differ from :func:`_composed`. Gradient caching
# off  means the batch that fits without it: the chunk's size (fewer in-batch negatives).
ABLATION: dict[str, dict] = {
    "all techniques": {},
    "fp32 (no bf16)": {"precision": "fp32"},
    "no gradient caching (small batch)": {"chunk_size": None, "batch": None},
    "32-bit optimizer state (no 8-bit)": {"optimizer": "adamw"},
    "no activation checkpointing": {"activation_checkpointing": "none"},
}


#: The composed run's step: bf16, 8-bit AdamW, every layer recomputed (gradient caching's chunk
#: is the ablation's argument), no warm-up.
COMPOSED_TRAINING = replace(
    CAPSTONE_TRAINING, precision="bf16", optimizer="adamw8bit",
    activation_checkpointing="every_layer", warmup_steps=0,
)  # fmt: skip


def _composed(batch: int, chunk: int, dim: int, seed: int, changes: dict) -> RunConfig:
    """The composed run with ``changes`` (``TrainConfig`` fields, or ``batch``)."""
    fields = {"chunk_size": chunk, **{k: v for k, v in changes.items() if k != "batch"}}
    training = replace(COMPOSED_TRAINING, **fields)
    batch = changes.get("batch", batch) or chunk  # None: what fits without caching, one chunk
    return RunConfig(output_dir="-", dim=dim, seed=seed, batch=batch, base_batch=batch,
                     lr_scaling="none", training=training)  # fmt: skip


def ablation(
    steps: int = 40, batch: int = 256, chunk: int = 64, dim: int = 256, seed: int = 0,
    variants: tuple[str, ...] | None = None,
) -> pd.DataFrame:  # fmt: skip
    """Each technique of the composed run switched off in turn (§20.6), on one task: the
    capstone bag trained ``steps`` steps from the same start (one build, copied per variant) through
    ``chapter20.training.trainer.Trainer`` (``chapter20.capstone.recipe.train_encoder``). One row
    per variant: Lee Pearson and held-out recall@1 after training, mean step time (seconds of the
    training steps / steps), one step's peak memory measured (``step_peak_memory``) and planned
    (``chapter20.training.memory_plan.plan``). Batches are ``batch`` documents, or ``chunk``
    when gradient caching is off. One process: cross-rank negatives need 2 ranks
    (:func:`ablation_benchmark`)."""
    setup = build_encoder(EncoderRecipe(dim=dim, seed=seed))
    start = copy.deepcopy(setup.model)
    retrieval = heldout_sentence_pairs(1_000)
    rows = []
    for name in variants or tuple(ABLATION):
        if name not in ABLATION:
            raise ValueError(f"unknown variant {name!r}; one of {list(ABLATION)}")
        config = _composed(batch, chunk, dim, seed, ABLATION[name])
        setup.model = copy.deepcopy(start)
        records = train_encoder(setup, steps=steps, batch=config.batch, retrieval=retrieval,
                                config=config.train_config())  # fmt: skip
        trainer = Trainer(copy.deepcopy(start), config.train_config())
        peak = step_peak_memory(trainer, setup.sampler(config.batch).batch_at(0)).peak_bytes
        rows.append({
            "variant": name, "batch": config.batch, "lee_pearson": records[-1]["lee_pearson"],
            "recall@1": records[-1]["recall@1"],
            "step_ms": 1e3 * records[-1]["seconds"] / max(steps, 1),
            "peak_MB": peak / 1e6,
            "planned_MB": memory_plan(config, trainer.encoder).peak_bytes / 1e6,
        })  # fmt: skip
    setup.model = start
    return pd.DataFrame(rows)


def _rank_of_a_run(config: RunConfig) -> dict | None:
    """One rank of :func:`cross_rank_ablation`'s runs (``run_local_group`` calls it): the
    composed run's summary on rank 0."""
    summary = run_capstone(config, log=lambda *_: None)
    return summary if group_rank_and_size()[0] == 0 else None


def cross_rank_ablation(
    steps: int = 10, batch: int = 128, chunk: int = 32, dim: int = 256, seed: int = 0,
    ranks: int = 2,
) -> pd.DataFrame:  # fmt: skip
    """The composed configuration of :func:`ablation` on ``ranks`` processes (gloo), with and
    without cross-rank negatives (§20.2.1, §20.6): the same global batch of ``batch``
    documents, so each query is scored against ``batch`` candidates with them and against its
    rank's ``batch / ranks`` without. Each variant is a whole ``run_capstone`` (the composed
    step inside the resumable loop, DDP over the ranks); same columns as :func:`ablation`, step
    time from rank 0's training seconds, peak memory measured and planned per rank."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="chapter20-ablation-") as tmp:
        for name, cross in ((f"all techniques, {ranks} ranks", True),
                            (f"no cross-rank negatives, {ranks} ranks", False)):  # fmt: skip
            config = replace(
                _composed(batch, chunk, dim, seed, {"cross_rank_negatives": cross}),
                output_dir=f"{tmp}/{cross}", steps=steps, eval_every=None,
                loop=LoopConfig(checkpoint_every=steps), progress=False,
            )  # fmt: skip
            summary = run_local_group(_rank_of_a_run, ranks, (config,), timeout_s=900)[0]
            final, measured = summary["final"], summary["measured_peak_bytes"]
            rows.append({
                "variant": name, "batch": batch, "lee_pearson": final["lee_pearson"],
                "recall@1": final["recall@1"],
                "step_ms": 1e3 * summary["train_seconds_this_launch"] / steps,
                "peak_MB": float("nan") if measured is None else measured / 1e6,
                "planned_MB": summary["planned_peak_bytes"] / 1e6,
            })  # fmt: skip
    return pd.DataFrame(rows)


def plot_ablation(frame: pd.DataFrame):
    """Three panels, one bar per variant: Lee Pearson, step time, peak memory (measured, with
    the plan as a tick)."""
    fig, axes = new_panels(3, "The composed run with each technique switched off in turn",
                           figsize=(13, 3.6))  # fmt: skip
    labels = frame["variant"]
    y = range(len(frame))
    panels = (("lee_pearson", "Lee Pearson r"), ("step_ms", "ms per step"),
              ("peak_MB", "peak MB of a step"))  # fmt: skip
    for ax, (column, title) in zip(axes, panels):
        ax.barh(list(y), frame[column], color="tab:blue")
        ax.set_title(title)
        ax.set_yticks(list(y), labels if ax is axes[0] else [""] * len(frame))
        ax.invert_yaxis()
    axes[2].scatter(frame["planned_MB"], list(y), marker="|", s=300, color="black",
                    label="plan", zorder=3)  # fmt: skip
    axes[2].legend(loc="lower right")
    return fig


def ablation_benchmark(steps: int = 200, batch: int = 512, chunk: int = 128, dim: int = 256,
                       seed: int = 0) -> None:  # fmt: skip
    """``python -m chapter20 bench ablation``: :func:`ablation` at a larger size, printed."""
    frame = ablation(steps=steps, batch=batch, chunk=chunk, dim=dim, seed=seed)
    print(frame.round(3).to_string(index=False))
    print("\ncross-rank negatives (2 ranks, the same global batch):")
    ranked = cross_rank_ablation(steps=steps, batch=batch, chunk=chunk, dim=dim, seed=seed)
    print(ranked.round(3).to_string(index=False))


def saved_and_loaded_difference(setup, texts: list[str]) -> float:
    """Largest absolute difference between the vectors of ``setup``'s encoder and those of the
    same encoder written to a file and read back by ``chapter20.training.encoder_file.load_encoder``
    (§20.6: the file needs no training state)."""
    import tempfile
    from pathlib import Path

    from chapter20.training.encoder_file import load_encoder

    with tempfile.TemporaryDirectory(prefix="chapter20-encoder-") as tmp:
        loaded = load_encoder(setup.save(Path(tmp) / "encoder.pt"))
        return float((loaded.encode(texts) - setup.text_encoder().encode(texts)).abs().max())


def composed_run(steps: int = 100, eval_every: int = 50, **fields) -> tuple[dict, list[str]]:
    """``chapter20.capstone.run.run_capstone`` of ``RunConfig(steps=..., eval_every=...,
    **fields)`` in a temporary directory that is removed afterwards (notebook 11, §20.6): the
    summary and the lines it printed before training (plan, cost projection, set-up)."""
    import tempfile

    from chapter20.capstone.run import run_capstone

    printed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="chapter20-run-") as tmp:
        config = RunConfig(output_dir=tmp, steps=steps, eval_every=eval_every, progress=False,
                           **fields)  # fmt: skip
        summary = run_capstone(config, log=printed.append)
    gone = ("encoder_file", "summary_file")  # removed with the directory
    return {k: v for k, v in summary.items() if k not in gone}, printed
