"""§20.1.1 Pipeline parallelism: a deep encoder cut into stages, one per rank, and its schedules.

- :func:`deep_encoder` is a stack of equal dense blocks that :func:`split_stages` cuts into
  contiguous stages, one per rank (:func:`pipeline_batch`: a seeded batch for it, and
  :func:`cross_entropy_per_example`, its loss); :class:`TimedStage` is
  ``torch.distributed.pipelining.PipelineStage`` that also counts the seconds it computes and the
  bytes it sends point to point, so that the idle share of a step (the *bubble*) and the traffic
  between stages are measured, next to :func:`bubble_fraction` = (S−1)/(M+S−1) and
  :func:`pipeline_p2p_bytes`. :func:`pipeline_schedule` builds GPipe or 1F1B over ``M``
  micro-batches.
- The schedules in a few lines each, for reading: :func:`schedule_order` (what one stage runs,
  in order), :func:`schedule_grid` (every forward and backward in its time slot when each takes
  one) and :func:`grid_idle_share` (the bubble of the grid as drawn), proven against
  (S−1)/(M+S−1).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from chapter20.core.checks import check_int
from chapter20.core.id_streams import uniform_ids

__all__ = [
    "SCHEDULES",
    "bubble_fraction",
    "pipeline_p2p_bytes",
    "deep_encoder",
    "pipeline_batch",
    "cross_entropy_per_example",
    "split_stages",
    "TimedStage",  # noqa: F822 (built on first access, see __getattr__)
    "pipeline_schedule",
    "schedule_order",
    "schedule_grid",
    "grid_idle_share",
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


def pipeline_batch(batch: int, model: dict, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded batch for :func:`deep_encoder` (``model``: its arguments): ``batch`` rows of 16
    token ids and a class each."""
    batch, seed = check_int("batch", batch, 1), check_int("seed", seed, 0)
    ids = uniform_ids((batch, 16), model["vocab_size"], seed=seed)
    labels = uniform_ids(batch, model["classes"], seed=seed + 1)
    return ids, labels


def cross_entropy_per_example(model: nn.Module, batch) -> torch.Tensor:
    """The deep encoder's per-example cross-entropy on ``batch = (ids, labels)``: one value per
    row, the loss the Trainer accumulates exactly."""
    ids, labels = batch
    return nn.functional.cross_entropy(model(ids), labels, reduction="none")


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
            return self._computing(super().forward_one_chunk, *args, **kwargs)

        def backward_one_chunk(self, *args, **kwargs):
            return self._computing(super().backward_one_chunk, *args, **kwargs)

        def _computing(self, chunk, *args, **kwargs):
            """``chunk(*args, **kwargs)``, its seconds added to ``counters.compute_seconds``."""
            start = time.perf_counter()
            try:
                return chunk(*args, **kwargs)
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


def schedule_order(kind: str, stages: int, micro_batches: int, stage: int) -> list[tuple]:
    """The order in which ``stage`` runs its work under ``kind`` (§20.1.1): ("F", m) is the
    forward of micro-batch m, ("B", m) its backward. GPipe: every forward, then every backward.
    1F1B: S−1−stage forwards to fill the pipeline, then one forward and one backward in turn,
    then the backwards left."""
    if kind not in SCHEDULES:
        raise ValueError(f"kind must be one of {', '.join(SCHEDULES)}, got {kind!r}")
    stages = check_int("stages", stages, 1)
    micro_batches = check_int("micro_batches", micro_batches, 1)
    stage = check_int("stage", stage, 0, maximum=stages - 1)
    if kind == "gpipe":
        return [("F", m) for m in range(micro_batches)] + [("B", m) for m in range(micro_batches)]
    warmup = min(stages - 1 - stage, micro_batches)
    order = [("F", m) for m in range(warmup)]
    for m in range(micro_batches - warmup):
        order += [("F", warmup + m), ("B", m)]
    return order + [("B", m) for m in range(micro_batches - warmup, micro_batches)]


def schedule_grid(kind: str, stages: int, micro_batches: int) -> dict[tuple, int]:
    """The time slot of every piece of work when each forward and each backward takes one slot
    (§20.1.1): {(stage, "F"/"B", micro-batch): slot}. A forward needs the previous stage's
    forward of its micro-batch, a backward the next stage's backward (the last stage, its own
    forward); a stage does one thing at a time, in :func:`schedule_order`."""
    if kind not in SCHEDULES:
        raise ValueError(f"kind must be one of {', '.join(SCHEDULES)}, got {kind!r}")
    stages = check_int("stages", stages, 1)
    micro_batches = check_int("micro_batches", micro_batches, 1)
    orders = [schedule_order(kind, stages, micro_batches, s) for s in range(stages)]
    done, free, slots = {}, [0] * stages, {}
    while any(orders):
        for s in range(stages):
            while orders[s]:
                op, m = orders[s][0]
                need = (s - 1, "F", m) if op == "F" else (s + 1, "B", m)
                if op == "B" and s == stages - 1:
                    need = (s, "F", m)
                if op == "F" and s == 0:
                    ready = 0
                elif need in done:
                    ready = done[need]
                else:
                    break  # wait for the other stage
                slots[(s, op, m)] = max(free[s], ready)
                done[(s, op, m)] = free[s] = slots[(s, op, m)] + 1
                orders[s].pop(0)
    return slots


def grid_idle_share(slots: dict[tuple, int]) -> float:
    """The share of the stages' time slots spent idle in a :func:`schedule_grid`: the bubble
    of the schedule as drawn."""
    stages = 1 + max(s for s, _, _ in slots)
    length = 1 + max(slots.values())
    return 1 - len(slots) / (stages * length)
