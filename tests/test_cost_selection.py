"""§20.5.1 Configurations and listing L12's selector, corrected (chapter20.cost.selection)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chapter20.cost.catalog import load_catalog
from chapter20.cost.selection import cheapest_config, configuration

CATALOG = load_catalog()


L12 = CATALOG[CATALOG["instance"].isin(["p3.2xlarge", "p4d.24xlarge", "g5.xlarge"])]


def test_listing_l12_on_its_three_types_picks_eight_g5_xlarge_with_the_right_gpu():
    """Claim C19: on L12's three types, 8 GPUs under $50/h, prefer cost -> 8 x g5.xlarge
    (A10G) at 8 x its catalog price; on the whole catalog the answer differs."""
    choice = cheapest_config(8, 50, prefer="cost", catalog=L12)
    assert (choice.instance, choice.n_instances, choice.gpus) == ("g5.xlarge", 8, 8)
    assert choice.gpu_model == "A10G"
    g5 = CATALOG.set_index("instance").loc["g5.xlarge", "on_demand_per_hour"]
    assert choice.price_per_hour == pytest.approx(8 * g5, abs=1e-9)
    assert "A10G" in choice.describe() and choice.snapshot_date in choice.describe()
    anywhere = cheapest_config(8, 50, prefer="cost")
    assert anywhere.price_per_hour <= choice.price_per_hour


def test_prefer_gpus_buys_the_most_gpus_the_budget_allows():
    choice = cheapest_config(8, 50, prefer="gpus")
    assert choice.price_per_hour <= 50 and choice.gpus >= 8
    for _, row in CATALOG.iterrows():  # no type buys more GPUs within the budget
        assert int(50 // row["on_demand_per_hour"]) * row["gpus"] <= choice.gpus


@pytest.mark.parametrize("prefer", ["cost", "gpus"])
@pytest.mark.parametrize("target", [1, 8, 20, 100])
def test_more_budget_never_gives_a_worse_choice(prefer, target):
    previous = None
    for budget in (10, 30, 60, 100, 200, 400, 1_000, 3_000, 10_000):
        try:
            choice = cheapest_config(target, budget, prefer=prefer)
        except ValueError:
            assert previous is None, f"budget {budget} fits nothing but a smaller one did"
            continue
        assert choice.gpus >= target and choice.price_per_hour <= budget
        if previous is not None:
            if prefer == "cost":
                assert choice.price_per_hour <= previous.price_per_hour
            else:
                assert choice.gpus >= previous.gpus
        previous = choice
    assert previous is not None


def test_filters_by_gpu_model_and_memory():
    assert cheapest_config(8, 500, gpu_model="H100").gpu_model == "H100"
    big = cheapest_config(8, 500, min_gpu_memory_gib=40)
    assert big.gpu_memory_gib >= 40
    known = CATALOG[CATALOG["gpu_memory_gib"] >= 40]
    per_8 = (known["on_demand_per_hour"] * np.ceil(8 / known["gpus"])).min()
    assert big.price_per_hour == pytest.approx(per_8)
    assert cheapest_config(8, 500, min_gpu_memory_gib=80).gpu_memory_gib >= 80
    with pytest.raises(ValueError, match="no instance type in the catalog matches"):
        cheapest_config(8, 500, min_gpu_memory_gib=1000)


def test_spot_quotes_the_regions_zones_and_budgets_at_the_highest():
    for instance in CATALOG.loc[CATALOG["spot_median_per_hour"].notna(), "instance"]:
        on_demand = configuration(instance, 2)
        spot = configuration(instance, 2, spot=True)
        assert spot.spot_price("low") <= spot.spot_price("median") <= spot.spot_price("high")
        assert spot.price_per_hour == spot.spot_price("high")
        assert spot.spot_price("median") < on_demand.price_per_hour
    assert cheapest_config(8, 50, spot=True, catalog=L12).price_per_hour < 8 * 1.006
    with pytest.raises(ValueError, match="has no spot price in us-east-1"):
        configuration("gpu_8x_a100", spot=True)


def test_nothing_fits_names_the_budget_and_the_cheapest_price():
    with pytest.raises(ValueError, match=r"budget_per_hour=5;.*8 x g5.xlarge.*\$8\.048/h"):
        cheapest_config(8, 5, catalog=L12)


@pytest.mark.parametrize(
    "args, kwargs, error, name",
    [
        ((0, 50), {}, ValueError, "target_gpus"),
        ((-8, 50), {}, ValueError, "target_gpus"),
        ((2.5, 50), {}, TypeError, "target_gpus"),
        ((8, 0), {}, ValueError, "budget_per_hour"),
        ((8, -10), {}, ValueError, "budget_per_hour"),
        ((8, math.nan), {}, ValueError, "budget_per_hour"),
        ((8, "50"), {}, TypeError, "budget_per_hour"),
        ((8, 50), {"prefer": "speed"}, ValueError, "prefer"),
        ((8, 50), {"gpu_model": "B200"}, ValueError, "gpu_model"),
        ((8, 50), {"min_gpu_memory_gib": math.nan}, ValueError, "min_gpu_memory_gib"),
        ((8, 50), {"min_gpu_memory_gib": 0}, ValueError, "min_gpu_memory_gib"),
        ((8, 50), {"spot": "yes"}, TypeError, "spot"),
    ],
)
def test_cheapest_config_rejects_bad_input(args, kwargs, error, name):
    with pytest.raises(error, match=name):
        cheapest_config(*args, **kwargs)


def test_unknown_gpu_model_error_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"\['A10', 'A100', .*'V100-32GB'\] or None, got 'B200'"):
        cheapest_config(8, 50, gpu_model="B200")
