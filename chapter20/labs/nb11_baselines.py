"""Notebook 11 (§20.7): the baselines fitted on the same text, at their best, as a committed
record.

TF-IDF (its weighting chosen on the validation pairs), LSI (its size chosen there), Doc2Vec,
Lucene's BM25 (k1 and b chosen there) and gensim's BM25 at its defaults, each fitted on
``lee_background`` and on the encoder's training text and scored on Lee and on the held-out
pairs (``chapter20.capstone.baselines``), take about a minute on two cores. ``chapter20 bench
baselines`` measures them all (3 seeds: Doc2Vec is drawn per seed, the others are repeated)
with every choice study and writes :data:`BASELINES_FILE`; the notebook reads it with
:func:`recorded_baselines` and fits one cheap baseline again with :func:`replay_baseline`.
``CHAPTER20_SCALE`` >= 2 measures everything live (:func:`baseline_study`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import pandas as pd

from chapter20.capstone.baselines import (
    CHOICE_STUDIES,
    CORPORA,
    baseline_table,
    chosen_settings,
    corpus_documents,
)
from chapter20.capstone.evaluation import heldout_sentence_pairs
from chapter20.core.checks import check_int
from chapter20.core.study_record import PROVENANCE, study_output, write_study

__all__ = [
    "BASELINES_FILE",
    "BASELINE_SEEDS",
    "baseline_study",
    "baselines_benchmark",
    "choice_lines",
    "recorded_baselines",
    "replay_baseline",
    "split_study",
]

#: The committed record of :func:`baselines_benchmark` (``data/``).
BASELINES_FILE = "capstone_baselines.csv"
#: The seeds of the record: Doc2Vec is fitted once per seed.
BASELINE_SEEDS = (0, 1, 2)
_CHOICE, _TABLE = "choice", "baselines"
#: Each tuned method's setting columns in its choice study.
_SETTING_COLUMNS = {"lsi": ("topics",), "tfidf": ("scheme",), "bm25": ("k1", "b")}


def baseline_study(seeds: Sequence[int] = BASELINE_SEEDS, corpora: Sequence[str] = CORPORA):
    """Every choice study on each corpus (validation pairs: LSI's size, TF-IDF's weighting,
    BM25's k1 and b) and the baseline table on the test pairs with the chosen settings, for
    ``seeds``, as one frame: ``study`` is ``"choice"`` (one row per method, corpus and setting)
    or ``"baselines"`` (one row per method, corpus and seed; ``settings`` a dict). Every figure
    is a count or a score, none a time."""
    seeds = [check_int("seeds", s, 0, 2**32 - 1) for s in seeds]
    chosen, frames = {}, []
    for corpus in corpora:
        documents = corpus_documents(corpus)
        for method, (run, _) in CHOICE_STUDIES.items():
            study = run(documents)
            chosen[(method, corpus)] = chosen_settings(method, documents, study)
            frames.append(study.assign(study=_CHOICE, method=method, corpus=corpus))
    table = baseline_table(corpora, seeds=seeds, retrieval=heldout_sentence_pairs(None),
                           settings=chosen)  # fmt: skip
    frames.append(table.drop(columns="seconds").assign(study=_TABLE))
    return pd.concat(frames, ignore_index=True)


def split_study(frame: pd.DataFrame) -> tuple[dict[tuple[str, str], pd.DataFrame], pd.DataFrame]:
    """:func:`baseline_study`'s frame (or its record) as the notebook reads it: each choice
    study by (method, corpus) (its settings, recall@1, recall@10, MRR, ``chosen``) and the
    baseline table (``settings`` as dicts), without the provenance columns."""
    frame = frame.drop(columns=[c for c in PROVENANCE if c in frame.columns])
    studies = {}
    for (method, corpus), rows in frame[frame["study"] == _CHOICE].groupby(
        ["method", "corpus"], sort=False
    ):
        columns = [*_SETTING_COLUMNS[method], "recall@1", "recall@10", "mrr", "chosen"]
        studies[(method, corpus)] = rows[columns].astype({"chosen": bool}).reset_index(drop=True)
    setting_columns = {c for cs in _SETTING_COLUMNS.values() for c in cs}
    table = frame[frame["study"] == _TABLE].drop(
        columns=["study", "chosen", *setting_columns], errors="ignore"
    )
    settings = [s if isinstance(s, dict) else ast.literal_eval(str(s)) for s in table["settings"]]
    table = table.assign(settings=settings, seed=table["seed"].astype(int))
    return studies, table.reset_index(drop=True)


def recorded_baselines(frame: pd.DataFrame, seed: int = 0):
    """The record's size studies and the baseline table of one ``seed`` (the notebook shows one
    seed; the record holds :data:`BASELINE_SEEDS`)."""
    studies, table = split_study(frame)
    return studies, table[table["seed"] == check_int("seed", seed, 0)].reset_index(drop=True)


def choice_lines(studies: dict[tuple[str, str], pd.DataFrame]) -> list[str]:
    """One line per choice study: the setting chosen on the validation pairs, and whether a
    setting sits at the edge of its grid, where a value beyond the grid may score higher."""
    lines = []
    for (method, corpus), study in studies.items():
        chosen = study.loc[study["chosen"]].iloc[0]
        parts, edges = [], []
        for column in _SETTING_COLUMNS[method]:
            value = chosen[column]
            parts.append(
                f"{column} {value:g}" if isinstance(value, (int, float)) else f"{column} {value}"
            )
            values = study[column]
            if values.dtype.kind in "if" and chosen[column] in (values.min(), values.max()):
                edges.append(column)
        where = f"at the grid's edge in {', '.join(edges)}" if edges else "inside the grid"
        lines.append(f"{method} on {corpus}: {', '.join(parts)} chosen, {where}")
    return lines


def replay_baseline(
    table: pd.DataFrame, method: str = "bm25", corpus: str = "lee_background", seed: int = 0
):
    """One baseline of the record fitted and scored again now: the record's row of
    (``method``, ``corpus``, ``seed``) and this run's row, for a check that the record is what
    this code computes (§20.7)."""
    rows = table[(table["method"] == method) & (table["corpus"] == corpus)
                 & (table["seed"] == seed)]  # fmt: skip
    if len(rows) != 1:
        raise ValueError(f"the record has no single row for {method!r} on {corpus!r}, seed {seed}")
    row = rows.iloc[0]
    live = baseline_table((corpus,), (method,), seeds=(seed,),
                          settings={(method, corpus): row["settings"]})  # fmt: skip
    return row, live.iloc[0]


def baselines_benchmark(seeds: tuple[int, ...] = BASELINE_SEEDS, out: str = ""):
    """``chapter20 bench baselines``: :func:`baseline_study`, printed; with ``out`` written as
    ``data/capstone_baselines.csv`` reads."""
    frame = baseline_study(seeds)
    shown = ["study", "corpus", "method", "seed", "recall@1", "mrr", "lee_pearson"]
    print(frame[shown].round(4).to_string(index=False))
    if study_output(out):
        command = f"chapter20 bench baselines --seeds {','.join(map(str, seeds))}"
        print("written:", write_study(frame, study_output(out), command))
