"""Tests of chapter20.labs.nb11_capstone (notebook 11's tables and figures)."""

import pandas as pd
import pytest

from chapter20.core.claims import HOLDS, NEEDS_GPU, NOT_YET_MEASURED, audit, load_claims
from chapter20.labs import nb11_capstone as capstone_lab


def test_every_takeaway_claim_exists_and_none_is_repeated():
    ids = [c for _, claims in capstone_lab.TAKEAWAYS for c in claims]
    assert len(ids) == len(set(ids))
    assert set(ids) <= set(load_claims())


def test_takeaways_read_the_audit_not_retyped_text(tmp_path):
    frame = audit(tmp_path)  # nothing recorded: every claim "not yet measured"
    frame.loc[frame["id"] == "C05", "verdict"] = HOLDS
    frame.loc[frame["id"] == "C10", "verdict"] = NEEDS_GPU
    table = capstone_lab.takeaways_table(frame)
    assert len(table) == len(capstone_lab.TAKEAWAYS)
    first = table.iloc[0]["verdicts"]
    assert first == f"C01: {NOT_YET_MEASURED}; C05: {HOLDS}"
    assert table.iloc[2]["verdicts"] == f"C10: {NEEDS_GPU}"


def test_verdicts_by_section_counts_every_claim(tmp_path):
    frame = audit(tmp_path)
    table = capstone_lab.verdicts_by_section(frame)
    assert table.to_numpy().sum() == 30
    assert table[NOT_YET_MEASURED].sum() == 30
    assert list(table.index)[0] == "overview"
    capstone_lab.plot_verdicts_by_section(table)


def test_quality_table_means_and_reference_row():
    runs = pd.DataFrame({"method": ["encoder"] * 3 + ["tfidf"] * 3,
                         "seed": [0, 1, 2] * 2,
                         "lee_pearson": [0.6, 0.62, 0.64, 0.55, 0.55, 0.55]})  # fmt: skip
    table = capstone_lab.quality_table(runs)
    assert table["method"].tolist() == ["encoder", "tfidf", "inter-rater agreement"]
    assert table["mean"].tolist() == pytest.approx([0.62, 0.55, 0.6])
    assert table["std"].tolist()[:2] == pytest.approx([0.02, 0.0])
    capstone_lab.plot_quality(table)


def test_committed_recipe_study_reads_and_is_relative_to_the_final_recipe():
    table = capstone_lab.recipe_study_table()
    assert table.loc[table["variant"] == "final recipe", "vs final"].item() == 0
    from chapter20.capstone.recipe import RECIPE_STUDY

    assert set(table["variant"]) <= set(RECIPE_STUDY)
