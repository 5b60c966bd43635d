"""§20.5.2 the preemption model (``chapter20.cost.young_daly``): Young's interval is near the
optimum of Daly's expected wall time, the Monte Carlo simulation converges to it, and the overhead
behaves at its limits. Tolerances: the optimum within 10% of Young's first-order formula; the
simulated mean within 4 standard errors of the model."""

import numpy as np
import pytest

from chapter20.cost.young_daly import (
    PreemptionModel,
    expected_wall_time,
    preemption_overhead,
    simulate_wall_time,
    young_daly_interval,
)


def test_young_daly_interval_formula():
    assert young_daly_interval(60, 3600) == pytest.approx((2 * 60 * 3600) ** 0.5)


def test_young_daly_interval_is_near_the_model_optimum():
    c, m, r = 30.0, 3600.0, 60.0
    taus = np.geomspace(30, 6000, 400)
    walls = [expected_wall_time(36_000, t, PreemptionModel(c, m, r)) for t in taus]
    best = taus[int(np.argmin(walls))]
    assert best == pytest.approx(young_daly_interval(c, m), rel=0.1)


@pytest.mark.parametrize("tau", [100.0, 600.0, 3000.0])
def test_simulation_converges_to_expected_wall_time(tau):
    model = PreemptionModel(checkpoint_seconds=60, mtbf_seconds=3600, restart_seconds=120)
    times = simulate_wall_time(20_000, tau, model, runs=4000, seed=1)
    expected = expected_wall_time(20_000, tau, model)
    assert abs(times.mean() - expected) < 4 * times.std() / np.sqrt(times.size)


def test_no_preemptions_means_only_checkpoint_cost():
    # A huge MTBF: the overhead is the checkpoints alone, C/τ.
    assert preemption_overhead(1000, 100, PreemptionModel(5, 1e12)) == pytest.approx(0.05, rel=1e-6)


def test_overhead_grows_as_preemptions_get_more_frequent():
    overheads = [
        preemption_overhead(36_000, young_daly_interval(60, m), PreemptionModel(60, m, 120))
        for m in (86_400, 14_400, 3600, 900)
    ]
    assert overheads == sorted(overheads) and overheads[0] > 0


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"checkpoint_seconds": 0, "mtbf_seconds": 10}, "checkpoint_seconds"),
        ({"checkpoint_seconds": 1, "mtbf_seconds": -1}, "mtbf_seconds"),
        ({"checkpoint_seconds": float("nan"), "mtbf_seconds": 10}, "checkpoint_seconds"),
    ],
)
def test_young_daly_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        young_daly_interval(**kwargs)


def test_expected_wall_time_bad_input():
    with pytest.raises(ValueError, match="interval_seconds"):
        expected_wall_time(100, 0, PreemptionModel(1, 10))
    with pytest.raises(ValueError, match="restart_seconds"):
        PreemptionModel(1, 10, -1)
    with pytest.raises(TypeError, match="model"):
        expected_wall_time(100, 10, (1, 10))
    with pytest.raises(ValueError, match="runs"):
        simulate_wall_time(100, 10, PreemptionModel(1, 10), runs=0)
