"""§20.1 the replicated lookup of notebook 01 written in a few lines
(``labs.nb01_sharding.listing_lookup_done_right``: the chapter's listing with its faults fixed)
against ``ShardedEmbedding(inputs="replicated", partition="range")``, on real gloo groups and as a
world of one; and the recommender's positive control (``labs.nb01_recommender.shuffled_users``).

Tolerance: bitwise. Both look up the same rows and sum the same tensors; the short version adds
exact zeros where the package never looks a row up.
"""

import pytest
import torch

from chapter20.labs.nb01_recommender import Interactions, shuffled_users
from chapter20.labs.nb01_sharding import (
    listing_lookup_done_right,
    reference_on_rank,
    surveys_on_rank,
)
from chapter20.techniques.distributed import run_local_group

SIZES = (2, 3, 4, 7, 101)  # V < W, V = W, V mod W != 0, ...


def _mismatches(records):
    """The records whose forward or gradient differs from the package's (bitwise), or whose
    out-of-range id did not raise."""
    return [
        r for r in records
        if r["forward"] != 0.0 or r["gradient"] != 0.0 or not r["bad_id_raises"]
    ]  # fmt: skip


def test_reference_equals_the_package_in_a_world_of_one():
    records = reference_on_rank(SIZES)
    assert len(records) == len(SIZES) and _mismatches(records) == []


def test_reference_equals_the_package_on_a_group_and_its_sub_group():
    # One launch of 3 ranks serves W = 2 (a dist.new_group of ranks 0-1) and W = 3, as in
    # notebook 01; the sub-group's tables must agree with nn.Embedding like the whole group's.
    plan = (SIZES, (64, 4, 50), None)  # sizes, (global batch, dim, V) of the bytes, no timing
    ranks = run_local_group(surveys_on_rank, 3, ({2: plan, 3: plan}, None))
    assert [sorted(rank["surveys"]) for rank in ranks] == [[2, 3], [2, 3], [3]]
    for world in (2, 3):
        surveys = [rank["surveys"][world] for rank in ranks if world in rank["surveys"]]
        assert [_mismatches(s["reference"]) for s in surveys] == [
            []
        ] * world  # V=2, W=3: a rank owns no row
        cases = [r for s in surveys for r in s["equivalence"]]
        assert {r["W"] for r in cases} == {world}
        assert all(r["forward_equal"] and r["grad_equal"] and r["step_equal"] for r in cases)
        # every row has an owner: the shards add up to V, the last V mod W rows included
        for size in SIZES:
            rows = [r["rows"] for s in surveys for r in s["reference"] if r["V"] == size]
            assert sum(rows) == size


@pytest.mark.parametrize("bad", [[-1], [5], [0, 5]])
def test_reference_raises_on_ids_out_of_range(bad):
    with pytest.raises(IndexError, match=r"ids must be in \[0, 5\)"):
        listing_lookup_done_right(torch.tensor(bad), torch.zeros(5, 2), 5)


def test_shuffled_users_keeps_items_and_breaks_the_user_link():
    train = torch.tensor([[u, i] for u in range(6) for i in range(u, u + 3)])
    data = Interactions(6, [str(i) for i in range(9)], train, train[:2], torch.ones(9))
    control = shuffled_users(data, seed=1)
    assert torch.equal(control.train[:, 1], train[:, 1])  # the same items, the same popularity
    assert sorted(control.train[:, 0].tolist()) == sorted(train[:, 0].tolist())
    assert not torch.equal(control.train[:, 0], train[:, 0])
    assert torch.equal(data.train, train)  # the data given is left alone
