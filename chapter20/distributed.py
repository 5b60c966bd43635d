"""§20.4 Multi-GPU and multi-node: process groups.

What every multi-process part of the chapter shares: the rank and world size of a group (a
world of one when no group is initialised), and :func:`run_local_group`, which runs a function on
N local processes joined in one real process group. Tests and notebooks use it to exercise the
distributed code paths on a laptop CPU with gloo; the same functions run under ``torchrun``.
"""

from __future__ import annotations

import os
import pickle
import queue as queue_module
import socket
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from chapter20.checks import check_int, check_real
from chapter20.device import dist_backend

__all__ = ["group_rank_and_size", "free_port", "run_local_group"]


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
