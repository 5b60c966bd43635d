"""§20.4.1 DDP's practices: a parameter the loss does not use, and what looking for one costs.

- :class:`WithUnusedHead`: the deep encoder with a head its forward never calls;
  :func:`unused_parameter_error`: the error DDP raises for it at the second step when
  ``find_unused_parameters`` is off.
- :func:`ddp_step`: one plain DDP training step (optionally followed by a barrier), the step
  each practice is timed with.
- :func:`unused_search_prediction`: what ``find_unused_parameters=True`` adds to a step, predicted
  from the autograd graph DDP walks after every forward.

Notebook 06 times the practices on a gloo group (``chapter20.labs.nb06_distributed``).
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.checks import check_int
from chapter20.core.device import set_seed
from chapter20.techniques.pipeline import deep_encoder

__all__ = [
    "PRACTICE_MODEL",
    "WithUnusedHead",
    "ddp_step",
    "unused_parameter_error",
    "unused_search_prediction",
]


#: The deep encoder of the practices (``deep_encoder`` arguments).
PRACTICE_MODEL = {"vocab_size": 1_000, "width": 128, "depth": 8, "classes": 16}


class WithUnusedHead(nn.Module):
    """The deep encoder and a head its forward never calls: a parameter the loss does not use."""

    def __init__(self, model: dict):
        super().__init__()
        self.encoder = deep_encoder(**model)
        self.unused = nn.Linear(model["classes"], model["classes"])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(ids)


def ddp_step(ddp: nn.Module, optimizer, ids, labels, barrier: bool = False):
    """One training step of ``ddp`` on ``(ids, labels)`` as a function to call: forward,
    cross-entropy, backward (DDP's all-reduce), ``optimizer.step()``, and with ``barrier`` a
    ``dist.barrier()`` after it, the practice §20.4.1 warns against."""
    if not isinstance(ddp, nn.Module):
        raise TypeError(f"ddp must be an nn.Module, got {type(ddp).__name__}")

    def step():
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(ddp(ids), labels).backward()
        optimizer.step()
        if barrier:
            dist.barrier()

    return step


def unused_parameter_error(model: dict, ids, labels) -> str:
    """The first two sentences of the error DDP raises at the second step when a parameter got no
    gradient and ``find_unused_parameters=False``; '' if none was raised."""
    set_seed(0)
    ddp = nn.parallel.DistributedDataParallel(WithUnusedHead(model))
    step = ddp_step(ddp, torch.optim.SGD(ddp.parameters(), lr=0.1), ids, labels)
    try:
        step()
        step()
    except RuntimeError as error:
        return ". ".join(str(error).split(". ")[:2]).strip() + "."
    return ""


def unused_search_prediction(
    batch: int = 64, model: dict = PRACTICE_MODEL, repeat: int = 20
) -> dict:
    """What ``find_unused_parameters=True`` adds to a step, predicted (§20.4.1): after each
    forward DDP walks the autograd graph from the output to find the parameters outside it.
    Returns the nodes of that graph for the deep encoder ``model`` (:data:`PRACTICE_MODEL`: the
    one notebook 06 times) at ``batch``, and the median milliseconds of the same walk written in
    Python over ``repeat`` walks: an upper bound, since DDP walks it in C++."""
    batch, repeat = check_int("batch", batch, 1), check_int("repeat", repeat, 1)
    set_seed(0)
    ids = torch.randint(0, model["vocab_size"], (batch, 16), generator=torch.Generator())
    output = deep_encoder(**model)(ids)

    def walk() -> int:
        seen, stack = set(), [output.grad_fn]
        while stack:
            node = stack.pop()
            if node is not None and node not in seen:
                seen.add(node)
                stack.extend(parent for parent, _ in node.next_functions)
        return len(seen)

    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        nodes = walk()
        times.append(time.perf_counter() - start)
    return {"nodes": nodes, "ms": 1e3 * float(np.median(times))}
