"""§20.1 chapter20.contrastive_training: listing L2 done right. Training on W gloo ranks (DDP,
cross-rank InfoNCE, with and without gradient caching) equals one process on the concatenated
batches; rank 0 saves, every rank can load.

Tolerance: float32 rounding carried through three Adam steps (1e-5 absolute on weights of order
1): the distributed loss sums the same terms in another order.
"""

import pytest
import torch

from chapter20.contrastive_training import ContrastiveTrainer
from chapter20.device import set_seed
from chapter20.distributed import group_rank_and_size, run_local_group
from chapter20.models import BagOfEmbeddingsEncoder

VOCAB, DIM, STEPS, GLOBAL_BATCH = 60, 8, 3, 13  # 13 rows: uneven slices on 2 and 3 ranks


def _batches():
    generator = torch.Generator().manual_seed(7)
    return [
        torch.randint(1, VOCAB, (2, GLOBAL_BATCH, 5), generator=generator) for _ in range(STEPS)
    ]


def _train(chunk_size, checkpoint=None) -> dict:
    """Train on this rank's slice of every global batch; return the final weights and losses."""
    rank, world = group_rank_and_size()
    set_seed(0)
    model = BagOfEmbeddingsEncoder(VOCAB, DIM)
    trainer = ContrastiveTrainer(
        model,
        torch.optim.Adam(model.parameters(), lr=1e-2),
        temperature=0.1,
        chunk_size=chunk_size,
        clip_norm=5.0,
    )
    losses = []
    for anchors, positives in _batches():
        losses.append(
            trainer.step(anchors.tensor_split(world)[rank], positives.tensor_split(world)[rank])
        )
    result = {
        "state": model.state_dict(),
        "losses": losses,
        "wrapped": type(trainer.model).__name__,
    }
    if checkpoint is not None:
        result["written"] = trainer.save_checkpoint(checkpoint) is not None
        fresh = BagOfEmbeddingsEncoder(VOCAB, DIM)
        loader = ContrastiveTrainer(fresh, torch.optim.Adam(fresh.parameters(), lr=1e-2))
        loader.load_checkpoint(checkpoint)
        result["loaded_equal"] = all(
            torch.equal(a, b)
            for a, b in zip(fresh.state_dict().values(), model.state_dict().values())
        )
        result["loaded_steps"] = loader.steps
    return result


def _train_both(checkpoint: str) -> list[dict]:
    return [_train(None, checkpoint), _train(4)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    single = [_train(None), _train(4)]
    groups = {
        world: run_local_group(_train_both, world, (str(tmp_path_factory.mktemp("ckpt") / "c.pt"),))
        for world in (2, 3)
    }
    return single, groups


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("cached", [False, True], ids=["plain", "grad_cache"])
def test_training_on_ranks_equals_one_process(runs, world, cached):
    single, groups = runs
    expected = single[cached]
    for result in groups[world]:
        got = result[cached]
        assert got["wrapped"] == "DistributedDataParallel"
        for name, value in expected["state"].items():
            torch.testing.assert_close(got["state"][name], value, rtol=0, atol=1e-5)
    # The ranks' losses, averaged, are the loss of the global batch.
    for step in range(STEPS):
        mean = sum(r[cached]["losses"][step] for r in groups[world]) / world
        assert mean == pytest.approx(expected["losses"][step], rel=1e-5)


def test_gradient_caching_trains_like_the_plain_step(runs):
    single, _ = runs
    for name, value in single[0]["state"].items():
        torch.testing.assert_close(single[1]["state"][name], value, rtol=0, atol=1e-5)
    assert single[0]["wrapped"] == "BagOfEmbeddingsEncoder"  # no DDP in a world of one


def test_only_rank_zero_writes_and_every_rank_loads(runs):
    _, groups = runs
    for world, results in groups.items():
        written = [r[0]["written"] for r in results]
        assert written == [True] + [False] * (world - 1)
        assert all(r[0]["loaded_equal"] and r[0]["loaded_steps"] == STEPS for r in results)


def test_bad_arguments():
    model = BagOfEmbeddingsEncoder(VOCAB, DIM)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="temperature"):
        ContrastiveTrainer(model, optimizer, temperature=0)
    with pytest.raises(ValueError, match="chunk_size"):
        ContrastiveTrainer(model, optimizer, chunk_size=0)
    with pytest.raises(ValueError, match="clip_norm"):
        ContrastiveTrainer(model, optimizer, clip_norm=-1)
    trainer = ContrastiveTrainer(model, optimizer)
    with pytest.raises(ValueError, match="same number of rows"):
        trainer.step(torch.randint(1, VOCAB, (4, 3)), torch.randint(1, VOCAB, (3, 3)))
