"""§20.1 Sharded embedding tables: one logical V×D table split by rows across the ranks.

The chapter's table (listing L1) splits the rows into contiguous blocks, looks up the ids a rank
owns into a zero tensor and sums the ranks' tensors with an all-reduce. It drops the last
``V mod world_size`` rows, answers unknown ids with zeros, and is only right when every rank
holds the same ids (``sharding_proofs.listing_lookup_done_right`` is that listing in its few
lines with both faults fixed, for reading). :class:`ShardedEmbedding` keeps every row, rejects
bad ids on every rank, and offers both communication patterns:

- ``inputs="replicated"`` (tensor parallel, as Megatron's ``VocabParallelEmbedding``): all
  ranks hold the same ids; each looks up the rows it owns, zeroes the rest, and a SUM
  all-reduce assembles the rows. The loss is replicated, so the backward is the identity.
- ``inputs="per_rank"`` (row-wise sharding under data parallelism, as TorchRec): each rank has
  its own ids; they are bucketed by owner and sent there with an all-to-all, looked up, and the
  rows come back with a second all-to-all. The backward runs the same path in reverse, so each
  row's gradient lands on its owner, summed over every rank that used it.

Rows are placed by a :class:`RowPartition`: ``"range"`` (contiguous blocks of ceil(V/W) rows; the
last ranks may own fewer or none) or ``"modulo"`` (row r on rank r mod W). Initial values depend
only on the row id and the seed, so a table is the same at every world size; the state dict carries
the logical row ids, and :mod:`chapter20.training.sharded_checkpoint` saves a table (with its
optimizer state) through ``torch.distributed.checkpoint`` so that one saved at W=2 loads at W=3,
each rank reading only its rows.

Bytes sent are recorded per collective in :attr:`ShardedEmbedding.comm_log`; gloo and nccl do
not report traffic, so an all-to-all counts the elements that leave the rank and an all-reduce
counts the tensor with the ring algorithm's per-rank traffic, 2(W-1)/W × its bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from chapter20.core.checks import check_int
from chapter20.techniques.communication_model import ring_allreduce_bytes
from chapter20.techniques.distributed import group_rank_and_size

__all__ = [
    "INPUT_MODES",
    "PARTITIONS",
    "RowPartition",
    "CommRecord",
    "ShardedEmbedding",
    "ShardedBagEncoder",
    "data_parallel_ignored_names",
    "all_to_all_bytes",
    "shard_load",
]

INPUT_MODES = ("replicated", "per_rank")
PARTITIONS = ("range", "modulo")

#: Rows initialised from one generator seed; a row's initial value depends on its id only.
_INIT_CHUNK_ROWS = 4096

# Status codes exchanged with the bucket sizes, so that a bad id on one rank stops every rank.
_OK, _OUT_OF_RANGE, _NOT_INTEGER = 0, 1, 2
_INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# Which rank owns which row
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowPartition:
    """Placement of ``num_embeddings`` rows on ``world_size`` ranks (§20.1.1, model parallelism).

    ``kind="range"``: rank r owns rows [r·B, min((r+1)·B, V)) with B = ceil(V/W), so every row
    has an owner and trailing ranks may own fewer rows, or none. ``kind="modulo"``: rank r owns
    rows r, r+W, r+2W, ..., which spreads consecutive (often equally hot) ids over all ranks.
    """

    num_embeddings: int
    world_size: int
    kind: str = "range"

    def __post_init__(self) -> None:
        check_int("num_embeddings", self.num_embeddings, 1)
        check_int("world_size", self.world_size, 1)
        _check_choice("partition", self.kind, PARTITIONS)

    @property
    def block(self) -> int:
        """The most rows any rank owns: ceil(V / W) for both kinds."""
        return math.ceil(self.num_embeddings / self.world_size)

    def owner(self, ids: torch.Tensor) -> torch.Tensor:
        """The rank that owns each id (ids must already be in range)."""
        if self.kind == "range":
            return torch.div(ids, self.block, rounding_mode="floor")
        return torch.remainder(ids, self.world_size)

    def local_index(self, ids: torch.Tensor) -> torch.Tensor:
        """Each id's row in its owner's shard."""
        if self.kind == "range":
            return torch.remainder(ids, self.block)
        return torch.div(ids, self.world_size, rounding_mode="floor")

    def rows_of(self, rank: int) -> torch.Tensor:
        """The logical row ids rank ``rank`` owns, in the order of its shard."""
        rank = self._check_rank(rank)
        if self.kind == "range":
            start = min(rank * self.block, self.num_embeddings)
            stop = min(start + self.block, self.num_embeddings)
            return torch.arange(start, stop)
        return torch.arange(rank, max(rank, self.num_embeddings), self.world_size)

    def num_rows(self, rank: int) -> int:
        """How many rows rank ``rank`` owns."""
        rank = self._check_rank(rank)
        if self.kind == "range":
            return max(0, min(self.block, self.num_embeddings - rank * self.block))
        return len(range(rank, self.num_embeddings, self.world_size))

    def _check_rank(self, rank: int) -> int:
        rank = check_int("rank", rank, 0)
        if rank >= self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got {rank}")
        return rank


def shard_load(
    ids: torch.Tensor, num_embeddings: int, world_size: int, partition: str = "range"
) -> torch.Tensor:
    """Lookups each rank serves for ``ids`` (§20.1.1, stragglers and load imbalance).

    Returns a LongTensor of length ``world_size``; ``load.max() / load.float().mean()`` is the
    imbalance: the busiest rank sets the step time. Under Zipf ids a range partition puts all
    hot (small) ids on rank 0, a modulo partition spreads them.
    """
    layout = RowPartition(num_embeddings, world_size, partition)
    flat = _validated_ids(ids, num_embeddings).reshape(-1)
    return torch.bincount(layout.owner(flat), minlength=world_size)


# --------------------------------------------------------------------------------------------
# Id validation: the same error at every world size, never zeros
# --------------------------------------------------------------------------------------------


def _id_status(ids: object, num_embeddings: int) -> tuple[int, int]:
    """(status code, offending value) for a batch of ids."""
    if not isinstance(ids, torch.Tensor) or ids.dtype not in _INTEGER_DTYPES:
        return _NOT_INTEGER, 0
    if ids.numel() == 0:
        return _OK, 0
    low, high = torch.aminmax(ids)
    if low.item() < 0:
        return _OUT_OF_RANGE, int(low.item())
    if high.item() >= num_embeddings:
        return _OUT_OF_RANGE, int(high.item())
    return _OK, 0


def _raise_for_status(
    code: int, value: int, num_embeddings: int, ids: object = None, rank: int | None = None
) -> None:
    where = "" if rank is None else f" (on rank {rank})"
    if code == _NOT_INTEGER:
        got = type(ids).__name__ if not isinstance(ids, torch.Tensor) else f"dtype {ids.dtype}"
        if ids is None:
            got = "a non-integer tensor"
        raise TypeError(f"ids must be an integer tensor (int64, int32, ...), got {got}{where}")
    if code == _OUT_OF_RANGE:
        raise IndexError(
            f"ids must be in [0, {num_embeddings}) for num_embeddings={num_embeddings}, "
            f"got {value}{where}"
        )


def _validated_ids(ids: object, num_embeddings: int) -> torch.Tensor:
    code, value = _id_status(ids, num_embeddings)
    _raise_for_status(code, value, num_embeddings, ids)
    return ids.long()  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------
# Communication: what each collective sends, and the formulas
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommRecord:
    """One collective as seen from this rank (§20.1.1, communication bottlenecks).

    ``tensor_bytes`` is what was handed to the collective; ``bytes_sent`` what this rank puts on
    the wire: for an all-to-all the elements addressed to other ranks, for an all-reduce the
    ring algorithm's 2(W-1)/W × ``tensor_bytes``.
    """

    op: str
    payload: str
    tensor_bytes: int
    bytes_sent: float
    world_size: int


def all_to_all_bytes(
    ids: torch.Tensor,
    num_embeddings: int,
    world_size: int,
    rank: int,
    row_bytes: int,
    partition: str = "range",
) -> int:
    """Bytes rank ``rank`` sends when its ``ids`` travel to their owners by all-to-all (§20.1.1):
    the ids owned by other ranks × ``row_bytes``. With ``row_bytes`` = D × element size this is
    the rows a per-rank sharded table returns in backward (and receives in forward)."""
    load = shard_load(ids, num_embeddings, world_size, partition)
    return int(load.sum() - load[check_int("rank", rank, 0)]) * check_int("row_bytes", row_bytes, 0)


class _AllReduceSum(torch.autograd.Function):
    """SUM all-reduce whose backward is the identity: the loss after it is replicated, so each
    rank already holds the full gradient of its (replicated) output."""

    @staticmethod
    def forward(ctx, partial, group, record):
        total = partial.clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
        record("all_reduce", "rows (forward)", total)
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


class _AllToAllRows(torch.autograd.Function):
    """All-to-all of rows with uneven splits; the backward sends the gradients back the same
    way (splits swapped), so a row's gradient reaches the rank that owns it."""

    @staticmethod
    def forward(ctx, rows, send_splits, recv_splits, group, record):
        ctx.splits, ctx.group, ctx.record = (send_splits, recv_splits), group, record
        out = rows.new_empty((sum(recv_splits), rows.shape[1]))
        dist.all_to_all_single(out, rows.contiguous(), recv_splits, send_splits, group=group)
        record("all_to_all", "rows (forward)", rows, send_splits)
        return out

    @staticmethod
    def backward(ctx, grad):
        send_splits, recv_splits = ctx.splits
        grad_rows = grad.new_empty((sum(send_splits), grad.shape[1]))
        dist.all_to_all_single(
            grad_rows, grad.contiguous(), send_splits, recv_splits, group=ctx.group
        )
        ctx.record("all_to_all", "row gradients (backward)", grad, recv_splits)
        return grad_rows, None, None, None, None


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------


def _initial_rows(rows: torch.Tensor, dim: int, seed: int) -> torch.Tensor:
    """N(0, 1) values for logical ``rows``, the same whichever rank or world size asks."""
    out = torch.empty(len(rows), dim)
    if len(rows) == 0:
        return out
    chunk_of = torch.div(rows, _INIT_CHUNK_ROWS, rounding_mode="floor")
    for chunk in torch.unique(chunk_of).tolist():
        generator = torch.Generator().manual_seed(seed * 1_000_003 + chunk)
        values = torch.randn(_INIT_CHUNK_ROWS, dim, generator=generator)
        picked = (chunk_of == chunk).nonzero().squeeze(1)
        out[picked] = values[rows[picked] - chunk * _INIT_CHUNK_ROWS]
    return out


class ShardedEmbedding(nn.Module):
    """A V×D embedding table whose rows are split across the ranks of ``group`` (§20.1).

    ``forward(ids)`` takes integer ids of any shape and returns ``ids.shape + (D,)``, equal to
    ``nn.Embedding`` with the same logical weight, at any world size, for any V >= 1. Gradients
    are dense and land on the owning rank. ``inputs`` picks the communication pattern (see the
    module docstring); every rank must call forward, and backward, together. An id outside
    [0, V) or a non-integer tensor raises the same IndexError or TypeError on every rank — in
    ``"per_rank"`` mode the status travels with the bucket sizes so no rank is left waiting.
    Without a process group the table is a world of one and calls no collective.
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        *,
        inputs: str = "replicated",
        partition: str = "range",
        group: dist.ProcessGroup | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        seed: int = 0,
    ):
        super().__init__()
        self.num_embeddings = check_int("num_embeddings", num_embeddings, 1)
        self.embedding_dim = check_int("embedding_dim", embedding_dim, 1)
        self.inputs = _check_choice("inputs", inputs, INPUT_MODES)
        self.seed = check_int("seed", seed, 0)
        self.group = group
        self.rank, self.world_size = group_rank_and_size(group)
        self.partition = RowPartition(self.num_embeddings, self.world_size, partition)
        self.weight = nn.Parameter(
            torch.empty(
                self.partition.num_rows(self.rank), self.embedding_dim, device=device, dtype=dtype
            )
        )
        self.comm_log: list[CommRecord] = []
        self.reset_parameters()

    # -- construction and inspection ---------------------------------------------------------

    def reset_parameters(self) -> None:
        """Initialise this rank's rows from N(0, 1), as ``nn.Embedding`` does; a row's value
        depends only on its logical id and ``seed``, not on the world size."""
        if self.weight.is_meta:
            return
        with torch.no_grad():
            self.weight.copy_(_initial_rows(self.row_ids(), self.embedding_dim, self.seed))

    @classmethod
    def from_full_weight(cls, weight: torch.Tensor, **kwargs) -> ShardedEmbedding:
        """A sharded table holding the logical table ``weight`` (V×D); every rank passes the
        same ``weight`` and keeps its own rows. ``kwargs`` as for the constructor."""
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            raise ValueError("weight must be a 2-D tensor (num_embeddings × embedding_dim)")
        kwargs.setdefault("dtype", weight.dtype)
        target = torch.device(kwargs.pop("device", None) or weight.device)
        table = cls(weight.shape[0], weight.shape[1], device="meta", **kwargs)
        table.to_empty(device=target)
        with torch.no_grad():
            table.weight.copy_(weight.detach()[table.row_ids().to(weight.device)])
        return table

    def row_ids(self) -> torch.Tensor:
        """Logical ids of this rank's rows, in shard order."""
        return self.partition.rows_of(self.rank)

    def full_weight(self) -> torch.Tensor:
        """The whole logical V×D table, gathered on every rank (for checks and small tables:
        it materialises V×D on each rank)."""
        local = self.weight.detach()
        if self.world_size == 1:
            return local.clone()
        padded = local.new_zeros((self.partition.block, self.embedding_dim))
        padded[: local.shape[0]] = local
        shards = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(shards, padded, group=self.group)
        full = local.new_empty((self.num_embeddings, self.embedding_dim))
        for rank, shard in enumerate(shards):
            rows = self.partition.rows_of(rank).to(full.device)
            full[rows] = shard[: len(rows)]
        return full

    def extra_repr(self) -> str:
        return (
            f"{self.num_embeddings}, {self.embedding_dim}, inputs={self.inputs!r}, "
            f"partition={self.partition.kind!r}, rank={self.rank}/{self.world_size}, "
            f"local_rows={self.weight.shape[0]}"
        )

    # -- state: logical row ids travel with the weights ---------------------------------------

    def get_extra_state(self) -> dict:
        return {
            "num_embeddings": self.num_embeddings,
            "embedding_dim": self.embedding_dim,
            "partition": self.partition.kind,
            "world_size": self.world_size,
            "row_ids": self.row_ids(),
        }

    def set_extra_state(self, state: dict) -> None:
        if not torch.equal(state["row_ids"], self.row_ids()):
            raise ValueError(
                "this state dict holds other rows (saved at world_size="
                f"{state['world_size']}, partition={state['partition']!r}); "
                "reshard it with chapter20.training.sharded_checkpoint.load_sharded"
            )

    # -- forward ----------------------------------------------------------------------------

    def _record(self, op: str, payload: str, tensor: torch.Tensor, splits=None) -> None:
        tensor_bytes = tensor.numel() * tensor.element_size()
        if op == "all_reduce":
            sent = ring_allreduce_bytes(tensor_bytes, self.world_size)
        else:
            row_bytes = math.prod(tensor.shape[1:]) * tensor.element_size()
            sent = (sum(splits) - splits[self.rank]) * row_bytes
        self.comm_log.append(CommRecord(op, payload, tensor_bytes, sent, self.world_size))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            _refuse_inside_ddp(self)
        if self.world_size > 1 and self.inputs == "per_rank":
            return self._forward_per_rank(ids)
        ids = _validated_ids(ids, self.num_embeddings).to(self.weight.device)
        if self.world_size == 1:
            return F.embedding(ids, self.weight)
        return self._forward_replicated(ids)

    def _forward_replicated(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        mine = (self.partition.owner(flat) == self.rank).nonzero().squeeze(1)
        rows = F.embedding(self.partition.local_index(flat[mine]), self.weight)
        # Rows this rank does not own stay zero and get no gradient (index_copy, not a
        # lookup of local row 0 times a mask).
        partial = rows.new_zeros((flat.numel(), self.embedding_dim)).index_copy(0, mine, rows)
        out = _AllReduceSum.apply(partial, self.group, self._record)
        return out.view(*ids.shape, self.embedding_dim)

    def _forward_per_rank(self, ids: torch.Tensor) -> torch.Tensor:
        device, world = self.weight.device, self.world_size
        code, value = _id_status(ids, self.num_embeddings)
        flat = ids.reshape(-1).long().to(device) if code == _OK else None
        owner = self.partition.owner(flat) if flat is not None else None
        counts = (
            torch.bincount(owner, minlength=world)
            if owner is not None
            else torch.zeros(world, dtype=torch.long, device=device)
        )
        # Bucket sizes travel with this rank's id status: if any rank got a bad id, every
        # rank raises the same error instead of waiting in the next collective.
        header = torch.stack(
            [counts, torch.full_like(counts, code), torch.full_like(counts, value)], dim=1
        )
        received = torch.empty_like(header)
        dist.all_to_all_single(received, header, group=self.group)
        self._record("all_to_all", "bucket sizes", header, [1] * world)
        bad = (received[:, 1] != _OK).nonzero().squeeze(1).tolist()
        if bad:
            source = bad[0]
            _raise_for_status(
                int(received[source, 1]),
                int(received[source, 2]),
                self.num_embeddings,
                ids if source == self.rank else None,
                rank=source,
            )
        send_splits, recv_splits = counts.tolist(), received[:, 0].tolist()
        order = torch.argsort(owner, stable=True)
        requested = flat.new_empty(sum(recv_splits))
        local_ids = self.partition.local_index(flat[order])
        dist.all_to_all_single(requested, local_ids, recv_splits, send_splits, group=self.group)
        self._record("all_to_all", "ids", local_ids, send_splits)
        rows = F.embedding(requested, self.weight)
        returned = _AllToAllRows.apply(rows, recv_splits, send_splits, self.group, self._record)
        out = returned.new_empty(returned.shape).index_copy(0, order, returned)
        return out.view(*ids.shape, self.embedding_dim)


# --------------------------------------------------------------------------------------------
# Beside data parallelism: the table stays out of DDP
# --------------------------------------------------------------------------------------------


def data_parallel_ignored_names(
    module: nn.Module, group: dist.ProcessGroup | None = None
) -> list[str]:
    """Names of the ``ShardedEmbedding`` parameters in ``module``, which DDP must ignore
    (§20.1 with §20.4): DDP would broadcast rank 0's rows over every rank's own rows at start and
    then average unrelated rows. Pass them to
    ``DistributedDataParallel._set_params_and_buffers_to_ignore_for_model`` (as
    ``chapter20.training.trainer.Trainer`` does). Under data parallelism each rank has its own ids,
    so
    every table must use ``inputs="per_rank"`` and the same process group: ValueError if not."""
    names = []
    for prefix, table in module.named_modules():
        if not isinstance(table, ShardedEmbedding):
            continue
        if table.inputs != "per_rank":
            raise ValueError(
                f"{prefix or 'the table'} uses inputs={table.inputs!r}: under data parallelism "
                "every rank has its own ids, so a sharded table needs inputs='per_rank'"
            )
        if group_rank_and_size(table.group) != group_rank_and_size(group):
            raise ValueError(f"{prefix or 'the table'} is sharded over another process group")
        names += [f"{prefix}.{name}" if prefix else name for name, _ in table.named_parameters()]
    return names


def _refuse_inside_ddp(table: ShardedEmbedding) -> None:
    """A sharded table whose rows DDP does not ignore is trained wrong without a sound: say so."""
    ddp = nn.parallel.DistributedDataParallel._get_active_ddp_module()
    if ddp is None:
        return
    ignored = {
        id(p) for name, p in ddp.module.named_parameters() if name in ddp.parameters_to_ignore
    }
    if id(table.weight) not in ignored:
        raise RuntimeError(
            "a ShardedEmbedding inside DistributedDataParallel must be ignored by DDP (each rank "
            "owns other rows: DDP would broadcast rank 0's rows and average unrelated ones). "
            "Train it with chapter20.training.trainer.Trainer, or pass "
            "chapter20.techniques.sharding.data_parallel_ignored_names(model) to "
            "DistributedDataParallel._set_params_and_buffers_to_ignore_for_model before wrapping"
        )


class ShardedBagEncoder(nn.Module):
    """``chapter20.core.models.BagOfEmbeddingsEncoder`` with its table sharded by rows (§20.1): a
    ``ShardedEmbedding`` (``per_rank`` inputs by default), the mean of each row's non-padding
    token rows, and a dense linear projection. The hybrid model of §20.1.1's advice: model
    parallelism for the table, data parallelism for the rest. With the same weights it computes
    what ``BagOfEmbeddingsEncoder`` computes."""

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int = 128,
        output_dim: int | None = None,
        *,
        padding_idx: int = 0,
        inputs: str = "per_rank",
        partition: str = "range",
        group: dist.ProcessGroup | None = None,
        seed: int = 0,
    ):
        super().__init__()
        vocab_size = check_int("vocab_size", vocab_size, 1)
        self.table = ShardedEmbedding(
            vocab_size, embedding_dim, inputs=inputs, partition=partition, group=group, seed=seed
        )
        if not 0 <= check_int("padding_idx", padding_idx, 0) < vocab_size:
            raise ValueError(f"padding_idx must be in [0, {vocab_size}), got {padding_idx}")
        output_dim = embedding_dim if output_dim is None else check_int("output_dim", output_dim, 1)
        self.vocab_size, self.padding_idx = vocab_size, padding_idx
        self.projection = nn.Linear(embedding_dim, output_dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids``: ``[batch, length]`` padded token ids → ``[batch, output_dim]``."""
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            raise ValueError("ids must be a 2-D [batch, length] tensor of token ids")
        rows = self.table(ids)
        keep = (ids != self.padding_idx).unsqueeze(-1).to(rows.dtype)
        counts = keep.sum(dim=1)
        if bool((counts == 0).any()):
            raise ValueError("every row of ids needs a non-padding token")
        return self.projection((rows * keep).sum(dim=1) / counts)
