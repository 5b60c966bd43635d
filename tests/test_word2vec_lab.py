"""Tests for chapter20.labs.nb09_word2vec (note, topic 1): the quality table of notebook 09."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from chapter20.labs.nb09_word2vec import CHANCE_SDS, MATCH_TOLERANCE, quality_verdicts, summarize


def _runs() -> pd.DataFrame:
    rows = []
    for trainer, wordsim, simlex in (
        ("ours negative", (0.20, 0.22, 0.24), (0.10, 0.11, 0.12)),
        ("gensim negative", (0.21, 0.21, 0.21), (0.19, 0.19, 0.19)),
        ("ours hierarchical", (0.40, 0.40, 0.40), (0.20, 0.20, 0.20)),
    ):
        for seed, (ws, sl) in enumerate(zip(wordsim, simlex)):
            rows.append({
                "trainer": trainer, "device": "cpu", "seed": seed, "epochs": 5,
                "wordsim353": ws, "simlex999": sl, "wordsim_oov_%": 25.0, "simlex_oov_%": 45.0,
                "wordsim_scored": 101, "simlex_scored": 401, "words_per_second": 1e5,
                "seconds": 1.0,
            })  # fmt: skip
    return pd.DataFrame(rows)


def test_summarize_gives_mean_std_and_chance_per_set():
    summary = summarize(_runs())
    row = summary.loc["ours negative"]
    assert row.seeds == 3
    assert row.wordsim353 == pytest.approx(0.22) and row.wordsim_std == pytest.approx(0.02)
    assert row.simlex999 == pytest.approx(0.11) and row.simlex_std == pytest.approx(0.01)
    # Spearman's null: standard deviation 1 / sqrt(m - 1) over m scored pairs
    assert row.wordsim_chance_sd == pytest.approx(0.1)
    assert row.simlex_chance_sd == pytest.approx(0.05)
    assert list(summary.index) == ["ours negative", "gensim negative", "ours hierarchical"]


def test_quality_verdicts_apply_the_stated_thresholds():
    verdicts = quality_verdicts(summarize(_runs()))
    assert CHANCE_SDS == 3 and MATCH_TOLERANCE == 0.05
    ours = verdicts.loc["ours negative"]
    assert ours.wordsim == "0.220 ± 0.020"
    assert not ours.wordsim_above_chance  # 0.22 < 3 × 0.1
    assert not ours.simlex_above_chance  # 0.11 < 3 × 0.05
    assert ours.largest_gap_to_gensim == pytest.approx(0.08)  # SimLex: 0.19 - 0.11
    assert not ours.matches_gensim
    gensim = verdicts.loc["gensim negative"]
    assert gensim.simlex_above_chance and math.isnan(gensim.largest_gap_to_gensim)
    # no gensim hierarchical run: nothing to compare with
    assert math.isnan(verdicts.loc["ours hierarchical"].largest_gap_to_gensim)
    assert verdicts.loc["ours hierarchical"].wordsim_above_chance
