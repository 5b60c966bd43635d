"""Notebook 08's lab (chapter20.labs.nb08_cost): the tables behind C17-C22 say what their
docstrings say, on the committed catalog."""

from __future__ import annotations

import pandas as pd
import pytest

from chapter20.cost.catalog import load_price_history
from chapter20.cost.fleet_choices import cheapest_fleet
from chapter20.cost.hardware import load_gpu_datasheets
from chapter20.labs import nb08_cost as lab


def test_the_chapters_prices_and_l12_on_its_menu_and_beyond():
    table, gap, counts_match = lab.chapter_prices()
    assert gap == pytest.approx((table["gap %"].abs() / 100).max())
    assert counts_match and table.loc["g5.xlarge", "GPU (catalog)"] == "A10G"
    assert (table["lowest region $/h"] <= table["catalog us-east-1 $/h"]).all()
    reruns = lab.cheapest_config_by_menu()
    assert reruns.loc["L12's three types (aws us-east-1)", "choice"] == "8 x g5.xlarge"
    assert (reruns["$/h"] <= reruns["$/h"].iloc[0]).all()  # a wider menu is never dearer
    assert list(reruns["$/h"]) == sorted(reruns["$/h"], reverse=True)  # every GPU: cheapest
    excluded = lab.excluded_gpus()
    trainable = reruns.loc["the whole catalog, trainable GPUs"]
    assert trainable["GPU"] not in excluded.index
    cheaper = excluded[excluded["$/h"] < trainable["$/h"]]  # what the restriction costs
    assert reruns.loc["the whole catalog, every GPU", "GPU"] in cheaper.index
    assert excluded["why excluded"].str.len().gt(0).all()


def test_spot_and_its_history_tables():
    by_type = lab.spot_by_type()
    assert (by_type["lowest %"] <= by_type["median %"]).all()
    assert (by_type["median %"] <= by_type["highest %"]).all()
    stability = lab.discount_stability(load_price_history())
    for column in ("saving median %", "first 30 days %", "last 30 days %"):
        assert (stability[column] >= stability["lowest %"] - 1e-9).all()
        assert (stability[column] <= stability["highest %"] + 1e-9).all()
    assert stability.loc["p4d.24xlarge", "daily versions"] > 300
    lines = lab.stability_lines(stability)
    assert len(lines) == len(stability) and lines[0].startswith(f"{stability.index[0]}: ")
    summary = lab.catalog_summary()
    assert "zones with a spot price" in summary and "skypilot-catalog" in summary


def test_c17_scales_with_the_workload_and_crosses_the_claimed_range():
    c17 = lab.training_cost_over_workloads(pairs=(1e9, 1e10, 1e11, 1e12), gpu_models=("A100",))
    costs = c17["cost $"].to_numpy()
    assert costs[1:] / costs[:-1] == pytest.approx([10, 10, 10])
    assert set(c17["verdict"]) == {
        "does not hold: smaller than claimed",
        "consistent with the model",
        "does not hold: larger than claimed",
    }
    fleet = cheapest_fleet(100, "A100")
    assert fleet["gpus"] >= 100 and fleet["gpu_model"] == "A100"


def test_c22_compute_share_falls_as_data_are_kept_longer():
    c22 = lab.compute_share_over_scenarios(
        retention_months=(1, 6, 24), egress_copies=(0,), pairs=(1e9,)
    )
    shares = c22["compute %"].to_numpy()
    assert shares[0] > shares[1] > shares[2]
    parts = c22[["compute %", "storage %", "network %"]].sum(axis=1)
    assert parts.to_numpy() == pytest.approx(100)


def test_tables_of_peaks_and_mixed_precision(capsys):
    peaks = lab.datasheet_table()
    assert peaks.loc["V100"].isna().tolist() == [True, False, True, False]  # bf16, fp16, tf32, fp32
    assert len(peaks) == load_gpu_datasheets()["gpu_model"].nunique()
    table = lab.mixed_precision_table()
    assert table.loc["fp32", "speed-up"] > table.loc["tf32", "speed-up"]
    assert list(table.columns) == ["speed-up", "cost saved %"]  # shown, never judged
    if not lab.torch.cuda.is_available():
        assert lab.benchmark() == [] and "needs one" in capsys.readouterr().out


def test_the_notes_of_c19_c20_and_c21_name_what_they_describe():
    import pandas as pd

    class Choice:
        def describe(self):
            return "8 x g5.xlarge"

    assert lab.catalog_choice_note(Choice()) == (
        "8 x g5.xlarge; L12's three types pick 8 x g5.xlarge at $8.048/h"
    )
    zones = pd.DataFrame({"saving %": [40.0, 60.0, 70.0, 95.0]})
    by_type = pd.DataFrame(index=["a", "b"])
    savings = pd.DataFrame({"saving_at_median %": [58.2, 50.0, 60.0],
                            "net_saving_at_median %": [54.9, 44.0, 56.0]})  # fmt: skip
    assert lab.spot_saving_note(by_type, zones, savings, "catalog") == (
        "2 types, 4 zones, 50% of zones within 50-90%; section 7's model, one region per cloud: "
        "58% saved at the median zone, 55% net of preemptions; catalog"
    )
    table, note = lab.mixed_precision_table(), lab.mixed_precision_note()
    assert f"vs fp32 x{table.loc['fp32', 'speed-up']:.2f} = " in note
    assert f"vs TF32 x{table.loc['tf32', 'speed-up']:.2f} = " in note
    assert note.endswith("no GPU row with a recorded code version yet")
    assert lab.mixed_precision_note(current=2.0).endswith("the current code's rows: x2.00")
    assert lab.timed_step_line(None) == (
        "timed on a GPU with the training step shown here: not yet, so the claim of 40–60% "
        "saved needs a GPU"
    )
    assert lab.timed_step_line(2.0) == (
        "timed on a GPU with the training step shown here: bf16 x2.00 over fp32, "
        "50% of the cost saved"
    )


def test_named_extreme_names_every_tie_and_wall_time_shows_minutes():
    values = pd.Series({"a": 70.0, "b": 29.5, "c": 69.99, "d": 29.6})
    assert lab.named_extreme(values, "max", unit="%") == "70% (a, c: tied)"
    assert lab.named_extreme(values, "min", digits=1) == "29.5 (b)"
    with pytest.raises(ValueError, match="which"):
        lab.named_extreme(values, "median")
    assert lab.wall_time_text(0.04) == "2.4 min" and lab.wall_time_text(403.4) == "403.4 h"


def test_spot_figure_draws_a_box_of_no_width_as_a_labelled_diamond():
    import matplotlib.pyplot as plt

    from chapter20 import cost
    from chapter20.labs import nb08_cost

    fig = nb08_cost.spot_figure(cost.spot_discounts())
    texts = [t.get_text() for t in fig.axes[0].texts]
    plt.close(fig)
    assert any("of zones at one saving, 60%" in t for t in texts)  # the A100's GCP zones


def test_pareto_figure_lifts_the_label_of_a_point_before_a_drop():
    import matplotlib.pyplot as plt

    from chapter20 import cost
    from chapter20.labs import nb08_cost

    options = cost.training_options(cost.EMBEDDING_WORKLOAD)
    frontier = cost.pareto_frontier(options)
    fig = nb08_cost.pareto_figure(options, frontier)
    labels = fig.axes[0].texts[: len(frontier)]
    plt.close(fig)
    costs = frontier["cost"].tolist()
    for label, here, after in zip(labels, costs, costs[1:] + [costs[-1]]):
        assert (label.get_va() == "bottom") == (after < 0.9 * here)
