"""§20.5.2 A sharded run resumed at another world size: the elastic row of notebook 07's faults.

A model whose training does not depend on the world size — a row-sharded table
(``ShardedEmbedding``) with replicated inputs, every rank seeing the global batch and each row
owned by one rank, and a linear head — trained in a short loop of its own that resumes from
``CheckpointManager`` checkpoints (:func:`elastic_training`). :func:`resume_at_other_world_size`
trains it on one world size, loses the run, resumes it on another and compares it with the same
run uninterrupted: the logical table is saved whole, so the new ranks re-shard it.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed as dist

from chapter20.core.checks import check_int, check_optional_int
from chapter20.core.device import set_seed
from chapter20.techniques.distributed import run_local_group
from chapter20.techniques.sharding import ShardedEmbedding
from chapter20.training.checkpoints import CheckpointManager
from chapter20.training.sampler import ResumableBatchSampler
from chapter20.training.state import capture_state, restore_state

__all__ = ["elastic_training", "resume_at_other_world_size"]


# A model whose training does not depend on the world size: a sharded table with replicated
# inputs (every rank sees the global batch, rows owned by one rank each) and a linear head.
_ELASTIC = {"vocab": 23, "dim": 4, "examples": 60, "tokens": 5, "global_batch": 6}


def _elastic_parts() -> dict:
    set_seed(0)
    table = ShardedEmbedding(_ELASTIC["vocab"], _ELASTIC["dim"], seed=1)
    model = torch.nn.ModuleDict({"table": table, "head": torch.nn.Linear(_ELASTIC["dim"], 1)})
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    sampler = ResumableBatchSampler(_ELASTIC["examples"], _ELASTIC["global_batch"], seed=2)
    return {"model": model, "optimizer": optimizer, "sampler": sampler}


def _elastic_data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    shape = (_ELASTIC["examples"], _ELASTIC["tokens"])
    ids = torch.randint(0, _ELASTIC["vocab"], shape, generator=generator)
    return ids, torch.randn(_ELASTIC["examples"], 1, generator=generator)


def _global_batch(sampler: ResumableBatchSampler) -> torch.Tensor:
    mine = sampler.next_batch()
    if sampler.world_size == 1:
        return mine
    slices = [torch.empty_like(mine) for _ in range(sampler.world_size)]
    dist.all_gather(slices, mine)
    return torch.cat(slices)


def elastic_training(directory: str, steps: int, stop_after: int | None = None) -> dict:
    """Train the world-size-independent model to ``steps``, resuming from ``directory`` and
    saving every 3 steps (every rank calls it); ``stop_after`` ends it early without saving,
    as a lost node would. Returns the whole logical table, the head, the step it resumed from
    and the warnings of the resume."""
    steps = check_int("steps", steps, 1)
    stop_after = check_optional_int("stop_after", stop_after, 1)
    parts = _elastic_parts()
    model, optimizer, sampler = parts["model"], parts["optimizer"], parts["sampler"]
    ids, targets = _elastic_data()
    manager = CheckpointManager(directory, keep_last=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = manager.load_latest()
        start = restore_state(state, **parts) if state is not None else 0
    for step in range(start + 1, steps + 1):
        batch = _global_batch(sampler)
        prediction = model["head"](model["table"](ids[batch]).mean(dim=1))
        loss = torch.nn.functional.mse_loss(prediction, targets[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 3 == 0:
            manager.save(capture_state(step, **parts))
        if step == stop_after:
            break
    manager.close()
    return {
        "table": model["table"].full_weight(),
        "head": [p.detach().clone() for p in model["head"].parameters()],
        "resumed_from": start,
        "warnings": [str(w.message) for w in caught],
    }


def _elastic_first_launch(directory: str, steps: int, stop_after: int) -> dict:
    reference = elastic_training(f"{directory}/reference", steps)
    elastic_training(f"{directory}/elastic", steps, stop_after)
    return reference


def resume_at_other_world_size(
    directory: str | Path, first: int = 2, second: int = 3, steps: int = 9, stop_after: int = 5
) -> dict:
    """Train on ``first`` ranks, lose the run after ``stop_after`` steps (newest checkpoint:
    step 3), resume on ``second`` ranks to ``steps``; and the same run uninterrupted on
    ``first`` ranks. Returns the largest difference between the two (tables, head) and the
    resumed run's warnings and start step."""
    first, second = check_int("first", first, 1), check_int("second", second, 1)
    steps, stop_after = check_int("steps", steps, 1), check_int("stop_after", stop_after, 1)
    directory = Path(directory)
    reference = run_local_group(_elastic_first_launch, first, (str(directory), steps, stop_after))[
        0
    ]
    resumed = run_local_group(elastic_training, second, (str(directory / "elastic"), steps))
    difference = max(float((r["table"] - reference["table"]).abs().max()) for r in resumed)
    for r in resumed:
        for got, expected in zip(r["head"], reference["head"]):
            difference = max(difference, float((got - expected).abs().max()))
    return {
        "max_abs_difference": difference,
        "resumed_from": [r["resumed_from"] for r in resumed],
        "warnings": resumed[0]["warnings"],
    }
