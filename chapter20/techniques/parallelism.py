"""§20.1.1, §20.3.2, §20.4.1 Beyond plain data parallelism: pipeline stages, ZeRO, overlap.

- **Pipeline parallelism** (§20.1.1, deep encoders): :func:`deep_encoder` is a stack of
  equal dense blocks that :func:`split_stages` cuts into contiguous stages, one per rank;
  :class:`TimedStage` is ``torch.distributed.pipelining.PipelineStage`` that also counts the
  seconds it computes and the bytes it sends point to point, so that the idle share of a step
  (the *bubble*) and the traffic between stages are measured, next to
  :func:`bubble_fraction` = (S−1)/(M+S−1) and :func:`pipeline_p2p_bytes`.
  :func:`pipeline_schedule` builds GPipe or 1F1B over ``M`` micro-batches.
- **ZeRO stage 1** (§20.3.2, §20.8): :func:`zero_adamw` is
  ``torch.distributed.optim.ZeroRedundancyOptimizer`` around AdamW — each rank keeps the moments of
  its share of the parameters and broadcasts the parameters it updated — ready to hand to
  ``chapter20.training.trainer.Trainer(optimizer=...)``; :func:`local_state_bytes` counts what this
  rank holds.
- **Overlap and no_sync** (§20.4.1): :func:`log_buckets` registers a DDP communication hook
  that records every all-reduce (its bucket's bytes) — the count per step shows ``no_sync`` at
  work — and, with ``blocking=True``, waits for each all-reduce inside the backward pass, so
  nothing overlaps (the reference for the overlap measurement). :func:`predicted_overlap` is
  the alpha-beta model of how much of the buckets' communication hides behind the backward.
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
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.checks import check_int, check_positive
from chapter20.techniques.communication_model import ring_allreduce_seconds

__all__ = [
    "SCHEDULES",
    "bubble_fraction",
    "pipeline_p2p_bytes",
    "deep_encoder",
    "split_stages",
    "TimedStage",  # noqa: F822 (built on first access, see __getattr__)
    "pipeline_schedule",
    "zero_adamw",
    "local_state_bytes",
    "BucketLog",
    "log_buckets",
    "predicted_overlap",
    "TokenizingPairs",
    "RankMonitor",
    "own_seconds",
    "find_straggler",
    "balanced_split",
]

#: Pipeline schedules :func:`pipeline_schedule` builds.
SCHEDULES = ("gpipe", "1f1b")


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """The idle share of a pipelined step, (S−1)/(M+S−1) (§20.1.1): with ``stages`` equal
    stages and ``micro_batches`` micro-batches each stage computes M of the M+S−1 time slots of
    the forward (and as many of the backward) and waits the other S−1 while the pipeline fills
    and drains. GPipe and 1F1B have the same bubble; 1F1B holds at most S micro-batches'
    activations instead of M."""
    stages = check_int("stages", stages, 1)
    micro_batches = check_int("micro_batches", micro_batches, 1)
    return (stages - 1) / (micro_batches + stages - 1)


def pipeline_p2p_bytes(batch: int, width: int, stages: int, element_size: int = 4) -> int:
    """Bytes sent point to point in one pipelined training step (§20.1.1): at each of the S−1
    stage boundaries the forward sends the activations (``batch`` × ``width`` values of
    ``element_size`` bytes) and the backward sends their gradient, the same size — whatever the
    number of micro-batches (they only cut the same bytes into more, smaller messages)."""
    batch = check_int("batch", batch, 1)
    width = check_int("width", width, 1)
    stages = check_int("stages", stages, 1)
    element_size = check_int("element_size", element_size, 1)
    return 2 * (stages - 1) * batch * width * element_size


class _Block(nn.Module):
    """A residual dense block: x + W2 GELU(W1 LayerNorm(x))."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, width)
        self.down = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def deep_encoder(vocab_size: int, width: int, depth: int, classes: int) -> nn.Sequential:
    """The deep encoder of the pipeline and overlap experiments (§20.1.1): a mean-pooled
    embedding bag of ``vocab_size`` × ``width``, ``depth`` equal residual dense blocks, and a
    linear head to ``classes`` logits — an ``nn.Sequential``, so that :func:`split_stages` can
    cut it anywhere. Seed before calling (``chapter20.core.device.set_seed``)."""
    vocab_size = check_int("vocab_size", vocab_size, 1)
    width = check_int("width", width, 1)
    depth = check_int("depth", depth, 1)
    classes = check_int("classes", classes, 1)
    layers = [nn.EmbeddingBag(vocab_size, width, mode="mean")]
    layers += [_Block(width) for _ in range(depth)]
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)


def split_stages(model: nn.Sequential, stages: int) -> list[nn.Sequential]:
    """``model``'s layers cut into ``stages`` contiguous, non-empty parts with as equal a share
    of the dense (matmul) weights — the compute — as the layer boundaries allow (§20.1.1);
    embedding lookups count as free. The parts share the model's modules (no copy): their
    composition is the model."""
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"model must be an nn.Sequential, got {type(model).__name__}")
    stages = check_int("stages", stages, 1, maximum=len(model))
    layers = list(model)
    costs = [_dense_weights(layer) for layer in layers]
    total, cuts, running = sum(costs), [], 0
    for index, cost in enumerate(costs[:-1]):
        running += cost
        needed = stages - 1 - len(cuts)
        target = total * (len(cuts) + 1) / stages
        # cut here unless taking the next layer too lands closer to an equal share
        closest = abs(running - target) <= abs(running + costs[index + 1] - target)
        if needed and (closest or len(layers) - index - 1 == needed):
            cuts.append(index + 1)
    bounds = [0, *cuts, len(layers)]
    return [nn.Sequential(*layers[a:b]) for a, b in zip(bounds, bounds[1:])]


def _dense_weights(module: nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def _pipelining():
    # imported on first use: it costs seconds (DTensor's operator tables), and the ZeRO and
    # overlap experiments never need it
    from torch.distributed import pipelining

    return pipelining


@dataclass
class _StageCounters:
    compute_seconds: float = 0.0
    sent_bytes: int = 0
    messages: int = 0

    def reset(self) -> None:
        self.compute_seconds, self.sent_bytes, self.messages = 0.0, 0, 0


def _sent(ops: list) -> tuple[int, int]:
    return sum(op.tensor.numel() * op.tensor.element_size() for op in ops), len(ops)


def _timed_stage_class():
    class TimedStage(_pipelining().PipelineStage):
        """``torch.distributed.pipelining.PipelineStage`` that also counts (§20.1.1), since the
        last :meth:`reset`: ``counters.compute_seconds`` spent in its forward and backward
        chunks (the rest of a step is waiting: the bubble and the transfers) and
        ``counters.sent_bytes`` / ``counters.messages`` of the activations and gradients it
        sent to its neighbours. Takes ``PipelineStage``'s arguments."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.counters = _StageCounters()

        def reset(self) -> None:
            self.counters.reset()

        def forward_one_chunk(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return super().forward_one_chunk(*args, **kwargs)
            finally:
                self.counters.compute_seconds += time.perf_counter() - start

        def backward_one_chunk(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return super().backward_one_chunk(*args, **kwargs)
            finally:
                self.counters.compute_seconds += time.perf_counter() - start

        def get_fwd_send_ops(self, *args, **kwargs):
            return self._count(super().get_fwd_send_ops(*args, **kwargs))

        def get_bwd_send_ops(self, *args, **kwargs):
            return self._count(super().get_bwd_send_ops(*args, **kwargs))

        def _count(self, ops: list) -> list:
            nbytes, count = _sent(ops)
            self.counters.sent_bytes += nbytes
            self.counters.messages += count
            return ops

    TimedStage.__module__ = __name__
    return TimedStage


def __getattr__(name: str):
    """``TimedStage`` is built on first access (PEP 562), so that importing this module does
    not import ``torch.distributed.pipelining``."""
    if name == "TimedStage":
        globals()[name] = _timed_stage_class()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pipeline_schedule(stage, kind: str, micro_batches: int, loss_fn):
    """The ``kind`` schedule ("gpipe": all forwards, then all backwards; "1f1b": one forward,
    one backward in the steady state) of ``stage`` over ``micro_batches`` micro-batches
    (§20.1.1); 1F1B needs at least as many micro-batches as stages. ``loss_fn(output,
    target)`` is the mean loss of one micro-batch; the gradients
    are divided by the micro-batch count, so a step's gradient is that of the whole batch's
    mean loss when the micro-batches are equal."""
    if kind not in SCHEDULES:
        raise ValueError(f"kind must be one of {', '.join(SCHEDULES)}, got {kind!r}")
    micro_batches = check_int("micro_batches", micro_batches, 1)
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    pipelining = _pipelining()
    cls = pipelining.ScheduleGPipe if kind == "gpipe" else pipelining.Schedule1F1B
    return cls(stage, micro_batches, loss_fn=loss_fn, scale_grads=True)


# --------------------------------------------------------------------------------------------
# ZeRO stage 1
# --------------------------------------------------------------------------------------------


def zero_adamw(params, lr: float, *, weight_decay: float = 0.01, group=None):
    """AdamW whose state is sharded over the ranks of ``group`` — ZeRO stage 1 (§20.3.2):
    ``torch.distributed.optim.ZeroRedundancyOptimizer``. Each rank keeps the two moments of
    its share of the parameters (whole tensors, dealt out greedily by size, so the shares are
    only as even as the tensors allow), steps them, and broadcasts the updated parameters, so
    the replicas stay identical and equal plain AdamW. Pass it to
    ``chapter20.training.trainer.Trainer(optimizer=...)``. In a world of one it holds everything."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    lr = check_positive("lr", lr)
    weight_decay = check_positive("weight_decay", weight_decay, zero=True)
    params = list(params.parameters() if isinstance(params, nn.Module) else params)
    if not params:
        raise ValueError("params must hold at least one parameter")
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("zero_adamw needs a process group (run_local_group or torchrun)")
    return ZeroRedundancyOptimizer(
        params,
        optimizer_class=torch.optim.AdamW,
        process_group=group,
        lr=lr,
        weight_decay=weight_decay,
    )


def local_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of optimizer state this rank holds (§20.3.2): for a ``ZeroRedundancyOptimizer``
    its local optimizer's share, for any other optimizer all of it."""
    inner = getattr(optimizer, "optim", optimizer)
    return sum(
        value.numel() * value.element_size()
        for state in inner.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    )


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

    @contextlib.contextmanager
    def data_wait(self):
        """Wraps fetching the next batch."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._data += time.perf_counter() - start

    @contextlib.contextmanager
    def step(self):
        """Wraps the training step (forward, backward, collectives, optimizer)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._step += time.perf_counter() - start

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
