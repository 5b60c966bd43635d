"""§20.1 The sharded table proven against ``nn.Embedding`` on every rank of a group: the proofs
that notebook 01 runs at every world size and the tests hold bitwise, and the reference they hold
the table to, the chapter's listing L1 done right (:func:`listing_lookup_done_right`).

Functions named ``*_on_rank`` run inside a process group (one call per rank, e.g. through
:func:`chapter20.techniques.distributed.run_local_group`, or as a world of one without a group) and
return plain, picklable records:

- :func:`equivalence_on_rank`: forward, gradient and one SGD step of ``ShardedEmbedding`` equal
  ``nn.Embedding``'s for every V, partition and input mode, on :func:`batch_ids`' awkward batches;
- :func:`misuse_on_rank`: the chapter's design misused (a replicated table fed a batch per rank);
- :func:`reference_on_rank`: ``listing_lookup_done_right`` equal to the sharded table;
- :func:`bad_ids_on_rank`: bad ids rejected the same way on every rank, the group still in step;
- :func:`comm_bytes_on_rank`: the bytes each collective sends, counted, next to the formulas.
"""

from __future__ import annotations

from itertools import product

import torch
import torch.distributed as dist
import torch.nn.functional as F

from chapter20.core.checks import check_int, check_real
from chapter20.core.id_streams import uniform_ids
from chapter20.techniques.communication_model import ring_allreduce_bytes
from chapter20.techniques.distributed import group_rank_and_size
from chapter20.techniques.sharding import (
    INPUT_MODES,
    PARTITIONS,
    RowPartition,
    ShardedEmbedding,
    all_to_all_bytes,
)

__all__ = [
    "listing_lookup_done_right",
    "batch_ids",
    "equivalence_on_rank",
    "misuse_on_rank",
    "reference_on_rank",
    "bad_ids_on_rank",
    "comm_bytes_on_rank",
]


def batch_ids(num_embeddings: int, world_size: int, rank: int, seed: int = 0) -> torch.Tensor:
    """An awkward (3, k) id batch: every shard's first and last row under both partitions (the
    same on every rank), random ids that depend on ``rank`` and ``seed``, and repeats. Pass the
    same ``rank`` on every rank for replicated inputs."""
    num_embeddings = check_int("num_embeddings", num_embeddings, 1)
    world_size = check_int("world_size", world_size, 1)
    rank, seed = check_int("rank", rank, 0, world_size - 1), check_int("seed", seed, 0)
    boundaries = []
    for kind in PARTITIONS:
        layout = RowPartition(num_embeddings, world_size, kind)
        for r in range(world_size):
            rows = layout.rows_of(r)
            if len(rows):
                boundaries += [int(rows[0]), int(rows[-1])]
    generator = torch.Generator().manual_seed(seed * 7919 + rank)
    random = torch.randint(0, num_embeddings, (12,), generator=generator).tolist()
    ids = boundaries + random + random[:4]  # the repeats accumulate gradients
    ids += ids[: (-len(ids)) % 3]
    return torch.tensor(ids).view(3, -1)


def _reference_weight(num_embeddings: int, dim: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(10_000 + seed)
    return torch.randn(num_embeddings, dim, generator=generator)


def bad_ids_on_rank(num_embeddings: int = 37, dim: int = 3, group=None) -> list[dict]:
    """Feed bad ids to both input modes (§20.1): an id of V, an id of -1, float ids. Replicated
    ranks all get them; in per-rank mode only rank 1 does (rank 0 in a world of one), the others
    a good batch. One record per case: the error each rank raised (type, message) — ``None``
    would mean zeros came back — and whether a good batch afterwards still equals
    ``nn.Embedding`` (the group is still in step). ``num_embeddings`` >= 4: id 3 is a good
    id beside each bad one."""
    num_embeddings, dim = check_int("num_embeddings", num_embeddings, 4), check_int("dim", dim, 1)
    rank, world = group_rank_and_size(group)
    culprit = min(1, world - 1)
    good = torch.tensor([0, num_embeddings // 2, num_embeddings - 1])
    cases = {
        "too large": torch.tensor([3, num_embeddings]),
        "negative": torch.tensor([-1, 3]),
        "float": torch.tensor([1.0, 2.0]),
    }
    records = []
    for inputs in INPUT_MODES:
        table = ShardedEmbedding(num_embeddings, dim, inputs=inputs, group=group)
        for case, bad in cases.items():
            ids = bad if inputs == "replicated" or rank == culprit else good
            error, message = None, None
            try:
                table(ids)
            except (IndexError, TypeError) as raised:
                error, message = type(raised).__name__, str(raised)
            still_right = torch.equal(table(good), F.embedding(good, table.full_weight()))
            records.append(
                {
                    "W": world,
                    "rank": rank,
                    "inputs": inputs,
                    "case": case,
                    "got_bad_ids": ids is bad,
                    "error": error,
                    "message": message,
                    "good_batch_after": still_right,
                }
            )
    return records


def equivalence_on_rank(
    sizes: tuple[int, ...], dim: int = 5, lr: float = 0.5, seed: int = 0, group=None
) -> list[dict]:
    """Check every (V, partition, inputs) on this rank against ``nn.Embedding`` (§20.1).

    For each case the same logical weight is sharded; per-rank inputs differ on every rank (the
    reference looks up all ranks' ids at once), replicated inputs are the same everywhere. Rank
    0's batch is empty in one extra case per V. Compared bitwise: the output, each shard's
    weight gradient against the matching rows of the full gradient, and the table after one SGD
    step. Returns one record per case, with the largest absolute difference of each.
    """
    sizes, dim, seed = _sizes(sizes), check_int("dim", dim, 1), check_int("seed", seed, 0)
    lr = check_real("lr", lr, minimum=0.0, exclusive=True, finite=True)
    rank, world = group_rank_and_size(group)
    records = []
    cases = product(sizes, PARTITIONS, INPUT_MODES, (False, True))
    for num_embeddings, kind, inputs, empty_on_rank0 in cases:
        if empty_on_rank0 and inputs == "replicated":
            continue
        full = _reference_weight(num_embeddings, dim, seed)
        if inputs == "replicated":
            all_ids = [batch_ids(num_embeddings, world, 0, seed)]
            mine = all_ids[0]
        else:
            all_ids = [batch_ids(num_embeddings, world, r, seed) for r in range(world)]
            if empty_on_rank0:
                all_ids[0] = all_ids[0][:, :0]
            mine = all_ids[rank]
        probes = [
            torch.randn(*ids.shape, dim, generator=torch.Generator().manual_seed(i))
            for i, ids in enumerate(all_ids)
        ]
        table = ShardedEmbedding.from_full_weight(full, inputs=inputs, partition=kind, group=group)
        out = table(mine)
        (out * probes[rank if inputs == "per_rank" else 0]).sum().backward()
        reference = full.clone().requires_grad_()
        flat_ids = torch.cat([ids.reshape(-1) for ids in all_ids])
        flat_probe = torch.cat([p.reshape(-1, dim) for p in probes])
        (F.embedding(flat_ids, reference) * flat_probe).sum().backward()
        expected_out = F.embedding(mine, full)
        expected_grad = reference.grad[table.row_ids()]
        torch.optim.SGD(table.parameters(), lr=lr).step()
        torch.optim.SGD([reference], lr=lr).step()
        stepped = table.full_weight()
        records.append(
            {
                "V": num_embeddings,
                "W": world,
                "rank": rank,
                "partition": kind,
                "inputs": inputs,
                "empty_batch": empty_on_rank0 and rank == 0,
                "forward_equal": torch.equal(out.detach(), expected_out),
                "grad_equal": torch.equal(table.weight.grad, expected_grad),
                "step_equal": torch.equal(stepped, reference.detach()),
                "max_abs_diff": max(
                    _max_diff(out.detach(), expected_out),
                    _max_diff(table.weight.grad, expected_grad),
                    _max_diff(stepped, reference.detach()),
                ),
            }
        )
    return records


def _sizes(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Each table size V of ``sizes`` checked: an int >= 1."""
    return tuple(check_int("sizes", v, 1) for v in sizes)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


def misuse_on_rank(num_embeddings: int = 101, dim: int = 4, seed: int = 0, group=None) -> dict:
    """The chapter's design misused (§20.1, listing L1): a replicated all-reduce table fed a
    different batch on every rank. Returns how many output rows match ``nn.Embedding``."""
    num_embeddings, dim = check_int("num_embeddings", num_embeddings, 1), check_int("dim", dim, 1)
    seed = check_int("seed", seed, 0)
    rank, world = group_rank_and_size(group)
    full = _reference_weight(num_embeddings, dim, seed)
    ids = batch_ids(num_embeddings, world, rank, seed)
    table = ShardedEmbedding.from_full_weight(full, inputs="replicated", group=group)
    with torch.no_grad():
        got = table(ids).reshape(-1, dim)
    expected = F.embedding(ids, full).reshape(-1, dim)
    right = (got == expected).all(dim=1)
    return {"W": world, "rank": rank, "rows": int(right.numel()), "right_rows": int(right.sum())}


def reference_on_rank(
    sizes: tuple[int, ...], dim: int = 5, seed: int = 0, group=None
) -> list[dict]:
    """:func:`listing_lookup_done_right` against ``ShardedEmbedding(inputs="replicated",
    partition="range")`` on this rank, for each V of ``sizes``: the output and the shard's
    gradient (largest absolute difference), and whether an id of V raises."""
    sizes, dim, seed = _sizes(sizes), check_int("dim", dim, 1), check_int("seed", seed, 0)
    rank, world = group_rank_and_size(group)
    records = []
    for num_embeddings in sizes:
        full = _reference_weight(num_embeddings, dim, seed)
        ids = batch_ids(num_embeddings, world, 0, seed)
        probe = torch.randn(*ids.shape, dim, generator=torch.Generator().manual_seed(seed))
        table = ShardedEmbedding.from_full_weight(
            full, inputs="replicated", partition="range", group=group
        )
        shard = table.weight.detach().clone().requires_grad_()
        ours, theirs = table(ids), listing_lookup_done_right(ids, shard, num_embeddings, group)
        (ours * probe).sum().backward()
        (theirs * probe).sum().backward()
        try:
            listing_lookup_done_right(torch.tensor([num_embeddings]), shard, num_embeddings, group)
            raised = False
        except IndexError:
            raised = True
        records.append({"V": num_embeddings, "W": world, "rank": rank, "rows": len(shard),
                        "forward": _max_diff(ours.detach(), theirs.detach()),
                        "gradient": _max_diff(table.weight.grad, shard.grad),
                        "bad_id_raises": raised})  # fmt: skip
    return records


def comm_bytes_on_rank(
    global_batch: int, dim: int, num_embeddings: int, seed: int = 0, group=None
) -> list:
    """Bytes this rank sends in one forward + backward, both patterns, for ``global_batch``
    lookups per step (§20.1.1): replicated ranks all hold the whole batch; per-rank ranks hold
    1/W of it. Each record has the measured bytes and the formula's."""
    global_batch, dim = check_int("global_batch", global_batch, 1), check_int("dim", dim, 1)
    num_embeddings = check_int("num_embeddings", num_embeddings, 1)
    seed = check_int("seed", seed, 0)
    rank, world = group_rank_and_size(group)
    records = []
    ids_all = uniform_ids(global_batch, num_embeddings, seed=seed)
    per_rank_ids = ids_all.tensor_split(world)[rank]
    for inputs, ids in (("replicated", ids_all), ("per_rank", per_rank_ids)):
        table = ShardedEmbedding(num_embeddings, dim, inputs=inputs, group=group)
        table(ids).sum().backward()
        row_bytes = dim * table.weight.element_size()
        for record in table.comm_log:
            if record.op == "all_reduce":
                formula = ring_allreduce_bytes(ids.numel() * row_bytes, world)
            elif record.payload == "bucket sizes":
                formula = (world - 1) * 3 * 8
            elif record.payload == "ids":
                formula = all_to_all_bytes(ids, num_embeddings, world, rank, 8)
            elif record.payload == "rows (forward)":
                formula = _rows_requested_by_others(ids_all, world, rank, num_embeddings, dim)
            else:
                formula = all_to_all_bytes(ids, num_embeddings, world, rank, row_bytes)
            records.append(
                {
                    "W": world,
                    "rank": rank,
                    "inputs": inputs,
                    "op": record.op,
                    "payload": record.payload,
                    "tensor_bytes": record.tensor_bytes,
                    "measured_bytes": record.bytes_sent,
                    "formula_bytes": formula,
                }
            )
    return records


def _rows_requested_by_others(
    ids_all: torch.Tensor, world: int, rank: int, num_embeddings: int, dim: int
) -> int:
    """Bytes of the rows rank ``rank`` returns in forward: every other rank's ids it owns."""
    layout = RowPartition(num_embeddings, world, "range")
    total = 0
    for other, ids in enumerate(ids_all.tensor_split(world)):
        if other != rank:
            total += int((layout.owner(ids) == rank).sum())
    return total * dim * 4


def listing_lookup_done_right(
    ids: torch.Tensor, shard: torch.Tensor, num_embeddings: int, group=None
):
    """The chapter's replicated lookup (listing L1: contiguous row ranges, a masked local
    lookup, a SUM all-reduce), with its two faults fixed: blocks of ceil(V/W) rows keep the
    last ``V mod W`` rows, and an id outside [0, V) raises instead of reading as zeros. This is
    Megatron's ``VocabParallelEmbedding``. Every rank passes the same ``ids`` and its own
    ``shard`` (rows [rank·block, rank·block + block) of the table). The backward is the identity
    (the loss after the lookup is the same on every rank). For reading: the package's version
    is :class:`ShardedEmbedding` with ``inputs="replicated", partition="range"`` (§20.1)."""
    rank, world = group_rank_and_size(group)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_embeddings):
        raise IndexError(f"ids must be in [0, {num_embeddings}), got {ids.min()}..{ids.max()}")
    block = -(-num_embeddings // world)  # ceil(V / W): no row is left without an owner
    start = rank * block
    outside = (ids < start) | (ids >= start + block)  # ids another rank owns
    local = (ids - start).masked_fill(outside, 0)  # any valid row; its result is zeroed below
    if len(shard):
        rows = F.embedding(local, shard).masked_fill(outside.unsqueeze(-1), 0.0)
    else:  # V < W: this rank owns no row, and sends zeros (with a gradient path to its shard)
        rows = shard.new_zeros((*ids.shape, shard.shape[1])) + shard.sum()
    total = rows.detach().clone()
    if world > 1:
        dist.all_reduce(
            total, op=dist.ReduceOp.SUM, group=group
        )  # each row comes from exactly one rank
    return total + (rows - rows.detach())  # forward: the sum; backward: to this rank's rows
