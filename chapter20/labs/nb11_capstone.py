"""§20.6–§20.8 Putting it together: the synthesis tables and figures of notebook 11.

- §20.6's key takeaways, each next to the verdicts that the notebooks measured for the claims
  behind it (read from the claims audit, never retyped): :func:`takeaways_table`, and where
  the audit's rows come from (:func:`audit_sources`);
- the audit of all 30 claims, one row per claim in the chapter's section order
  (:func:`audit_table`), and per section: :func:`verdicts_by_section`,
  :func:`plot_verdicts_by_section`;
- the encoder next to the baselines fitted on the same text, on every §20.7 figure:
  :func:`quality_table`, :func:`plot_quality`, and the goal judged against the seed noise
  (:func:`goal_lines`);
- the composed run in a temporary directory (:func:`composed_run`) and the encoder file's
  round trip (:func:`saved_and_loaded_difference`), named by the step it kept
  (:func:`composed_run_label`);
- §20.8's further reading and this notebook's own references (:func:`reading_list`).

The scaling studies are ``labs.nb11_scaling``, the recipe search ``labs.nb11_recipe``, the
ablation ``labs.nb11_ablation``.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from chapter20.capstone.baselines import baseline_name
from chapter20.capstone.capstone_config import CAPSTONE_COMPOSED, CapstoneConfig
from chapter20.capstone.evaluation import LEE_INTER_RATER
from chapter20.capstone.run import run_capstone
from chapter20.core.claim_criteria import section_order
from chapter20.core.claims import NOT_YET_MEASURED, VERDICTS, audit, verdict_with_direction
from chapter20.core.paths import data_file
from chapter20.core.plotting import new_figure, new_panels
from chapter20.core.seed_statistics import beyond_noise, summarize_seeds
from chapter20.training.config import TrainConfig
from chapter20.training.driver import FinishedRun
from chapter20.training.encoder_file import load_encoder

__all__ = [
    "FIGURES",
    "READING_FILE",
    "READING_LISTS",
    "TAKEAWAYS_FILE",
    "audit_sources",
    "audit_sources_line",
    "audit_table",
    "composed_run",
    "composed_run_label",
    "composed_training",
    "goal_lines",
    "method_rows",
    "plot_quality",
    "plot_verdicts_by_section",
    "quality_table",
    "reading_list",
    "saved_and_loaded_difference",
    "takeaways",
    "takeaways_table",
    "verdicts_by_section",
]

#: §20.6's key takeaways in our words, each with the claims (C01–C30) that measure it
#: (``data/``: ``takeaway``, ``claims`` separated by spaces).
TAKEAWAYS_FILE = "chapter_takeaways.csv"
#: §20.8's further reading, its 13 entries in the chapter's order (``list`` "further reading";
#: authors, venue and arXiv id as the papers give them), and this notebook's own references
#: (``list`` "methods"): ``topic``, ``reference``, ``adds`` (what it adds, and where the
#: notebooks use it). ``data/``.
READING_FILE = "reading_lists.csv"
READING_LISTS = ("further reading", "methods")


def _text_table(name: str) -> pd.DataFrame:
    return pd.read_csv(data_file(name), dtype=str, keep_default_na=False)


def takeaways() -> list[tuple[str, tuple[str, ...]]]:
    """§20.6's key takeaways, each with the ids of the claims that measure it
    (:data:`TAKEAWAYS_FILE`)."""
    return [(text, tuple(claims.split())) for text, claims in
            _text_table(TAKEAWAYS_FILE).itertuples(index=False, name=None)]  # fmt: skip


def reading_list(name: str) -> list[tuple[str, str, str]]:
    """One of :data:`READING_LISTS` as (topic, reference, what it adds), in its order
    (:data:`READING_FILE`)."""
    if name not in READING_LISTS:
        raise ValueError(f"name must be one of {READING_LISTS}, got {name!r}")
    rows = _text_table(READING_FILE)
    return list(rows.loc[rows["list"] == name, ["topic", "reference", "adds"]]
                .itertuples(index=False, name=None))  # fmt: skip


#: The §20.7 figures of :func:`quality_table`, with their display names.
FIGURES = {
    "lee_pearson": "Lee r",
    "recall@1": "R@1",
    "recall@10": "R@10",
    "mrr": "MRR",
    "ndcg@10": "NDCG@10",
    "alignment": "align",
    "uniformity": "unif",
    "mean_cosine": "mean cos",
}


def takeaways_table(frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per takeaway of :func:`takeaways` with each of its claims' verdicts as
    ``"C05: holds"`` (the audit's verdict per claim)."""
    frame = audit() if frame is None else frame
    verdicts = frame.groupby("id", sort=False)["verdict"].agg(
        lambda v: " / ".join(dict.fromkeys(v))
    )
    rows = []
    for takeaway, claims in takeaways():
        rows.append(
            {
                "takeaway (§20.6)": takeaway,
                "verdicts": "; ".join(f"{c}: {verdicts.get(c, NOT_YET_MEASURED)}" for c in claims),
            }
        )
    return pd.DataFrame(rows)


def audit_sources(frame: pd.DataFrame) -> pd.Series:
    """How many of the audit's claims come from each source (its ``shown`` column): "this run",
    the committed record ("recorded <date> on <machine>"), or none yet."""
    shown = frame["shown"].replace("", "not yet measured (no run, no record)")
    return shown.value_counts(sort=False).rename("claims")


def audit_sources_line(frame: pd.DataFrame) -> str:
    """:func:`audit_sources` in one line, for the reader: how many verdicts come from this run
    of the notebooks and how many from the record (with its date and machine)."""
    counts = audit_sources(frame)
    return "verdicts: " + "; ".join(
        f"{n} {'from ' if source == 'this run' else ''}{source}" for source, n in counts.items()
    )


def _in_chapter_order(frame: pd.DataFrame) -> pd.DataFrame:
    keys = [(section_order(s), i) for s, i in zip(frame["section"], frame["id"])]
    return frame.iloc[sorted(range(len(frame)), key=keys.__getitem__)]


def audit_table(frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """The audit (``chapter20.core.claims.audit``) as a table to display, one row per claim in
    the chapter's section order (``core.claim_criteria.section_order``), then by id: the
    claim's words in full, its verdict with the direction of a miss, what was claimed and
    measured, and the notebook that judged it."""
    rows = _in_chapter_order(audit() if frame is None else frame)
    verdicts = list(map(verdict_with_direction, rows["verdict"], rows["direction"].fillna("")))
    return pd.DataFrame(
        {
            "§": rows["section"].to_numpy(),
            "claim": rows["claim"].to_numpy(),
            "verdict": verdicts,
            "claimed": rows["expected"].to_numpy(),
            "measured": rows["measured"].to_numpy(),
            "notebook": [s[:2] if s else "—" for s in rows["source"]],
        },
        index=pd.Index(rows["id"].to_numpy(), name="id"),
    )


def verdicts_by_section(frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """Claims per section and verdict (sections in the chapter's order, ``section_order``;
    "not yet measured" where neither this run nor the committed record has the owner's
    verdict)."""
    frame = audit() if frame is None else frame
    columns = [*VERDICTS, NOT_YET_MEASURED]
    table = pd.crosstab(frame["section"], frame["verdict"]).reindex(columns=columns, fill_value=0)
    return table.loc[sorted(set(frame["section"]), key=section_order)]


def plot_verdicts_by_section(table: pd.DataFrame):
    """Horizontal stacked bars: claims per section by verdict (sections read top to bottom in
    the chapter's order, so no label runs into another)."""
    fig, ax = new_figure("The chapter's 30 claims, audited", "claims", "section", figsize=(8, 5))
    left = pd.Series(0, index=table.index)
    for verdict in table.columns:
        if table[verdict].any():
            ax.barh(table.index, table[verdict], left=left, label=verdict)
            left = left + table[verdict]
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def method_rows(baselines: pd.DataFrame, encoders: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The rows :func:`quality_table` and :func:`plot_quality` read: each encoder frame of
    ``encoders`` (one row per seed) under its name, then each baseline of ``baselines`` (as
    ``chapter20.capstone.baselines.baseline_table`` returns them) under its name and corpus,
    e.g. ``"LSI-800 (training text)"``."""
    frames = [frame.assign(method=name) for name, frame in encoders.items()]
    named = baselines.assign(method=[
        f"{baseline_name(m, s)} ({c})"
        for m, s, c in zip(baselines["method"], baselines["settings"], baselines["corpus"])
    ])  # fmt: skip
    return pd.concat([*frames, named], ignore_index=True)


def _figure(values: pd.Series) -> str:
    mean = values.mean()
    return f"{mean:.3f}" + (f" ± {values.std(ddof=1):.3f}" if len(values) > 1 else "")


def goal_lines(encoder: pd.DataFrame, name: str, baselines: pd.DataFrame) -> list[str]:
    """Section 3's goal, judged: the encoder (``encoder``: one row per seed, called ``name``)
    against the tuned BM25 of its own training text on held-out MRR, and against the LSI of
    ``baselines`` with the highest Lee r (the strongest LSI, whichever corpus) on Lee r. Each
    line says which is higher and whether by more than the seed noise, twice the larger
    standard deviation over seeds (``core.seed_statistics.beyond_noise``; a baseline that
    draws nothing, or has one row, has a standard deviation of 0)."""
    bm25 = baselines[(baselines["method"] == "bm25") & (baselines["corpus"] == "training text")]
    lsi = baselines[baselines["method"] == "lsi"]
    if bm25.empty or lsi.empty:
        raise ValueError("baselines must hold the tuned BM25 of the training text and an LSI")
    lsi = lsi[lsi["lee_pearson"] == lsi["lee_pearson"].max()]
    lines = []
    for column, label, rows in (("mrr", "held-out MRR", bm25), ("lee_pearson", "Lee r", lsi)):
        first = rows.iloc[0]
        other = f"{baseline_name(first['method'], first['settings'])} ({first['corpus']})"
        both = pd.concat([encoder.assign(who=name), rows.assign(who=other)], ignore_index=True)
        summary = summarize_seeds(both, by="who", columns=(column,)).set_index("who")
        means = summary[f"{column}_mean"]
        higher, lower = (name, other) if means[name] >= means[other] else (other, name)
        beyond = beyond_noise(summary.reset_index(), higher, lower, by="who", column=column)
        noise = 2 * summary[f"{column}_std"].max()
        figures = {who: _figure(both.loc[both["who"] == who, column]) for who in (name, other)}
        lines.append(
            f"{label}: {higher}, {figures[higher]}, is higher than {lower}, {figures[lower]}: "
            f"{'beyond' if beyond else 'within'} the seed noise (twice the larger seed SD, "
            f"{noise:.3f})"
        )
    return lines


def composed_run_label(summary: dict) -> str:
    """The quality table's name for a run of :func:`composed_run`: its steps and the step whose
    weights early stopping kept (``"kept its start"`` when that is step 0, so the row is read
    as the untrained encoder it is)."""
    best = (summary.get("early_stopping") or {}).get("best_step")
    kept = (
        "its last step" if best is None else "kept its start" if best == 0 else f"kept step {best}"
    )
    return f"encoder, composed run, {summary['steps']} steps ({kept})"


def quality_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std over seeds of every §20.7 figure per method (``rows``: one per method and
    seed, with the columns of :data:`FIGURES`), as text cells (``"0.584 ± 0.003"``, ``"—"``
    where a figure is not defined, e.g. BM25's Lee score), methods in first-seen order."""
    groups = rows.groupby("method", sort=False)
    table = pd.DataFrame({"seeds": groups.size()})
    for column, name in FIGURES.items():
        mean, std = groups[column].mean(), groups[column].std(ddof=1).fillna(0.0)
        table[name] = [
            "—" if not np.isfinite(m) else f"{m:.3f}" + (f" ± {s:.3f}" if n > 1 else "")
            for m, s, n in zip(mean, std, table["seeds"])
        ]
    return table


def plot_quality(rows: pd.DataFrame):
    """Two panels, one bar per method (mean ± std over seeds): Lee Pearson with the
    inter-rater line, and held-out MRR with its chance level."""
    fig, axes = new_panels(
        2, "The encoder next to the baselines (same text and lee_background)", figsize=(13, 4.5)
    )
    groups = rows.groupby("method", sort=False)
    names = list(groups.groups)
    y = np.arange(len(names))
    for ax, column, label in (
        (axes[0], "lee_pearson", "Lee Pearson r"),
        (axes[1], "mrr", "held-out MRR"),
    ):
        mean = groups[column].mean().reindex(names)
        std = groups[column].std(ddof=1).reindex(names).fillna(0.0)
        ax.barh(y, mean.fillna(0.0), xerr=std, capsize=3, color="tab:blue")
        ax.set_yticks(y, names if ax is axes[0] else [""] * len(names))
        ax.invert_yaxis()
        ax.set_xlabel(label)
    axes[0].axvline(LEE_INTER_RATER, color="grey", linestyle="--", label="inter-rater agreement")
    axes[1].axvline(float(rows["chance_mrr"].iloc[0]), color="grey", linestyle=":", label="chance")
    for ax in axes:
        ax.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, fontsize=8
        )  # off the bars
    return fig


def saved_and_loaded_difference(setup, texts: list[str]) -> float:
    """Largest absolute difference between the vectors of ``setup``'s encoder and those of the
    same encoder written to a file and read back by
    ``chapter20.training.encoder_file.load_encoder`` (§20.6: the file needs no training state)."""
    with tempfile.TemporaryDirectory(prefix="chapter20-encoder-") as tmp:
        loaded = load_encoder(setup.save(Path(tmp) / "encoder.pt"))
        return float((loaded.encode(texts) - setup.text_encoder().encode(texts)).abs().max())


def composed_training(**fields) -> TrainConfig:
    """``chapter20.capstone.capstone_config.CAPSTONE_COMPOSED`` (every memory technique on) with
    ``fields`` changed (e.g. ``chunk_size``, the documents per chunk of gradient caching;
    ``warmup_steps``; ``base_batch``, the batch of its rate) (§20.6)."""
    return replace(CAPSTONE_COMPOSED, **fields)


def composed_run(steps: int = 100, eval_every: int = 50, **fields) -> tuple[dict, list[str]]:
    """``chapter20.capstone.run.run_capstone`` of ``CapstoneConfig(steps=..., eval_every=...,
    **fields)`` in a temporary directory that is removed afterwards (notebook 11, §20.6): the
    summary and the lines it printed before training (plan, cost projection, set-up)."""
    printed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="chapter20-run-") as tmp:
        config = CapstoneConfig(
            output_dir=tmp, steps=steps, eval_every=eval_every, progress=False, **fields
        )
        result = run_capstone(config, log=printed.append)
    if not isinstance(result, FinishedRun):
        raise ValueError(f"the run must train to its last step, got {result}")
    gone = ("encoder_file",)  # removed with the directory
    return {k: v for k, v in result.summary.items() if k not in gone}, printed
