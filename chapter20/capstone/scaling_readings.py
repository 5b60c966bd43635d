"""§20.6 Reading the scaling studies: what each lever buys, beyond the seed noise.

A study's record (``chapter20.capstone.scaling.scaling_run`` rows: one per evaluation of every
run, ``chosen`` on the validation-chosen step, plus the baselines' rows) is read here:

- :func:`run_results`: one row per run, its untrained start and its validation-chosen step;
- :func:`lever_table`: per setting of a lever (width, batch, share of the text), the chosen
  step's figure over the seeds (mean ± standard deviation), the start's, what training added,
  and whether training beat the start beyond the noise (twice the larger standard deviation,
  ``chapter20.core.seed_statistics``) — a setting whose runs did not, gives no trend;
- :func:`batch_evidence`: C01's reading, where gains in the batch stop at equal steps
  (``chapter20.capstone.evaluation.saturation_batch``), from runs shown to have trained;
- :func:`doubling_fit`: a figure against log2 of the training documents, fitted by least
  squares per method (the gain per doubling of text, with its standard error), and where two
  methods' lines would cross — an extrapolation, with its uncertainty;
- :func:`best_configuration`: the configuration of the highest mean validation MRR.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from chapter20.capstone.evaluation import past_start, saturation_batch
from chapter20.core.checks import check_int
from chapter20.core.seed_statistics import beyond_noise, summarize_seeds

__all__ = [
    "LEVERS",
    "POINT_FIELDS",
    "batch_evidence",
    "best_configuration",
    "crossing",
    "doubling_fit",
    "lever_table",
    "run_results",
]

#: What identifies a run of a scaling study (``chapter20.capstone.scaling.ScalingPoint``).
POINT_FIELDS = ("dim", "init", "batch", "fraction", "budget", "seed")
#: The levers of the studies, as the columns that set them.
LEVERS = ("dim", "batch", "fraction")


def run_results(
    frame: pd.DataFrame, columns: Sequence[str] = ("mrr", "val_mrr", "recall@1", "recall@10")
) -> pd.DataFrame:
    """One row per encoder run of a study's ``frame``: the point's fields, ``best_step`` (the
    validation-chosen step), every figure at it (``columns`` and whatever else the chosen row
    holds) and each of ``columns`` untrained (``start_<column>``) and what training added
    (``added_<column>``)."""
    runs = frame[frame["method"] == "encoder"] if "method" in frame else frame
    if runs.empty:
        raise ValueError("frame holds no encoder runs")
    keys = [c for c in POINT_FIELDS if c in runs.columns]
    chosen = runs[runs["chosen"].astype(bool)].set_index(keys)
    start = runs[runs["step"] == 0].set_index(keys)
    out = chosen.rename(columns={"step": "best_step"}).copy()
    for column in columns:
        out[f"start_{column}"] = start[column]
        out[f"added_{column}"] = out[column] - out[f"start_{column}"]
    return out.reset_index()


def lever_table(results: pd.DataFrame, by: str | Sequence[str], column: str = "mrr"):
    """Per setting of ``by`` (a lever, or several columns) of :func:`run_results`: seeds,
    ``column`` at the chosen step (mean, std), the start's mean, what training added (mean ±
    std), the mean best step, and ``trained``: the chosen step beat the start by more than
    twice the larger standard deviation over the seeds."""
    by = [by] if isinstance(by, str) else list(by)
    rows = []
    for key, runs in results.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        pair = pd.concat([
            pd.DataFrame({"arm": "trained", column: runs[column].to_numpy()}),
            pd.DataFrame({"arm": "start", column: runs[f"start_{column}"].to_numpy()}),
        ])  # fmt: skip
        summary = summarize_seeds(pair, by="arm", columns=(column,))
        rows.append({
            **dict(zip(by, key)), "seeds": len(runs), f"{column}_mean": runs[column].mean(),
            f"{column}_std": runs[column].std(ddof=1), "start_mean": runs[f"start_{column}"].mean(),
            "added_mean": runs[f"added_{column}"].mean(),
            "added_std": runs[f"added_{column}"].std(ddof=1),
            "best_step": runs["best_step"].mean(),
            "trained": beyond_noise(summary, "trained", "start", by="arm", column=column),
        })  # fmt: skip
    return pd.DataFrame(rows)


def batch_evidence(results: pd.DataFrame, budget: str = "steps", column: str = "mrr") -> dict:
    """C01 from the batch study's runs at ``budget``: ``trained`` (every batch's runs beat their
    untrained start beyond the noise), ``saturation`` (the smallest batch that no larger batch
    beats beyond the noise, ``chapter20.capstone.evaluation.saturation_batch``; None when a
    batch did not train), the largest batch tried, and the table they come from."""
    runs = results[results["budget"] == budget]
    if runs.empty:
        raise ValueError(f"budget must be one of {sorted(set(results['budget']))}, got {budget!r}")
    frame = runs.assign(mode=budget)[["mode", "batch", "seed", column]]
    start = runs.assign(mode="untrained", batch=0)[["mode", "batch", "seed"]]
    start[column] = runs[f"start_{column}"].to_numpy()
    table = past_start(frame, start, budget, column)
    trained = bool(table["past_start"].all())
    return {
        "trained": trained,
        "saturation": saturation_batch(frame, budget, column) if trained else None,
        "largest": int(runs["batch"].max()),
        "table": table,
    }


def doubling_fit(points: pd.DataFrame, x: str = "documents_trained", y: str = "mrr") -> dict:
    """``y`` against log2 of ``x`` by least squares over every row of ``points`` (each seed a
    point): ``slope`` (the gain per doubling), its standard error ``slope_se``, the
    ``intercept`` at log2 x = 0 and the covariance of the two (for :func:`crossing`)."""
    if len(points) < 3:
        raise ValueError(f"a fit needs at least 3 points, got {len(points)}")
    design = np.column_stack([np.ones(len(points)), np.log2(points[x].to_numpy(float))])
    values = points[y].to_numpy(float)
    coef, *_ = np.linalg.lstsq(design, values, rcond=None)
    residual = values - design @ coef
    dof = max(len(values) - 2, 1)
    covariance = (residual @ residual / dof) * np.linalg.inv(design.T @ design)
    return {"intercept": float(coef[0]), "slope": float(coef[1]),
            "slope_se": float(np.sqrt(covariance[1, 1])), "covariance": covariance}  # fmt: skip


def crossing(behind: dict, ahead: dict, draws: int = 4_000, seed: int = 0) -> dict:
    """Whether the method ``behind`` (a :func:`doubling_fit`) closes its gap to the one
    ``ahead`` with more text, and where their lines would meet, in log2 of the documents: the
    gap closes only if ``behind`` gains more per doubling by more than twice the standard error
    of the difference (``closing``); the meeting point comes with a 90% interval from ``draws``
    samples of both fits' coefficients (normal, with their covariances). ``widening``: ``ahead``
    gains more by the same margin. An extrapolation, never a measurement."""
    draws = check_int("draws", draws, 1, 10_000_000)
    seed = check_int("seed", seed, 0)
    gap_slope = behind["slope"] - ahead["slope"]
    gap_se = float(np.hypot(behind["slope_se"], ahead["slope_se"]))
    out = {"slope_difference": gap_slope, "difference_se": gap_se, "closing": False,
           "widening": gap_slope < -2 * gap_se, "log2_documents": None, "low": None,
           "high": None}  # fmt: skip
    if gap_slope <= 2 * gap_se:
        return out
    rng = np.random.default_rng(seed)
    a = rng.multivariate_normal([behind["intercept"], behind["slope"]], behind["covariance"], draws)
    b = rng.multivariate_normal([ahead["intercept"], ahead["slope"]], ahead["covariance"], draws)
    sampled = (b[:, 0] - a[:, 0]) / (a[:, 1] - b[:, 1])
    low, high = np.quantile(sampled, [0.05, 0.95])
    estimate = (ahead["intercept"] - behind["intercept"]) / gap_slope
    return {**out, "closing": True, "log2_documents": float(estimate), "low": float(low),
            "high": float(high)}  # fmt: skip


def best_configuration(results: pd.DataFrame, by: Sequence[str] = ("dim", "init")) -> dict:
    """The setting of ``by`` whose runs have the highest mean validation MRR at their chosen
    step (choices are made on validation only), with that mean."""
    means = results.groupby(list(by))["val_mrr"].mean()
    key = means.idxmax()
    key = key if isinstance(key, tuple) else (key,)
    return {**dict(zip(by, key)), "val_mrr": float(means.max())}
