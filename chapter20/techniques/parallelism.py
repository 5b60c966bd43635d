"""§20.1.1, §20.4 Beyond plain data parallelism: a tensor-parallel block, the input pipeline,
stragglers.

- **Tensor parallelism** (§20.1.1): :func:`tensor_parallel_block` computes a dense block as
  Megatron's shards would, simulated in one process, proven against the whole block. Pipeline
  stages are ``chapter20.techniques.pipeline``, ZeRO-1 ``chapter20.techniques.zero``, DDP's
  overlap and gradient compression ``chapter20.techniques.ddp_hooks``.
- **The input pipeline** (§20.4.1): :class:`TokenizingPairs` encodes text pairs as they are
  read, the work a ``DataLoader``'s ``num_workers`` take off the training loop.
- **Stragglers** (§20.4, challenges): :class:`RankMonitor` logs, on every rank and every step,
  the time spent waiting for data, the step time and the CPU share, and gathers every rank's
  log; :func:`own_seconds` separates each rank's own work from its waiting for the others, and
  :func:`find_straggler` names the rank the others wait for; :func:`balanced_split`
  resizes each rank's share of a fixed global batch in proportion to its measured speed
  (dynamic batch sizing). The contrastive loss with cross-rank negatives
  (``chapter20.techniques.contrastive.distributed_info_nce``) is exact for uneven shares, so the
  step the ranks take together stays that of the global batch.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.checks import check_int, check_positive

__all__ = [
    "tensor_parallel_block",
    "TokenizingPairs",
    "RankMonitor",
    "own_seconds",
    "find_straggler",
    "balanced_split",
]


# --------------------------------------------------------------------------------------------
# Tensor parallelism
# --------------------------------------------------------------------------------------------


def tensor_parallel_block(x: torch.Tensor, up: nn.Linear, down: nn.Linear, shards: int):
    """``down(gelu(up(x)))`` computed as ``shards`` ranks would in Megatron's tensor parallelism
    (§20.1.1), simulated in one process: each shard holds a slice of ``up``'s output rows
    (column-parallel) and the matching slice of ``down``'s input columns (row-parallel), so it
    computes a partial sum of the output with no communication in between; the sum over the
    shards is the one all-reduce of the forward."""
    shards = check_int("shards", shards, 1, maximum=up.out_features)
    partial = []
    for w1, b1, w2 in zip(up.weight.chunk(shards, 0), up.bias.chunk(shards),
                          down.weight.chunk(shards, 1)):  # fmt: skip
        hidden = nn.functional.gelu(x @ w1.T + b1)  # this shard's hidden units only
        partial.append(hidden @ w2.T)  # a partial sum of every output unit
    return torch.stack(partial).sum(dim=0) + down.bias  # the all-reduce, then the bias once


# --------------------------------------------------------------------------------------------
# The input pipeline
# --------------------------------------------------------------------------------------------


class TokenizingPairs(torch.utils.data.Dataset):
    """Text pairs encoded when they are read (§20.4.1, listing L9 with real data): item ``i``
    is the two ``max_len`` id rows of ``pairs[i]`` (two token lists) under ``vocabulary``
    (``chapter20.core.corpora.encode_texts``). The work a ``DataLoader``'s workers do in parallel
    with
    the training step; the same ids as encoding everything beforehand."""

    def __init__(self, pairs, vocabulary: dict[str, int], max_len: int):
        self.pairs = list(pairs)
        if not self.pairs:
            raise ValueError("pairs must hold at least one pair")
        if not isinstance(vocabulary, dict):
            raise TypeError(f"vocabulary must be a dict, got {type(vocabulary).__name__}")
        self.vocabulary = vocabulary
        self.max_len = check_int("max_len", max_len, 1)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        from chapter20.core.corpora import encode_texts

        ids = encode_texts(self.pairs[index], self.vocabulary, self.max_len)
        return ids[0], ids[1]


# --------------------------------------------------------------------------------------------
# Stragglers: per-rank monitoring and dynamic batch sizing
# --------------------------------------------------------------------------------------------


class RankMonitor:
    """Per-rank monitoring of a data-parallel run (§20.4, challenges): one row per step with
    this rank's share of the batch, the seconds spent waiting for data (inside
    :meth:`data_wait`), the seconds of the step (inside :meth:`step`: compute and collectives,
    so a rank that waits for a slower one waits here), the whole iteration and the CPU share
    of it (process CPU time / wall time: low while a rank sleeps or blocks). :meth:`gathered`
    collects every rank's rows on every rank (a collective)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self._data = self._step = 0.0

    def data_wait(self):
        """Wraps fetching the next batch."""
        return self._adding_seconds("_data")

    def step(self):
        """Wraps the training step (forward, backward, collectives, optimizer)."""
        return self._adding_seconds("_step")

    @contextlib.contextmanager
    def _adding_seconds(self, name: str):
        """Adds the seconds spent inside the block to the attribute ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, name, getattr(self, name) + time.perf_counter() - start)

    @contextlib.contextmanager
    def iteration(self, step: int, batch: int):
        """Wraps one whole iteration (data, then step) of ``batch`` examples on this rank."""
        step, batch = check_int("step", step, 0), check_int("batch", batch, 0)
        self._data = self._step = 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
            self.rows.append(
                {
                    "rank": rank,
                    "step": step,
                    "batch": batch,
                    "data_seconds": self._data,
                    "step_seconds": self._step,
                    "iteration_seconds": wall,
                    "cpu_share": cpu / wall if wall > 0 else math.nan,
                }
            )

    def gathered(self, group: dist.ProcessGroup | None = None) -> list[dict]:
        """Every rank's rows, on every rank (``all_gather_object``; this rank's in a world of
        one)."""
        if not (dist.is_available() and dist.is_initialized()):
            return list(self.rows)
        parts: list = [None] * dist.get_world_size(group)
        dist.all_gather_object(parts, self.rows, group=group)
        return [row for part in parts for row in part]


def own_seconds(rows: Sequence[dict]) -> dict[int, float]:
    """Each rank's median *own* seconds per iteration from :class:`RankMonitor` rows (§20.4):
    its data wait plus its compute, where the compute is its share times the fewest step
    seconds per example of that iteration — the rank that reached the collectives last waited
    for nobody, so its step time is compute; the others' excess is waiting, not their work."""
    if not rows:
        raise ValueError("rows must hold at least one monitored step")
    by_step: dict[int, list[dict]] = {}
    for row in rows:
        by_step.setdefault(row["step"], []).append(row)
    own: dict[int, list[float]] = {}
    for step_rows in by_step.values():
        per_example = min(r["step_seconds"] / max(r["batch"], 1) for r in step_rows)
        for r in step_rows:
            own.setdefault(r["rank"], []).append(r["data_seconds"] + per_example * r["batch"])
    return {rank: _median(values) for rank, values in sorted(own.items())}


def find_straggler(rows: Sequence[dict], slack_share: float = 0.2) -> int | None:
    """The rank every other rank waits for, from :class:`RankMonitor` rows (§20.4): the rank
    whose :func:`own_seconds` exceed every other rank's by more than ``slack_share`` of the
    median iteration, or None when no rank holds the others up. (A rank slow in compute alone
    shows up only if its step is slow per example, which the estimate cannot see when it
    arrives last; its CPU share or GPU utilisation tells it apart.)"""
    slack_share = check_positive("slack_share", slack_share)
    own = own_seconds(rows)
    if len(own) < 2:
        return None
    slowest = max(own, key=own.get)
    threshold = slack_share * _median([r["iteration_seconds"] for r in rows])
    others = [value for rank, value in own.items() if rank != slowest]
    return slowest if all(own[slowest] - value > threshold for value in others) else None


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def balanced_split(rates: Sequence[float], total: int, *, minimum: int = 1) -> list[int]:
    """Shares of a global batch of ``total`` examples in proportion to each rank's measured
    ``rates`` (examples per second of its own work), so that every rank needs about the same
    time (§20.4, dynamic batch sizing against stragglers). Whole numbers summing to
    ``total``, each at least ``minimum`` (largest remainders get the rounding)."""
    total = check_int("total", total, 1)
    minimum = check_int("minimum", minimum, 0)
    rates = [check_positive("rates", r) for r in rates]
    if not rates:
        raise ValueError("rates must hold one rate per rank")
    if minimum * len(rates) > total:
        raise ValueError(f"total={total} cannot give {len(rates)} ranks at least {minimum} each")
    spare = total - minimum * len(rates)
    exact = [spare * r / sum(rates) for r in rates]
    shares = [math.floor(x) for x in exact]
    order = sorted(range(len(rates)), key=lambda i: exact[i] - shares[i], reverse=True)
    for i in order[: spare - sum(shares)]:
        shares[i] += 1
    return [minimum + s for s in shares]
