"""§20.1, §20.4 Sharded checkpoints: a model with sharded embedding tables saved and loaded
through ``torch.distributed.checkpoint`` (DCP), at any world size, optimizer state included.

A :class:`~chapter20.techniques.sharding.ShardedEmbedding` holds only its rank's rows, so no rank
has the whole model to save, and after a restart on a different number of machines each rank needs
other rows than it saved. DCP solves both (§20.4 best practices, "sharded checkpoints"):

- Every rank writes its own rows; the rest of the model (replicated, as under DDP) is written
  once. The coordinator writes the metadata file ``.metadata`` last, after every rank's data is
  on disk: a directory without it is an unfinished save and is never loaded (the commit marker).
- A range-partitioned table is a ``DTensor`` sharded by rows (``Shard(0)``: blocks of
  ceil(V/W) rows, the same placement as :class:`~chapter20.techniques.sharding.RowPartition`), so at
  load each rank reads only the saved blocks that overlap the rows it owns now, at any world size;
  no rank materialises the V×D table.
- Model and optimizer state go through ``get_state_dict`` / ``set_state_dict``, keyed by
  parameter name rather than by position, so AdamW's moments of each row follow the row.
- A modulo-partitioned table (row r on rank r mod W) is not a contiguous block. Its own path:
  its rows (and their optimizer state) are exchanged by all-to-all into the range layout before
  DCP writes them, and back after DCP reads them, so both partitions share one file format and
  load into each other.

Values that are not tensors (hyper-parameters of the optimizer, the tables' layout) travel as one
byte tensor holding a ``torch.save`` payload that is checked to load with ``weights_only=True``
before anything is written; DCP itself then unpickles no object of ours.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.paths import check_weights_only
from chapter20.techniques.distributed import any_rank, group_rank_and_size
from chapter20.techniques.sharding import RowPartition, ShardedEmbedding

__all__ = [
    "METADATA_FILE",
    "ShardedModelState",
    "sharded_tables",
    "sharded_state_dict",
    "write_sharded_state",
    "save_sharded_state",
    "load_sharded_state",
    "is_committed",
    "save_sharded",
    "load_sharded",
]

#: DCP's metadata file; the coordinator writes it after every rank's data: the commit marker.
METADATA_FILE = ".metadata"
_OBJECTS = "chapter20_objects"


def _dcp():
    """``torch.distributed.checkpoint``, imported on first use: it costs about a second at
    start-up, which every process that imports ``chapter20.training.checkpoints`` (every training
    launch, every
    restart after a preemption) would otherwise pay without a sharded table to save."""
    import torch.distributed.checkpoint as dcp

    return dcp


def _state_dict_api():
    """``torch.distributed.checkpoint.state_dict`` (get/set_state_dict), imported on first use."""
    from torch.distributed.checkpoint import state_dict

    return state_dict


def _options():
    return _state_dict_api().StateDictOptions(flatten_optimizer_state_dict=True)


def sharded_tables(model: nn.Module) -> dict[str, ShardedEmbedding]:
    """The :class:`ShardedEmbedding` modules of ``model`` by name ("" when ``model`` is one)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return {name: m for name, m in model.named_modules() if isinstance(m, ShardedEmbedding)}


def _prefix(name: str) -> str:
    return f"{name}." if name else ""


# --------------------------------------------------------------------------------------------
# Rows between the two partitions at one world size
# --------------------------------------------------------------------------------------------


def _exchange_rows(
    tensor: torch.Tensor, table: ShardedEmbedding, source: RowPartition, target: RowPartition
) -> torch.Tensor:
    """``tensor`` (this rank's rows under ``source``, one per row) laid out under ``target``:
    each row travels to its new owner with one all-to-all (ids with a second)."""
    rank, world = table.rank, table.world_size
    if world == 1 or source == target:
        return tensor
    device = tensor.device
    ids = source.rows_of(rank).to(device)
    destination = target.owner(ids)
    order = torch.argsort(destination, stable=True)
    send = torch.bincount(destination, minlength=world)
    receive = torch.empty_like(send)
    dist.all_to_all_single(receive, send, group=table.group)
    send_splits, receive_splits = send.tolist(), receive.tolist()
    rows = tensor.new_empty((sum(receive_splits), *tensor.shape[1:]))
    dist.all_to_all_single(
        rows, tensor[order].contiguous(), receive_splits, send_splits, group=table.group
    )
    row_ids = ids.new_empty(sum(receive_splits))
    dist.all_to_all_single(row_ids, ids[order], receive_splits, send_splits, group=table.group)
    out = tensor.new_empty((target.num_rows(rank), *tensor.shape[1:]))
    out[target.local_index(row_ids)] = rows
    return out


def _range_layout(table: ShardedEmbedding) -> RowPartition:
    return RowPartition(table.num_embeddings, table.world_size, "range")


def _as_global(local: torch.Tensor, table: ShardedEmbedding, mesh) -> Any:
    """This rank's block of a range-partitioned V×… tensor as a DTensor (the tensor itself in a
    world of one, where the block is the whole table)."""
    if mesh is None:
        return local
    try:
        from torch.distributed.tensor import DTensor, Shard
    except ImportError:  # torch < 2.5
        from torch.distributed._tensor import DTensor, Shard

    shape = torch.Size((table.num_embeddings, *local.shape[1:]))
    return DTensor.from_local(
        local, mesh, [Shard(0)], run_check=False, shape=shape, stride=_contiguous_stride(shape)
    )


def _contiguous_stride(shape: torch.Size) -> tuple[int, ...]:
    stride, step = [], 1
    for size in reversed(shape):
        stride.append(step)
        step *= size
    return tuple(reversed(stride))


def _mesh(tables: dict[str, ShardedEmbedding], group: dist.ProcessGroup | None):
    worlds = {t.world_size for t in tables.values()}
    if not tables or worlds == {1}:
        return None
    from torch.distributed.device_mesh import DeviceMesh

    device_type = next(iter(tables.values())).weight.device.type
    return DeviceMesh.from_group(group or dist.group.WORLD, device_type)


# --------------------------------------------------------------------------------------------
# The state: which entries are rows of a table
# --------------------------------------------------------------------------------------------


def _dcp_options(group: dist.ProcessGroup | None) -> dict[str, Any]:
    """DCP's keyword arguments: the group, or ``no_dist`` in a world of one without one."""
    if dist.is_available() and dist.is_initialized():
        return {"process_group": group}
    return {"no_dist": True} if "no_dist" in inspect.signature(_dcp().load).parameters else {}


@contextlib.contextmanager
def _dcp_call(what: str):
    """Run a DCP save or load. Without a process group DCP warns that it "assumes" a single
    process: here that is the documented world of one, not a guess. DCP reports a failure on
    any rank as a ``CheckpointException`` on every rank, a BaseException that ``except
    Exception`` misses; it becomes an OSError (a disk error, errno kept) or a RuntimeError."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            yield
    except CheckpointException as exc:
        ranks = sorted(exc.failures)
        first = exc.failures[ranks[0]][0] if ranks else exc
        where = f"{what} failed on rank {', '.join(map(str, ranks))}"
        if isinstance(first, OSError):
            raise OSError(first.errno, f"{where}: {first.strerror or first}") from first
        raise RuntimeError(f"{where}: {type(first).__name__}: {first}") from first


def _row_entries(
    tables: dict[str, ShardedEmbedding], model_sd: dict, optim_sd: dict
) -> dict[tuple[str, str], ShardedEmbedding]:
    """(``"model"`` or ``"optimizer"``, key) of every entry that holds one value per row of a
    table (its weight, its AdamW moments, its momentum buffer), mapped to the table."""
    entries = {}
    for name, table in tables.items():
        weight = f"{_prefix(name)}weight"
        entries[("model", weight)] = table
        local_shape = tuple(table.weight.shape)
        for key, value in optim_sd.items():
            if not key.startswith(f"state.{weight}.") or not isinstance(value, torch.Tensor):
                continue
            if value.dim() == 0:
                continue  # a step count: replicated
            if tuple(value.shape) != local_shape:
                raise ValueError(
                    f"optimizer state {key!r} has shape {tuple(value.shape)}, not one value per "
                    f"row of the table {local_shape}: it cannot be resharded (use an optimizer "
                    "whose state has the parameter's shape, e.g. AdamW or SGD)"
                )
            entries[("optimizer", key)] = table
    return entries


class ShardedModelState:
    """Model and optimizer state of a model with sharded tables, ready for DCP (§20.4).

    ``tensors`` maps ``"model"`` / ``"optimizer"`` to flat dicts of tensors (rows of a table as
    DTensors in the range layout when the world has several ranks); ``objects`` holds what is
    not a tensor (optimizer hyper-parameters, the tables' sizes). Like a ``state_dict`` it may
    hold the live tensors: write it (:func:`write_sharded_state`) before the next step.
    """

    def __init__(self, tensors: dict[str, dict[str, Any]], objects: dict[str, Any]):
        self.tensors = tensors
        self.objects = objects

    def __repr__(self) -> str:
        counts = {part: len(entries) for part, entries in self.tensors.items()}
        return f"ShardedModelState(tensors={counts}, tables={self.objects['tables']})"


def _split_tensors(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    return tensors, {k: v for k, v in state.items() if k not in tensors}


def _model_and_optimizer_state(model: nn.Module, optimizer, with_optimizer: bool):
    if with_optimizer:
        return _state_dict_api().get_state_dict(model, optimizer, options=_options())
    return _state_dict_api().get_model_state_dict(model, options=_options()), {}


def sharded_state_dict(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    group: dist.ProcessGroup | None = None,
) -> ShardedModelState:
    """The state of ``model`` (and ``optimizer``) in the form DCP writes (§20.1, §20.4); a
    collective when a table is modulo-partitioned (its rows move to the range layout), so every
    rank calls it. Rows of every table are stored in the range layout, whatever the partition.

    An optimizer that has not stepped yet has no state; it is saved as such (its
    hyper-parameters only), because ``get_state_dict`` would create the state with a zero step
    and change the run that follows.
    """
    tables = sharded_tables(model)
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    stepped = optimizer is not None and bool(optimizer.state)
    model_sd, optim_sd = _model_and_optimizer_state(model, optimizer, stepped)
    for name in tables:
        model_sd.pop(f"{_prefix(name)}_extra_state", None)
    model_tensors, model_objects = _split_tensors(model_sd)
    optim_tensors, optim_objects = _split_tensors(optim_sd)
    mesh = _mesh(tables, group)
    parts = {"model": model_tensors, "optimizer": optim_tensors}
    for (part, key), table in _row_entries(tables, model_tensors, optim_tensors).items():
        ranged = _exchange_rows(parts[part][key], table, table.partition, _range_layout(table))
        parts[part][key] = _as_global(ranged.detach(), table, mesh)
    objects = {
        "model": model_objects,
        "optimizer": optim_objects,
        "optimizer_saved": optimizer is not None,
        "optimizer_stepped": stepped,
        "param_groups": optimizer.state_dict()["param_groups"] if optimizer is not None else None,
        "tables": {
            name: {
                "num_embeddings": t.num_embeddings,
                "embedding_dim": t.embedding_dim,
                "partition": t.partition.kind,
                "world_size": t.world_size,
            }
            for name, t in tables.items()
        },
    }
    check_weights_only(objects, "objects")
    return ShardedModelState(parts, objects)


def _objects_tensor(objects: dict[str, Any]) -> torch.Tensor:
    buffer = io.BytesIO()
    torch.save(objects, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def is_committed(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a finished DCP save (its metadata file exists)."""
    return (Path(directory) / METADATA_FILE).is_file()


def write_sharded_state(
    directory: str | os.PathLike,
    state: ShardedModelState,
    *,
    group: dist.ProcessGroup | None = None,
) -> Path:
    """Write ``state`` (from :func:`sharded_state_dict`) to ``directory`` with DCP; every rank
    calls it (§20.4). A metadata file already there is removed first (and every rank waits for
    that), so a save that dies half-way never leaves the old metadata vouching for a mix of old
    and new files. Raises on every rank if any rank fails."""
    if not isinstance(state, ShardedModelState):
        raise TypeError(f"state must be a ShardedModelState, got {type(state).__name__}")
    directory = Path(directory)
    rank, world = group_rank_and_size(group)
    failed = False
    if rank == 0:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / METADATA_FILE).unlink(missing_ok=True)
        except OSError:
            failed = True
    if any_rank(failed, group):
        raise OSError(f"could not prepare the checkpoint directory {directory}")
    payload = {**state.tensors, _OBJECTS: _objects_tensor(state.objects)}
    with _dcp_call(f"saving the sharded checkpoint {directory}"):
        _dcp().save(payload, checkpoint_id=str(directory), **_dcp_options(group))
    return directory


def save_sharded_state(
    directory: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    group: dist.ProcessGroup | None = None,
) -> Path:
    """Save ``model`` (and ``optimizer``) with DCP into ``directory``: each rank writes its own
    rows, the metadata written last commits the save (§20.1, §20.4). Every rank calls it."""
    return write_sharded_state(
        directory, sharded_state_dict(model, optimizer, group=group), group=group
    )


def _saved_objects(directory: Path, metadata, group) -> dict[str, Any]:
    entry = metadata.state_dict_metadata.get(_OBJECTS)
    if entry is None:
        raise ValueError(f"{directory} is a DCP checkpoint, but not one of chapter20's")
    buffer = torch.empty(entry.size, dtype=torch.uint8)
    with _dcp_call(f"loading the sharded checkpoint {directory}"):
        _dcp().load({_OBJECTS: buffer}, checkpoint_id=str(directory), **_dcp_options(group))
    return torch.load(io.BytesIO(buffer.numpy().tobytes()), weights_only=True)


def _drop_unsaved_optimizer_state(model, optimizer, optim_sd: dict, saved: set[str]) -> None:
    """Parameters that had no optimizer state when saved (no gradient yet) get none now:
    ``get_state_dict`` created state for every parameter of the fresh optimizer."""
    for name, param in model.named_parameters():
        keys = [k for k in optim_sd if k.startswith(f"state.{name}.")]
        if keys and not any(f"optimizer.{k}" in saved for k in keys):
            for key in keys:
                del optim_sd[key]
            optimizer.state.pop(param, None)


def _check_tables(tables: dict[str, ShardedEmbedding], saved: dict[str, dict]) -> None:
    if set(tables) != set(saved):
        raise ValueError(
            f"the checkpoint holds sharded tables {sorted(saved)}, the model {sorted(tables)}"
        )
    for name, table in tables.items():
        size = (saved[name]["num_embeddings"], saved[name]["embedding_dim"])
        if size != (table.num_embeddings, table.embedding_dim):
            raise ValueError(
                f"table {name or '(the model)'!r}: the checkpoint holds a {size[0]}×{size[1]} "
                f"table, the model a {table.num_embeddings}×{table.embedding_dim} one"
            )


def load_sharded_state(
    directory: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    group: dist.ProcessGroup | None = None,
) -> dict[str, Any]:
    """Load what :func:`save_sharded_state` wrote into ``model`` (and ``optimizer``), at any
    world size and either partition (§20.1, §20.4); every rank calls it. Each rank reads only
    the saved row blocks that overlap the rows it owns now. Returns the saved tables' layouts.

    Raises FileNotFoundError for a directory without a finished save (no metadata), ValueError
    when the checkpoint holds other tables or sizes, or no optimizer state for ``optimizer``.
    """
    directory = Path(directory)
    if not is_committed(directory):
        raise FileNotFoundError(
            f"{directory} holds no finished sharded checkpoint (no {METADATA_FILE}: the save "
            "did not complete, or this is not a checkpoint directory)"
        )
    tables = sharded_tables(model)
    metadata = _dcp().FileSystemReader(str(directory)).read_metadata()
    objects = _saved_objects(directory, metadata, group)
    _check_tables(tables, objects["tables"])
    if optimizer is not None and not objects["optimizer_saved"]:
        raise ValueError("the checkpoint holds no optimizer state; pass optimizer=None")
    stepped = optimizer is not None and objects["optimizer_stepped"]
    model_sd, optim_sd = _model_and_optimizer_state(model, optimizer, stepped)
    if stepped:
        _drop_unsaved_optimizer_state(model, optimizer, optim_sd, set(metadata.state_dict_metadata))
    extra = {
        f"{_prefix(name)}_extra_state": model_sd.pop(f"{_prefix(name)}_extra_state")
        for name in tables
        if f"{_prefix(name)}_extra_state" in model_sd
    }
    model_tensors, _ = _split_tensors(model_sd)
    optim_tensors, _ = _split_tensors(optim_sd)
    parts = {"model": model_tensors, "optimizer": optim_tensors}
    targets = {"model": dict(model_tensors), "optimizer": dict(optim_tensors)}
    rows = _row_entries(tables, model_tensors, optim_tensors)
    mesh = _mesh(tables, group)
    for (part, key), table in rows.items():
        live = parts[part][key]
        block = (
            live
            if table.partition.kind == "range"
            else live.new_empty((_range_layout(table).num_rows(table.rank), *live.shape[1:]))
        )
        targets[part][key] = _as_global(block.detach(), table, mesh)
    with _dcp_call(f"loading the sharded checkpoint {directory}"):
        _dcp().load(targets, checkpoint_id=str(directory), **_dcp_options(group))
    for (part, key), table in rows.items():
        block = targets[part][key]
        block = block.to_local() if hasattr(block, "to_local") else block
        moved = _exchange_rows(block, table, _range_layout(table), table.partition)
        with torch.no_grad():
            parts[part][key].copy_(moved)
    for part in ("model", "optimizer"):
        for key, value in targets[part].items():
            if (part, key) not in rows:
                parts[part][key] = value
    model_sd = {**model_sd, **parts["model"], **objects["model"], **extra}
    if stepped:
        optim_sd = {**optim_sd, **parts["optimizer"], **objects["optimizer"]}
        _state_dict_api().set_state_dict(
            model,
            optimizer,
            model_state_dict=model_sd,
            optim_state_dict=optim_sd,
            options=_options(),
        )
    else:
        model.load_state_dict(model_sd)
        if optimizer is not None:
            optimizer.load_state_dict({"state": {}, "param_groups": objects["param_groups"]})
    return objects["tables"]


# --------------------------------------------------------------------------------------------
# One table
# --------------------------------------------------------------------------------------------


def save_sharded(table: ShardedEmbedding, directory: str | os.PathLike) -> Path:
    """Save one sharded table with DCP (§20.1): :func:`save_sharded_state` of the table alone;
    every rank of its group calls it. Returns ``directory``."""
    if not isinstance(table, ShardedEmbedding):
        raise TypeError(f"table must be a ShardedEmbedding, got {type(table).__name__}")
    return save_sharded_state(directory, table, group=table.group)


def load_sharded(table: ShardedEmbedding, directory: str | os.PathLike) -> None:
    """Load a table saved by :func:`save_sharded` (at any world size, either partition) into
    ``table``; each rank reads only the saved blocks that overlap its rows (§20.1)."""
    if not isinstance(table, ShardedEmbedding):
        raise TypeError(f"table must be a ShardedEmbedding, got {type(table).__name__}")
    load_sharded_state(directory, table, group=table.group)
