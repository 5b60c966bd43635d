"""§20.6 Notebook 11's scaling studies: what width, batch, training text and steps buy.

Each study is a list of ``chapter20.capstone.scaling.ScalingPoint`` runs (3 seeds, a random
start unless said, every choice made on the validation pairs) beside the classic baselines
fitted on the same text:

- **width** (:data:`WIDTHS`, random and LSA starts, batch 512), with LSI at the same width;
- **batch** (C01, :data:`BATCH_SIZES`, width 256): at equal steps and at equal documents seen;
- **data** (:data:`DATA_FRACTIONS` of the training documents, width 256, batch
  :data:`DATA_BATCH`), with TF-IDF, LSI and both BM25 fitted on each share.

``chapter20 bench scaling --study NAME`` runs one and, with ``--out`` (or
``CHAPTER20_STUDY_OUT``), writes its record after every run (``core.study_record``): one row
per evaluation of every run (``chosen`` marks the validation-chosen step) and one row per
baseline (``method`` names it; the encoder's rows say "encoder").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from chapter20.capstone.baselines import (
    baseline_name,
    baseline_table,
    chosen_settings,
    corpus_documents,
    fit_baseline,
)
from chapter20.capstone.evaluation import evaluate_scores, heldout_sentence_pairs
from chapter20.capstone.hybrid import OVERLAP_BUCKETS, bucket_metrics
from chapter20.capstone.scaling import HeldOutPairs, ScalingPoint, scaling_run
from chapter20.capstone.scaling_readings import doubling_fit, lever_table, run_results
from chapter20.core.checks import check_int
from chapter20.core.findings import compare
from chapter20.core.plotting import new_panels
from chapter20.core.study_record import read_study, study_output, value_span, write_study

__all__ = [
    "batch_claim",
    "batch_results",
    "bucket_lines",
    "bucket_table",
    "data_fits",
    "fit_lines",
    "hybrid_lines",
    "width_lines",
    "encoder_runs",
    "hybrid_table",
    "plot_curves",
    "plot_data",
    "plot_lever",
    "replay_point",
    "study_record",
    "BATCH_SIZES",
    "BATCH_STEPS",
    "DATA_BATCH",
    "DATA_FRACTIONS",
    "SCALING_FILES",
    "STUDIES",
    "STUDY_SEEDS",
    "WIDTHS",
    "held_out_pairs",
    "scaling_benchmark",
    "scaling_study",
    "study_points",
    "tuned_bm25",
]

#: The widths of the width study.
WIDTHS = (128, 256, 512, 1024)
#: The batches of the batch study (None: every training document in one step).
BATCH_SIZES = (32, 128, 512, None)
#: The batch and data studies' budget: at most this many steps, or as many documents as this
#: many steps of 512; long enough that small batches train to their best (400 steps of 32 did
#: not leave the start; 400 steps of 128 were still improving).
BATCH_STEPS = 1600
#: The shares of the training documents of the data study.
DATA_FRACTIONS = (0.125, 0.25, 0.5, 1.0)
#: The data study's batch: the smallest share (241 documents) still fills it.
DATA_BATCH = 128
#: The seeds of every study.
STUDY_SEEDS = (0, 1, 2)
#: The studies and their committed records (``data/``).
SCALING_FILES = {
    "width": "scaling_width.csv",
    "batch": "scaling_batch.csv",
    "data": "scaling_data.csv",
}
STUDIES = tuple(SCALING_FILES)
#: The baselines fitted beside the data study on each share of the text.
DATA_BASELINES = ("tfidf", "lsi", "bm25", "bm25_gensim")


def held_out_pairs() -> HeldOutPairs:
    """Every test pair and every validation pair (§20.7)."""
    return HeldOutPairs(
        heldout_sentence_pairs(None), heldout_sentence_pairs(None, split="validation")
    )


def tuned_bm25(fraction: float = 1.0):
    """Lucene's BM25 on ``fraction`` of the training text, k1 and b chosen on validation."""
    documents = corpus_documents("training text", fraction)
    return fit_baseline("bm25", documents, corpus="training text",
                        **chosen_settings("bm25", documents))  # fmt: skip


def study_points(study: str, seeds: Sequence[int] = STUDY_SEEDS) -> list[ScalingPoint]:
    """The runs of ``study`` (of :data:`STUDIES`), for each seed."""
    if study not in STUDIES:
        raise ValueError(f"study must be one of {STUDIES}, got {study!r}")
    seeds = [check_int("seeds", s, 0) for s in seeds]
    if study == "width":
        return [ScalingPoint(dim=d, init=i, seed=s)
                for d in WIDTHS for i in ("random", "lsa") for s in seeds]  # fmt: skip
    if study == "batch":
        points = [ScalingPoint(batch=b, seed=s, steps=BATCH_STEPS)
                  for b in BATCH_SIZES for s in seeds]  # fmt: skip
        return points + [ScalingPoint(batch=b, seed=s, budget="documents", steps=BATCH_STEPS)
                         for b in BATCH_SIZES if b != 512 for s in seeds]  # fmt: skip
    return [ScalingPoint(batch=DATA_BATCH, fraction=f, seed=s, steps=BATCH_STEPS)
            for f in DATA_FRACTIONS for s in seeds]  # fmt: skip


def _baseline_rows(study: str, pairs: HeldOutPairs) -> list[dict]:
    """The baselines beside ``study``: LSI at each width; every data baseline on each share."""
    rows = []
    if study == "width":
        documents = corpus_documents("training text")
        for dim in WIDTHS:
            lsi = fit_baseline("lsi", documents, corpus="training text", lsi_topics=dim)
            rows.append({"method": "lsi", "dim": dim, "fraction": 1.0,
                         **evaluate_scores(lsi.score, pairs.test)})  # fmt: skip
    elif study == "data":
        for fraction in DATA_FRACTIONS:
            table = baseline_table(("training text",), DATA_BASELINES, retrieval=pairs.test,
                                   fraction=fraction)  # fmt: skip
            rows += table.assign(fraction=fraction, settings=table["settings"].map(str)).to_dict(
                "records"
            )
    return rows


def scaling_study(
    study: str,
    seeds: Sequence[int] = STUDY_SEEDS,
    *,
    after_run: Callable[[pd.DataFrame], None] | None = None,
) -> pd.DataFrame:
    """Every run of ``study`` (:func:`study_points`) and its baselines (§20.6): the rows of
    ``chapter20.capstone.scaling.scaling_run`` with ``method`` "encoder", then one row per
    baseline. Runs on the whole text are also read per word-overlap bucket and fused with the
    tuned BM25. ``after_run(frame)`` sees the rows so far after every run."""
    pairs = held_out_pairs()
    bm25 = tuned_bm25()
    rows = _baseline_rows(study, pairs)
    for point in study_points(study, seeds):
        lexical = bm25 if point.fraction == 1.0 else None
        rows += [{"method": "encoder", **r} for r in scaling_run(point, pairs, lexical)]
        if after_run is not None:
            after_run(pd.DataFrame(rows))
    return pd.DataFrame(rows)


def scaling_benchmark(study: str = "width", seeds: str = "0,1,2", out: str = ""):
    """``chapter20 bench scaling``: one scaling study (``--study``: width, batch or data),
    each run's validation-chosen row printed as it ends; with ``out`` its record is written
    after every run (as ``data/scaling_<study>.csv`` reads)."""
    chosen_seeds = tuple(int(s) for s in seeds.split(","))
    command = f"chapter20 bench scaling --study {study} --seeds {seeds}"
    path = study_output(out)

    def after_run(frame: pd.DataFrame) -> None:
        runs = frame[(frame["method"] == "encoder") & frame["chosen"].fillna(False).astype(bool)]
        last = runs.iloc[-1]
        print(f"dim {last['dim']} init {last['init']} batch {last['batch']} fraction "
              f"{last['fraction']} seed {last['seed']} budget {last['budget']}: step "
              f"{last['step']}, val_mrr {last['val_mrr']:.4f}, mrr {last['mrr']:.4f}",
              flush=True)  # fmt: skip
        if path:
            write_study(frame, path, command)

    scaling_study(study, chosen_seeds, after_run=after_run)
    if path:
        print("written:", path)


# --- reading a record: tables and figures ---------------------------------------------------


def study_record(study: str) -> pd.DataFrame:
    """The committed record of ``study`` (``data/scaling_<study>.csv``)."""
    if study not in STUDIES:
        raise ValueError(f"study must be one of {STUDIES}, got {study!r}")
    return read_study(SCALING_FILES[study])


def encoder_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The encoder's evaluation rows of a record (its baselines' rows dropped)."""
    runs = frame[frame["method"] == "encoder"].copy()
    runs["chosen"] = runs["chosen"].astype(bool)
    for column in ("dim", "batch", "seed", "step"):
        runs[column] = runs[column].astype(int)
    return runs


def _band(ax, x, runs: pd.DataFrame, column: str, label: str, **style):
    stats = runs.groupby(x)[column].agg(["mean", "std"]).fillna(0.0)
    ax.errorbar(stats.index, stats["mean"], yerr=stats["std"], marker="o", capsize=4,
                label=label, **style)  # fmt: skip


def plot_lever(results: pd.DataFrame, x: str, groups: str, references: dict[str, float],
               *, title: str, xlabel: str):  # fmt: skip
    """Held-out MRR at the validation-chosen step (mean ± std over seeds) against a lever
    ``x`` (log scale), one line per value of ``groups``, its untrained start dashed, and each
    of ``references`` (a baseline's MRR) as a grey horizontal line."""
    fig, axes = new_panels(1, title, figsize=(8, 4.5))
    ax = axes[0]
    for i, (name, runs) in enumerate(results.groupby(groups, sort=False)):
        color = f"C{i}"
        _band(ax, x, runs, "mrr", f"{name}: trained (chosen step)", color=color)
        _band(ax, x, runs, "start_mrr", f"{name}: untrained start", color=color,
              linestyle="--", alpha=0.6)  # fmt: skip
    for j, (name, value) in enumerate(references.items()):
        ax.axhline(value, color="grey", linestyle=(0, (1, 1 + j)), label=name)
    ax.set_xscale("log", base=2)
    ticks = sorted(set(results[x]))
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("held-out MRR")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    return fig


def plot_curves(runs: pd.DataFrame, title: str):
    """Validation and test MRR of each run (one colour per seed) against the step, the
    validation-chosen step of each run marked with a star."""
    fig, axes = new_panels(2, title, figsize=(12, 4))
    for ax, (column, label) in zip(axes, (("val_mrr", "validation MRR"), ("mrr", "test MRR"))):
        for i, (seed, run) in enumerate(runs.groupby("seed")):
            run = run.sort_values("step")
            ax.plot(run["step"], run[column], color=f"C{i}", label=f"seed {seed}")
            kept = run[run["chosen"]]
            ax.plot(kept["step"], kept[column], "*", color=f"C{i}", markersize=14)
        ax.set_xlabel("step")
        ax.set_ylabel(label)
    axes[-1].legend(title="★ chosen step", fontsize=8)
    return fig


def data_fits(results: pd.DataFrame, baselines: pd.DataFrame) -> dict[str, dict]:
    """The gain per doubling of the training text (``doubling_fit``) of the encoder and of each
    baseline of the data study, by method."""
    fits = {"encoder": doubling_fit(results)}
    for method, rows in baselines.groupby("method", sort=False):
        fits[method] = doubling_fit(rows.drop_duplicates("fraction"))
    return fits


def plot_data(results: pd.DataFrame, baselines: pd.DataFrame, fits: dict[str, dict]):
    """Held-out MRR against the training documents (log scale): the encoder (mean ± std over
    seeds, chosen step) and each baseline fitted on the same share, with their fitted lines."""
    fig, axes = new_panels(1, "What more training text buys", figsize=(8, 4.5))
    ax = axes[0]
    _band(ax, "documents_trained", results, "mrr", "encoder (chosen step)", color="C0")
    for i, (method, rows) in enumerate(baselines.groupby("method", sort=False), start=1):
        rows = rows.drop_duplicates("fraction").sort_values("documents_trained")
        ax.plot(rows["documents_trained"], rows["mrr"], "s-", color=f"C{i}",
                label=baseline_name(method))  # fmt: skip
    xs = np.array(sorted(set(results["documents_trained"])), dtype=float)
    for i, fit in enumerate(fits.values()):
        ax.plot(xs, fit["intercept"] + fit["slope"] * np.log2(xs), ":", color=f"C{i}", alpha=0.7)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{int(x):,}" for x in xs])
    ax.set_xlabel("training documents")
    ax.set_ylabel("held-out MRR")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    return fig


def _bucket_mrr(results: pd.DataFrame, lexical: dict[str, np.ndarray], buckets: np.ndarray):
    """Held-out MRR per bucket of :data:`OVERLAP_BUCKETS`: the encoder's mean and std over its
    seeds, and each lexical method's figure, as numbers (one dict per bucket)."""
    rows = []
    for bucket in OVERLAP_BUCKETS:
        values = results[f"mrr_overlap_{bucket}"]
        rows.append({"bucket": bucket, "pairs": int((buckets == bucket).sum()),
                     "encoder": (values.mean(), values.std(ddof=1))})  # fmt: skip
    for name, scores in lexical.items():
        for row, figures in zip(rows, bucket_metrics(scores, buckets)):
            row[name] = figures["mrr"]
    return rows


def bucket_table(results: pd.DataFrame, lexical: dict[str, np.ndarray], buckets: np.ndarray):
    """Held-out MRR per word-overlap bucket: the encoder's runs (mean ± std over seeds, at their
    chosen step, from the record) beside each lexical method's ``lexical`` score matrix scored
    now on the same test pairs (``chapter20.capstone.hybrid.bucket_metrics``), with the pairs
    in each bucket."""
    rows = []
    for row in _bucket_mrr(results, lexical, buckets):
        mean, std = row.pop("encoder")
        shown = {
            name: f"{value:.3f}" for name, value in row.items() if name not in ("bucket", "pairs")
        }
        rows.append({"shared content words": row["bucket"], "pairs": row["pairs"],
                     "encoder": f"{mean:.3f} ± {std:.3f}", **shown})  # fmt: skip
    return pd.DataFrame(rows).set_index("shared content words")


def bucket_lines(
    results: pd.DataFrame, lexical: dict[str, np.ndarray], buckets: np.ndarray, chance: float
) -> list[str]:
    """One line per bucket of :func:`bucket_table`: which method has the highest held-out MRR
    there, and each method's MRR as a multiple of ``chance`` (a random ranking's MRR against
    every candidate, the same in every bucket)."""
    if not chance > 0:
        raise ValueError(f"chance must be a positive MRR, got {chance!r}")
    lines = []
    for row in _bucket_mrr(results, lexical, buckets):
        figures = {name: value for name, value in row.items() if name not in ("bucket", "pairs")}
        figures["encoder"] = figures["encoder"][0]
        leader = max(figures, key=figures.get)
        times = ", ".join(f"{name} {value / chance:.1f}×" for name, value in figures.items())
        lines.append(f"{row['bucket']} shared: {leader} leads; MRR over chance: {times}")
    return lines


def hybrid_table(results: pd.DataFrame, bm25_figures: dict) -> pd.DataFrame:
    """The tuned BM25 alone, the encoder alone, and their fusion with the untrained and with
    the trained encoder (weight chosen on validation): held-out recall@1, recall@10 and MRR,
    mean ± std over the seeds (BM25 draws nothing: one value)."""
    rows = [{"method": "tuned BM25 alone", **{k: f"{bm25_figures[k]:.3f}" for k in _FIGURES}}]
    arms = (("encoder alone (trained)", ""), ("fusion, untrained encoder", "start_hybrid_"),
            ("fusion, trained encoder", "hybrid_"))  # fmt: skip
    for name, prefix in arms:
        row = {"method": name}
        for k in _FIGURES:
            values = results[f"{prefix}{k}"]
            row[k] = f"{values.mean():.3f} ± {values.std(ddof=1):.3f}"
        rows.append(row)
    weights = results["hybrid_weight"]
    rows[-1]["method"] += f" (weights {value_span(weights)})"
    return pd.DataFrame(rows).set_index("method")


_FIGURES = ("recall@1", "recall@10", "mrr")


def batch_results(record: pd.DataFrame) -> pd.DataFrame:
    """The batch study's runs (``run_results``), its batch-512 runs counted under both budgets:
    at 512 documents per step, 1,600 steps are 1,600 × 512 documents, the same run."""
    results = run_results(encoder_runs(record))
    same = results[(results["batch"] == 512) & (results["budget"] == "steps")]
    return pd.concat([results, same.assign(budget="documents")], ignore_index=True)


def batch_claim(evidence: dict) -> dict:
    """``ClaimsLog.check("C01", ...)``'s keyword arguments from ``batch_evidence`` (§20.6):
    where gains stop at equal steps, and whether every batch trained past its start (if not,
    no batch is measured and the verdict says the runs gave no trend)."""
    table = evidence["table"]
    note = (
        ", ".join(
            f"batch {b:,}: MRR {m:.4f} ± {s:.4f}"
            for b, m, s in zip(table["batch"], table["mrr_mean"], table["mrr_std"])
        )
        + f"; untrained {table['untrained_mean'].iloc[0]:.4f}"
    )
    if evidence["saturation"] == evidence["largest"]:
        note += "; gains had not stopped at the largest batch there is"
    measured = None if evidence["saturation"] is None else float(evidence["saturation"])
    return {"measured": measured, "unit": "examples per batch",
            "trained_past_start": evidence["trained"], "note": note}  # fmt: skip


def replay_point(frame: pd.DataFrame, point: ScalingPoint) -> tuple[pd.Series, pd.Series]:
    """One run of a record trained again now: the record's chosen row of ``point`` and this
    run's, for a check that the record is what this code computes (§20.6)."""
    runs = encoder_runs(frame)
    mine = runs[(runs["dim"] == point.dim) & (runs["init"] == point.init)
                & (runs["fraction"] == point.fraction) & (runs["seed"] == point.seed)
                & (runs["budget"] == point.budget) & runs["chosen"]]  # fmt: skip
    if point.batch is not None:
        mine = mine[mine["batch"] == point.batch]
    if len(mine) != 1:
        raise ValueError(f"the record has no single chosen row for {point}")
    live = pd.DataFrame(scaling_run(point, held_out_pairs()))
    return mine.iloc[0], live[live["chosen"]].iloc[0]


def fit_lines(fits: dict[str, dict], meet: dict) -> list[str]:
    """Each method's gain per doubling of the text (± its standard error), then whether the
    encoder's gap to the tuned BM25 closes with more text (``crossing``), and where the lines
    would meet if it does, said as an extrapolation."""
    lines = [f"{'encoder' if m == 'encoder' else baseline_name(m)}: {f['slope']:+.4f} ± "
             f"{f['slope_se']:.4f} MRR per doubling of the text"
             for m, f in fits.items()]  # fmt: skip
    difference = (f"the encoder's gain per doubling minus the tuned BM25's: "
                  f"{meet['slope_difference']:+.4f} ± {meet['difference_se']:.4f} MRR")  # fmt: skip
    if meet["widening"]:
        return lines + [difference + ": the gap widens with more text"]
    if not meet["closing"]:
        return lines + [difference + ": within twice its uncertainty, no sign the gap closes"]
    return lines + [
        f"{difference}: extrapolated, the lines meet at about 2^{meet['log2_documents']:.1f} "
        f"documents (90% interval 2^{meet['low']:.1f} to 2^{meet['high']:.1f}); an "
        "extrapolation, not a measurement"
    ]


def width_lines(results: pd.DataFrame) -> list[str]:
    """For each start, the widest table against the narrowest (held-out MRR at the chosen step,
    compared within twice the larger seed standard deviation, ``core.findings.compare``)."""
    table = lever_table(results, ["init", "dim"]).set_index(["init", "dim"])
    lines = []
    for init in ("random", "lsa"):
        rows = table.loc[init]
        wide, narrow = rows.loc[rows.index.max()], rows.loc[rows.index.min()]
        noise = 2 * max(wide["mrr_std"], narrow["mrr_std"])
        lines.append(compare(f"{init} start at width {rows.index.max():,}", wide["mrr_mean"],
                             f"at width {rows.index.min()}", narrow["mrr_mean"], unit="MRR",
                             spread=noise))  # fmt: skip
    return lines


def hybrid_lines(results: pd.DataFrame, bm25_mrr: float) -> list[str]:
    """The fusion with the trained encoder against the tuned BM25 alone, and against the fusion
    with the untrained encoder (held-out MRR, within twice the larger seed standard deviation;
    BM25 draws nothing)."""
    fused, start = results["hybrid_mrr"], results["start_hybrid_mrr"]
    spread = 2 * max(fused.std(ddof=1), start.std(ddof=1))
    return [
        compare("the fusion with the trained encoder", fused.mean(), "the tuned BM25 alone",
                bm25_mrr, unit="MRR", spread=2 * fused.std(ddof=1)),
        compare("the fusion with the trained encoder", fused.mean(), "with the untrained one",
                start.mean(), unit="MRR", spread=spread),
    ]  # fmt: skip
