"""§20.5.2 The training state: everything a resumed run needs to continue bit for bit.

Listing L13 saves only the model. A run that resumes bit for bit also needs the optimizer, the
LR scheduler, the GradScaler, the step, the data position and every rank's RNG states:
:func:`capture_state` gathers them (in types that ``torch.load(weights_only=True)`` reads back)
and :func:`restore_state` puts them back; :func:`parameter_fingerprint` tells two runs' weights
apart. ``chapter20.training.checkpoints.CheckpointManager`` writes what :func:`capture_state`
returns; :func:`state_table` says what it holds, component by component.
"""

from __future__ import annotations

import hashlib
import random
import warnings
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from chapter20.core.checks import check_int
from chapter20.core.device import set_seed
from chapter20.core.measure import format_bytes
from chapter20.techniques.distributed import group_rank_and_size
from chapter20.training.sampler import ResumableBatchSampler
from chapter20.training.sharded_checkpoint import (
    ShardedModelState,
    load_sharded_state,
    sharded_state_dict,
    sharded_tables,
)

__all__ = [
    "rng_state",
    "set_rng_state",
    "capture_state",
    "restore_state",
    "parameter_fingerprint",
    "state_table",
]


def rng_state() -> dict[str, Any]:
    """This process's Python, NumPy, torch CPU and (when present) CUDA RNG states (§20.5.2), in
    types that ``torch.load(weights_only=True)`` accepts."""
    version, words, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": (version, list(words), gauss),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured (§20.5.2); the CUDA states only when this
    process has as many GPUs as the one that saved them (otherwise a warning)."""
    version, words, gauss = state["python"]
    random.setstate((version, tuple(words), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        if len(state["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda"])
        else:
            warnings.warn(
                f"checkpoint holds {len(state['cuda'])} CUDA RNG states, this process sees "
                f"{torch.cuda.device_count()} GPUs: CUDA RNG not restored",
                stacklevel=2,
            )


def _all_ranks_rng(group: dist.ProcessGroup | None) -> list[dict[str, Any]]:
    _, world = group_rank_and_size(group)
    if world == 1:
        return [rng_state()]
    states: list[Any] = [None] * world
    dist.all_gather_object(states, rng_state(), group=group)
    return states


def capture_state(
    step: int,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any = None,
    scaler: torch.amp.GradScaler | None = None,
    sampler: ResumableBatchSampler | None = None,
    group: dist.ProcessGroup | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The full training state after ``step`` optimizer steps (§20.5.2); a collective under
    DDP (every rank's RNG states are gathered), so every rank calls it.

    ``model`` is the plain module (not the DDP wrapper, whose keys carry ``module.``). ``extra``
    keeps small values (epoch counters, loss history) under ``state["extra"]``; they must be tensors
    or plain Python values (:meth:`CheckpointManager.save` checks, naming the key). When ``model``
    holds :class:`~chapter20.techniques.sharding.ShardedEmbedding` tables, each rank has only its
    rows: model and optimizer go under ``state["sharded"]``, which :meth:`CheckpointManager.save`
    writes through DCP from every rank, so that the run resumes at any world size. Like any
    ``state_dict``, the result holds the live tensors, not copies: save it before the next step
    changes them.
    """
    step = check_int("step", step, 0)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    _, world = group_rank_and_size(group)
    sharded = None
    if sharded_tables(model):
        sharded = sharded_state_dict(model, optimizer, group=group)
    state = {
        "step": step,
        "world_size": world,
        "model": model.state_dict() if sharded is None else None,
        "optimizer": _optimizer_state(optimizer, group) if sharded is None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "sampler": sampler.state_dict() if sampler is not None else None,
        "rng": _all_ranks_rng(group),
        "extra": extra,
    }
    if sharded is not None:
        state["sharded"] = sharded
    return state


def _optimizer_state(optimizer: torch.optim.Optimizer, group) -> dict[str, Any] | None:
    """The optimizer's whole state. An optimizer whose state is sharded over the ranks (ZeRO
    stage 1, ``ZeroRedundancyOptimizer``) gathers it on rank 0 first (a collective), which
    writes the checkpoint; the other ranks hold None (every rank loads rank 0's file, and
    each keeps its own share)."""
    if not hasattr(optimizer, "consolidate_state_dict"):
        return optimizer.state_dict()
    optimizer.consolidate_state_dict(to=0)
    return optimizer.state_dict() if group_rank_and_size(group)[0] == 0 else None


def restore_state(
    state: dict[str, Any],
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any = None,
    scaler: torch.amp.GradScaler | None = None,
    sampler: ResumableBatchSampler | None = None,
    group: dist.ProcessGroup | None = None,
) -> int:
    """Load what :func:`capture_state` saved into fresh objects and return the step (§20.5.2);
    every rank calls it.

    Every component given must be in the checkpoint (and vice versa), so a resume never runs
    with, say, a fresh optimizer by accident: a mismatch raises ``ValueError``. Sharded tables
    are read back through DCP, each rank reading its own rows at the current world size. When
    the world size changed (an elastic restart on fewer or more machines) the RNG streams
    cannot be matched to ranks: a warning says the run continues, but no longer bit for bit.
    """
    if not isinstance(state, dict) or "step" not in state:
        raise TypeError("state must be a dict from capture_state / CheckpointManager.load_latest")
    for name, obj in (("scheduler", scheduler), ("scaler", scaler), ("sampler", sampler)):
        if (obj is None) != (state.get(name) is None):
            where = "the checkpoint has none" if obj is not None else "none was passed"
            raise ValueError(f"{name}: {where}; pass the same components that were saved")
    sharded = state.get("sharded")
    if isinstance(sharded, ShardedModelState):
        raise ValueError(
            "this state was captured but not saved: restore what CheckpointManager.load_latest "
            "returns (a sharded model's rows are on disk, one part per rank)"
        )
    if sharded is not None:
        load_sharded_state(sharded["directory"], model, optimizer, group=group)
    else:
        if sharded_tables(model):
            raise ValueError(
                "the model has sharded tables but the checkpoint holds an unsharded model"
            )
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    for name, obj in (("scheduler", scheduler), ("scaler", scaler), ("sampler", sampler)):
        if obj is not None:
            obj.load_state_dict(state[name])
    rank, world = group_rank_and_size(group)
    if world == state["world_size"]:
        set_rng_state(state["rng"][rank])
    else:
        warnings.warn(
            f"checkpoint was saved by {state['world_size']} ranks, this run has {world}: "
            "model, optimizer and data position restored, RNG streams reseeded (the run "
            "continues correctly, but not bit for bit like an uninterrupted one)",
            stacklevel=2,
        )
        set_seed(state["step"] * 1000 + rank)
    return state["step"]


def parameter_fingerprint(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter and buffer's bytes, in state-dict order (first 16 hex digits):
    equal fingerprints mean bitwise-equal models (§20.5.2's resume proof). Entries that are not
    tensors (a sharded table's row layout) are not part of the values and are skipped; for a
    sharded table it is this rank's rows."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        if not isinstance(tensor, torch.Tensor):
            continue
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def _tensor_bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def _holds(name: str, value) -> str:
    if value is None:
        return "none in this run"
    if name == "model":
        return f"{len(value)} tensors: " + ", ".join(value)
    if name == "optimizer":
        kinds = sorted({k for per in value["state"].values() for k in per})
        group = [k for k in value["param_groups"][0] if k != "params"][:4]
        return f"{', '.join(kinds)} for {len(value['state'])} tensors; {', '.join(group)}, ..."
    if name == "rng":
        return f"{len(value)} rank(s) × " + ", ".join(value[0])
    if isinstance(value, dict):
        shown = {
            k: v for k, v in value.items() if k[0] != "_" and isinstance(v, (int, float, list))
        }
        return ", ".join(f"{k}={v}" for k, v in shown.items()) or "(empty)"
    return repr(value)


def state_table(state: dict):
    """§20.5.2 what a saved training state holds, one row per component of
    :func:`capture_state`: what it holds (tensor names, optimizer slots, the schedule's and the
    sampler's counters, the RNG streams per rank) and its tensor bytes."""
    import pandas as pd  # only the table needs it, not the training processes

    if not isinstance(state, dict) or "step" not in state:
        raise TypeError("state must be a dict from capture_state / CheckpointManager.load_latest")
    return pd.DataFrame(
        [
            {
                "component": name,
                "holds": _holds(name, value),
                "tensor bytes": format_bytes(_tensor_bytes(value)),
            }  # fmt: skip
            for name, value in state.items()
        ]
    )
