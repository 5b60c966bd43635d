"""§20.1.1, §20.4 What an all-reduce costs, measured on a process group: its seconds and the bytes
it puts on the wire.

- :func:`allreduce_times_on_rank` times SUM all-reduces of growing messages on this rank of the
  current group; ``chapter20.techniques.communication_model.fit_alpha_beta`` fits the alpha-beta
  model to them.
- :func:`loopback_bytes` reads the bytes the kernel sent through the loopback interface, where
  gloo's ranks on one machine talk; :func:`wire_bytes_per_call` turns two readings around a
  run of all-reduces into the bytes one all-reduce put on the wire.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist

from chapter20.core.checks import check_int

__all__ = ["allreduce_times_on_rank", "loopback_bytes", "wire_bytes_per_call"]


def allreduce_times_on_rank(
    sizes: tuple[int, ...], repeat: int = 9, *, dtype: str = "float32"
) -> list[list[float]]:
    """Seconds of every timed SUM all-reduce of a ``dtype`` tensor of each byte size in ``sizes``
    on this rank of the current group (§20.4): two untimed calls, then ``repeat`` timed ones, each
    after a barrier; one list of ``repeat`` times per size. Every rank calls it with the same
    arguments. ``communication_model.fit_alpha_beta`` fits the alpha-beta model to them."""
    sizes = [check_int("sizes", size, 1) for size in sizes]
    repeat = check_int("repeat", repeat, 1)
    if dtype not in ("float32", "float16", "bfloat16", "float64"):
        raise ValueError(f"dtype must be float32, float16, bfloat16 or float64, got {dtype!r}")
    kind = getattr(torch, dtype)
    itemsize = torch.empty((), dtype=kind).element_size()
    times = []
    for size in sizes:
        tensor = torch.ones(max(1, size // itemsize), dtype=kind)
        for _ in range(2):
            dist.all_reduce(tensor)
        runs = []
        for _ in range(repeat):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            runs.append(time.perf_counter() - start)
        times.append(runs)
    return times


def loopback_bytes() -> int | None:
    """Bytes the kernel has sent through the loopback interface since boot (Linux's
    ``/proc/net/dev``), or None where there is no such counter. gloo's ranks on one machine talk
    over TCP on this interface, so the difference across a collective is what it put on the
    wire (plus any other traffic at that moment, which only adds) (§20.4)."""
    path = Path("/proc/net/dev")
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        name, _, fields = line.partition(":")
        if name.strip() == "lo":
            return int(fields.split()[8])  # transmit bytes
    return None


def wire_bytes_per_call(tensor: torch.Tensor, calls: int, repeat: int) -> float:
    """The fewest loopback bytes per all-reduce of ``tensor`` over ``repeat`` tries of ``calls``
    all-reduces each, all ranks together (§20.4): rank 0 reads :func:`loopback_bytes` around them
    (other traffic only adds, so the minimum is the best estimate). Every rank of the current
    group calls it with the same arguments; rank 0's value is the one to read (the other ranks
    read no counter and return 0; inf where the counter is missing)."""
    calls = check_int("calls", calls, 1)
    repeat = check_int("repeat", repeat, 1)
    best = float("inf")
    for _ in range(repeat):
        dist.barrier()
        before = loopback_bytes() if dist.get_rank() == 0 else 0
        dist.barrier()  # nothing is sent between the read and this barrier but the barrier
        for _ in range(calls):
            dist.all_reduce(tensor)
        dist.barrier()  # every rank has sent its last chunk
        after = loopback_bytes() if dist.get_rank() == 0 else 0
        if before is not None and after is not None:
            best = min(best, (after - before) / calls)
    return best
