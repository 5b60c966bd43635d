"""Tests of chapter20.core.seed_statistics: mean ± standard deviation over seeds, the stated
rules of a quality comparison, and the one spread of repeated timings (median, min–max)."""

import numpy as np
import pandas as pd
import pytest

from chapter20.core.seed_statistics import (
    beyond_noise,
    median_and_range,
    range_text,
    summarize_seeds,
    timing_spread_ms,
    versus_reference,
)


def test_summarize_seeds():
    frame = pd.DataFrame(
        {"method": ["a", "a", "b", "b"], "pearson": [0.1, 0.3, 0.5, 0.5], "spearman": [0] * 4}
    )
    out = summarize_seeds(frame)
    assert list(out["method"]) == ["a", "b"]
    assert out["pearson_mean"].tolist() == pytest.approx([0.2, 0.5])
    assert out["pearson_std"].tolist() == pytest.approx([np.std([0.1, 0.3], ddof=1), 0.0])


def test_versus_reference_and_beyond_noise_compute_the_stated_rules():
    frame = pd.DataFrame({"m": ["ref", "x", "y"] * 2, "r": [0.10, 0.095, 0.20, 0.12, 0.105, 0.22]})
    table = versus_reference(frame, by="m", reference="ref", column="r", chance=0.01)
    rows = table.set_index("m")
    assert list(table["m"]) == ["ref", "x", "y"] and (table["seeds"] == 2).all()
    assert rows.loc["ref", "gap"] == 0.0
    assert rows.loc["x", "gap"] == pytest.approx((0.10 - 0.11) / 0.11)
    assert rows.loc["x", "weakest_vs_chance"] == pytest.approx(9.5)
    assert rows.loc["y", "r_std"] == pytest.approx(np.std([0.20, 0.22], ddof=1))
    assert beyond_noise(table, "y", "ref", by="m", column="r")
    assert not beyond_noise(table, "ref", "x", by="m", column="r")  # within noise
    with pytest.raises(ValueError, match="reference"):
        versus_reference(frame, by="m", reference="z", column="r", chance=0.01)
    with pytest.raises(ValueError, match="chance"):
        versus_reference(frame, by="m", reference="ref", column="r", chance=0.0)
    with pytest.raises(ValueError, match="worse"):
        beyond_noise(table, "y", "z", by="m", column="r")


def test_timing_spread_is_the_median_and_the_range_of_the_repeats_in_ms():
    spread = timing_spread_ms([0.003, 0.001, 0.010])
    assert spread == pytest.approx({"ms": 3.0, "min_ms": 1.0, "max_ms": 10.0, "range_ms": 9.0})
    assert median_and_range([4.0, 1.0, 2.0, 3.0]) == (2.5, 1.0, 4.0)  # an even count: midpoint
    assert median_and_range([7.0]) == (7.0, 7.0, 7.0)
    with pytest.raises(ValueError, match="at least one"):
        timing_spread_ms([])
    with pytest.raises(ValueError, match="NaN"):
        median_and_range([1.0, float("nan")])


def test_range_text_prints_each_low_high_pair():
    assert range_text([1.0, 0.25], [2.5, 0.5]) == ["1.0–2.5", "0.2–0.5"]
    assert range_text([1.0], [2.0], 3) == ["1.000–2.000"]
    with pytest.raises(ValueError, match="one length"):
        range_text([1.0], [2.0, 3.0])
    with pytest.raises(ValueError, match="decimals"):
        range_text([1.0], [2.0], -1)
