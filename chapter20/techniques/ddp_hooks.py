"""§20.1.1, §20.4.1 DDP's communication hooks: gradient compression, and the buckets' all-reduces
logged for the overlap measurement.

- :func:`compress_gradients`: fp16 / bf16 gradient compression through DDP's communication
  hooks, with the bytes each all-reduce carries counted (C03).
- :func:`log_buckets` registers a DDP communication hook that records every all-reduce (its
  bucket's bytes) — the count per step shows ``no_sync`` at work — and, with ``blocking=True``,
  waits for each all-reduce inside the backward pass, so nothing overlaps (the reference for the
  overlap measurement). :func:`predicted_overlap` is the alpha-beta model of how much of the
  buckets' communication hides behind the backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.checks import check_int, check_positive
from chapter20.techniques.communication_model import ring_allreduce_seconds

__all__ = [
    "COMPRESSIONS",
    "CompressionStats",
    "compress_gradients",
    "BucketLog",
    "log_buckets",
    "predicted_overlap",
]


# --------------------------------------------------------------------------------------------
# Gradient compression
# --------------------------------------------------------------------------------------------


@dataclass
class CompressionStats:
    """Bytes this rank handed to gradient all-reduces, uncompressed and as sent."""

    calls: int = 0
    fp32_bytes: int = 0
    sent_bytes: int = 0

    @property
    def ratio(self) -> float:
        return self.sent_bytes / self.fp32_bytes if self.fp32_bytes else 1.0


_COMPRESSIONS = {"none": None, "fp16": torch.float16, "bf16": torch.bfloat16}
#: Gradient all-reduce compressions of :func:`compress_gradients`.
COMPRESSIONS = tuple(_COMPRESSIONS)


def compress_gradients(model: nn.parallel.DistributedDataParallel, kind: str = "fp16"):
    """Register a DDP communication hook that all-reduces gradients in ``kind`` ("fp16",
    "bf16", or "none" for plain fp32) and counts the bytes (§20.1.1 remedies, claim C03).
    PyTorch's own ``fp16_compress_hook`` / ``bf16_compress_hook`` do the work. Returns the
    :class:`CompressionStats` the hook fills."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if kind not in _COMPRESSIONS:
        raise ValueError(f"kind must be one of {', '.join(_COMPRESSIONS)}, got {kind!r}")
    if not isinstance(model, nn.parallel.DistributedDataParallel):
        raise TypeError(f"model must be DistributedDataParallel, got {type(model).__name__}")
    inner = {
        "none": default_hooks.allreduce_hook,
        "fp16": default_hooks.fp16_compress_hook,
        "bf16": default_hooks.bf16_compress_hook,
    }[kind]
    dtype = _COMPRESSIONS[kind] or torch.float32
    stats = CompressionStats()

    def hook(process_group, bucket):
        buffer = bucket.buffer()
        stats.calls += 1
        stats.fp32_bytes += buffer.numel() * buffer.element_size()
        stats.sent_bytes += buffer.numel() * torch.empty((), dtype=dtype).element_size()
        return inner(process_group, bucket)

    model.register_comm_hook(None, hook)
    return stats


# --------------------------------------------------------------------------------------------
# Overlap of the gradient all-reduce with the backward pass; no_sync
# --------------------------------------------------------------------------------------------


@dataclass
class BucketLog:
    """The all-reduces a DDP model launched since :meth:`reset`: one entry of bytes per
    bucket, in launch order."""

    bucket_bytes: list[int] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return len(self.bucket_bytes)

    def reset(self) -> None:
        self.bucket_bytes.clear()


def log_buckets(model: nn.parallel.DistributedDataParallel, *, blocking: bool = False) -> BucketLog:
    """Register a communication hook on ``model`` that averages each gradient bucket as DDP
    does and records it in the returned :class:`BucketLog` (§20.4.1). With ``blocking=True``
    the hook waits for each all-reduce before it returns, inside the backward pass, so no
    communication overlaps computation: the reference an overlapped step is measured against."""
    if not isinstance(model, nn.parallel.DistributedDataParallel):
        raise TypeError(f"model must be DistributedDataParallel, got {type(model).__name__}")
    log = BucketLog()

    def hook(process_group, bucket):
        buffer = bucket.buffer()
        log.bucket_bytes.append(buffer.numel() * buffer.element_size())
        group = process_group if process_group is not None else dist.group.WORLD
        buffer.div_(dist.get_world_size(group))
        work = dist.all_reduce(buffer, group=group, async_op=True)
        if blocking:
            work.wait()
            future = torch.futures.Future()
            future.set_result(buffer)
            return future
        return work.get_future().then(lambda fut: fut.value()[0])

    model.register_comm_hook(None, hook)
    return log


def predicted_overlap(
    bucket_bytes: list[int],
    backward_seconds: float,
    world_size: int,
    latency: float,
    bandwidth: float,
) -> dict[str, float]:
    """The alpha-beta model of DDP's overlap (§20.4.1): each bucket's ring all-reduce takes
    ``ring_allreduce_seconds``; the buckets become ready during the backward pass (which takes
    ``backward_seconds``) and their all-reduces run one after another beside it, so at most
    ``backward_seconds`` of communication hides, and never the last bucket's, which is ready
    only at the end. Returns ``comm_seconds`` (all buckets), ``exposed_seconds`` and
    ``hidden_fraction`` (1 − exposed / comm). A model with a free communication engine: on a
    CPU whose cores all compute, the transfers compete with the backward instead."""
    sizes = [check_int("bucket_bytes", b, 0) for b in bucket_bytes]
    if not sizes:
        raise ValueError("bucket_bytes must hold at least one bucket")
    backward_seconds = check_positive("backward_seconds", backward_seconds, zero=True)
    world_size = check_int("world_size", world_size, 1)
    latency = check_positive("latency", latency, zero=True)
    bandwidth = check_positive("bandwidth", bandwidth)
    times = [ring_allreduce_seconds(b, world_size, latency, bandwidth) for b in sizes]
    comm = sum(times)
    exposed = times[-1] + max(0.0, comm - times[-1] - backward_seconds)
    hidden = 1 - exposed / comm if comm > 0 else 0.0
    return {"comm_seconds": comm, "exposed_seconds": exposed, "hidden_fraction": hidden}
