"""§20.1.1, §20.4 What an all-reduce costs, modelled: bytes, the alpha-beta (latency + bandwidth)
model of a ring, its fit to measured times, and the data-parallel scaling it predicts.

- :func:`ring_allreduce_bytes` / :func:`ring_allreduce_seconds`: a ring all-reduce of ``n``
  bytes over W ranks sends 2(W−1)/W × ``n`` per rank in 2(W−1) steps; each step costs the
  latency alpha, each byte 1 / bandwidth (beta).
- :func:`fit_alpha_beta`: alpha and beta fitted to measured all-reduce times
  (``chapter20.techniques.allreduce_timing.allreduce_times_on_rank`` measures them).
- :data:`LINKS`, :func:`hierarchical_allreduce_seconds`, :func:`scaling_efficiency`,
  :func:`scaling_model`: data parallelism over nodes of GPUs — a ring inside the node, then a
  ring over the nodes for each GPU's share — and the efficiency compute / (compute + exposed
  communication) that §20.5's cost model (``chapter20.cost.estimates``) scales with.
- :func:`ring_allreduce_reference`: the ring itself, written out over a list of tensors (one per
  rank): reduce-scatter, then all-gather, with the log of who sent which chunk at each step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from chapter20.core.checks import check_int, check_positive, check_real

# pandas costs every torchrun worker half a second to import; only the tables need it.
if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "LINKS",
    "ring_allreduce_bytes",
    "ring_allreduce_seconds",
    "fit_alpha_beta",
    "hierarchical_allreduce_seconds",
    "scaling_efficiency",
    "scaling_model",
    "ring_allreduce_reference",
]

#: Links of the scaling model: bandwidth in bytes/s per GPU in one direction, latency (alpha) in
#: seconds per ring step. Bandwidths: NVLink 3 of an A100, 600 GB/s both directions together
#: (NVIDIA's A100 datasheet, the ``nvlink`` row of data/gpu_datasheets.csv that §20.5's cost
#: model reads; tests/test_communication_model.py checks that the two agree); InfiniBand HDR and
#: 100 Gb Ethernet at their line rates, 200 and 100 Gbit/s, one port per GPU. The latencies are
#: the model's round assumptions (a few microseconds on NVLink and InfiniBand, tens over
#: Ethernet), not cited measurements: the model's conclusions are read at sizes where the
#: bandwidth term dominates.
LINKS = {
    "NVLink (A100)": {"bandwidth": 300e9, "latency": 3e-6},
    "InfiniBand HDR 200 Gb/s": {"bandwidth": 25e9, "latency": 5e-6},
    "Ethernet 100 Gb/s": {"bandwidth": 12.5e9, "latency": 20e-6},
}


def ring_allreduce_bytes(tensor_bytes: float, world_size: int) -> float:
    """Bytes one rank sends in a ring all-reduce of ``tensor_bytes`` (§20.1.1): reduce-scatter
    then all-gather, each W-1 steps of 1/W of the tensor, so 2(W-1)/W × ``tensor_bytes``. It
    stays below twice the tensor at any W; the traffic summed over ranks grows as W."""
    tensor_bytes = check_positive("tensor_bytes", tensor_bytes, zero=True)
    world_size = check_int("world_size", world_size, 1)
    return 2 * (world_size - 1) / world_size * tensor_bytes


def ring_allreduce_seconds(nbytes: float, world_size: int, latency: float, bandwidth: float):
    """Seconds of a ring all-reduce of ``nbytes`` over ``world_size`` ranks (§20.1.1, §20.4):
    2(W−1) messages of latency ``latency`` (alpha) each carrying ``nbytes``/W at ``bandwidth``
    bytes/s (1/beta). The alpha-beta model that §20.5's cost model scales with."""
    nbytes = check_positive("nbytes", nbytes, zero=True)
    world_size = check_int("world_size", world_size, 1)
    latency = check_positive("latency", latency, zero=True)
    bandwidth = check_positive("bandwidth", bandwidth)
    if world_size == 1:
        return 0.0
    steps = 2 * (world_size - 1)
    return steps * latency + steps / world_size * nbytes / bandwidth


def fit_alpha_beta(frame: pd.DataFrame) -> tuple[float, float]:
    """Fit the ring all-reduce model t = 2(W-1)·alpha + 2(W-1)/W · bytes · beta to measured
    times (§20.4): ``frame`` has columns ``bytes``, ``seconds`` and the world size (``W`` or
    ``world_size``); returns alpha, the per-step latency (s), and beta, the seconds per byte
    (1 / bandwidth), both clipped at 0. Least squares on *relative* residuals (weights 1/t):
    the sizes span decades, and an unweighted fit would let the largest messages decide alone.
    Two sizes give the line through both."""
    world_column = "W" if "W" in frame else "world_size"
    missing = [c for c in ("bytes", "seconds", world_column) if c not in frame]
    if missing or len(frame) < 2:
        raise ValueError(
            "frame must have columns bytes, seconds and W (or world_size) and two or more "
            f"rows, got columns {list(frame.columns)} and {len(frame)} row(s)"
        )
    world = check_int("W", int(frame[world_column].iloc[0]), 2)
    steps = 2 * (world - 1)
    x = np.asarray(frame["bytes"], dtype=float) * steps / world
    seconds = np.asarray(frame["seconds"], dtype=float)
    slope, intercept = np.polyfit(x, seconds, 1, w=1 / seconds)
    return max(intercept / steps, 0.0), max(slope, 0.0)


def hierarchical_allreduce_seconds(
    gradient_bytes: float,
    gpus_per_node: int,
    nodes: int,
    *,
    gpu_link: tuple[float, float] | None,
    network: tuple[float, float] | None,
) -> float:
    """Seconds of a hierarchical all-reduce of ``gradient_bytes`` (§20.4): a ring over the
    node's ``gpus_per_node`` GPUs on ``gpu_link``, then a ring over the ``nodes`` for each
    GPU's 1/``gpus_per_node`` share on ``network`` (each GPU carries its share over its own
    part of the network). A link is ``(latency s, bandwidth bytes/s per GPU)``; one the run does
    not use (one GPU per node, one node) may be None. ValueError where a needed link is None."""
    gradient_bytes = check_positive("gradient_bytes", gradient_bytes, zero=True)
    gpus_per_node = check_int("gpus_per_node", gpus_per_node, 1)
    nodes = check_int("nodes", nodes, 1)
    links = {
        "gpu_link": _check_link("gpu_link", gpu_link),
        "network": _check_link("network", network),
    }
    comm = 0.0
    for name, world, nbytes in (
        ("gpu_link", gpus_per_node, gradient_bytes),
        ("network", nodes, gradient_bytes / gpus_per_node),
    ):
        link = links[name]
        if world == 1:
            continue
        if link is None:
            raise ValueError(f"{name} is needed for a ring over {world} and must not be None")
        comm += ring_allreduce_seconds(nbytes, world, *link)
    return comm


def _check_link(name: str, link) -> tuple[float, float] | None:
    """None, or ``(latency >= 0, bandwidth > 0)`` as two floats."""
    if link is None:
        return None
    if not isinstance(link, (tuple, list)) or len(link) != 2:
        raise TypeError(f"{name} must be None or (latency s, bandwidth bytes/s), got {link!r}")
    return (
        check_positive(f"{name} latency", link[0], zero=True),
        check_positive(f"{name} bandwidth", link[1]),
    )


def scaling_efficiency(compute_seconds: float, comm_seconds: float, overlap: float = 0.0) -> float:
    """Data-parallel scaling efficiency (speed-up / GPUs) of a step that computes for
    ``compute_seconds`` and communicates for ``comm_seconds``, ``overlap`` of which hides behind
    the backward pass (§20.4): compute / (compute + (1 − overlap) × comm). An upper bound: no
    stragglers, no framework overhead."""
    compute = check_positive("compute_seconds", compute_seconds)
    comm = check_positive("comm_seconds", comm_seconds, zero=True)
    overlap = check_real("overlap", overlap, minimum=0, maximum=1)
    return compute / (compute + comm * (1 - overlap))


def scaling_model(
    gradient_bytes: float,
    compute_seconds: float,
    world_sizes: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512),
    *,
    gpus_per_node: int = 8,
    inter_node: str = "InfiniBand HDR 200 Gb/s",
    overlap: float = 0.0,
) -> pd.DataFrame:
    """Scaling efficiency of data parallelism, modelled (§20.4, claim C16): each step computes
    for ``compute_seconds`` and all-reduces ``gradient_bytes`` hierarchically
    (:func:`hierarchical_allreduce_seconds`) — a ring over the node's GPUs on NVLink, then a
    ring over the nodes on ``inter_node`` (a key of :data:`LINKS`) for the node's share — with
    ``overlap`` of the communication hidden behind the backward pass. One row per world size:
    ``gpus``, ``comm_seconds``, ``efficiency``, ``speedup``."""
    import pandas as pd

    if inter_node not in LINKS:
        raise ValueError(f"inter_node must be one of {list(LINKS)}, got {inter_node!r}")
    nvlink, network = LINKS["NVLink (A100)"], LINKS[inter_node]
    gpus_per_node = check_int("gpus_per_node", gpus_per_node, 1)
    records = []
    for world in world_sizes:
        world = check_int("world_sizes", world, 1)
        comm = hierarchical_allreduce_seconds(
            gradient_bytes, min(world, gpus_per_node), max(1, world // gpus_per_node),
            gpu_link=(nvlink["latency"], nvlink["bandwidth"]),
            network=(network["latency"], network["bandwidth"]),
        )  # fmt: skip
        efficiency = scaling_efficiency(compute_seconds, comm, overlap)
        records.append(
            {"gpus": world, "comm_seconds": comm, "efficiency": efficiency,
             "speedup": world * efficiency}
        )  # fmt: skip
    return pd.DataFrame(records)


def ring_allreduce_reference(
    tensors: list[torch.Tensor],
) -> tuple[list[torch.Tensor], list[tuple[str, list[tuple[int, int]]]]]:
    """A ring all-reduce written out (§20.1.1, §20.4): ``tensors[r]`` is rank r's gradient; each
    is cut into W chunks. Reduce-scatter: at each of W−1 steps, rank r sends one chunk to rank
    r+1, which adds it to its own; after them rank r holds the full sum of chunk r+1. All-gather:
    W−1 more steps pass the summed chunks on around the ring. Returns every rank's result (the
    sum) and, per step, its phase and the (sending rank, chunk) pairs."""
    world = check_int("len(tensors)", len(tensors), 1)
    chunks = [list(t.detach().flatten().clone().tensor_split(world)) for t in tensors]
    log = []
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(world - 1):
            first = 0 if phase == "reduce-scatter" else 1  # all-gather starts at the summed chunk
            sends = [(rank, (rank + first - step) % world) for rank in range(world)]
            payloads = [chunks[rank][chunk].clone() for rank, chunk in sends]  # all send at once
            for (rank, chunk), payload in zip(sends, payloads):
                receiver = chunks[(rank + 1) % world]
                receiver[chunk] = receiver[chunk] + payload if first == 0 else payload
            log.append((phase, sends))
    return [torch.cat(c).view_as(t) for c, t in zip(chunks, tensors)], log
