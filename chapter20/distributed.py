"""§20.4 Multi-GPU and multi-node: process groups, loaders, learning-rate scaling, DDP hooks.

- :func:`init_distributed` / :func:`distributed` set up the process group from torchrun's
  environment (listing L10 done right: gloo on CPU, nccl on CUDA, a world of one without
  torchrun, a clear error for a misconfigured launch) and tear it down.
- :func:`is_main_process`, :func:`main_print`, :func:`save_on_main`: rank 0 logs and saves,
  every rank waits for the file (§20.4 best practices).
- :func:`distributed_loader` / :func:`set_epoch`: listing L9 done right — a DistributedSampler
  that covers the data set exactly once per epoch and reshuffles each epoch.
- :func:`scale_lr` and :func:`warmup_schedule`: the linear scaling rule with warm-up (C14).
- :func:`compress_gradients`: fp16 / bf16 gradient compression through DDP's communication
  hooks, with the bytes each all-reduce carries counted (C03).
- :func:`run_local_group` runs a function on N local processes in one real group, so tests and
  notebooks exercise all of this on a laptop CPU; the same code runs under ``torchrun``.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import pickle
import queue as queue_module
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from chapter20.checks import check_int, check_real
from chapter20.device import dist_backend, get_device
from chapter20.paths import atomic_torch_save

__all__ = [
    "ring_allreduce_seconds",
    "group_rank_and_size",
    "free_port",
    "run_local_group",
    "DistributedContext",
    "init_distributed",
    "distributed",
    "is_main_process",
    "main_print",
    "save_on_main",
    "distributed_loader",
    "set_epoch",
    "scale_lr",
    "warmup_schedule",
    "CompressionStats",
    "compress_gradients",
]


def group_rank_and_size(group: dist.ProcessGroup | None = None) -> tuple[int, int]:
    """``(rank, world_size)`` in ``group`` (§20.4); ``(0, 1)`` when no process group exists, so
    that distributed code runs unchanged as a world of one."""
    if not (dist.is_available() and dist.is_initialized()):
        if group is not None:
            raise ValueError("group was given but torch.distributed is not initialised")
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a local rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(
    rank: int,
    world_size: int,
    port: int,
    backend: str,
    timeout_s: float,
    fn: Callable[..., Any],
    args: tuple,
    results: Any,
) -> None:
    # Share the machine's cores between the ranks instead of oversubscribing them.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    try:
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        try:
            value = fn(*args)
        finally:
            gc.collect()  # free DDP reducers and pending works before their group goes
            dist.destroy_process_group()
        results.put((rank, True, pickle.dumps(value)))
    except BaseException:  # report any failure to the parent instead of hanging it
        results.put((rank, False, traceback.format_exc()))


def run_local_group(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple = (),
    *,
    backend: str | None = None,
    timeout_s: float = 120.0,
) -> list[Any]:
    """Run ``fn(*args)`` on ``world_size`` local processes in one process group (§20.4).

    Each process joins a real group (``backend`` defaults to gloo on CPU, nccl with CUDA) through
    a TCP rendezvous on 127.0.0.1, calls ``fn`` and returns its (picklable) value; the list of
    values comes back in rank order. ``fn`` must be importable (a module-level function), as with
    any spawned process. If a rank raises, the others are stopped and a RuntimeError carries that
    rank's traceback; if the group is not done within ``timeout_s`` seconds, a TimeoutError.
    """
    world_size = check_int("world_size", world_size, 1)
    timeout_s = check_real("timeout_s", timeout_s, finite=True)
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    backend = backend or dist_backend()
    context = mp.get_context("spawn")
    results = context.Queue()
    port = free_port()
    processes = [
        context.Process(
            target=_worker,
            args=(rank, world_size, port, backend, timeout_s, fn, args, results),
            daemon=True,
        )
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    values: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < world_size:
            try:
                rank, ok, payload = results.get(timeout=0.2)
            except queue_module.Empty:
                dead = [p for p in processes if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(
                        f"a rank of the local group exited with code {dead[0].exitcode} "
                        "without reporting a result"
                    ) from None
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the local group of {world_size} did not finish in {timeout_s:g} s"
                    ) from None
                continue
            if not ok:
                raise RuntimeError(f"rank {rank} of {world_size} failed:\n{payload}")
            values[rank] = pickle.loads(payload)
    finally:
        for process in processes:
            process.join(timeout=5 if len(values) == world_size else 0.1)
            if process.is_alive():
                process.terminate()
                process.join()
    return [values[rank] for rank in range(world_size)]


# --------------------------------------------------------------------------------------------
# Launch: torchrun's environment → a process group
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DistributedContext:
    """Where this process stands: rank, world size, local rank, device, backend, and whether
    :func:`init_distributed` created the process group (and must destroy it)."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None
    created_group: bool

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(name: str, default: int | None = None) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(
            f"environment variable {name} must be an integer, got {value!r}"
        ) from None


def init_distributed(*, backend: str | None = None, timeout_s: float = 300.0) -> DistributedContext:
    """Join the process group that ``torchrun`` (or SLURM + torchrun) describes (§20.4.2).

    Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT. Without them (plain
    ``python script.py``) this is a world of one and no group is created. The backend is nccl
    with CUDA (and the CUDA device is set from LOCAL_RANK), gloo otherwise. A launch that cannot
    work raises RuntimeError saying which variable to set. An existing group is reused.
    """
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        local = _env_int("LOCAL_RANK", 0)
        return DistributedContext(rank, world, local, _device_for(local), dist.get_backend(), False)
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local = _env_int("LOCAL_RANK", 0)
    if world < 1 or not 0 <= rank < world:
        raise RuntimeError(
            f"RANK={rank} and WORLD_SIZE={world} do not fit: need WORLD_SIZE >= 1 and "
            "0 <= RANK < WORLD_SIZE (launch with torchrun, which sets both)"
        )
    device = _device_for(local)
    if world == 1:
        return DistributedContext(0, 1, local, device, None, False)
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        raise RuntimeError(
            f"WORLD_SIZE={world} but {' and '.join(missing)} not set: every rank must know where "
            "rank 0 listens (torchrun sets them; across nodes pass --master_addr=<node 0 host> "
            "--master_port=<free port>)"
        )
    backend = backend or dist_backend(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=check_real("timeout_s", timeout_s, finite=True))
    store, _, _ = next(dist.rendezvous("env://", rank=rank, world_size=world, timeout=timeout))
    # torchrun's elastic restarts reuse the agent's store: keys of the previous attempt's ranks
    # (their old gloo/nccl addresses) would be read as current. One namespace per attempt.
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.PrefixStore(f"chapter20/attempt-{attempt}", store)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    return DistributedContext(rank, world, local, device, backend, True)


def _device_for(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return get_device()


@contextlib.contextmanager
def distributed(**kwargs):
    """``with distributed() as ctx:`` — :func:`init_distributed`, then the process group is
    destroyed on exit (also after an error) if this call created it."""
    ctx = init_distributed(**kwargs)
    try:
        yield ctx
    finally:
        if ctx.created_group and dist.is_initialized():
            dist.destroy_process_group()


def is_main_process() -> bool:
    """True on rank 0 (and in a world of one)."""
    return group_rank_and_size()[0] == 0


def main_print(*args, **kwargs) -> None:
    """``print`` on rank 0 only: one log, not W interleaved copies."""
    if is_main_process():
        print(*args, **kwargs)


def save_on_main(obj: Any, path: str | os.PathLike) -> Path | None:
    """Rank 0 saves ``obj`` atomically; every rank then waits at a barrier, so no rank reads a
    checkpoint that is not complete (§20.4 best practices). Returns the path on rank 0."""
    written = atomic_torch_save(obj, path) if is_main_process() else None
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    return written


# --------------------------------------------------------------------------------------------
# Data: each rank its share, every example once per epoch
# --------------------------------------------------------------------------------------------


def distributed_loader(
    dataset: torch.utils.data.Dataset,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = True,
    num_workers: int = 0,
    pin_memory: bool | None = None,
) -> torch.utils.data.DataLoader:
    """A DataLoader over this rank's share of ``dataset`` (§20.4.1, listing L9 done right).

    ``batch_size`` is per rank. A ``DistributedSampler`` deals the (seeded) permutation out
    round-robin, so at every step the ranks' batches together are one global batch of a single
    process with ``batch_size × W`` rows. ``drop_last=True`` (the default) drops the incomplete
    tail, so no rank pads with repeated examples and no short batch spikes a contrastive loss;
    with ``drop_last=False`` the sampler pads by repeating examples. Call :func:`set_epoch`
    before each epoch to reshuffle. Pinned memory only helps copies to a GPU (default: on with
    CUDA); workers help when loading is slow (tensors in memory need none).
    """
    rank, world = group_rank_and_size()
    batch_size = check_int("batch_size", batch_size, 1)
    sampler = torch.utils.data.DistributedSampler(
        dataset, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last
    )
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        drop_last=drop_last,
        num_workers=check_int("num_workers", num_workers, 0),
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        persistent_workers=num_workers > 0,
    )


def set_epoch(loader: torch.utils.data.DataLoader, epoch: int) -> None:
    """Tell the loader's DistributedSampler the epoch: without it every epoch repeats the same
    order (listing L9 forgets this)."""
    sampler = loader.sampler
    if not isinstance(sampler, torch.utils.data.DistributedSampler):
        raise TypeError("loader must use a DistributedSampler (see distributed_loader)")
    sampler.set_epoch(check_int("epoch", epoch, 0))


# --------------------------------------------------------------------------------------------
# Learning rate
# --------------------------------------------------------------------------------------------


def ring_allreduce_seconds(nbytes: float, world_size: int, latency: float, bandwidth: float):
    """Seconds of a ring all-reduce of ``nbytes`` over ``world_size`` ranks (§20.1.1, §20.4):
    2(W−1) messages of latency ``latency`` (alpha) each carrying ``nbytes``/W at ``bandwidth``
    bytes/s (1/beta). The alpha-beta model that §20.5's cost model scales with."""
    if world_size <= 1:
        return 0.0
    steps = 2 * (world_size - 1)
    return steps * latency + steps / world_size * nbytes / bandwidth


def scale_lr(base_lr: float, base_batch: int, batch: int) -> float:
    """Linear scaling rule (§20.4.1, claim C14): the learning rate grows with the global batch,
    ``base_lr × batch / base_batch`` (batch 512 at 1e-3 → batch 4096 at 8e-3). Use it with a
    warm-up (:func:`warmup_schedule`): early updates at the full scaled rate diverge."""
    base_lr = check_real("base_lr", base_lr, finite=True)
    if base_lr <= 0:
        raise ValueError(f"base_lr must be > 0, got {base_lr}")
    return base_lr * check_int("batch", batch, 1) / check_int("base_batch", base_batch, 1)


def warmup_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int, *, total_steps: int | None = None
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up from 1/``warmup_steps`` of the rate to the full rate over
    ``warmup_steps`` steps (0: none), then constant — or, with ``total_steps``, a cosine decay
    that reaches 0 at ``total_steps`` (§20.4.1). Every parameter group follows it. Call
    ``scheduler.step()`` after each optimizer step."""
    warmup_steps = check_int("warmup_steps", warmup_steps, 0)
    if total_steps is not None:
        total_steps = check_int("total_steps", total_steps, 1)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if total_steps is None:
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


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
