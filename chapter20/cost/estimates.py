"""§20.5 Time and cost to train: a workload, its throughput, the scaling efficiency, on demand
and on spot with preemptions, and what the run costs besides the GPUs.

What a training run costs is price × wall time, and the wall time depends on the GPU's speed, on
how well data parallelism scales over the instance's links, and — on spot capacity — on the work
lost to preemptions. This module puts those pieces together for one configuration of the catalog
(``chapter20.cost.selection.Config``):

- §20.5 :func:`time_to_train` and :func:`cost_to_train`, with the scaling efficiency from the
  alpha-beta all-reduce model of §20.4 (:func:`data_parallel_efficiency`:
  ``chapter20.techniques.communication_model`` on the links of ``chapter20.cost.hardware``)
  and the throughput of a fixed embedding workload (:data:`EMBEDDING_WORKLOAD`,
  :func:`throughput_per_gpu`: one GPU measurement scaled by the datasheet peaks in the
  workload's precision; ``chapter20.cost.throughput.measure_throughput``
  times it here).
- §20.5.2 spot: the expected preemption overhead at the Young/Daly checkpoint interval, from
  :mod:`chapter20.cost.young_daly`; :func:`spot_savings` gross and net of that overhead.
- §20.5 a cost breakdown into compute, storage and network (:func:`cost_breakdown`).

Every option over the catalog and the Pareto frontier of (time, cost) are
``chapter20.cost.fleet_choices``; the figures ``chapter20.cost.plots``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from chapter20.core.checks import check_int, check_optional_positive, check_positive, check_real
from chapter20.core.gpu_record import read_gpu_measurements
from chapter20.cost.catalog import catalog_or_default
from chapter20.cost.hardware import peak_tflops
from chapter20.cost.selection import Config
from chapter20.cost.young_daly import PreemptionModel, preemption_overhead, young_daly_interval
from chapter20.techniques.communication_model import (
    LINKS,
    hierarchical_allreduce_seconds,
    scaling_efficiency,
)

__all__ = [
    "EGRESS_PER_GB",
    "EMBEDDING_WORKLOAD",
    "H200_MEASUREMENT",
    "STORAGE_PER_GB_MONTH",
    "THROUGHPUT_CODE",
    "CostBreakdown",
    "DataFootprint",
    "Preemption",
    "ThroughputRecord",
    "TrainingCost",
    "Workload",
    "cost_breakdown",
    "cost_to_train",
    "data_parallel_efficiency",
    "mixed_precision_saving",
    "overhead_vs_interval",
    "spot_savings",
    "throughput_per_gpu",
    "time_to_train",
]


# --------------------------------------------------------------------------------------------
# §20.5 Time to train: a workload, its throughput, and the scaling efficiency
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """A fixed embedding-training job (§20.5): a Transformer text encoder trained with InfoNCE
    on ``pairs`` (anchor, positive) pairs of ``seq_len`` tokens, ``pairs_per_gpu`` per GPU
    and step, in ``precision``; ``gradient_bytes`` are all-reduced every step (fp32)."""

    name: str
    pairs: float
    vocab: int
    d_model: int
    n_heads: int
    n_layers: int
    seq_len: int
    pairs_per_gpu: int
    precision: str = "bf16"

    def __post_init__(self):
        check_positive("pairs", self.pairs)
        for name in ("vocab", "d_model", "n_heads", "n_layers", "seq_len", "pairs_per_gpu"):
            check_int(name, getattr(self, name), 1)

    @property
    def parameters(self) -> int:
        """Parameters of the encoder (embeddings, layers, final norm), counted from its shape
        as :class:`chapter20.core.models.TransformerEncoder` builds it."""
        d, ff = self.d_model, 4 * self.d_model
        per_layer = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (d * ff + ff) + (ff * d + d)
        return self.vocab * d + self.seq_len * d + self.n_layers * per_layer + 2 * d

    @property
    def gradient_bytes(self) -> int:
        return 4 * self.parameters


#: The workload of notebook 08: an encoder the size of MiniLM-L6-H384 (6 layers, 384 wide,
#: 12 heads, BERT's 30,522-token vocabulary; the encoder of all-MiniLM-L6-v2, which was trained
#: on about 1 billion pairs), trained on 1 billion pairs of 64 tokens, 1,024 pairs per GPU and
#: step (a global batch of 8,192 on 8 GPUs), in bf16.
EMBEDDING_WORKLOAD = Workload(
    name="MiniLM-L6-H384-sized encoder, InfoNCE, 1B pairs of 64 tokens",
    pairs=1e9,
    vocab=30_522,
    d_model=384,
    n_heads=12,
    n_layers=6,
    seq_len=64,
    pairs_per_gpu=1024,
    precision="bf16",
)


@dataclass(frozen=True)
class ThroughputRecord:
    """Step times of :data:`EMBEDDING_WORKLOAD` measured once on a GPU (§20.5), kept with their
    provenance: ``step_seconds[precision][batch]`` from
    ``chapter20.cost.throughput.measure_throughput``
    (``tf32``: fp32 with TF32 matrix multiplies allowed; ``fp32``: PyTorch's default, no TF32)."""

    gpu: str
    gpu_model: str
    torch_version: str
    date: str
    step_seconds: dict[str, dict[int, float]]

    def pairs_per_second(self, precision: str, batch: int) -> float:
        """Measured pairs per second at ``batch`` in ``precision``."""
        return batch / self.step_seconds[precision][batch]

    def speedup(self, precision: str, baseline: str, batch: int) -> float:
        """Step time in ``baseline`` over step time in ``precision`` at ``batch``."""
        return self.step_seconds[baseline][batch] / self.step_seconds[precision][batch]

    def step_model(self, precision: str = "bf16") -> tuple[float, float]:
        """Least-squares fit of step time = overhead + batch × per-pair time over the
        measured batch sizes: (overhead in s, seconds per pair). The overhead is the part of
        a step that does not grow with the batch (kernel launches, synchronisations, the
        optimizer over all parameters)."""
        if precision not in self.step_seconds:
            raise ValueError(
                f"precision must be one the record measured, "
                f"{sorted(self.step_seconds)}, got {precision!r}"
            )
        batches = sorted(self.step_seconds[precision])
        if len(batches) < 2:
            raise ValueError(
                f"the record has step times at {len(batches)} batch size(s) for {precision}; "
                "fitting overhead and per-pair time needs two or more"
            )
        times = [self.step_seconds[precision][b] for b in batches]
        slope, intercept = np.polyfit(np.asarray(batches, float), np.asarray(times), 1)
        return float(intercept), float(slope)


def _throughput_record(device: str, gpu_model: str) -> ThroughputRecord:
    """The step times of :data:`EMBEDDING_WORKLOAD` that the GPU record
    (``data/gpu_measurements.csv``, rows ``step seconds, <precision>, <batch> pairs``) holds
    for ``device``; the newest row wins for each precision and batch."""
    frame = read_gpu_measurements()
    rows = frame[(frame["device"] == device) & frame["quantity"].str.startswith("step seconds, ")]
    if rows.empty:
        raise ValueError(f"the GPU record has no step times of the workload on {device!r}")
    steps: dict[str, dict[int, float]] = {}
    for row in rows.sort_values("date", kind="stable").itertuples(index=False):
        _, precision, pairs = (part.strip() for part in row.quantity.split(","))
        steps.setdefault(precision, {})[int(pairs.split()[0])] = float(row.value)
    newest = rows.sort_values("date", kind="stable").iloc[-1]
    return ThroughputRecord(
        gpu=device,
        gpu_model=gpu_model,
        torch_version=newest["torch"].split()[0],
        date=newest["date"],
        step_seconds={p: dict(sorted(b.items())) for p, b in steps.items()},
    )


#  Measured on one NVIDIA H200 in a device run (not on this machine), each value the mean of  two
# medians of 20 steps: ``batch / cost.throughput.measure_throughput(EMBEDDING_WORKLOAD, batch=batch,
# precision=..., device="cuda", warmup=5, repeat=20)``, eager PyTorch, AdamW (not fused),  no
# torch.compile. Read from the GPU record (``chapter20.core.gpu_record``), where the figures live.
H200_MEASUREMENT = _throughput_record("NVIDIA H200", "H200")

#: The modules whose code the step times of :data:`EMBEDDING_WORKLOAD` measure
#: (``chapter20.core.gpu_record.code_version``): a GPU figure of another version of them
#: describes code that no longer exists.
THROUGHPUT_CODE = (
    "cost.throughput",
    "training.trainer",
    "training.config",
    "core.models",
    "techniques.precision",
)


def throughput_per_gpu(
    gpu_model: str,
    workload: Workload = EMBEDDING_WORKLOAD,
    record: ThroughputRecord = H200_MEASUREMENT,
) -> float:
    """Pairs per second of ``workload`` on one ``gpu_model`` (§20.5) — a **model** calibrated
    on ``record``: step time = overhead + batch × per-pair time (:meth:`ThroughputRecord.
    step_model`, in the workload's precision), with the per-pair time scaled by the ratio of
    the two GPUs' datasheet peaks **in that precision**
    (:func:`chapter20.cost.hardware.peak_tflops`) and the overhead kept as measured.

    ValueError for a GPU without a cited datasheet, and for a precision the GPU has no units
    for (the V100 has no bf16: a bf16 workload is refused, not priced at its fp16 peak). An
    assumption: it ignores memory bandwidth and assumes every GPU reaches the same fraction of
    its peak."""
    target = peak_tflops(gpu_model, workload.precision)
    if workload != EMBEDDING_WORKLOAD:
        raise ValueError("the recorded step times are for EMBEDDING_WORKLOAD only; measure yours")
    overhead, per_pair = record.step_model(workload.precision)
    per_pair *= peak_tflops(record.gpu_model, workload.precision) / target
    return workload.pairs_per_gpu / (overhead + workload.pairs_per_gpu * per_pair)


def time_to_train(
    work: float, throughput_per_gpu: float, n_gpus: int, scaling_efficiency: float
) -> float:
    """Seconds to process ``work`` examples at ``throughput_per_gpu`` examples/s on ``n_gpus``
    GPUs that scale with ``scaling_efficiency`` (speed-up / GPUs, in (0, 1]; e.g. from
    :func:`data_parallel_efficiency`) (§20.5): work / (throughput × GPUs × efficiency)."""
    work = check_positive("work", work)
    throughput = check_positive("throughput_per_gpu", throughput_per_gpu)
    n_gpus = check_int("n_gpus", n_gpus, 1)
    efficiency = check_positive("scaling_efficiency", scaling_efficiency)
    if efficiency > 1:
        raise ValueError(f"scaling_efficiency must be in (0, 1], got {efficiency}")
    return work / (throughput * n_gpus * efficiency)


#: Latencies of the alpha-beta model (seconds per ring step): NVLink's and, for an instance
#: network, the Ethernet entry's of ``chapter20.techniques.communication_model.LINKS``.
GPU_LINK_LATENCY_S = LINKS["NVLink (A100)"]["latency"]
NETWORK_LATENCY_S = LINKS["Ethernet 100 Gb/s"]["latency"]


def data_parallel_efficiency(
    config: Config,
    gradient_bytes: float,
    step_compute_seconds: float,
    *,
    overlap: float = 0.0,
    gpu_link_latency_s: float = GPU_LINK_LATENCY_S,
    network_latency_s: float = NETWORK_LATENCY_S,
) -> float:
    """Scaling efficiency of data parallelism on ``config`` (§20.4's alpha-beta model, §20.5).

    Each step computes for ``step_compute_seconds`` and all-reduces ``gradient_bytes``
    hierarchically (``chapter20.techniques.communication_model``, the model of §20.4's
    ``scaling_model`` on the catalog's links): a ring over the instance's GPUs on its GPU link
    (``gpu_link_gb_s`` per GPU), then a ring over the instances for each GPU's 1/g share, over
    its 1/g share of the instance's network. ``overlap`` of the communication hides behind the
    backward pass. Efficiency = compute / (compute + exposed communication); 1.0 on a single
    GPU. Upper bound: no stragglers, no framework overhead. ValueError where a
    link it needs has no cited figure (``chapter20.cost.hardware``).
    """
    gradient_bytes = check_positive("gradient_bytes", gradient_bytes)
    compute = check_positive("step_compute_seconds", step_compute_seconds)
    overlap = check_real("overlap", overlap, finite=True)
    if not 0 <= overlap <= 1:
        raise ValueError(f"overlap must be in [0, 1], got {overlap}")
    gpu_link_latency_s = check_positive("gpu_link_latency_s", gpu_link_latency_s, zero=True)
    network_latency_s = check_positive("network_latency_s", network_latency_s, zero=True)
    in_node = config.gpus_per_instance
    if in_node > 1 and config.gpu_link_gb_s is None:
        raise ValueError(
            f"no cited GPU link bandwidth for the {config.gpu_model} GPUs of "
            f"{config.instance}: its data-parallel efficiency cannot be modelled"
        )
    if config.n_instances > 1 and config.network_gbps is None:
        raise ValueError(
            f"no cited network bandwidth for {config.instance}: it is modelled as "
            "one instance only (data/instance_network.csv)"
        )
    gpu_link = network = None
    if in_node > 1:
        gpu_link = (gpu_link_latency_s, config.gpu_link_gb_s * 1e9)
    if config.n_instances > 1:
        network = (network_latency_s, config.network_gbps * 1e9 / 8 / in_node)
    comm = hierarchical_allreduce_seconds(
        gradient_bytes, in_node, config.n_instances, gpu_link=gpu_link, network=network
    )
    return scaling_efficiency(compute, comm, overlap)


# --------------------------------------------------------------------------------------------
# §20.5 / §20.5.2 Cost to train, on demand and on spot
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preemption:
    """Spot preemptions as §20.5.2 models them: each instance is preempted at random (mean
    ``mtbf_hours`` between preemptions, exponential); a checkpoint takes
    ``checkpoint_seconds``; a restart (new instance, reload) ``restart_seconds``."""

    mtbf_hours: float
    checkpoint_seconds: float
    restart_seconds: float

    def __post_init__(self):
        check_positive("mtbf_hours", self.mtbf_hours)
        check_positive("checkpoint_seconds", self.checkpoint_seconds)
        restart = check_real("restart_seconds", self.restart_seconds, finite=True)
        if restart < 0:
            raise ValueError(f"restart_seconds must be >= 0, got {restart}")

    def job_mtbf_seconds(self, n_instances: int) -> float:
        """Mean time between preemptions of a synchronous job on ``n_instances``: any one of
        them stops it, so the rates add."""
        return self.mtbf_hours * 3600 / check_int("n_instances", n_instances, 1)

    def for_job(self, n_instances: int) -> PreemptionModel:
        """The inputs of Daly's model (``chapter20.cost.young_daly``) for a synchronous job on
        ``n_instances``: its :meth:`job_mtbf_seconds`, this checkpoint and restart time."""
        mtbf = self.job_mtbf_seconds(n_instances)
        return PreemptionModel(self.checkpoint_seconds, mtbf, self.restart_seconds)


@dataclass(frozen=True)
class TrainingCost:
    """What one run costs (§20.5): ``compute_hours`` of training, ``wall_hours`` with the
    expected preemption overhead (``overhead``, 0.1 = 10% longer; 0 on demand), checkpointing
    every ``interval_seconds`` (None on demand), billed at ``price_per_hour`` for the wall time."""

    config: Config
    spot: bool
    compute_hours: float
    wall_hours: float
    overhead: float
    interval_seconds: float | None
    price_per_hour: float
    cost: float


def cost_to_train(
    config: Config,
    train_seconds: float,
    *,
    preemption: Preemption | None = None,
    spot_quote: str = "median",
    interval_seconds: float | None = None,
) -> TrainingCost:
    """Cost of ``train_seconds`` of training on ``config`` (§20.5, §20.5.2).

    On demand: the time at the on-demand price (no preemptions; checkpoint time is not
    counted). With ``config.spot``: the spot price of the region's ``spot_quote`` zone
    (``low``/``median``/``high``) for the expected wall time under
    ``preemption`` (required), checkpointing every ``interval_seconds`` — by default the
    Young/Daly interval √(2·C·M) for the job's mean time between preemptions M, which shrinks
    with the number of instances. The expected overhead is Daly's model
    (:func:`chapter20.cost.young_daly.preemption_overhead`); the whole wall time is billed.
    """
    if not isinstance(config, Config):
        raise TypeError(f"config must be a Config, got {type(config).__name__}")
    seconds = check_positive("train_seconds", train_seconds)
    interval_seconds = check_optional_positive("interval_seconds", interval_seconds)
    if not config.spot:
        hours = seconds / 3600
        price = config.on_demand_per_hour
        return TrainingCost(config, False, hours, hours, 0.0, None, price, hours * price)
    if preemption is None:
        raise ValueError("preemption is required for a spot configuration (mtbf, checkpoint)")
    price = config.spot_price(spot_quote)
    job = preemption.for_job(config.n_instances)
    if interval_seconds is None:
        interval = young_daly_interval(job.checkpoint_seconds, job.mtbf_seconds)
    else:
        interval = check_positive("interval_seconds", interval_seconds)
    overhead = preemption_overhead(seconds, interval, job)
    wall = seconds / 3600 * (1 + overhead)
    return TrainingCost(config, True, seconds / 3600, wall, overhead, interval, price, wall * price)


def overhead_vs_interval(
    train_seconds: float,
    preemption: Preemption,
    intervals: Iterable[float],
    n_instances: int = 1,
) -> pd.DataFrame:
    """Expected preemption overhead (fraction of the work) for each checkpoint interval in
    seconds (§20.5.2), on ``n_instances`` instances; the Young/Daly interval is (near) its
    minimum."""
    train_seconds = check_positive("train_seconds", train_seconds)
    job = preemption.for_job(n_instances)
    records = []
    for tau in intervals:
        tau = check_positive("intervals", tau)
        try:
            overhead = preemption_overhead(train_seconds, tau, job)
        except ValueError as exc:
            raise ValueError(f"intervals: {tau:g} s: {exc}") from None
        records.append({"interval_seconds": tau, "overhead": overhead})
    return pd.DataFrame(records)


def spot_savings(
    catalog: pd.DataFrame | None = None,
    *,
    train_hours: float | None = None,
    preemption: Preemption | None = None,
) -> pd.DataFrame:
    """Per catalog instance type with a spot price (§20.5.2): the saving of spot over on-demand
    in %, in the region's highest, median and lowest spot zone (the catalog's own prices);
    with ``train_hours`` and ``preemption`` also the expected preemption overhead (one
    instance, Young/Daly interval) and the net saving at the median zone once it is paid."""
    frame = catalog_or_default(catalog)
    frame = frame[frame["spot_median_per_hour"].notna()]
    if (train_hours is None) != (preemption is None):
        raise ValueError("give train_hours and preemption together, or neither")
    seconds = None if train_hours is None else check_positive("train_hours", train_hours) * 3600
    records = []
    for _, row in frame.iterrows():
        od = row["on_demand_per_hour"]
        record = {
            "cloud": row["cloud"],
            "instance": row["instance"],
            "gpu_model": row["gpu_model"],
            "spot_zones": int(row["spot_zones"]),
            "saving_at_high %": 100 * (1 - row["spot_high_per_hour"] / od),
            "saving_at_median %": 100 * (1 - row["spot_median_per_hour"] / od),
            "saving_at_low %": 100 * (1 - row["spot_low_per_hour"] / od),
        }
        if seconds is not None:
            on_demand = cost_to_train(Config.from_catalog_row(row, 1, False), seconds)
            spot = cost_to_train(
                Config.from_catalog_row(row, 1, True), seconds, preemption=preemption
            )
            record["overhead %"] = 100 * spot.overhead
            record["net_saving_at_median %"] = 100 * (1 - spot.cost / on_demand.cost)
        records.append(record)
    return pd.DataFrame(records).set_index("instance")


def mixed_precision_saving(speedup: float) -> float:
    """The fraction of a run's cost that a ``speedup`` (time fp32 / time mixed) saves on the
    same instances (§20.5): 1 − 1/speedup; negative for a slow-down."""
    return 1 - 1 / check_positive("speedup", speedup)


# --------------------------------------------------------------------------------------------
# §20.5 Cost breakdown
# --------------------------------------------------------------------------------------------

#: Object storage, USD per GB-month (Amazon S3 Standard, US East (N. Virginia), first 50 TB a
#: month), and data transfer out to the internet, USD per GB (the first 10 TB a month): AWS's
#: list prices (aws.amazon.com/s3/pricing), which SkyPilot's catalog does not carry; read here
#: in guides that quote them (devnotes.tech, "Understanding AWS S3 Pricing", and
#: deepeshsoni.com/archives/256), not on AWS's page itself. Inputs of the breakdown's model.
STORAGE_PER_GB_MONTH = 0.023
EGRESS_PER_GB = 0.09
HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class CostBreakdown:
    """A run's cost by component in USD (§20.5): compute (the GPUs), storage (data set and
    checkpoints for the run and their retention), network (egress) and other."""

    compute: float
    storage: float
    network: float
    other: float

    @property
    def total(self) -> float:
        return self.compute + self.storage + self.network + self.other

    def shares(self) -> dict[str, float]:
        """Each component's share of the total, in %."""
        return {
            k: 100 * getattr(self, k) / self.total
            for k in ("compute", "storage", "network", "other")
        }


@dataclass(frozen=True)
class DataFootprint:
    """What a run stores and sends out besides computing (§20.5): the data set (``dataset_gb``)
    and ``checkpoints_kept`` checkpoints of ``checkpoint_gb`` each, kept for the run plus
    ``retention_months`` at ``storage_per_gb_month``, and ``egress_gb`` copied out of the cloud
    at ``egress_per_gb`` (traffic between instances of one zone is not billed). Sizes and
    prices are floats >= 0."""

    dataset_gb: float
    checkpoint_gb: float
    checkpoints_kept: int = 3
    retention_months: float = 1.0
    egress_gb: float = 0.0
    storage_per_gb_month: float = STORAGE_PER_GB_MONTH
    egress_per_gb: float = EGRESS_PER_GB

    def __post_init__(self):
        for name in ("dataset_gb", "checkpoint_gb", "retention_months", "egress_gb",
                     "storage_per_gb_month", "egress_per_gb"):  # fmt: skip
            value = check_real(name, getattr(self, name), finite=True)
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
            object.__setattr__(self, name, value)
        check_int("checkpoints_kept", self.checkpoints_kept, 0)


def cost_breakdown(
    compute_cost: float, run_hours: float, data: DataFootprint, other: float = 0.0
) -> CostBreakdown:
    """The cost of a run split into compute, storage and network (§20.5).

    Compute: ``compute_cost`` USD for ``run_hours`` of training. Storage: ``data``'s data set
    and checkpoints for the run plus its retention, at its price per GB-month. Network: its
    egress at its price per GB. ``other`` is anything else in USD (support, monitoring, people
    are not modelled).
    """
    compute = check_positive("compute_cost", compute_cost)
    hours = check_positive("run_hours", run_hours)
    other = check_positive("other", other, zero=True)
    if not isinstance(data, DataFootprint):
        raise TypeError(f"data must be a DataFootprint, got {type(data).__name__}")
    months = hours / HOURS_PER_MONTH + data.retention_months
    stored_gb = data.dataset_gb + data.checkpoints_kept * data.checkpoint_gb
    return CostBreakdown(
        compute=compute,
        storage=stored_gb * data.storage_per_gb_month * months,
        network=data.egress_gb * data.egress_per_gb,
        other=other,
    )
