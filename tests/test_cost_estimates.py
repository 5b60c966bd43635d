"""§20.5 Time and cost to train (chapter20.cost.estimates): the workload and its throughput, the
scaling efficiency, on demand and on spot with preemptions, and the cost breakdown."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from chapter20.core.models import TransformerEncoder, count_parameters
from chapter20.cost.catalog import load_catalog
from chapter20.cost.estimates import (
    EMBEDDING_WORKLOAD,
    H200_MEASUREMENT,
    DataFootprint,
    Preemption,
    Workload,
    cost_breakdown,
    cost_to_train,
    data_parallel_efficiency,
    mixed_precision_saving,
    spot_savings,
    throughput_per_gpu,
    time_to_train,
)
from chapter20.cost.selection import configuration
from chapter20.cost.young_daly import young_daly_interval
from chapter20.techniques.communication_model import scaling_model

CATALOG = load_catalog()


# -------------------------------------------------------------------------- time to train


def test_time_to_train_is_work_over_effective_throughput():
    assert time_to_train(1e6, 1_000, 4, 0.5) == pytest.approx(500.0)
    assert time_to_train(1e6, 1_000, 1, 1.0) == pytest.approx(1_000.0)


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
        time_to_train(*args)


def test_efficiency_is_the_alpha_beta_model_of_section_20_4():
    """On links equal to scaling_model's (NVLink 300 GB/s, one 200 Gb/s HDR port per GPU),
    data_parallel_efficiency gives scaling_model's efficiency (same formula, catalog links)."""
    base = configuration("p4d.24xlarge")
    for world in (8, 16, 64):
        config = dataclasses.replace(base, n_instances=world // 8, gpu_link_gb_s=300,
                                     network_gbps=8 * 200)  # fmt: skip
        ours = data_parallel_efficiency(config, 440e6, 0.3, network_latency_s=5e-6)
        theirs = scaling_model(440e6, 0.3, (world,)).efficiency.iloc[0]
        assert ours == pytest.approx(theirs, rel=1e-12)
    one_gpu = configuration("g5.xlarge")
    assert data_parallel_efficiency(one_gpu, 440e6, 0.3) == 1.0
    slow = data_parallel_efficiency(configuration("p4d.24xlarge", 2), 440e6, 0.3)
    fast = data_parallel_efficiency(configuration("p4d.24xlarge"), 440e6, 0.3)
    assert slow < fast < 1.0  # 400 Gb/s between instances vs NVLink inside one
    with pytest.raises(ValueError, match="no cited network bandwidth for g5.xlarge"):
        data_parallel_efficiency(configuration("g5.xlarge", 8), 440e6, 0.3)
    assert data_parallel_efficiency(base, 440e6, 0.3, overlap=1.0) == 1.0
    with pytest.raises(ValueError, match="overlap"):
        data_parallel_efficiency(base, 440e6, 0.3, overlap=1.5)


def test_workload_parameter_count_matches_the_encoder():
    w = EMBEDDING_WORKLOAD
    with torch.device("meta"):
        model = TransformerEncoder(w.vocab, d_model=w.d_model, n_heads=w.n_heads,
                                   n_layers=w.n_layers, max_len=w.seq_len)  # fmt: skip
    assert w.parameters == count_parameters(model)
    assert w.gradient_bytes == 4 * w.parameters


def test_throughput_model_reproduces_the_measurement_and_orders_gpus_by_peak():
    record, w = H200_MEASUREMENT, EMBEDDING_WORKLOAD
    measured = record.pairs_per_second("bf16", w.pairs_per_gpu)
    assert throughput_per_gpu("H200") == pytest.approx(measured, rel=0.05)
    speeds = [throughput_per_gpu(g) for g in ("A100", "H100")]
    assert speeds == sorted(speeds)
    overhead, per_pair = record.step_model()
    assert overhead > 0 and per_pair > 0
    with pytest.raises(ValueError, match="gpu_model"):
        throughput_per_gpu("T4")  # no cited datasheet
    with pytest.raises(ValueError, match="1 batch size"):
        record.step_model("fp16")  # one batch size recorded: no fit
    with pytest.raises(ValueError, match="precision must be one the record measured"):
        record.step_model("int8")


def test_measure_throughput_runs_on_cpu():
    tiny = Workload("tiny", pairs=1e3, vocab=50, d_model=8, n_heads=2, n_layers=1,
                         seq_len=4, pairs_per_gpu=4, precision="fp32")  # fmt: skip
    from chapter20.cost.throughput import measure_throughput

    value = measure_throughput(tiny, device="cpu", warmup=0, repeat=1)
    assert math.isfinite(value) and value > 0


# ------------------------------------------------------------------------- cost to train


PREEMPTION = Preemption(mtbf_hours=8, checkpoint_seconds=60, restart_seconds=300)


def test_on_demand_cost_is_hours_times_price():
    run = cost_to_train(configuration("p4d.24xlarge", 2), 3 * 3600)
    assert run.overhead == 0 and run.interval_seconds is None
    assert run.cost == pytest.approx(3 * 2 * 32.7726)


def test_spot_uses_the_young_daly_interval_of_the_job():
    config = configuration("g5.xlarge", 4, spot=True)
    run = cost_to_train(config, 24 * 3600, preemption=PREEMPTION)
    job_mtbf = 8 * 3600 / 4  # any of the 4 instances stops the job
    assert run.interval_seconds == pytest.approx(young_daly_interval(60, job_mtbf))
    assert run.wall_hours == pytest.approx(24 * (1 + run.overhead))
    assert run.cost == pytest.approx(run.wall_hours * config.spot_price("median"))
    for factor in (0.25, 0.5, 2.0, 4.0):  # the Young/Daly interval is (near) the optimum
        other = cost_to_train(config, 24 * 3600, preemption=PREEMPTION,
                                   interval_seconds=run.interval_seconds * factor)  # fmt: skip
        assert other.overhead >= run.overhead


def test_preemption_overhead_grows_as_the_mean_time_between_preemptions_shrinks():
    config = configuration("p4d.24xlarge", spot=True)
    overheads = [
        cost_to_train(config, 24 * 3600, preemption=Preemption(mtbf, 60, 300)).overhead  # fmt: skip
        for mtbf in (48, 24, 8, 2, 0.5)
    ]
    assert all(a < b for a, b in zip(overheads, overheads[1:])), overheads
    assert overheads[0] > 0
    more = cost_to_train(configuration("p4d.24xlarge", 8, spot=True), 24 * 3600,
                              preemption=PREEMPTION)  # fmt: skip
    assert more.overhead > cost_to_train(config, 24 * 3600, preemption=PREEMPTION).overhead


def test_spot_without_preemption_model_and_bad_preemptions_raise():
    config = configuration("g5.xlarge", spot=True)
    with pytest.raises(ValueError, match="preemption"):
        cost_to_train(config, 3600)
    with pytest.raises(ValueError, match="spot_quote"):
        cost_to_train(config, 3600, preemption=PREEMPTION, spot_quote="mid")
    with pytest.raises(ValueError, match="train_seconds"):
        cost_to_train(config, math.nan, preemption=PREEMPTION)
    with pytest.raises(ValueError, match="mtbf_hours"):
        Preemption(mtbf_hours=0, checkpoint_seconds=60, restart_seconds=0)
    with pytest.raises(ValueError, match="restart_seconds"):
        Preemption(mtbf_hours=8, checkpoint_seconds=60, restart_seconds=-1)
    with pytest.raises(TypeError, match="config"):
        cost_to_train("g5.xlarge", 3600)
    with pytest.raises(ValueError, match="instance"):
        configuration("no-such.type")


def test_spot_savings_net_of_overhead_are_below_the_gross_savings():
    table = spot_savings(train_hours=24, preemption=PREEMPTION)
    assert len(table) == CATALOG["spot_median_per_hour"].notna().sum()
    assert (table["saving_at_high %"] <= table["saving_at_median %"]).all()
    assert (table["saving_at_median %"] <= table["saving_at_low %"]).all()
    assert (table["net_saving_at_median %"] < table["saving_at_median %"]).all()
    with pytest.raises(ValueError, match="together"):
        spot_savings(train_hours=24)


def test_mixed_precision_saving():
    assert mixed_precision_saving(2.0) == pytest.approx(0.5)
    assert mixed_precision_saving(1.5) == pytest.approx(1 / 3)
    assert mixed_precision_saving(0.5) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="speedup"):
        mixed_precision_saving(0)


# ------------------------------------------------------------------------- cost breakdown


def test_cost_breakdown_adds_up():
    data = DataFootprint(1000, 10, checkpoints_kept=5, retention_months=1, egress_gb=100)
    parts = cost_breakdown(700.0, 73, data, other=50)
    months = 73 / 730 + 1
    assert parts.storage == pytest.approx(1050 * 0.023 * months)
    assert parts.network == pytest.approx(9.0)
    assert parts.total == pytest.approx(700 + parts.storage + 9 + 50)
    assert sum(parts.shares().values()) == pytest.approx(100)
    bigger = cost_breakdown(700.0, 73, DataFootprint(dataset_gb=10_000, checkpoint_gb=10))
    smaller = cost_breakdown(700.0, 73, DataFootprint(dataset_gb=1000, checkpoint_gb=10))
    assert bigger.shares()["compute"] < smaller.shares()["compute"]
    with pytest.raises(ValueError, match="dataset_gb"):
        DataFootprint(dataset_gb=-1, checkpoint_gb=1)
    with pytest.raises(ValueError, match="compute_cost"):
        cost_breakdown(math.nan, 1, DataFootprint(dataset_gb=1, checkpoint_gb=1))
    with pytest.raises(TypeError, match="data"):
        cost_breakdown(700.0, 1, {"dataset_gb": 1})
