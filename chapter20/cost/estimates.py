"""§20.5 Training cost: a dated price catalog, time and cost to train, spot with preemptions.

Listing L12 ranks three instance types by hourly price alone (and calls the g5.xlarge's A10G a
T4). What a training run costs is price × wall time, and the wall time depends on the GPU's
speed, on how well data parallelism scales over the instance's links, and — on spot capacity —
on the work lost to preemptions. This module puts those pieces together:

- §20.5.1 :func:`load_catalog` reads ``data/instance_prices.csv``, a **dated snapshot** of list
  prices (never live prices), and validates it; :func:`cheapest_config` is L12's selector,
  corrected (the right GPU names, spot prices, filters by GPU model and memory).
- §20.5 :func:`time_to_train` and :func:`cost_to_train`, with the scaling efficiency from the
  alpha-beta all-reduce model of §20.4 (:func:`data_parallel_efficiency`) and the throughput of a
  fixed embedding workload (:data:`EMBEDDING_WORKLOAD`;
  ``chapter20.cost.throughput.measure_throughput`` times it here).
- §20.5.2 spot: the expected preemption overhead at the Young/Daly checkpoint interval, from
  :mod:`chapter20.training.checkpoints`; :func:`spot_savings` gross and net of that overhead.
- §20.5 the Pareto frontier of (time, cost) (:func:`pareto_frontier`) and a cost breakdown into
  compute, storage and network (:func:`cost_breakdown`).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from chapter20.core.checks import check_int, check_optional_positive, check_positive, check_real
from chapter20.core.gpu_record import read_gpu_measurements
from chapter20.core.paths import data_file
from chapter20.cost.preemption import preemption_overhead, young_daly_interval
from chapter20.techniques.distributed import ring_allreduce_seconds

__all__ = [
    "CATALOG_COLUMNS",
    "EGRESS_PER_GB",
    "EMBEDDING_WORKLOAD",
    "GPU_TFLOPS",
    "H200_MEASUREMENT",
    "SPOT_QUOTES",
    "STORAGE_PER_GB_MONTH",
    "Config",
    "CostBreakdown",
    "Preemption",
    "ThroughputRecord",
    "TrainingCost",
    "Workload",
    "cheapest_config",
    "configuration",
    "cost_breakdown",
    "cost_to_train",
    "data_parallel_efficiency",
    "gpu_models",
    "load_catalog",
    "mixed_precision_saving",
    "overhead_vs_interval",
    "pareto_frontier",
    "plot_pareto",
    "plot_spot_overhead",
    "plot_time_and_cost",
    "price_table",
    "snapshot_label",
    "spot_savings",
    "throughput_per_gpu",
    "time_to_train",
    "training_options",
]

# --------------------------------------------------------------------------------------------
# §20.5.1 The price catalog
# --------------------------------------------------------------------------------------------

#: The columns of ``data/instance_prices.csv`` and what each must hold (see data/README.md).
CATALOG_COLUMNS = {
    "provider": "cloud provider (aws, gcp, azure)",
    "instance": "instance or machine type, unique in the file",
    "gpu_model": "GPU model, e.g. A10G, A100, H100",
    "gpus": "GPUs per instance, an int >= 1",
    "gpu_memory_gb": "memory per GPU in GB, > 0",
    "on_demand_per_hour": "on-demand USD per instance-hour, > 0",
    "spot_low_per_hour": "low end of the spot range, USD per hour (empty: no spot)",
    "spot_high_per_hour": "high end of the spot range, USD per hour (empty: no spot)",
    "gpu_link_gb_s": "GPU-to-GPU bandwidth inside the instance, GB/s per GPU and direction",
    "network_gbps": "network bandwidth of the instance, Gbit/s",
    "region": "the region the price is for",
    "snapshot_date": "when the price applied, YYYY-MM or YYYY-MM-DD",
    "confidence": "how sure the recorded on-demand price is: high, medium or low",
    "source": "where the price is published",
}
_CONFIDENCE = ("high", "medium", "low")
_DATE = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?$")
SPOT_QUOTES = ("low", "mid", "high")


class _BadCell(ValueError):
    pass


def _text(raw: str) -> str:
    if not raw.strip():
        raise _BadCell("must not be empty")
    return raw.strip()


def _number(raw: str, *, optional: bool = False) -> float | None:
    if not raw.strip():
        if optional:
            return None
        raise _BadCell("must be a number")
    try:
        value = float(raw)
    except ValueError:
        raise _BadCell("must be a number") from None
    if not math.isfinite(value) or value <= 0:
        raise _BadCell("must be a finite number > 0")
    return value


def _count(raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise _BadCell("must be an int >= 1") from None
    if value < 1:
        raise _BadCell("must be an int >= 1")
    return value


def _date(raw: str) -> str:
    match = _DATE.match(raw.strip())
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise _BadCell("must be a date YYYY-MM or YYYY-MM-DD")
    if match.group(3) is not None:
        pd.Timestamp(raw.strip())  # a real calendar day, else ValueError below
    return raw.strip()


def _choice(raw: str) -> str:
    if raw.strip() not in _CONFIDENCE:
        raise _BadCell(f"must be one of {list(_CONFIDENCE)}")
    return raw.strip()


_PARSERS = {
    "provider": _text,
    "instance": _text,
    "gpu_model": _text,
    "gpus": _count,
    "gpu_memory_gb": _number,
    "on_demand_per_hour": _number,
    "spot_low_per_hour": lambda raw: _number(raw, optional=True),
    "spot_high_per_hour": lambda raw: _number(raw, optional=True),
    "gpu_link_gb_s": lambda raw: _number(raw, optional=True),
    "network_gbps": _number,
    "region": _text,
    "snapshot_date": _date,
    "confidence": _choice,
    "source": _text,
}


def _row_error(name: str, line: int, column: str, reason: str, raw: object) -> ValueError:
    return ValueError(f"{name} line {line}, column {column!r}: {reason}, got {raw!r}")


def _parse_row(name: str, line: int, row: dict[str, str]) -> dict[str, object]:
    record: dict[str, object] = {}
    for column, parse in _PARSERS.items():
        raw = row[column] if row[column] is not None else ""
        try:
            record[column] = parse(raw)
        except (_BadCell, ValueError) as exc:
            reason = str(exc) if isinstance(exc, _BadCell) else "must be a real calendar date"
            raise _row_error(name, line, column, reason, raw) from None
    low, high = record["spot_low_per_hour"], record["spot_high_per_hour"]
    if (low is None) != (high is None):
        column = "spot_low_per_hour" if low is None else "spot_high_per_hour"
        raise _row_error(name, line, column, "give both ends of the spot range or neither", "")
    if low is not None and high is not None:
        if low > high:
            raise _row_error(name, line, "spot_low_per_hour", f"must be <= spot_high ({high})", low)
        if high > record["on_demand_per_hour"]:
            raise _row_error(
                name,
                line,
                "spot_high_per_hour",
                f"must be <= on_demand_per_hour ({record['on_demand_per_hour']})",
                high,
            )
    if record["gpus"] > 1 and record["gpu_link_gb_s"] is None:
        raise _row_error(name, line, "gpu_link_gb_s", "needed for an instance of several GPUs", "")
    return record


def load_catalog(path: str | Path | None = None) -> pd.DataFrame:
    """The price snapshot (§20.5.1) as a DataFrame, one row per instance type, validated.

    ``path`` defaults to ``data/instance_prices.csv``. Every column of :data:`CATALOG_COLUMNS`
    must be present (and no other); a bad cell raises ``ValueError`` naming the file, the line
    and the column. Guaranteed on return: positive prices and sizes, spot ranges with
    low <= high <= on-demand, a date on every row, unique instance names.
    The prices are the snapshot's, never live prices: show :func:`snapshot_label` with them.
    """
    if path is None:
        return _default_catalog().copy()
    return _read_catalog(Path(path))


@cache
def _default_catalog() -> pd.DataFrame:
    return _read_catalog(data_file("instance_prices.csv"))


def _read_catalog(path: Path) -> pd.DataFrame:
    name = path.name
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in CATALOG_COLUMNS if c not in header]
        if missing:
            raise ValueError(f"{name} line 1: missing column(s) {missing}")
        extra = [c for c in header if c not in CATALOG_COLUMNS]
        if extra:
            raise ValueError(f"{name} line 1: unknown column(s) {extra}")
        records, seen = [], {}
        for line, row in enumerate(reader, start=2):
            if None in row:
                raise ValueError(f"{name} line {line}: more cells than columns")
            record = _parse_row(name, line, row)
            key = record["instance"]  # looked up by name: unique across providers
            if key in seen:
                raise _row_error(
                    name, line, "instance", f"duplicate of line {seen[key]}", record["instance"]
                )
            seen[key] = line
            records.append(record)
    if not records:
        raise ValueError(f"{name}: no rows")
    return pd.DataFrame.from_records(records, columns=list(CATALOG_COLUMNS))


def _catalog(catalog: pd.DataFrame | None) -> pd.DataFrame:
    return load_catalog() if catalog is None else catalog


def gpu_models(catalog: pd.DataFrame | None = None) -> list[str]:
    """The GPU models of the catalog, sorted (§20.5.1)."""
    return sorted(_catalog(catalog)["gpu_model"].unique())


def snapshot_label(catalog: pd.DataFrame | None = None) -> str:
    """A caption for anything that shows catalog prices: which snapshot they come from."""
    dates = sorted(_catalog(catalog)["snapshot_date"].unique())
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return f"list prices of a {when} snapshot (not live prices; see data/README.md)"


def price_table(catalog: pd.DataFrame | None = None) -> pd.DataFrame:
    """The catalog for display (§20.5.1): GPUs, memory, $/h, $/GPU-hour, spot range and the
    spot saving it implies, and how confident the recorded on-demand price is."""
    frame = _catalog(catalog)
    spot = frame["spot_low_per_hour"].notna()
    low = frame["spot_low_per_hour"].astype(float)
    high = frame["spot_high_per_hour"].astype(float)
    table = pd.DataFrame(
        {
            "provider": frame["provider"],
            "instance": frame["instance"],
            "GPUs": frame["gpus"].astype(str) + " x " + frame["gpu_model"],
            "GB/GPU": frame["gpu_memory_gb"].astype(int),
            "$/h": frame["on_demand_per_hour"],
            "$/GPU-h": (frame["on_demand_per_hour"] / frame["gpus"]).round(3),
            "spot $/h": np.where(
                spot, low.map("{:.2f}".format) + "-" + high.map("{:.2f}".format), "—"
            ),
            "spot saving %": np.where(
                spot,
                (100 * (1 - high / frame["on_demand_per_hour"])).round().map("{:.0f}".format)
                + "-"
                + (100 * (1 - low / frame["on_demand_per_hour"])).round().map("{:.0f}".format),
                "—",
            ),
            "confidence": frame["confidence"],
        }
    )
    return table.set_index("instance")


# --------------------------------------------------------------------------------------------
# §20.5.1 Configurations and L12's selector
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """``n_instances`` instances of one catalog type (§20.5.1); prices are for all of them.

    ``price_per_hour`` is what the budget is compared with: on-demand, or with ``spot`` the
    high end of the spot range (so no price inside the range exceeds the budget).
    """

    provider: str
    instance: str
    gpu_model: str
    gpu_memory_gb: float
    gpus_per_instance: int
    n_instances: int
    spot: bool
    on_demand_per_hour: float
    spot_low_per_hour: float | None
    spot_high_per_hour: float | None
    gpu_link_gb_s: float | None
    network_gbps: float
    region: str
    snapshot_date: str
    confidence: str

    @property
    def gpus(self) -> int:
        return self.n_instances * self.gpus_per_instance

    @property
    def price_per_hour(self) -> float:
        return self.spot_price("high") if self.spot else self.on_demand_per_hour

    def spot_price(self, quote: str = "mid") -> float:
        """The spot price of the whole configuration at the ``low``, ``mid`` or ``high`` end."""
        if quote not in SPOT_QUOTES:
            raise ValueError(f"spot_quote must be one of {list(SPOT_QUOTES)}, got {quote!r}")
        if self.spot_low_per_hour is None or self.spot_high_per_hour is None:
            raise ValueError(f"{self.instance} has no spot price in the catalog")
        low, high = self.spot_low_per_hour, self.spot_high_per_hour
        return {"low": low, "mid": (low + high) / 2, "high": high}[quote]

    def describe(self) -> str:
        """One line: ``8 x g5.xlarge (aws, 8 x A10G 24 GB) at $8.048/h on demand [2025-05]``."""
        kind = "spot, high end" if self.spot else "on demand"
        return (
            f"{self.n_instances} x {self.instance} ({self.provider}, {self.gpus} x "
            f"{self.gpu_model} {self.gpu_memory_gb:g} GB) at ${self.price_per_hour:,.3f}/h "
            f"{kind} [{self.snapshot_date} prices]"
        )


def _config_from_row(row: pd.Series, n_instances: int, spot: bool) -> Config:
    def scaled(value: object) -> float | None:
        return None if pd.isna(value) else round(float(value) * n_instances, 6)

    return Config(
        provider=row["provider"],
        instance=row["instance"],
        gpu_model=row["gpu_model"],
        gpu_memory_gb=float(row["gpu_memory_gb"]),
        gpus_per_instance=int(row["gpus"]),
        n_instances=n_instances,
        spot=spot,
        on_demand_per_hour=scaled(row["on_demand_per_hour"]),
        spot_low_per_hour=scaled(row["spot_low_per_hour"]),
        spot_high_per_hour=scaled(row["spot_high_per_hour"]),
        gpu_link_gb_s=None if pd.isna(row["gpu_link_gb_s"]) else float(row["gpu_link_gb_s"]),
        network_gbps=float(row["network_gbps"]),
        region=row["region"],
        snapshot_date=row["snapshot_date"],
        confidence=row["confidence"],
    )


def configuration(
    instance: str, n_instances: int = 1, *, spot: bool = False, catalog: pd.DataFrame | None = None
) -> Config:
    """``n_instances`` of the catalog's ``instance`` as a :class:`Config` (§20.5.1);
    ValueError for an instance the catalog lacks, or ``spot`` where it has no spot price."""
    frame = _catalog(catalog)
    n_instances = check_int("n_instances", n_instances, 1)
    rows = frame[frame["instance"] == instance]
    if rows.empty:
        raise ValueError(f"instance must be one of {sorted(frame['instance'])}, got {instance!r}")
    row = rows.iloc[0]
    if spot and pd.isna(row["spot_low_per_hour"]):
        raise ValueError(f"instance {instance!r} has no spot price in the catalog")
    return _config_from_row(row, n_instances, bool(spot))


def _positive(name: str, value: object) -> float:
    return check_positive(name, value)


def cheapest_config(
    target_gpus: int,
    budget_per_hour: float,
    *,
    prefer: str = "cost",
    gpu_model: str | None = None,
    min_gpu_memory_gb: float | None = None,
    spot: bool = False,
    catalog: pd.DataFrame | None = None,
) -> Config:
    """L12's selector, corrected (§20.5.1): ``n`` instances of one catalog type with at least
    ``target_gpus`` GPUs whose price per hour is within ``budget_per_hour``.

    - ``prefer="cost"``: the fewest instances that reach ``target_gpus``, and of those types
      the cheapest configuration per hour;
    - ``prefer="gpus"``: as many instances as the budget buys, and the type that gives the most
      GPUs (the cheaper one on a tie).

    ``gpu_model`` and ``min_gpu_memory_gb`` filter the types; ``spot=True`` prices spot
    capacity at the high end of its range, so the budget holds anywhere inside the range.
    Ties go to the lower price, then fewer instances, then the instance name: the answer is
    deterministic. More budget never gives a worse answer: the same or a cheaper configuration
    (``cost``), the same or more GPUs (``gpus``). Raises ValueError for bad arguments and when
    nothing fits, naming the cheapest configuration that would.
    """
    target_gpus = check_int("target_gpus", target_gpus, 1)
    budget = _positive("budget_per_hour", budget_per_hour)
    if prefer not in ("cost", "gpus"):
        raise ValueError(f"prefer must be 'cost' or 'gpus', got {prefer!r}")
    if not isinstance(spot, bool):
        raise TypeError(f"spot must be a bool, got {type(spot).__name__}")
    frame = _catalog(catalog)
    if gpu_model is not None:
        known = gpu_models(frame)
        if gpu_model not in known:
            raise ValueError(f"gpu_model must be one of {known} or None, got {gpu_model!r}")
        frame = frame[frame["gpu_model"] == gpu_model]
    if min_gpu_memory_gb is not None:
        min_memory = _positive("min_gpu_memory_gb", min_gpu_memory_gb)
        frame = frame[frame["gpu_memory_gb"] >= min_memory]
    if spot:
        frame = frame[frame["spot_high_per_hour"].notna()]
    if frame.empty:
        raise ValueError(
            "no instance type in the catalog matches "
            f"gpu_model={gpu_model!r}, min_gpu_memory_gb={min_gpu_memory_gb!r}, spot={spot}"
        )
    fewest = [
        _config_from_row(row, math.ceil(target_gpus / row["gpus"]), spot)
        for _, row in frame.iterrows()
    ]
    fits = [c for c in fewest if c.price_per_hour <= budget * (1 + 1e-12)]
    if not fits:
        cheapest = min(fewest, key=_cost_key)
        raise ValueError(
            f"no configuration of >= {target_gpus} GPUs fits budget_per_hour={budget:g}; "
            f"the cheapest is {cheapest.describe()}"
        )
    if prefer == "cost":
        return min(fits, key=_cost_key)
    most = []
    for config in fits:
        per_instance = config.price_per_hour / config.n_instances
        n = max(config.n_instances, int(budget * (1 + 1e-12) // per_instance))
        row = frame[frame["instance"] == config.instance].iloc[0]
        most.append(_config_from_row(row, n, spot))
    return min(most, key=lambda c: (-c.gpus, *_cost_key(c)))


def _cost_key(config: Config) -> tuple:
    return (round(config.price_per_hour, 9), config.n_instances, config.instance)


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
        _positive("pairs", self.pairs)
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
        batches = sorted(self.step_seconds[precision])
        if len(batches) < 2:
            raise ValueError(f"need step times at two batch sizes or more for {precision}")
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
# medians of 20 steps: ``batch / training.measure_throughput(EMBEDDING_WORKLOAD, batch=batch,
# precision=..., device="cuda", warmup=5, repeat=20)``, eager PyTorch, AdamW (not fused),  no
# torch.compile. Read from the GPU record (``chapter20.core.gpu_record``), where the figures live.
H200_MEASUREMENT = _throughput_record("NVIDIA H200", "H200")

#: Dense tensor-core peak per GPU model in TFLOP/s (bf16; fp16 on the V100, which has no bf16),
#: from NVIDIA's datasheets (SXM parts); the A10G has no NVIDIA datasheet: 70 is the commonly
#: reported figure (e.g. Baseten's A10 vs A10G comparison), against the A10's 125.
GPU_TFLOPS = {"V100": 125.0, "A10G": 70.0, "A100": 312.0, "H100": 989.0, "H200": 989.0}


def throughput_per_gpu(
    gpu_model: str,
    workload: Workload = EMBEDDING_WORKLOAD,
    record: ThroughputRecord = H200_MEASUREMENT,
) -> float:
    """Pairs per second of ``workload`` on one ``gpu_model`` (§20.5) — a **model** calibrated
    on ``record``: step time = overhead + batch × per-pair time (:meth:`ThroughputRecord.
    step_model`), with the per-pair time scaled by the ratio of dense tensor-core peaks
    (:data:`GPU_TFLOPS`) and the overhead kept as measured. An assumption: it ignores memory
    bandwidth and assumes every GPU reaches the same fraction of its peak."""
    if gpu_model not in GPU_TFLOPS:
        raise ValueError(f"gpu_model must be one of {sorted(GPU_TFLOPS)}, got {gpu_model!r}")
    if workload != EMBEDDING_WORKLOAD:
        raise ValueError("the recorded step times are for EMBEDDING_WORKLOAD only; measure yours")
    overhead, per_pair = record.step_model(workload.precision)
    per_pair *= GPU_TFLOPS[record.gpu_model] / GPU_TFLOPS[gpu_model]
    return workload.pairs_per_gpu / (overhead + workload.pairs_per_gpu * per_pair)


def time_to_train(
    work: float, throughput_per_gpu: float, n_gpus: int, scaling_efficiency: float
) -> float:
    """Seconds to process ``work`` examples at ``throughput_per_gpu`` examples/s on ``n_gpus``
    GPUs that scale with ``scaling_efficiency`` (speed-up / GPUs, in (0, 1]; e.g. from
    :func:`data_parallel_efficiency`) (§20.5): work / (throughput × GPUs × efficiency)."""
    work = _positive("work", work)
    throughput = _positive("throughput_per_gpu", throughput_per_gpu)
    n_gpus = check_int("n_gpus", n_gpus, 1)
    efficiency = _positive("scaling_efficiency", scaling_efficiency)
    if efficiency > 1:
        raise ValueError(f"scaling_efficiency must be in (0, 1], got {efficiency}")
    return work / (throughput * n_gpus * efficiency)


#: Latencies of the alpha-beta model (seconds per ring step): NVLink's as in
#: ``distributed_lab.LINKS``; 20 us for an instance network, as its Ethernet entry.
GPU_LINK_LATENCY_S = 3e-6
NETWORK_LATENCY_S = 20e-6


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
    hierarchically, as ``distributed_lab.scaling_model`` does: a ring over the instance's GPUs
    on its GPU link (``gpu_link_gb_s`` per GPU), then a ring over the instances for each GPU's
    1/g share, over its 1/g share of the instance's network. ``overlap`` of the communication
    hides behind the backward pass. Efficiency = compute / (compute + exposed communication);
    1.0 on a single GPU. Upper bound: no stragglers, no framework overhead.
    """
    gradient_bytes = _positive("gradient_bytes", gradient_bytes)
    compute = _positive("step_compute_seconds", step_compute_seconds)
    overlap = check_real("overlap", overlap, finite=True)
    if not 0 <= overlap <= 1:
        raise ValueError(f"overlap must be in [0, 1], got {overlap}")
    gpu_link_latency_s = check_positive("gpu_link_latency_s", gpu_link_latency_s, zero=True)
    network_latency_s = check_positive("network_latency_s", network_latency_s, zero=True)
    in_node = config.gpus_per_instance
    comm = 0.0
    if in_node > 1:
        link = config.gpu_link_gb_s * 1e9
        comm += ring_allreduce_seconds(gradient_bytes, in_node, gpu_link_latency_s, link)
    network_per_gpu = config.network_gbps * 1e9 / 8 / in_node
    comm += ring_allreduce_seconds(
        gradient_bytes / in_node, config.n_instances, network_latency_s, network_per_gpu
    )
    return compute / (compute + comm * (1 - overlap))


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
        _positive("mtbf_hours", self.mtbf_hours)
        _positive("checkpoint_seconds", self.checkpoint_seconds)
        restart = check_real("restart_seconds", self.restart_seconds, finite=True)
        if restart < 0:
            raise ValueError(f"restart_seconds must be >= 0, got {restart}")

    def job_mtbf_seconds(self, n_instances: int) -> float:
        """Mean time between preemptions of a synchronous job on ``n_instances``: any one of
        them stops it, so the rates add."""
        return self.mtbf_hours * 3600 / check_int("n_instances", n_instances, 1)


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
    spot_quote: str = "mid",
    interval_seconds: float | None = None,
) -> TrainingCost:
    """Cost of ``train_seconds`` of training on ``config`` (§20.5, §20.5.2).

    On demand: the time at the on-demand price (no preemptions; checkpoint time is not
    counted). With ``config.spot``: the spot price at
    ``spot_quote`` (``low``/``mid``/``high`` of the range) for the expected wall time under
    ``preemption`` (required), checkpointing every ``interval_seconds`` — by default the
    Young/Daly interval √(2·C·M) for the job's mean time between preemptions M, which shrinks
    with the number of instances. The expected overhead is Daly's model
    (:func:`chapter20.cost.preemption.preemption_overhead`); the whole wall time is billed.
    """
    if not isinstance(config, Config):
        raise TypeError(f"config must be a Config, got {type(config).__name__}")
    seconds = _positive("train_seconds", train_seconds)
    interval_seconds = check_optional_positive("interval_seconds", interval_seconds)
    if not config.spot:
        hours = seconds / 3600
        price = config.on_demand_per_hour
        return TrainingCost(config, False, hours, hours, 0.0, None, price, hours * price)
    if preemption is None:
        raise ValueError("preemption is required for a spot configuration (mtbf, checkpoint)")
    price = config.spot_price(spot_quote)
    mtbf = preemption.job_mtbf_seconds(config.n_instances)
    if interval_seconds is None:
        interval = young_daly_interval(preemption.checkpoint_seconds, mtbf)
    else:
        interval = _positive("interval_seconds", interval_seconds)
    overhead = preemption_overhead(
        seconds, interval, preemption.checkpoint_seconds, mtbf, preemption.restart_seconds
    )
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
    train_seconds = _positive("train_seconds", train_seconds)
    mtbf = preemption.job_mtbf_seconds(n_instances)
    records = []
    for tau in intervals:
        tau = _positive("intervals", tau)
        try:
            overhead = preemption_overhead(
                train_seconds, tau, preemption.checkpoint_seconds, mtbf, preemption.restart_seconds
            )
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
    """Per instance type with a spot price (§20.5.2): the saving of spot over on-demand in %,
    at the low, mid and high end of the spot range; with ``train_hours`` and ``preemption``
    also the net saving at the mid price once the expected preemption overhead (one instance,
    Young/Daly interval) is paid for."""
    frame = _catalog(catalog)
    frame = frame[frame["spot_low_per_hour"].notna()]
    if (train_hours is None) != (preemption is None):
        raise ValueError("give train_hours and preemption together, or neither")
    records = []
    for _, row in frame.iterrows():
        od = row["on_demand_per_hour"]
        record = {
            "instance": row["instance"],
            "gpu_model": row["gpu_model"],
            "saving_at_high %": 100 * (1 - row["spot_high_per_hour"] / od),
            "saving_at_mid %": 100
            * (1 - (row["spot_low_per_hour"] + row["spot_high_per_hour"]) / 2 / od),
            "saving_at_low %": 100 * (1 - row["spot_low_per_hour"] / od),
        }
        if train_hours is not None:
            seconds = _positive("train_hours", train_hours) * 3600
            on_demand = cost_to_train(_config_from_row(row, 1, False), seconds)
            spot = cost_to_train(_config_from_row(row, 1, True), seconds, preemption=preemption)
            record["overhead %"] = 100 * spot.overhead
            record["net_saving_at_mid %"] = 100 * (1 - spot.cost / on_demand.cost)
        records.append(record)
    return pd.DataFrame(records).set_index("instance")


def mixed_precision_saving(speedup: float) -> float:
    """The fraction of a run's cost that a ``speedup`` (time fp32 / time mixed) saves on the
    same instances (§20.5): 1 − 1/speedup; negative for a slow-down."""
    return 1 - 1 / _positive("speedup", speedup)


# --------------------------------------------------------------------------------------------
# §20.5 Options over the catalog, and the Pareto frontier
# --------------------------------------------------------------------------------------------


def training_options(
    workload: Workload = EMBEDDING_WORKLOAD,
    gpu_counts: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128),
    *,
    instances: Sequence[str] | None = None,
    spot: bool = False,
    preemption: Preemption | None = None,
    overlap: float = 0.0,
    catalog: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Time and cost to train ``workload`` for every catalog type (or ``instances``) and every
    GPU count that is a whole number of its instances (§20.5).

    Per row: GPUs, per-GPU throughput (:func:`throughput_per_gpu`, an assumption), the
    alpha-beta scaling efficiency, ``hours`` (wall time, with the preemption overhead on spot),
    ``price_per_hour`` and ``cost``. On spot the price is the middle of the range.
    """
    frame = _catalog(catalog)
    if instances is not None:
        unknown = sorted(set(instances) - set(frame["instance"]))
        if unknown:
            raise ValueError(f"instances not in the catalog: {unknown}")
        frame = frame[frame["instance"].isin(instances)]
    if spot:
        frame = frame[frame["spot_low_per_hour"].notna()]
    counts = [check_int("gpu_counts", g, 1) for g in gpu_counts]
    records = []
    for _, row in frame.iterrows():
        per_gpu = throughput_per_gpu(row["gpu_model"], workload)
        step = workload.pairs_per_gpu / per_gpu
        for gpus in counts:
            if gpus % row["gpus"]:
                continue
            config = _config_from_row(row, gpus // row["gpus"], spot)
            efficiency = data_parallel_efficiency(
                config, workload.gradient_bytes, step, overlap=overlap
            )
            seconds = time_to_train(workload.pairs, per_gpu, gpus, efficiency)
            run = cost_to_train(config, seconds, preemption=preemption)
            records.append(
                {
                    "instance": row["instance"],
                    "provider": row["provider"],
                    "gpu_model": row["gpu_model"],
                    "n_instances": config.n_instances,
                    "gpus": gpus,
                    "pairs_per_s_per_gpu": per_gpu,
                    "efficiency": efficiency,
                    "hours": run.wall_hours,
                    "price_per_hour": run.price_per_hour,
                    "cost": run.cost,
                }
            )
    return pd.DataFrame(records)


def pareto_frontier(options: pd.DataFrame, time: str = "hours", cost: str = "cost") -> pd.DataFrame:
    """The options no other option beats on both time and cost (§20.5), sorted by time: along
    the frontier the time rises and the cost strictly falls. Ties keep the first option."""
    for column in (time, cost):
        if column not in options.columns:
            raise ValueError(f"options has no column {column!r}")
        values = options[column].to_numpy(dtype=float)
        if not np.isfinite(values).all():
            raise ValueError(f"column {column!r} must hold finite numbers (no NaN)")
    ordered = options.sort_values([time, cost], kind="stable")
    keep, best = [], math.inf
    for index, value in zip(ordered.index, ordered[cost]):
        if value < best:
            keep.append(index)
            best = value
    return ordered.loc[keep]


# --------------------------------------------------------------------------------------------
# §20.5 Cost breakdown
# --------------------------------------------------------------------------------------------

#: Object storage, USD per GB-month (Amazon S3 Standard, us-east-1, first 50 TB), and data
#: transfer out to the internet, USD per GB (AWS, first 10 TB a month): list prices of the same
#: snapshot as the catalog, from aws.amazon.com/s3/pricing and aws.amazon.com/ec2/pricing/on-demand.
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


def cost_breakdown(
    compute_cost: float,
    *,
    run_hours: float,
    dataset_gb: float,
    checkpoint_gb: float,
    checkpoints_kept: int = 3,
    retention_months: float = 1.0,
    egress_gb: float = 0.0,
    other: float = 0.0,
    storage_per_gb_month: float = STORAGE_PER_GB_MONTH,
    egress_per_gb: float = EGRESS_PER_GB,
) -> CostBreakdown:
    """The cost of a run split into compute, storage and network (§20.5).

    Storage: the data set and ``checkpoints_kept`` checkpoints, kept for the run plus
    ``retention_months``, at ``storage_per_gb_month``. Network: ``egress_gb`` out of the
    cloud at ``egress_per_gb`` (traffic between instances of one zone is not billed).
    ``other`` is anything else in USD (support, monitoring, people are not modelled).
    """
    compute = _positive("compute_cost", compute_cost)
    hours = _positive("run_hours", run_hours)
    sizes = {}
    for name, value in (
        ("dataset_gb", dataset_gb),
        ("checkpoint_gb", checkpoint_gb),
        ("retention_months", retention_months),
        ("egress_gb", egress_gb),
        ("other", other),
        ("storage_per_gb_month", storage_per_gb_month),
        ("egress_per_gb", egress_per_gb),
    ):
        sizes[name] = check_real(name, value, finite=True)
        if sizes[name] < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    kept = check_int("checkpoints_kept", checkpoints_kept, 0)
    months = hours / HOURS_PER_MONTH + sizes["retention_months"]
    stored_gb = sizes["dataset_gb"] + kept * sizes["checkpoint_gb"]
    return CostBreakdown(
        compute=compute,
        storage=stored_gb * sizes["storage_per_gb_month"] * months,
        network=sizes["egress_gb"] * sizes["egress_per_gb"],
        other=sizes["other"],
    )


# --------------------------------------------------------------------------------------------
# Figures (house style)
# --------------------------------------------------------------------------------------------


def _plain_log_axis(axis, values) -> None:
    """Log scale with the given values as plain-number ticks (1, 8, 64 rather than 2^3)."""
    ticks = sorted({float(v) for v in values})
    axis.set_ticks(ticks, [f"{t:g}" for t in ticks])
    import matplotlib.ticker  # the plots import matplotlib; the cost model does not need it

    axis.set_minor_locator(matplotlib.ticker.NullLocator())


def plot_time_and_cost(options: pd.DataFrame, caption: str = ""):
    """Two panels over GPU count (§20.5): wall time in hours (log) and cost in USD, one line
    per instance type. ``caption`` (the price snapshot) goes under the figure."""
    from chapter20.core.plotting import new_panels

    fig, (left, right) = new_panels(2, "Time and cost to train one workload", figsize=(11, 4.2))
    styles = ("-", "--", "-.", ":")
    markers = ("o", "s", "^", "D", "v", "P")
    for index, (instance, group) in enumerate(options.groupby("instance", sort=False)):
        label = f"{instance} ({group['gpu_model'].iloc[0]})"
        # distinct dashes and markers: instances with the same GPUs draw the same curve
        style = dict(linestyle=styles[index % 4], marker=markers[index % 6], markersize=4,
                     label=label)  # fmt: skip
        left.plot(group["gpus"], group["hours"], **style)
        right.plot(group["gpus"], group["cost"], **style)
    for ax in (left, right):
        ax.set_xscale("log")
        _plain_log_axis(ax.xaxis, options["gpus"])
        ax.set_xlabel("GPUs")
    left.set(ylabel="wall time (hours)", yscale="log")
    right.set(ylabel="cost of the run (USD)", ylim=(0, 1.1 * options["cost"].max()))
    right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if caption:
        fig.text(0.5, -0.02, caption, ha="center", fontsize=8, color="#555555")
    return fig


def plot_pareto(
    options: pd.DataFrame,
    frontier: pd.DataFrame,
    caption: str = "",
    highlight: dict[str, tuple[float, float]] | None = None,
):
    """Every option as a point of (wall time, cost) coloured by GPU model, the Pareto frontier
    as a line labelled with its GPU counts, and ``highlight`` points (label: (hours, cost))
    as stars (§20.5)."""
    from chapter20.core.plotting import new_figure

    fig, ax = new_figure(
        "Time vs cost: every option and the Pareto frontier",
        "wall time (hours, log scale)",
        "cost of the run (USD)",
    )
    for gpu_model, group in options.groupby("gpu_model"):
        ax.scatter(group["hours"], group["cost"], s=14, alpha=0.6, label=gpu_model)
    ax.plot(frontier["hours"], frontier["cost"], "k-", lw=1.2, label="Pareto frontier (GPUs)")
    for row in frontier.itertuples():
        ax.annotate(f"{row.gpus}", (row.hours, row.cost), fontsize=7, ha="center", va="top",
                    xytext=(0, -4), textcoords="offset points")  # fmt: skip
    for label, (hours, cost) in (highlight or {}).items():
        ax.plot(hours, cost, "*", color="black", markersize=11)
        ax.annotate(label, (hours, cost), fontsize=8, xytext=(6, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.1 * options["cost"].max())
    ax.legend(fontsize=8, loc="lower left", ncol=2)
    if caption:
        ax.text(0.0, -0.2, caption, transform=ax.transAxes, fontsize=8, color="#555555")
    return fig


def plot_spot_overhead(curves: dict[str, pd.DataFrame], optima: dict[str, tuple[float, float]]):
    """Preemption overhead (%) against the checkpoint interval (minutes), one curve per mean
    time between preemptions; ``optima[label]`` = (Young/Daly interval in seconds, its
    overhead) is marked with a dot (§20.5.2). The y axis stops at 10x the largest optimum."""
    from chapter20.core.plotting import new_figure

    fig, ax = new_figure(
        "Spot: expected overhead vs checkpoint interval",
        "checkpoint interval (minutes)",
        "expected overhead (% of the work)",
    )
    for label, frame in curves.items():
        (line,) = ax.plot(frame["interval_seconds"] / 60, 100 * frame["overhead"], label=label)
        interval, overhead = optima[label]
        ax.plot(interval / 60, 100 * overhead, "o", color=line.get_color())
    ax.set_xscale("log")
    ax.set_yscale("log")
    lowest = min(overhead for _, overhead in optima.values())
    ax.set_ylim(50 * lowest, 1000 * max(overhead for _, overhead in optima.values()))
    ax.legend(fontsize=8, title="dots: Young/Daly interval", title_fontsize=8)
    return fig
