"""§20.5 Every fleet choice over the catalog and its Pareto frontier (chapter20.cost.fleet_choices),
and the figures of notebook 08 (chapter20.cost.plots)."""

from __future__ import annotations

import math

import matplotlib
import pandas as pd
import pytest

from chapter20.cost.catalog import load_price_history, snapshot_label, spot_discounts
from chapter20.cost.fleet_choices import pareto_frontier, training_options, untimed_types
from chapter20.cost.plots import (
    gpu_colour,
    plot_pareto,
    plot_price_history,
    plot_spot_discounts,
    plot_time_and_cost,
)

matplotlib.use("Agg")


def test_pareto_frontier_of_a_small_example():
    options = pd.DataFrame({"hours": [1, 2, 2, 3, 4, 5], "cost": [10, 8, 9, 8, 3, 4]})
    frontier = pareto_frontier(options)
    assert frontier.index.tolist() == [0, 1, 4]


def test_frontier_over_the_catalog_is_monotone_and_undominated():
    options = training_options()
    frontier = pareto_frontier(options)
    assert len(frontier) >= 2
    assert frontier["hours"].is_monotonic_increasing
    assert (frontier["cost"].diff().dropna() < 0).all()
    for _, point in frontier.iterrows():
        better = (options["hours"] < point["hours"]) & (options["cost"] < point["cost"])
        assert not better.any()
    with pytest.raises(ValueError, match="finite"):
        pareto_frontier(pd.DataFrame({"hours": [1.0, math.nan], "cost": [1.0, 2.0]}))


def test_types_the_model_cannot_time_are_listed_with_the_reason():
    """The A10G has no cited datasheet, the V100 no bf16 units, a PCIe part is not the SXM part
    of the datasheet; a type without a cited network is timed as one instance only."""
    untimed = untimed_types().set_index("instance")["reason"]
    assert untimed["g5.xlarge"] == "no cited datasheet for the A10G"
    assert untimed["p3.2xlarge"] == "the V100 has no bf16 units"
    assert untimed["gpu_1x_h100_pcie"].startswith("a PCIe part")
    assert untimed["gpu_8x_a100"] == "timed as one instance only: no cited network bandwidth"
    assert "p4d.24xlarge" not in untimed.index
    with pytest.raises(ValueError, match="g5.xlarge cannot be timed: no cited datasheet"):
        training_options(instances=["g5.xlarge"])
    lambda_8 = training_options(gpu_counts=(8, 16), instances=["gpu_8x_a100"])
    assert lambda_8["gpus"].tolist() == [8]
    p4d = training_options(gpu_counts=(8, 16), instances=["p4d.24xlarge"])
    assert p4d["gpus"].tolist() == [8, 16] and p4d["efficiency"].is_monotonic_decreasing


def test_figures_label_their_axes_with_units():
    options = training_options(gpu_counts=(8, 16), instances=["p4d.24xlarge"])
    fig = plot_time_and_cost(options, caption=snapshot_label())
    labels = [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes]
    assert ("GPUs", "wall time (hours)") in labels and ("GPUs", "cost of the run (USD)") in labels
    fig = plot_pareto(options, pareto_frontier(options))
    assert fig.axes[0].get_xlabel() == "wall time (hours, log scale)"
    assert fig.axes[0].get_ylabel() == "cost of the run (USD)"
    fig = plot_price_history(load_price_history())
    labels = [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes]
    assert ("date of the catalog version", "spot saving over on-demand (%)") in labels
    # one colour per GPU model in every figure: the p4d's A100 line is the A100 colour
    left = fig.axes[0]
    p4d = [line for line in left.get_lines() if line.get_label() != "_nolegend_"]
    assert gpu_colour("A100") in [matplotlib.colors.to_hex(line.get_color()) for line in p4d]
    fig = plot_spot_discounts(spot_discounts(), claimed=(50, 90))
    assert fig.axes[0].get_xlabel() == "spot saving over on-demand (%)"
    matplotlib.pyplot.close("all")
