"""§20.5 cost model: the price snapshot, L12's selector corrected, time and cost to train,
spot with preemptions, the Pareto frontier and the cost breakdown."""

from __future__ import annotations

import dataclasses
import math

import matplotlib
import pandas as pd
import pytest
import torch

from chapter20 import cost
from chapter20.core.models import TransformerEncoder, count_parameters
from chapter20.core.paths import data_file
from chapter20.cost.preemption import young_daly_interval
from chapter20.labs.nb06_distributed import scaling_model

matplotlib.use("Agg")

CATALOG = cost.load_catalog()


# ------------------------------------------------------------------------------- catalog


def test_catalog_is_a_dated_snapshot_with_sources_for_every_row():
    assert len(CATALOG) >= 6
    assert CATALOG["snapshot_date"].str.match(r"^\d{4}-\d{2}").all()
    assert (CATALOG["source"].str.len() > 10).all()
    assert "snapshot" in cost.snapshot_label() and "not live" in cost.snapshot_label()


def test_catalog_has_the_chapters_types_and_current_gpus_on_two_providers():
    assert {"p3.2xlarge", "p4d.24xlarge", "g5.xlarge"} <= set(CATALOG["instance"])
    for model in ("A100", "H100", "H200"):
        providers = set(CATALOG.loc[CATALOG["gpu_model"] == model, "provider"])
        assert len(providers) >= 2, f"{model} on {providers}"


def test_catalog_names_the_g5_gpu_correctly_and_keeps_the_chapters_prices():
    """Claim C18 and listing L12's mislabel: the g5.xlarge carries an A10G, not a T4."""
    rows = CATALOG.set_index("instance")
    assert rows.loc["g5.xlarge", "gpu_model"] == "A10G"
    chapter = {"p3.2xlarge": (3.06, 1, "V100"), "p4d.24xlarge": (32.77, 8, "A100"),
               "g5.xlarge": (1.006, 1, "A10G")}  # fmt: skip
    for instance, (price, gpus, model) in chapter.items():
        assert rows.loc[instance, "on_demand_per_hour"] == pytest.approx(price, rel=1e-3)
        assert (rows.loc[instance, "gpus"], rows.loc[instance, "gpu_model"]) == (gpus, model)


def _write(tmp_path, edit):
    """A copy of the real catalog with ``edit(lines)`` applied; returns its path."""
    lines = data_file("instance_prices.csv").read_text(encoding="utf-8").splitlines()
    path = tmp_path / "prices.csv"
    path.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    return path


def _set_cell(lines, line_number, column, value):
    header = lines[0].split(",")
    cells = lines[line_number - 1].split(",")
    cells[header.index(column)] = value
    lines[line_number - 1] = ",".join(cells)
    return lines


@pytest.mark.parametrize(
    "column, value, reason",
    [
        ("on_demand_per_hour", "-1", "must be a finite number > 0"),
        ("on_demand_per_hour", "nan", "must be a finite number > 0"),
        ("gpus", "two", "must be an int >= 1"),
        ("gpu_memory_gb", "", "must be a number"),
        ("snapshot_date", "last May", "must be a date"),
        ("snapshot_date", "2025-02-30", "must be a real calendar date"),
        ("confidence", "sure", "must be one of"),
        ("spot_high_per_hour", "99", "must be <= on_demand_per_hour"),
        ("spot_low_per_hour", "", "give both ends of the spot range"),
        ("source", " ", "must not be empty"),
    ],
)
def test_loader_names_the_bad_line_and_column(tmp_path, column, value, reason):
    path = _write(tmp_path, lambda lines: _set_cell(lines, 3, column, value))
    with pytest.raises(ValueError, match=rf"line 3, column '{column}': {reason}"):
        cost.load_catalog(path)


def test_loader_rejects_missing_columns_duplicates_and_multi_gpu_rows_without_a_link(tmp_path):
    def drop_source(lines):
        return [line.rsplit(",", 1)[0] if i else line.replace(",source", "") for i, line in
                enumerate(lines)]  # fmt: skip

    with pytest.raises(ValueError, match=r"missing column\(s\) \['source'\]"):
        cost.load_catalog(_write(tmp_path, drop_source))
    with pytest.raises(ValueError, match="line 4, column 'instance': duplicate of line 2"):
        cost.load_catalog(_write(tmp_path, lambda lines: lines[:3] + [lines[1]] + lines[3:]))
    multi = CATALOG.index[CATALOG["gpus"] > 1][0] + 2  # header is line 1, first row line 2
    with pytest.raises(ValueError, match=rf"line {multi}, column 'gpu_link_gb_s'"):
        cost.load_catalog(_write(tmp_path, lambda ls: _set_cell(ls, multi, "gpu_link_gb_s", "")))


# ----------------------------------------------------------------------------- selector


def test_chapters_example_is_reproduced_with_the_right_gpu():
    """Claim C19: 8 GPUs under $50/h, prefer cost -> 8 x g5.xlarge at $8.048/h (A10G)."""
    choice = cost.cheapest_config(8, 50, prefer="cost")
    assert (choice.instance, choice.n_instances, choice.gpus) == ("g5.xlarge", 8, 8)
    assert choice.gpu_model == "A10G"
    assert choice.price_per_hour == pytest.approx(8.048, abs=1e-9)
    assert "A10G" in choice.describe() and "2025-05" in choice.describe()


def test_prefer_gpus_buys_the_most_gpus_the_budget_allows():
    choice = cost.cheapest_config(8, 50, prefer="gpus")
    assert choice.price_per_hour <= 50 and choice.gpus >= 8
    for _, row in CATALOG.iterrows():  # no type buys more GPUs within the budget
        assert int(50 // row["on_demand_per_hour"]) * row["gpus"] <= choice.gpus


@pytest.mark.parametrize("prefer", ["cost", "gpus"])
@pytest.mark.parametrize("target", [1, 8, 20, 100])
def test_more_budget_never_gives_a_worse_choice(prefer, target):
    previous = None
    for budget in (10, 30, 60, 100, 200, 400, 1_000, 3_000, 10_000):
        try:
            choice = cost.cheapest_config(target, budget, prefer=prefer)
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
    assert cost.cheapest_config(8, 500, gpu_model="H100").gpu_model == "H100"
    big = cost.cheapest_config(8, 500, min_gpu_memory_gb=40)
    assert big.gpu_memory_gb >= 40 and big.instance == "Standard_ND96asr_v4"
    assert cost.cheapest_config(8, 500, min_gpu_memory_gb=100).gpu_model == "H200"


def test_spot_is_cheaper_per_hour_than_on_demand():
    for instance in CATALOG.loc[CATALOG["spot_low_per_hour"].notna(), "instance"]:
        on_demand = cost.configuration(instance, 2)
        spot = cost.configuration(instance, 2, spot=True)
        assert spot.spot_price("low") <= spot.spot_price("mid") <= spot.spot_price("high")
        assert spot.price_per_hour == spot.spot_price("high") < on_demand.price_per_hour
    assert cost.cheapest_config(8, 50, spot=True).price_per_hour < 8.048


def test_nothing_fits_names_the_budget_and_the_cheapest_price():
    with pytest.raises(ValueError, match=r"budget_per_hour=5;.*8 x g5.xlarge.*\$8\.048/h"):
        cost.cheapest_config(8, 5)


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
        ((8, 50), {"gpu_model": "T4"}, ValueError, "gpu_model"),
        ((8, 50), {"min_gpu_memory_gb": math.nan}, ValueError, "min_gpu_memory_gb"),
        ((8, 50), {"min_gpu_memory_gb": 0}, ValueError, "min_gpu_memory_gb"),
        ((8, 50), {"spot": "yes"}, TypeError, "spot"),
    ],
)
def test_cheapest_config_rejects_bad_input(args, kwargs, error, name):
    with pytest.raises(error, match=name):
        cost.cheapest_config(*args, **kwargs)


def test_unknown_gpu_model_error_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"\['A100', 'A10G', 'H100', 'H200', 'V100'\].*'T4'"):
        cost.cheapest_config(8, 50, gpu_model="T4")


# -------------------------------------------------------------------------- time to train


def test_time_to_train_is_work_over_effective_throughput():
    assert cost.time_to_train(1e6, 1_000, 4, 0.5) == pytest.approx(500.0)
    assert cost.time_to_train(1e6, 1_000, 1, 1.0) == pytest.approx(1_000.0)


@pytest.mark.parametrize(
    "args, name",
    [
        ((0, 100, 1, 1.0), "work"),
        ((math.nan, 100, 1, 1.0), "work"),
        ((1e6, -1, 1, 1.0), "throughput_per_gpu"),
        ((1e6, math.inf, 1, 1.0), "throughput_per_gpu"),
        ((1e6, 100, 0, 1.0), "n_gpus"),
        ((1e6, 100, 1, 0.0), "scaling_efficiency"),
        ((1e6, 100, 1, 1.5), "scaling_efficiency"),
        ((1e6, 100, 1, math.nan), "scaling_efficiency"),
    ],
)
def test_time_to_train_rejects_bad_input(args, name):
    with pytest.raises(ValueError, match=name):
        cost.time_to_train(*args)


def test_efficiency_is_the_alpha_beta_model_of_section_20_4():
    """On links equal to scaling_model's (NVLink 300 GB/s, one 200 Gb/s HDR port per GPU),
    data_parallel_efficiency gives scaling_model's efficiency (same formula, catalog links)."""
    base = cost.configuration("p4d.24xlarge")
    for world in (8, 16, 64):
        config = dataclasses.replace(base, n_instances=world // 8, gpu_link_gb_s=300,
                                     network_gbps=8 * 200)  # fmt: skip
        ours = cost.data_parallel_efficiency(config, 440e6, 0.3, network_latency_s=5e-6)
        theirs = scaling_model(440e6, 0.3, (world,)).efficiency.iloc[0]
        assert ours == pytest.approx(theirs, rel=1e-12)
    one_gpu = cost.configuration("g5.xlarge")
    assert cost.data_parallel_efficiency(one_gpu, 440e6, 0.3) == 1.0
    slow = cost.data_parallel_efficiency(cost.configuration("g5.xlarge", 8), 440e6, 0.3)
    fast = cost.data_parallel_efficiency(cost.configuration("p4d.24xlarge"), 440e6, 0.3)
    assert slow < fast < 1.0  # 10 Gb/s between instances vs NVLink inside one
    assert cost.data_parallel_efficiency(base, 440e6, 0.3, overlap=1.0) == 1.0
    with pytest.raises(ValueError, match="overlap"):
        cost.data_parallel_efficiency(base, 440e6, 0.3, overlap=1.5)


def test_workload_parameter_count_matches_the_encoder():
    w = cost.EMBEDDING_WORKLOAD
    with torch.device("meta"):
        model = TransformerEncoder(w.vocab, d_model=w.d_model, n_heads=w.n_heads,
                                   n_layers=w.n_layers, max_len=w.seq_len)  # fmt: skip
    assert w.parameters == count_parameters(model)
    assert w.gradient_bytes == 4 * w.parameters


def test_throughput_model_reproduces_the_measurement_and_orders_gpus_by_peak():
    record, w = cost.H200_MEASUREMENT, cost.EMBEDDING_WORKLOAD
    measured = record.pairs_per_second("bf16", w.pairs_per_gpu)
    assert cost.throughput_per_gpu("H200") == pytest.approx(measured, rel=0.05)
    speeds = [cost.throughput_per_gpu(g) for g in ("A10G", "V100", "A100", "H100")]
    assert speeds == sorted(speeds)
    overhead, per_pair = record.step_model()
    assert overhead > 0 and per_pair > 0
    with pytest.raises(ValueError, match="gpu_model"):
        cost.throughput_per_gpu("T4")


def test_measure_throughput_runs_on_cpu():
    tiny = cost.Workload("tiny", pairs=1e3, vocab=50, d_model=8, n_heads=2, n_layers=1,
                         seq_len=4, pairs_per_gpu=4, precision="fp32")  # fmt: skip
    from chapter20.cost.throughput import measure_throughput

    value = measure_throughput(tiny, device="cpu", warmup=0, repeat=1)
    assert math.isfinite(value) and value > 0


# ------------------------------------------------------------------------- cost to train


PREEMPTION = cost.Preemption(mtbf_hours=8, checkpoint_seconds=60, restart_seconds=300)


def test_on_demand_cost_is_hours_times_price():
    run = cost.cost_to_train(cost.configuration("p4d.24xlarge", 2), 3 * 3600)
    assert run.overhead == 0 and run.interval_seconds is None
    assert run.cost == pytest.approx(3 * 2 * 32.7726)


def test_spot_uses_the_young_daly_interval_of_the_job():
    config = cost.configuration("g5.xlarge", 4, spot=True)
    run = cost.cost_to_train(config, 24 * 3600, preemption=PREEMPTION)
    job_mtbf = 8 * 3600 / 4  # any of the 4 instances stops the job
    assert run.interval_seconds == pytest.approx(young_daly_interval(60, job_mtbf))
    assert run.wall_hours == pytest.approx(24 * (1 + run.overhead))
    assert run.cost == pytest.approx(run.wall_hours * config.spot_price("mid"))
    for factor in (0.25, 0.5, 2.0, 4.0):  # the Young/Daly interval is (near) the optimum
        other = cost.cost_to_train(config, 24 * 3600, preemption=PREEMPTION,
                                   interval_seconds=run.interval_seconds * factor)  # fmt: skip
        assert other.overhead >= run.overhead


def test_preemption_overhead_grows_as_the_mean_time_between_preemptions_shrinks():
    config = cost.configuration("p4d.24xlarge", spot=True)
    overheads = [
        cost.cost_to_train(
            config, 24 * 3600, preemption=cost.Preemption(mtbf, 60, 300)
        ).overhead  # fmt: skip
        for mtbf in (48, 24, 8, 2, 0.5)
    ]
    assert all(a < b for a, b in zip(overheads, overheads[1:])), overheads
    assert overheads[0] > 0
    more = cost.cost_to_train(cost.configuration("p4d.24xlarge", 8, spot=True), 24 * 3600,
                              preemption=PREEMPTION)  # fmt: skip
    assert more.overhead > cost.cost_to_train(config, 24 * 3600, preemption=PREEMPTION).overhead


def test_spot_without_preemption_model_and_bad_preemptions_raise():
    config = cost.configuration("g5.xlarge", spot=True)
    with pytest.raises(ValueError, match="preemption"):
        cost.cost_to_train(config, 3600)
    with pytest.raises(ValueError, match="spot_quote"):
        cost.cost_to_train(config, 3600, preemption=PREEMPTION, spot_quote="median")
    with pytest.raises(ValueError, match="train_seconds"):
        cost.cost_to_train(config, math.nan, preemption=PREEMPTION)
    with pytest.raises(ValueError, match="mtbf_hours"):
        cost.Preemption(mtbf_hours=0, checkpoint_seconds=60, restart_seconds=0)
    with pytest.raises(ValueError, match="restart_seconds"):
        cost.Preemption(mtbf_hours=8, checkpoint_seconds=60, restart_seconds=-1)
    with pytest.raises(TypeError, match="config"):
        cost.cost_to_train("g5.xlarge", 3600)
    with pytest.raises(ValueError, match="instance"):
        cost.configuration("g4dn.xlarge")


def test_spot_savings_net_of_overhead_are_below_the_gross_savings():
    table = cost.spot_savings(train_hours=24, preemption=PREEMPTION)
    assert len(table) == CATALOG["spot_low_per_hour"].notna().sum()
    assert (table["saving_at_high %"] <= table["saving_at_mid %"]).all()
    assert (table["saving_at_mid %"] <= table["saving_at_low %"]).all()
    assert (table["net_saving_at_mid %"] < table["saving_at_mid %"]).all()
    with pytest.raises(ValueError, match="together"):
        cost.spot_savings(train_hours=24)


def test_mixed_precision_saving():
    assert cost.mixed_precision_saving(2.0) == pytest.approx(0.5)
    assert cost.mixed_precision_saving(1.5) == pytest.approx(1 / 3)
    assert cost.mixed_precision_saving(0.5) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="speedup"):
        cost.mixed_precision_saving(0)


# ------------------------------------------------------------------ frontier and breakdown


def test_pareto_frontier_of_a_small_example():
    options = pd.DataFrame({"hours": [1, 2, 2, 3, 4, 5], "cost": [10, 8, 9, 8, 3, 4]})
    frontier = cost.pareto_frontier(options)
    assert frontier.index.tolist() == [0, 1, 4]


def test_frontier_over_the_catalog_is_monotone_and_undominated():
    options = cost.training_options()
    frontier = cost.pareto_frontier(options)
    assert len(frontier) >= 2
    assert frontier["hours"].is_monotonic_increasing
    assert (frontier["cost"].diff().dropna() < 0).all()
    for _, point in frontier.iterrows():
        better = (options["hours"] < point["hours"]) & (options["cost"] < point["cost"])
        assert not better.any()
    with pytest.raises(ValueError, match="finite"):
        cost.pareto_frontier(pd.DataFrame({"hours": [1.0, math.nan], "cost": [1.0, 2.0]}))


def test_cheapest_per_hour_is_not_cheapest_per_run():
    """L12 ranks by $/h; per trained model the 8 x g5.xlarge of the chapter costs more than
    one 8-GPU A100 instance, and takes several times as long (the model's inputs are stated
    in cost.py)."""
    options = cost.training_options(gpu_counts=(8,), instances=["g5.xlarge", "p4d.24xlarge"])
    by = options.set_index("instance")
    assert by.loc["g5.xlarge", "price_per_hour"] < by.loc["p4d.24xlarge", "price_per_hour"]
    assert by.loc["g5.xlarge", "cost"] > by.loc["p4d.24xlarge", "cost"]
    assert by.loc["g5.xlarge", "hours"] > 3 * by.loc["p4d.24xlarge", "hours"]


def test_cost_breakdown_adds_up():
    parts = cost.cost_breakdown(700.0, run_hours=73, dataset_gb=1000, checkpoint_gb=10,
                                checkpoints_kept=5, retention_months=1, egress_gb=100,
                                other=50)  # fmt: skip
    months = 73 / 730 + 1
    assert parts.storage == pytest.approx(1050 * 0.023 * months)
    assert parts.network == pytest.approx(9.0)
    assert parts.total == pytest.approx(700 + parts.storage + 9 + 50)
    assert sum(parts.shares().values()) == pytest.approx(100)
    bigger = cost.cost_breakdown(700.0, run_hours=73, dataset_gb=10_000, checkpoint_gb=10)
    assert (
        bigger.shares()["compute"]
        < cost.cost_breakdown(700.0, run_hours=73, dataset_gb=1000, checkpoint_gb=10).shares()[
            "compute"
        ]
    )
    with pytest.raises(ValueError, match="dataset_gb"):
        cost.cost_breakdown(700.0, run_hours=1, dataset_gb=-1, checkpoint_gb=1)
    with pytest.raises(ValueError, match="compute_cost"):
        cost.cost_breakdown(math.nan, run_hours=1, dataset_gb=1, checkpoint_gb=1)


def test_figures_label_their_axes_with_units():
    options = cost.training_options(gpu_counts=(8, 16), instances=["p4d.24xlarge"])
    fig = cost.plot_time_and_cost(options, caption=cost.snapshot_label())
    labels = [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes]
    assert ("GPUs", "wall time (hours)") in labels and ("GPUs", "cost of the run (USD)") in labels
    fig = cost.plot_pareto(options, cost.pareto_frontier(options))
    assert fig.axes[0].get_xlabel() == "wall time (hours, log scale)"
    assert fig.axes[0].get_ylabel() == "cost of the run (USD)"
    matplotlib.pyplot.close("all")
