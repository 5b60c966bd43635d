"""§20.5 Every option over the catalog and its Pareto frontier (chapter20.cost.options), and the
figures of notebook 08 (chapter20.cost.plots)."""

from __future__ import annotations

import math

import matplotlib
import pandas as pd
import pytest

from chapter20.cost.catalog import snapshot_label
from chapter20.cost.options import pareto_frontier, training_options
from chapter20.cost.plots import plot_pareto, plot_time_and_cost

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


def test_cheapest_per_hour_is_not_cheapest_per_run():
    """L12 ranks by $/h; per trained model the 8 x g5.xlarge of the chapter costs more than
    one 8-GPU A100 instance, and takes several times as long (the model's inputs are stated
    in chapter20.cost.estimates)."""
    options = training_options(gpu_counts=(8,), instances=["g5.xlarge", "p4d.24xlarge"])
    by = options.set_index("instance")
    assert by.loc["g5.xlarge", "price_per_hour"] < by.loc["p4d.24xlarge", "price_per_hour"]
    assert by.loc["g5.xlarge", "cost"] > by.loc["p4d.24xlarge", "cost"]
    assert by.loc["g5.xlarge", "hours"] > 3 * by.loc["p4d.24xlarge", "hours"]


def test_figures_label_their_axes_with_units():
    options = training_options(gpu_counts=(8, 16), instances=["p4d.24xlarge"])
    fig = plot_time_and_cost(options, caption=snapshot_label())
    labels = [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes]
    assert ("GPUs", "wall time (hours)") in labels and ("GPUs", "cost of the run (USD)") in labels
    fig = plot_pareto(options, pareto_frontier(options))
    assert fig.axes[0].get_xlabel() == "wall time (hours, log scale)"
    assert fig.axes[0].get_ylabel() == "cost of the run (USD)"
    matplotlib.pyplot.close("all")
