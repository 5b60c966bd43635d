"""§20.2.1 chapter20.techniques.accumulation and the trainer's accumulation: accumulated == full
batch for any split, alone and under 2-rank DDP with ``no_sync``; the chapter's rule (L4) and
InfoNCE accumulation are not.

Tolerance: float32 rounding (1e-6 absolute on gradients of order 1): the accumulated gradient
adds the same terms as the full batch, in another order.
"""

import pytest
import torch
from torch import nn

from chapter20.core.device import set_seed
from chapter20.core.measure import max_grad_diff
from chapter20.labs.nb02_contrastive import (
    _mse_per_example,
    accumulation_proof,
    naive_info_nce_accumulation_gap,
)
from chapter20.techniques.accumulation import example_weights, num_examples, split_batch
from chapter20.techniques.distributed import group_rank_and_size, run_local_group
from chapter20.training.config import TrainConfig
from chapter20.training.trainer import Trainer

ATOL = 1e-6


@pytest.mark.parametrize("sizes", [(7, 3, 5, 1), (4, 4, 4), (16,), (1, 1, 1, 1, 1, 11)])
def test_accumulation_equals_the_full_batch_for_any_split(sizes):
    result = accumulation_proof(sizes)
    assert result["examples"] < ATOL


def test_the_chapters_rule_is_wrong_for_uneven_micro_batches():
    assert accumulation_proof((7, 3, 5, 1))["micro_batches"] > 1e-2
    assert accumulation_proof((4, 4, 4))["micro_batches"] < ATOL  # right only for equal sizes


def test_accumulating_info_nce_is_not_the_full_batch():
    gap = naive_info_nce_accumulation_gap()
    assert gap["negatives_accumulated"] < gap["negatives_full"]
    assert abs(gap["full_batch_loss"] - gap["accumulated_loss"]) > 0.1
    assert gap["max_grad_diff"] > 1e-2


def _setup(seed: int = 0):
    set_seed(seed)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    data = torch.randn(20, 4), torch.randn(20, 2)
    return model, data


def test_clipping_comes_after_accumulation_and_one_step_is_taken():
    model, (x, y) = _setup()
    before = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        loss_before = float(_mse_per_example(model, (x, y)).mean())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = Trainer(
        model, TrainConfig(clip_norm=1e-3), loss=_mse_per_example, optimizer=optimizer
    )
    result = trainer.step(list(zip(x.split(6), y.split(6))))
    norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    assert result.grad_norm > 1e-3  # the norm of the whole accumulated gradient, before clipping
    assert float(norm) == pytest.approx(1e-3, rel=1e-4)  # clipped once, after accumulation
    assert result.examples == 20 and trainer.steps == 1
    moved = [(p - b).abs().max() for p, b in zip(model.parameters(), before)]
    assert all(m > 0 for m in moved)
    assert result.loss == pytest.approx(loss_before, rel=1e-6)  # the mean over all examples


def test_num_examples_reads_the_first_tensor():
    assert num_examples(torch.zeros(5, 3)) == 5
    assert num_examples((torch.zeros(2, 3), torch.zeros(2))) == 2
    assert num_examples({"ids": torch.zeros(7, 1)}) == 7
    with pytest.raises(ValueError, match="batch dimension"):
        num_examples(torch.tensor(3.0))


def test_split_batch_cuts_every_tensor_alike_into_near_equal_parts():
    x, y = torch.arange(10).view(10, 1), torch.arange(10)
    parts = split_batch({"x": x, "y": y}, 3)
    assert [len(p["y"]) for p in parts] == [4, 3, 3]
    assert torch.equal(torch.cat([p["x"] for p in parts]), x)
    assert all(torch.equal(p["x"].flatten(), p["y"]) for p in parts)
    assert len(split_batch((x, y), 50)) == 10  # never an empty micro-batch
    with pytest.raises(ValueError, match="first dimension"):
        split_batch((x, torch.zeros(9)), 2)
    with pytest.raises(ValueError, match="micro_batches"):
        split_batch(x, 0)


def test_example_weights_of_the_two_rules():
    assert example_weights([7, 3, 5, 1]) == [1 / 16] * 4
    assert example_weights([7, 3, 5, 1], "micro_batches") == [1 / 28, 1 / 12, 1 / 20, 1 / 4]
    with pytest.raises(ValueError, match="rule must be one of"):
        example_weights([2], "tokens")
    with pytest.raises(ValueError, match="at least one"):
        example_weights([])


def test_loss_must_return_one_loss_per_example():
    model, (x, y) = _setup()
    trainer = Trainer(model, loss=lambda m, b: _mse_per_example(m, b).mean())
    with pytest.raises(ValueError, match="one loss per example"):
        trainer.step([(x, y)])
    with pytest.raises(ValueError, match="at least one micro-batch"):
        Trainer(model, loss=_mse_per_example).step([])


# --- under DDP -------------------------------------------------------------------------------


def _ddp_accumulation_on_rank(rank_sizes: list[tuple[int, ...]]) -> dict:
    """Each rank accumulates its own uneven micro-batches under DDP; the reference is one
    process on all ranks' examples. Counts the gradient all-reduces with a comm hook."""
    rank, world = group_rank_and_size()
    model, _ = _setup()
    total = sum(sum(s) for s in rank_sizes)
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(total, 4, generator=generator), torch.randn(total, 2, generator=generator)
    start = sum(sum(s) for s in rank_sizes[:rank])
    mine = slice(start, start + sum(rank_sizes[rank]))
    micro = list(zip(x[mine].split(list(rank_sizes[rank])), y[mine].split(list(rank_sizes[rank]))))
    reference, _ = _setup()
    frozen = torch.optim.SGD(reference.parameters(), 0.0)
    Trainer(reference, loss=_mse_per_example, optimizer=frozen).step([(x, y)])
    trainer = Trainer(
        model, loss=_mse_per_example, optimizer=torch.optim.SGD(model.parameters(), 0.0)
    )
    ddp = trainer.model
    assert isinstance(ddp, nn.parallel.DistributedDataParallel)
    trainer.step(micro)  # the trainer's DDP communication hook counts every all-reduce
    grads = {n.removeprefix("module.encoder."): p.grad for n, p in ddp.named_parameters()}
    expected = {n: p.grad for n, p in reference.named_parameters()}
    syncs = trainer.communication.calls
    return {"max_diff": max_grad_diff(grads, expected), "syncs": syncs, "micro": len(micro)}


def test_ddp_accumulation_equals_one_process_and_syncs_once():
    # Uneven micro-batches, and ranks with different numbers of examples.
    results = run_local_group(_ddp_accumulation_on_rank, 2, ([(5, 2, 3), (1, 6)],))
    for result in results:
        assert result["max_diff"] < ATOL
        assert result["syncs"] == 1 < result["micro"]  # no_sync on all but the last micro-batch


@pytest.mark.parametrize("sizes", [(7, 3, 5, 1), (15, 1)])
def test_the_short_version_equals_the_full_batch(sizes):
    assert accumulation_proof(sizes)["reference"] < ATOL  # float32 rounding
