"""§20.1 chapter20.techniques.sharding: the sharded table equals nn.Embedding for every V, world
size, partition and input mode (real gloo groups of 2-4 local processes), rejects bad ids the same
way at every world size, reshards on load, and counts its bytes as the formulas say.

Equalities are bitwise: a lookup copies rows, an all-reduce adds zeros to them, and each row's
gradient is summed over the same positions in the same order as nn.Embedding's backward.
"""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.id_streams import zipf_ids
from chapter20.demos.recommender import passage_interactions, sharded_step_on_rank
from chapter20.labs.nb01_sharding import surveys_on_rank
from chapter20.techniques.distributed import group_rank_and_size, run_local_group
from chapter20.techniques.sharding import (
    INPUT_MODES,
    PARTITIONS,
    RowPartition,
    ShardedEmbedding,
    all_to_all_bytes,
    shard_load,
)
from chapter20.techniques.sharding_proofs import (
    bad_ids_on_rank,
    comm_bytes_on_rank,
    equivalence_on_rank,
    misuse_on_rank,
    reference_on_rank,
)
from chapter20.training.sharded_checkpoint import (
    is_committed,
    load_sharded,
    load_sharded_state,
    save_sharded,
    save_sharded_state,
)

V_INIT, D_INIT = 37, 3  # the table whose initial values must not depend on the world size
REFERENCE_SIZES = (2, 3, 4, 7, 101)  # V < W, V = W, V mod W != 0, ...
#: notebook 01's survey plan: the reference lookup on these sizes, (global batch, dim, V) of the
#: bytes, no timing
SURVEY = (REFERENCE_SIZES, (64, 4, 50), None)


# --------------------------------------------------------------------------------------------
# What every rank of a group checks; one start per world size (module-scoped fixture)
# --------------------------------------------------------------------------------------------


def _trained(partition: str, seed: int = 3, group=None) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A sharded table + a dense head after two AdamW steps: rows and moments that depend on
    the row id only (replicated inputs), so every world size and partition holds the same
    logical state."""
    torch.manual_seed(0)
    model = nn.ModuleDict(
        {
            "table": ShardedEmbedding(V_INIT, D_INIT, partition=partition, seed=seed, group=group),
            "head": nn.Linear(D_INIT, 1),
        }
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    for step in range(2):
        ids = (torch.arange(12) * (step + 5)) % V_INIT
        model["head"](model["table"](ids)).pow(2).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer


def _logical(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The whole logical table, its AdamW moments and step, and the head, on every rank."""
    table = model["table"]
    state = optimizer.state[table.weight]
    out = {"table": table.full_weight(), "head": model["head"].weight.detach().clone()}
    saved = table.weight.detach().clone()
    with torch.no_grad():
        for name in ("exp_avg", "exp_avg_sq"):
            table.weight.copy_(state[name])
            out[name] = table.full_weight()
        table.weight.copy_(saved)
    out["step"] = float(state["step"])
    return out


def _reads(function):
    """Call ``function``; return {key: first rows of the saved blocks} this rank read."""
    import torch.distributed.checkpoint as dcp

    read: dict[str, list[int]] = {}
    original = dcp.FileSystemReader.read_data

    def counting(self, plan, planner):
        for item in plan.items:
            index = item.storage_index
            read.setdefault(index.fqn, []).append(index.offset[0] if index.offset else 0)
        return original(self, plan, planner)

    dcp.FileSystemReader.read_data = counting
    try:
        function()
    finally:
        dcp.FileSystemReader.read_data = original
    return read


def _load_into(target: str, directory: str, group) -> tuple[dict, dict]:
    """A fresh model (other seed) with ``target`` partition loaded from ``directory``: its
    logical state and the blocks read."""
    fresh, fresh_optimizer = _trained(target, seed=11, group=group)
    reads = _reads(lambda: load_sharded_state(directory, fresh, fresh_optimizer, group=group))
    return _logical(fresh, fresh_optimizer), reads


def _dcp_checks(save_dir: str, load_dir: str | None, group) -> dict:
    """Save the trained state with each partition; reload it at this world size; and, when
    ``load_dir`` holds the W=2 saves, load those into each partition here."""
    out = {}
    for partition in PARTITIONS:
        model, optimizer = _trained(partition, group=group)
        out[f"saved {partition}"] = _logical(model, optimizer)
        if load_dir is None or partition == "range":  # W=3, 4 reload only their range save
            save_sharded_state(f"{save_dir}/{partition}", model, optimizer, group=group)
    directory = f"{save_dir}/range"
    out["loaded same world"], out["reads same world"] = _load_into("range", directory, group)
    if load_dir is not None:
        for saved in PARTITIONS:
            for target in PARTITIONS:
                logical, reads = _load_into(target, f"{load_dir}/{saved}", group)
                out[f"{saved} -> {target}"], out[f"reads {saved} -> {target}"] = logical, reads
    return out


def _checks_at(world: int, group, save_dir: str, load_dir: str | None) -> dict:
    """What a rank of a group of ``world`` ranks checks (``group``: ranks 0..world-1)."""
    rank, _ = group_rank_and_size(group)
    sizes = tuple(v for v in (world - 1, world, world + 1, 101, 1000) if v >= 1)
    table = ShardedEmbedding(V_INIT, D_INIT, partition="modulo", seed=3, group=group)
    save_sharded(ShardedEmbedding(V_INIT, D_INIT, seed=3, group=group), save_dir)
    loaded = None
    if load_dir is not None:
        target = ShardedEmbedding(V_INIT, D_INIT, partition="modulo", seed=99, group=group)
        load_sharded(target, load_dir)
        loaded = target.full_weight()
    per_rank = ShardedEmbedding(V_INIT, D_INIT, inputs="per_rank", group=group)
    return {
        "dcp": _dcp_checks(save_dir, load_dir, group),
        "equivalence": equivalence_on_rank(sizes, group=group),
        "misuse": misuse_on_rank(group=group),
        "errors": bad_ids_on_rank(V_INIT, D_INIT, group=group),
        "initial_table": table.full_weight(),
        "loaded": loaded,
        "scalar_shape": tuple(per_rank(torch.tensor(rank)).shape),
        "comm": comm_bytes_on_rank(96, 8, 50, group=group),
    }


def _group_checks(save_dirs: dict[int, str], interactions) -> dict:
    """One group of 4 ranks serves W = 2, 3, 4 (a start costs more than the checks): ranks
    0..W-1 form a sub-group per W and check; W=3 and W=4 load the table W=2 saved. Then, on the
    whole group, the recommender step and the reference lookup's surveys at W=2 and W=3."""
    rank, world = group_rank_and_size()
    out = {}
    for size in WORLD_SIZES:
        group = None if size == world else dist.new_group(list(range(size)))  # every rank calls
        if rank < size:
            load_dir = None if size == 2 else save_dirs[2]
            out[size] = _checks_at(size, group, save_dirs[size], load_dir)
        dist.barrier()  # W=2's saves are complete before W=3 reads them
    out["recommender"] = sharded_step_on_rank(data=interactions)
    out["surveys"] = surveys_on_rank({2: SURVEY, 3: SURVEY}, None)["surveys"]
    return out


@pytest.fixture(scope="module")
def interactions():
    """The recommender's real interactions, built once for the module and its group."""
    return passage_interactions()


@pytest.fixture(scope="module")
def group_runs(tmp_path_factory, interactions):
    """Checks at W = 2, 3, 4 (one group of 4, sub-groups); W=3 and W=4 load what W=2 saved.
    ``group_runs[W]``: one result per rank of the group of W; ``["four"]``: the whole group's."""
    save_dirs = {w: str(tmp_path_factory.mktemp(f"saved_w{w}")) for w in WORLD_SIZES}
    ranks = run_local_group(_group_checks, max(WORLD_SIZES), (save_dirs, interactions))
    runs = {w: [ranks[r][w] for r in range(w)] for w in WORLD_SIZES}
    runs["four"] = ranks
    runs["saved_at_two"] = save_dirs[2]
    return runs


WORLD_SIZES = (2, 3, 4)


# --------------------------------------------------------------------------------------------
# Recommender ids: user and item tables on real co-occurrence interactions
# --------------------------------------------------------------------------------------------


def test_recommender_tables_sharded_over_four_ranks_equal_the_plain_tables(group_runs):
    # float32 rounding: the ranks' gradients are summed by the all-to-all in another order
    for rank in group_runs["four"]:
        result = rank["recommender"]
        assert result["max_weight_diff"] < 1e-6
        assert result["loss_sharded"] == pytest.approx(result["loss_plain"], abs=1e-6)


def test_passage_interactions_are_real_disjoint_and_filtered(interactions):
    data = interactions
    train = {tuple(p) for p in data.train.tolist()}
    test = {tuple(p) for p in data.test.tolist()}
    assert len(train) == len(data.train) and len(test) == len(data.test)  # distinct pairs
    assert not train & test
    held = torch.bincount(torch.cat([data.train, data.test])[:, 1], minlength=data.num_items)
    assert held.min() >= 10 and held.max() <= 0.2 * data.users  # rare and function words out
    assert data.popularity.sum() == len(data.train)
    assert "the" not in data.items  # every passage holds it
    with pytest.raises(ValueError, match="test_share"):
        passage_interactions(test_share=1.0)


# --------------------------------------------------------------------------------------------
# Equivalence with nn.Embedding
# --------------------------------------------------------------------------------------------


def test_world_of_one_equals_nn_embedding_for_every_case():
    records = equivalence_on_rank((1, 2, 101, 1000))
    assert len(records) == 4 * len(PARTITIONS) * 3  # replicated + per_rank + per_rank empty
    for record in records:
        assert record["forward_equal"] and record["grad_equal"] and record["step_equal"], record


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_group_equals_nn_embedding_forward_gradient_and_sgd_step(group_runs, world):
    records = [r for rank in group_runs[world] for r in rank["equivalence"]]
    sizes = {r["V"] for r in records}
    assert sizes == {v for v in (world - 1, world, world + 1, 101, 1000) if v >= 1}
    assert {(r["partition"], r["inputs"]) for r in records} == {
        (p, i) for p in PARTITIONS for i in INPUT_MODES
    }
    assert any(r["empty_batch"] for r in records)  # rank 0 looked up nothing in some cases
    for record in records:
        assert record["forward_equal"], record
        assert record["grad_equal"], record
        assert record["step_equal"], record
        assert record["max_abs_diff"] == 0.0


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_scalar_ids_give_one_row(group_runs, world):
    assert all(rank["scalar_shape"] == (D_INIT,) for rank in group_runs[world])


def test_the_chapters_all_reduce_fed_per_rank_ids_gives_wrong_rows(group_runs):
    for world in WORLD_SIZES:
        misuse = [rank["misuse"] for rank in group_runs[world]]
        assert all(m["right_rows"] < m["rows"] for m in misuse), misuse


# --------------------------------------------------------------------------------------------
# Bad ids: the same error at every world size, never zeros
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case, kind, value",
    [
        ("too large", "IndexError", "got 37"),
        ("negative", "IndexError", "got -1"),
        ("float", "TypeError", "torch.float32"),
    ],
)
def test_bad_ids_raise_the_same_error_at_every_world_size(group_runs, case, kind, value):
    runs = [bad_ids_on_rank(V_INIT, D_INIT)] + [
        rank["errors"] for world in WORLD_SIZES for rank in group_runs[world]
    ]
    for records in runs:
        for record in (r for r in records if r["case"] == case):
            where = (record["W"], record["rank"], record["inputs"])
            assert record["error"] == kind, where  # every rank raised: none waits, none zeros
            assert record["good_batch_after"], where
            if record["inputs"] == "per_rank" and record["W"] > 1:
                assert "on rank 1" in record["message"], where  # names the rank at fault
            if kind == "IndexError" or record["got_bad_ids"]:
                assert value in record["message"], where


def test_error_messages_name_the_argument_and_the_range():
    with pytest.raises(IndexError, match=r"ids must be in \[0, 37\).*got 99"):
        ShardedEmbedding(V_INIT, D_INIT)(torch.tensor([99]))
    with pytest.raises(TypeError, match="integer tensor"):
        ShardedEmbedding(V_INIT, D_INIT)([1, 2])
    with pytest.raises(TypeError, match="torch.bool"):
        ShardedEmbedding(V_INIT, D_INIT)(torch.tensor([True]))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_embeddings": 0}, ValueError, "num_embeddings"),
        ({"embedding_dim": 0}, ValueError, "embedding_dim"),
        ({"num_embeddings": 3.5}, TypeError, "num_embeddings"),
        ({"inputs": "broadcast"}, ValueError, "inputs must be one of"),
        ({"partition": "rows"}, ValueError, "partition must be one of"),
        ({"seed": -1}, ValueError, "seed"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, error, match):
    arguments = {"num_embeddings": 10, "embedding_dim": 4, **kwargs}
    with pytest.raises(error, match=match):
        ShardedEmbedding(**arguments)


# --------------------------------------------------------------------------------------------
# Placement of rows
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", PARTITIONS)
@pytest.mark.parametrize("num_embeddings", [1, 2, 3, 4, 5, 10, 101])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_every_row_has_exactly_one_owner(kind, num_embeddings, world):
    layout = RowPartition(num_embeddings, world, kind)
    rows = torch.cat([layout.rows_of(r) for r in range(world)])
    assert sorted(rows.tolist()) == list(range(num_embeddings))  # nothing dropped, no repeats
    assert sum(layout.num_rows(r) for r in range(world)) == num_embeddings
    for rank in range(world):
        own = layout.rows_of(rank)
        assert len(own) == layout.num_rows(rank) <= layout.block
        assert torch.equal(layout.owner(own), torch.full_like(own, rank))
        assert torch.equal(layout.local_index(own), torch.arange(len(own)))


def test_the_rows_the_chapter_drops_are_kept():
    # L1 gives each of 4 ranks 10 // 4 = 2 rows and loses rows 8 and 9.
    layout = RowPartition(10, 4, "range")
    assert [layout.num_rows(r) for r in range(4)] == [3, 3, 3, 1]
    assert layout.rows_of(3).tolist() == [9]
    assert RowPartition(1, 4, "range").num_rows(3) == 0  # a rank may own nothing


def test_partition_rejects_a_rank_outside_the_world():
    with pytest.raises(ValueError, match=r"rank must be in \[0, 3\)"):
        RowPartition(10, 3).rows_of(3)


# --------------------------------------------------------------------------------------------
# The same logical table at every world size; saving and resharding
# --------------------------------------------------------------------------------------------


def test_initial_table_is_the_same_at_every_world_size(group_runs):
    expected = ShardedEmbedding(V_INIT, D_INIT, seed=3).full_weight()
    assert not torch.equal(expected, ShardedEmbedding(V_INIT, D_INIT, seed=4).full_weight())
    for world in WORLD_SIZES:
        for rank in group_runs[world]:
            assert torch.equal(rank["initial_table"], expected)


def test_initial_values_follow_nn_embedding_statistics():
    weight = ShardedEmbedding(20_000, 8).full_weight()
    assert abs(float(weight.mean())) < 0.01 and abs(float(weight.std()) - 1) < 0.01


def test_table_saved_at_two_ranks_loads_at_three_four_and_one(group_runs):
    expected = ShardedEmbedding(V_INIT, D_INIT, seed=3).full_weight()
    for world in (3, 4):
        for rank in group_runs[world]:
            assert torch.equal(rank["loaded"], expected)  # another W and another partition
    single = ShardedEmbedding(V_INIT, D_INIT, partition="modulo", seed=99)
    load_sharded(single, group_runs["saved_at_two"])
    assert torch.equal(single.full_weight(), expected)


def test_state_dict_carries_logical_row_ids_and_refuses_other_rows():
    table = ShardedEmbedding(V_INIT, D_INIT)
    state = table.state_dict()
    assert torch.equal(state["_extra_state"]["row_ids"], torch.arange(V_INIT))
    twin = ShardedEmbedding(V_INIT, D_INIT, seed=5)
    twin.load_state_dict(state)
    assert torch.equal(twin.weight, table.weight)
    state["_extra_state"]["row_ids"] = torch.arange(V_INIT).flip(0)
    with pytest.raises(ValueError, match="load_sharded"):
        twin.load_state_dict(state)


def _differences(got: dict, expected: dict) -> list[str]:
    """The entries of two logical states that differ (bitwise: resharding only copies)."""
    if got.keys() != expected.keys():
        return [f"keys {sorted(got)} != {sorted(expected)}"]
    return [
        key
        for key in expected
        if not (
            torch.equal(got[key], expected[key])
            if isinstance(expected[key], torch.Tensor)
            else got[key] == expected[key]
        )
    ]


def test_training_state_is_the_same_logical_state_at_every_world_size(group_runs):
    expected = group_runs[2][0]["dcp"]["saved range"]
    assert expected["step"] == 2.0 and expected["exp_avg"].abs().sum() > 0
    for world in WORLD_SIZES:
        for rank, run in enumerate(group_runs[world]):
            for partition in PARTITIONS:
                got = run["dcp"][f"saved {partition}"]
                assert _differences(got, expected) == [], (world, rank, partition)


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_dcp_reloads_table_and_adam_state_at_the_same_world_size(group_runs, world):
    for rank, run in enumerate(group_runs[world]):
        expected = run["dcp"]["saved range"]
        assert _differences(run["dcp"]["loaded same world"], expected) == [], (world, rank)


@pytest.mark.parametrize("world", [3, 4])
@pytest.mark.parametrize("saved", PARTITIONS)
@pytest.mark.parametrize("target", PARTITIONS)
def test_dcp_reshards_table_and_adam_state_to_another_world_size(group_runs, world, saved, target):
    """Saved by 2 ranks, loaded by 3 or 4, into either partition; the modulo partition (its
    rows exchanged into the range layout around DCP) gives the same state as the range one."""
    expected = group_runs[2][0]["dcp"]["saved range"]
    for rank, run in enumerate(group_runs[world]):
        assert _differences(run["dcp"][f"{saved} -> {target}"], expected) == [], (world, rank)


def test_each_rank_reads_only_the_saved_blocks_over_its_rows(group_runs):
    for world in WORLD_SIZES:
        layout = RowPartition(V_INIT, world)
        for rank, run in enumerate(group_runs[world]):
            reads = run["dcp"]["reads same world"]
            mine = [rank * layout.block] if layout.num_rows(rank) else []
            assert reads.get("model.table.weight", []) == mine, (world, rank)
            assert reads.get("optimizer.state.table.weight.exp_avg", []) == mine, (world, rank)
    saved_blocks = RowPartition(V_INIT, 2)
    for world in (3, 4):
        layout = RowPartition(V_INIT, world)
        for rank, run in enumerate(group_runs[world]):
            owners = saved_blocks.owner(layout.rows_of(rank)).unique().tolist()
            needed = sorted(saved_blocks.block * owner for owner in owners)
            got = run["dcp"]["reads range -> range"].get("model.table.weight", [])
            assert sorted(got) == needed, (world, rank)


def test_an_unfinished_save_is_never_loaded_nor_mixed_with_an_older_one(tmp_path, monkeypatch):
    """DCP writes its metadata last; a save into a directory first removes the old metadata,
    so a save cut short leaves no metadata vouching for a mix of old and new files."""
    import torch.distributed.checkpoint as dcp

    first, _ = _trained("range")
    save_sharded_state(tmp_path, first)
    assert is_committed(tmp_path)

    def die(self, metadata, results):
        raise OSError("killed before the metadata was written")

    monkeypatch.setattr(dcp.FileSystemWriter, "finish", die)
    second, _ = _trained("range", seed=8)
    with pytest.raises(OSError, match="failed on rank 0: killed before the metadata"):
        save_sharded_state(tmp_path, second)  # an OSError, not DCP's BaseException
    assert not is_committed(tmp_path)
    with pytest.raises(FileNotFoundError, match="no finished sharded checkpoint"):
        load_sharded_state(tmp_path, _trained("range", seed=9)[0])


def test_loading_checks_the_tables_and_the_optimizer(tmp_path):
    model, _ = _trained("range")
    save_sharded_state(tmp_path / "model-only", model)
    other = nn.ModuleDict(
        {"table": ShardedEmbedding(V_INIT + 1, D_INIT), "head": nn.Linear(D_INIT, 1)}
    )
    with pytest.raises(ValueError, match=r"38×3"):
        load_sharded_state(tmp_path / "model-only", other)
    fresh, optimizer = _trained("range", seed=4)
    with pytest.raises(ValueError, match="no optimizer state"):
        load_sharded_state(tmp_path / "model-only", fresh, optimizer)
    with pytest.raises(TypeError, match="ShardedEmbedding"):
        save_sharded(nn.Linear(2, 2), tmp_path / "x")


def test_an_optimizer_that_has_not_stepped_is_saved_as_such(tmp_path):
    """get_state_dict would create AdamW state with a zero step (and change the run after it);
    a checkpoint taken before the first step restores an optimizer without state."""
    torch.manual_seed(0)
    model = nn.ModuleDict({"table": ShardedEmbedding(V_INIT, D_INIT), "head": nn.Linear(3, 1)})
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    save_sharded_state(tmp_path, model, optimizer)
    assert not optimizer.state  # saving did not touch it
    fresh, fresh_optimizer = _trained("range", seed=4)
    load_sharded_state(tmp_path, fresh, fresh_optimizer)
    assert not fresh_optimizer.state
    assert torch.equal(fresh["table"].weight, model["table"].weight)


def test_from_full_weight_keeps_the_weight_and_its_dtype():
    weight = torch.randn(11, 4, dtype=torch.float64)
    table = ShardedEmbedding.from_full_weight(weight, partition="modulo")
    assert table.weight.dtype == torch.float64
    assert torch.equal(table.full_weight(), weight)
    with pytest.raises(ValueError, match="2-D"):
        ShardedEmbedding.from_full_weight(torch.randn(4))


# --------------------------------------------------------------------------------------------
# Communication bytes and load
# --------------------------------------------------------------------------------------------


def test_all_to_all_formula_counts_ids_owned_elsewhere():
    ids = torch.tensor([0, 1, 2, 5, 9])  # V=10, W=2 range: rank 0 owns 0-4
    assert all_to_all_bytes(ids, 10, 2, rank=0, row_bytes=4) == 2 * 4
    assert all_to_all_bytes(ids, 10, 2, rank=1, row_bytes=4) == 3 * 4


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_measured_bytes_per_collective_equal_the_formula(group_runs, world):
    records = [r for rank in group_runs[world] for r in rank["comm"]]
    payloads = {(r["inputs"], r["payload"]) for r in records}
    assert ("replicated", "rows (forward)") in payloads
    assert ("per_rank", "row gradients (backward)") in payloads
    for record in records:
        assert record["measured_bytes"] == record["formula_bytes"], record
    # Rows sent forward and gradients sent back are the same traffic, summed over the ranks.
    sent = {
        p: sum(r["measured_bytes"] for r in records if r["payload"] == p)
        for p in ("rows (forward)", "row gradients (backward)")
    }
    replicated = sum(r["measured_bytes"] for r in records if r["inputs"] == "replicated")
    assert sent["row gradients (backward)"] == sent["rows (forward)"] - replicated


def test_world_of_one_sends_nothing():
    records = comm_bytes_on_rank(64, 4, 20)
    assert records == []  # no collective runs without a group
    table = ShardedEmbedding(20, 4, inputs="per_rank")
    table(torch.arange(20)).sum().backward()
    assert table.comm_log == []


def test_shard_load_counts_every_lookup_and_shows_the_zipf_hot_spot():
    ids = zipf_ids(50_000, 10_000, s=1.1, seed=0)
    by_range = shard_load(ids, 10_000, 8, "range")
    by_modulo = shard_load(ids, 10_000, 8, "modulo")
    assert int(by_range.sum()) == int(by_modulo.sum()) == 50_000
    imbalance = lambda load: float(load.max() / load.double().mean())  # noqa: E731
    assert imbalance(by_range) > 3  # the hot head lives on rank 0
    assert imbalance(by_modulo) < imbalance(by_range) / 2
    with pytest.raises(IndexError, match="got 10000"):
        shard_load(torch.tensor([10_000]), 10_000, 8)


def test_world_of_one_is_nn_embedding_for_any_shape():
    plain = nn.Embedding(13, 4)
    table = ShardedEmbedding.from_full_weight(plain.weight)
    for ids in (
        torch.tensor(3),
        torch.randint(0, 13, (2, 3, 4)),
        torch.empty(0, 5, dtype=torch.long),
    ):
        assert torch.equal(table(ids), plain(ids))
        assert table(ids).shape == ids.shape + (4,)
    assert torch.equal(table(torch.tensor([1, 2], dtype=torch.int32)), plain(torch.tensor([1, 2])))


@pytest.mark.cuda
def test_sharded_state_on_cuda_round_trips_through_dcp(tmp_path):
    torch.manual_seed(0)
    model = nn.ModuleDict(
        {"table": ShardedEmbedding(V_INIT, D_INIT, device="cuda"), "head": nn.Linear(3, 1)}
    ).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model["head"](model["table"](torch.arange(5, device="cuda"))).sum().backward()
    optimizer.step()
    save_sharded_state(tmp_path, model, optimizer)
    fresh = nn.ModuleDict(
        {"table": ShardedEmbedding(V_INIT, D_INIT, device="cuda", seed=4), "head": nn.Linear(3, 1)}
    ).cuda()
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    load_sharded_state(tmp_path, fresh, fresh_optimizer)
    assert torch.equal(fresh["table"].weight, model["table"].weight)
    assert fresh["table"].weight.device.type == "cuda"
    state = fresh_optimizer.state[fresh["table"].weight]
    assert torch.equal(state["exp_avg"], optimizer.state[model["table"].weight]["exp_avg"])


# --------------------------------------------------------------------------------------------
# The replicated lookup written in a few lines (sharding_proofs.listing_lookup_done_right, the
# chapter's listing with its faults fixed) against ShardedEmbedding(inputs="replicated",
# partition="range"). Bitwise: both look up the same rows and sum the same tensors; the short
# version adds exact zeros where the package never looks a row up.
# --------------------------------------------------------------------------------------------


def _mismatches(records):
    """The records whose forward or gradient differs from the package's (bitwise), or whose
    out-of-range id did not raise."""
    return [
        r for r in records
        if r["forward"] != 0.0 or r["gradient"] != 0.0 or not r["bad_id_raises"]
    ]  # fmt: skip


def test_reference_lookup_equals_the_package_in_a_world_of_one():
    records = reference_on_rank(REFERENCE_SIZES)
    assert len(records) == len(REFERENCE_SIZES) and _mismatches(records) == []


def test_reference_lookup_equals_the_package_on_a_group_and_its_sub_group(group_runs):
    """``sharding_proofs.listing_lookup_done_right`` (the chapter's replicated lookup with its
    faults fixed) against the package, bitwise: the group of 4 serves W = 2 and W = 3 (sub-groups
    of ranks 0-1 and 0-2), as in notebook 01; a sub-group's tables must agree with nn.Embedding
    like a whole group's."""
    ranks = group_runs["four"]
    assert [sorted(rank["surveys"]) for rank in ranks] == [[2, 3], [2, 3], [3], []]
    for world in (2, 3):
        surveys = [rank["surveys"][world] for rank in ranks if world in rank["surveys"]]
        assert [_mismatches(s["reference"]) for s in surveys] == [
            []
        ] * world  # V=2, W=3: a rank owns no row
        cases = [r for s in surveys for r in s["equivalence"]]
        assert {r["W"] for r in cases} == {world}
        assert all(r["forward_equal"] and r["grad_equal"] and r["step_equal"] for r in cases)
        # every row has an owner: the shards add up to V, the last V mod W rows included
        for size in REFERENCE_SIZES:
            rows = [r["rows"] for s in surveys for r in s["reference"] if r["V"] == size]
            assert sum(rows) == size
