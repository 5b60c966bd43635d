"""Notebook 11, section 3 (§20.7): the baselines fitted on the same text, as a committed record.

TF-IDF, LSI (its size chosen on the validation pairs), Doc2Vec and BM25, each fitted on
``lee_background`` and on the encoder's training text and scored on Lee and on the held-out
pairs (``chapter20.capstone.baselines``), take about half a minute on two cores. ``chapter20
bench baselines`` measures them all (3 seeds: Doc2Vec is drawn per seed, the others are repeated)
with LSI's size study and writes :data:`BASELINES_FILE`; the notebook reads it with
:func:`recorded_baselines` and fits one cheap baseline again with :func:`replay_baseline`.
``CHAPTER20_SCALE`` >= 2 measures everything live (:func:`baseline_study`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import pandas as pd

from chapter20.capstone.baselines import (
    CORPORA,
    baseline_table,
    chosen_lsi_topics,
    corpus_documents,
    lsi_size_study,
)
from chapter20.capstone.evaluation import heldout_sentence_pairs
from chapter20.core.checks import check_int
from chapter20.core.study_record import PROVENANCE, study_output, write_study

__all__ = [
    "lsi_choice_lines",
    "BASELINES_FILE",
    "BASELINE_SEEDS",
    "baseline_study",
    "baselines_benchmark",
    "recorded_baselines",
    "replay_baseline",
    "split_study",
]

#: The committed record of :func:`baselines_benchmark` (``data/``).
BASELINES_FILE = "capstone_baselines.csv"
#: The seeds of the record: Doc2Vec is fitted once per seed.
BASELINE_SEEDS = (0, 1, 2)
_LSI, _TABLE = "lsi size", "baselines"


def baseline_study(seeds: Sequence[int] = BASELINE_SEEDS, corpora: Sequence[str] = CORPORA):
    """LSI's size study on each corpus (validation pairs) and the baseline table on the test
    pairs with the chosen sizes, for ``seeds``, as one frame: ``study`` is ``"lsi size"`` (one row
    per corpus and size) or ``"baselines"`` (one row per method, corpus and seed; ``settings`` a
    dict). Every figure is a count or a score, none a time."""
    seeds = [check_int("seeds", s, 0, 2**32 - 1) for s in seeds]
    sizes, frames = {}, []
    for corpus in corpora:
        study = lsi_size_study(corpus_documents(corpus))
        sizes[corpus] = chosen_lsi_topics(study)
        frames.append(study.assign(study=_LSI, corpus=corpus))
    table = baseline_table(corpora, seeds=seeds, retrieval=heldout_sentence_pairs(None),
                           lsi_topics=sizes)  # fmt: skip
    frames.append(table.drop(columns="seconds").assign(study=_TABLE))
    return pd.concat(frames, ignore_index=True)


def split_study(frame: pd.DataFrame) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """:func:`baseline_study`'s frame (or its record) as the notebook reads it: LSI's size
    study per corpus (``topics``, recall@1, recall@10, MRR, ``chosen``) and the baseline table
    (``settings`` as dicts), without the provenance columns."""
    frame = frame.drop(columns=[c for c in PROVENANCE if c in frame.columns])
    lsi = frame[frame["study"] == _LSI]
    studies = {
        corpus: rows[["topics", "recall@1", "recall@10", "mrr", "chosen"]]
        .astype({"topics": int, "chosen": bool})
        .reset_index(drop=True)
        for corpus, rows in lsi.groupby("corpus", sort=False)
    }
    table = frame[frame["study"] == _TABLE].drop(columns=["study", "topics", "chosen"])
    settings = [s if isinstance(s, dict) else ast.literal_eval(str(s)) for s in table["settings"]]
    table = table.assign(settings=settings, seed=table["seed"].astype(int))
    return studies, table.reset_index(drop=True)


def recorded_baselines(frame: pd.DataFrame, seed: int = 0):
    """The record's size studies and the baseline table of one ``seed`` (the notebook shows one
    seed; the record holds :data:`BASELINE_SEEDS`)."""
    studies, table = split_study(frame)
    return studies, table[table["seed"] == check_int("seed", seed, 0)].reset_index(drop=True)


def lsi_choice_lines(studies: dict[str, pd.DataFrame]) -> list[str]:
    """One line per LSI size study: the size chosen on the validation pairs, and whether it is
    an interior optimum or the grid's edge, where a size beyond the grid may score higher."""
    lines = []
    for corpus, study in studies.items():
        chosen, largest = int(study.loc[study["chosen"], "topics"].iloc[0]), study["topics"].max()
        where = (
            "the largest size tried: the grid's edge, so a larger size may score higher"
            if chosen == largest
            else f"inside the grid, which goes up to {int(largest):,}"
        )
        lines.append(f"LSI on {corpus}: {chosen:,} topics chosen, {where}")
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
    topics = {corpus: int(row["settings"]["topics"])} if method == "lsi" else None
    live = baseline_table((corpus,), (method,), seeds=(seed,), lsi_topics=topics)
    return row, live.iloc[0]


def baselines_benchmark(seeds: tuple[int, ...] = BASELINE_SEEDS, out: str = ""):
    """``chapter20 bench baselines``: :func:`baseline_study`, printed; with ``out`` written as
    ``data/capstone_baselines.csv`` reads."""
    frame = baseline_study(seeds)
    shown = ["study", "corpus", "topics", "method", "seed", "recall@1", "mrr", "lee_pearson"]
    print(frame[shown].round(4).to_string(index=False))
    if study_output(out):
        command = f"chapter20 bench baselines --seeds {','.join(map(str, seeds))}"
        print("written:", write_study(frame, study_output(out), command))
