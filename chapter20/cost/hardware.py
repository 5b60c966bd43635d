"""§20.5 What the time model knows of the hardware: datasheet peaks per precision, GPU links,
instance networks, each with its source.

The price catalog (``chapter20.cost.catalog``) says what an instance costs, not how fast it
trains. The time model (``chapter20.cost.estimates``) scales one measured step by the ratio of
the GPUs' **datasheet peaks in the workload's precision**, and prices data parallelism with the
**GPU link** inside an instance and the **network** between instances. Those figures live in
two data files, every row with the document it comes from and where that document was read:

- ``data/gpu_datasheets.csv``: dense peak TFLOP/s per GPU model (the catalog's names) and
  precision (``bf16``, ``fp16``, ``tf32``, ``fp32``), and the NVLink bandwidth; a precision a GPU
  has no units for is simply absent (the V100 has no bf16 and no tf32), and
  :func:`peak_tflops` refuses it, naming the GPU and the precisions it has;
- ``data/instance_network.csv``: the network bandwidth of the instance types whose provider
  states it in a document read here; a type without a row is modelled as one instance only.

A GPU the datasheet file does not list (the A10G: NVIDIA publishes no datasheet for AWS's
part) is priced by the catalog but not timed.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import pandas as pd

from chapter20.core.paths import data_file

__all__ = [
    "PRECISIONS",
    "gpu_link_gb_s",
    "instance_network_gbps",
    "load_gpu_datasheets",
    "load_instance_network",
    "peak_tflops",
    "precisions_of",
    "timed_gpus",
]

#: The precisions the datasheet file gives peaks for (``tf32``: fp32 inputs on tensor cores).
PRECISIONS = ("bf16", "fp16", "tf32", "fp32")
_DATASHEET_COLUMNS = (
    "gpu_model",
    "quantity",
    "precision",
    "value",
    "unit",
    "document",
    "read_via",
    "note",
)
_NETWORK_COLUMNS = ("cloud", "instance", "network_gbps", "document", "read_via", "note")


def _read(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    if tuple(frame.columns) != columns:
        raise ValueError(f"{path.name} must have the columns {columns}, got {tuple(frame.columns)}")
    for line, row in enumerate(frame.itertuples(index=False), start=2):
        value = float(row.value if "value" in columns else row.network_gbps)
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{path.name} line {line}: the value must be a number > 0")
        if not row.document.strip() or not row.read_via.startswith("https://"):
            raise ValueError(f"{path.name} line {line}: every figure needs its document and URL")
    return frame


def load_gpu_datasheets(path: str | Path | None = None) -> pd.DataFrame:
    """``data/gpu_datasheets.csv`` (§20.5): one row per GPU model and figure (``quantity``
    ``peak`` with a ``precision``, or ``nvlink``), ``value`` as a float, with its ``document``
    and the URL it was read at; ValueError for a row without a positive value or a source."""
    frame = _datasheets() if path is None else _read(Path(path), _DATASHEET_COLUMNS)
    frame = frame.copy()
    frame["value"] = frame["value"].astype(float)
    bad = frame[(frame["quantity"] == "peak") & ~frame["precision"].isin(PRECISIONS)]
    if len(bad):
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {bad.iloc[0, 2]!r}")
    return frame


@cache
def _datasheets() -> pd.DataFrame:
    return _read(data_file("gpu_datasheets.csv"), _DATASHEET_COLUMNS)


def load_instance_network(path: str | Path | None = None) -> pd.DataFrame:
    """``data/instance_network.csv`` (§20.5): the network bandwidth in Gbit/s of the instance
    types whose provider states it in a document read here, each with its source."""
    frame = _network() if path is None else _read(Path(path), _NETWORK_COLUMNS)
    frame = frame.copy()
    frame["network_gbps"] = frame["network_gbps"].astype(float)
    return frame


@cache
def _network() -> pd.DataFrame:
    return _read(data_file("instance_network.csv"), _NETWORK_COLUMNS)


@cache
def _peaks() -> dict[tuple[str, str], float]:
    frame = load_gpu_datasheets()
    peaks = frame[frame["quantity"] == "peak"]
    return {(g, p): v for g, p, v in zip(peaks["gpu_model"], peaks["precision"], peaks["value"])}


@cache
def _links() -> dict[str, float]:
    frame = load_gpu_datasheets()
    links = frame[frame["quantity"] == "nvlink"]
    return dict(zip(links["gpu_model"], links["value"] / 2))


@cache
def _networks() -> dict[tuple[str, str], float]:
    frame = load_instance_network()
    return dict(zip(zip(frame["cloud"], frame["instance"]), frame["network_gbps"]))


def timed_gpus() -> list[str]:
    """The GPU models the datasheet file gives peaks for, sorted (§20.5)."""
    return sorted({gpu for gpu, _ in _peaks()})


def precisions_of(gpu_model: str) -> list[str]:
    """The precisions ``gpu_model`` has datasheet peaks for, in :data:`PRECISIONS` order
    (empty for a GPU the file does not list)."""
    return [p for p in PRECISIONS if (gpu_model, p) in _peaks()]


def peak_tflops(gpu_model: str, precision: str) -> float:
    """The dense datasheet peak of ``gpu_model`` in ``precision``, TFLOP/s (§20.5).

    ValueError for a GPU the datasheet file does not list (naming the ones it does), for an
    unknown precision, and for a precision the GPU has no units for: ``the V100 has no bf16
    peak in its datasheet (it has fp16, fp32)``."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    have = precisions_of(gpu_model)
    if not have:
        raise ValueError(
            f"gpu_model must be one of {timed_gpus()} (the GPUs with a cited datasheet), "
            f"got {gpu_model!r}"
        )
    if precision not in have:
        raise ValueError(
            f"the {gpu_model} has no {precision} peak in its datasheet (it has "
            f"{', '.join(have)}): it cannot run a {precision} workload at tensor-core speed"
        )
    return float(_peaks()[(gpu_model, precision)])


def gpu_link_gb_s(gpu_model: str) -> float | None:
    """NVLink bandwidth per GPU and direction in GB/s (half the datasheet's two-way figure),
    or None where the datasheet file has none (§20.5). The time model assumes the GPUs of a
    multi-GPU instance are joined by NVLink: true of the 8-GPU SXM instances, an overstatement
    for an instance that joins them over PCIe."""
    link = _links().get(gpu_model)
    return None if link is None else float(link)


def instance_network_gbps(cloud: str, instance: str) -> float | None:
    """The network bandwidth of ``instance`` in Gbit/s from ``data/instance_network.csv``, or
    None where no document read here states it (§20.5)."""
    network = _networks().get((cloud, instance))
    return None if network is None else float(network)
