"""§20.1 the replicated lookup of notebook 01 written in a few lines
(``sharding_proofs.listing_lookup_done_right``: the chapter's listing with its faults fixed)
against ``ShardedEmbedding(inputs="replicated", partition="range")``: its out-of-range ids (its
equality with the package, as a world of one and on real gloo groups, is checked beside the
package's own checks in ``test_sharding.py``, whose W=3 group serves it); and the recommender's
positive control (``demos.recommender.shuffled_users``).

Tolerance: bitwise. Both look up the same rows and sum the same tensors; the short version adds
exact zeros where the package never looks a row up.
"""

import pytest
import torch

from chapter20.demos.recommender import Interactions, shuffled_users
from chapter20.techniques.sharding_proofs import listing_lookup_done_right


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
