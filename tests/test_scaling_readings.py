"""Tests of chapter20.capstone.scaling_readings (§20.6): a study's runs are read at their
validation-chosen step beside their start, a lever's effect is judged against the seed noise,
and the doubling fit and its crossing are the least-squares line and where two lines meet."""

import numpy as np
import pandas as pd
import pytest

from chapter20.capstone import scaling_readings as readings


def _study(values: dict[int, tuple[float, float]], start: float = 0.05) -> pd.DataFrame:
    """Evaluation rows of runs at widths ``values`` (width → (chosen mrr, val_mrr)), 3 seeds:
    each run has its start (step 0), a chosen step 100 and a later step 200."""
    rows = []
    for dim, (mrr, val) in values.items():
        for seed, noise in enumerate((-0.001, 0.0, 0.001)):
            point = {"method": "encoder", "dim": dim, "init": "random", "batch": 512,
                     "fraction": 1.0, "budget": "steps", "seed": seed}  # fmt: skip
            for step, m, v, chosen in ((0, start, start, False), (100, mrr, val, True),
                                       (200, mrr - 0.01, val - 0.01, False)):  # fmt: skip
                rows.append({**point, "step": step, "mrr": m + noise, "val_mrr": v + noise,
                             "recall@1": m, "recall@10": m, "chosen": chosen})  # fmt: skip
    return pd.DataFrame(rows + [{"method": "lsi", "dim": 128, "mrr": 0.2}])


def test_a_run_is_read_at_its_chosen_step_beside_its_start():
    results = readings.run_results(_study({128: (0.08, 0.09)}))
    assert len(results) == 3 and (results["best_step"] == 100).all()
    assert results["added_mrr"].to_numpy() == pytest.approx([0.03, 0.03, 0.03])
    assert results["start_val_mrr"].iloc[1] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="no encoder runs"):
        readings.run_results(pd.DataFrame({"method": ["lsi"]}))


def test_a_lever_counts_as_trained_only_beyond_twice_the_seed_spread():
    results = readings.run_results(_study({128: (0.0515, 0.06), 1024: (0.09, 0.1)}))
    table = readings.lever_table(results, "dim").set_index("dim")
    # 0.0515 vs 0.05, both with a std of 0.001: 0.0015 < 2 × 0.001 → not trained
    assert not table.loc[128, "trained"] and table.loc[1024, "trained"]
    assert table.loc[1024, "added_mean"] == pytest.approx(0.04)
    assert table.loc[1024, "seeds"] == 3 and table.loc[1024, "best_step"] == 100
    assert readings.best_configuration(results) == {"dim": 1024, "init": "random",
                                                    "val_mrr": pytest.approx(0.1)}  # fmt: skip


def test_the_doubling_fit_is_the_least_squares_line_in_log2_documents():
    documents = np.array([100, 200, 400, 800, 100, 200, 400, 800])
    noise = np.array([0.001, -0.001] * 4)
    points = pd.DataFrame({"documents_trained": documents,
                           "mrr": 0.05 + 0.01 * np.log2(documents) + noise})  # fmt: skip
    fit = readings.doubling_fit(points)
    slope, intercept = np.polyfit(np.log2(documents), points["mrr"], 1)
    assert fit["slope"] == pytest.approx(slope) and fit["intercept"] == pytest.approx(intercept)
    assert 0 < fit["slope_se"] < 0.001
    with pytest.raises(ValueError, match="at least 3"):
        readings.doubling_fit(points.head(2))


def test_a_gap_closes_only_if_the_method_behind_gains_more_beyond_the_noise():
    cov = np.diag([1e-8, 1e-10])
    steep = {"intercept": 0.0, "slope": 0.02, "slope_se": 1e-5, "covariance": cov}
    flat = {"intercept": 0.1, "slope": 0.01, "slope_se": 1e-5, "covariance": cov}
    meet = readings.crossing(steep, flat)  # steep is behind until 2^10 documents
    assert meet["closing"] and not meet["widening"]
    assert meet["log2_documents"] == pytest.approx(10.0) and meet["low"] < 10.0 < meet["high"]
    assert readings.crossing(flat, steep)["widening"]  # the one ahead gains more
    uncertain = {**flat, "slope": 0.02 - 1e-6}  # the slopes differ by less than their noise
    both = readings.crossing(steep, uncertain)
    assert not both["closing"] and not both["widening"] and both["log2_documents"] is None
