"""§20.2.1 chapter20.accumulation: accumulated == full batch for any split, alone and under
2-rank DDP with ``no_sync``; the chapter's rule (L4) and InfoNCE accumulation are not.

Tolerance: float32 rounding (1e-6 absolute on gradients of order 1): the accumulated gradient
adds the same terms as the full batch, in another order.
"""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from chapter20.accumulation import accumulate_step, num_examples
from chapter20.contrastive_lab import (
    _mse_per_example,
    accumulation_proof,
    max_grad_diff,
    naive_info_nce_accumulation_gap,
)
from chapter20.device import set_seed
from chapter20.distributed import group_rank_and_size, run_local_group

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
    micro = list(zip(x.split(6), y.split(6)))
    result = accumulate_step(model, micro, _mse_per_example, optimizer, clip_norm=1e-3)
    norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    assert result.grad_norm > 1e-3  # the norm of the whole accumulated gradient, before clipping
    assert float(norm) == pytest.approx(1e-3, rel=1e-4)  # clipped once, after accumulation
    assert result.examples == 20 and result.micro_batches == 4
    moved = [(p - b).abs().max() for p, b in zip(model.parameters(), before)]
    assert all(m > 0 for m in moved)
    assert result.loss == pytest.approx(loss_before, rel=1e-6)  # the mean over all examples


def test_num_examples_reads_the_first_tensor():
    assert num_examples(torch.zeros(5, 3)) == 5
    assert num_examples((torch.zeros(2, 3), torch.zeros(2))) == 2
    assert num_examples({"ids": torch.zeros(7, 1)}) == 7
    with pytest.raises(ValueError, match="batch dimension"):
        num_examples(torch.tensor(3.0))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"micro_batches": []}, "at least one micro-batch"),
        ({"clip_norm": 0}, "clip_norm"),
        ({"normalize": "tokens"}, "normalize must be one of"),
    ],
)
def test_bad_arguments(kwargs, match):
    model, (x, y) = _setup()
    arguments = {"micro_batches": [(x, y)], **kwargs}
    with pytest.raises(ValueError, match=match):
        accumulate_step(
            model,
            loss_fn=_mse_per_example,
            optimizer=torch.optim.SGD(model.parameters(), 0.1),
            **arguments,
        )


def test_loss_fn_must_return_one_loss_per_example():
    model, (x, y) = _setup()
    with pytest.raises(ValueError, match="one loss per example"):
        accumulate_step(
            model,
            [(x, y)],
            lambda m, b: _mse_per_example(m, b).mean(),
            torch.optim.SGD(model.parameters(), 0.1),
        )


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
    accumulate_step(
        reference, [(x, y)], _mse_per_example, torch.optim.SGD(reference.parameters(), 0.0)
    )
    ddp = nn.parallel.DistributedDataParallel(model)
    calls = []

    def counting_hook(state, bucket):
        calls.append(1)
        return (
            dist.all_reduce(bucket.buffer().div_(world), async_op=True)
            .get_future()
            .then(lambda fut: fut.value()[0])
        )

    ddp.register_comm_hook(None, counting_hook)
    accumulate_step(ddp, micro, _mse_per_example, torch.optim.SGD(ddp.parameters(), 0.0))
    grads = {n.removeprefix("module."): p.grad for n, p in ddp.named_parameters()}
    expected = {n: p.grad for n, p in reference.named_parameters()}
    return {"max_diff": max_grad_diff(grads, expected), "syncs": len(calls), "micro": len(micro)}


def test_ddp_accumulation_equals_one_process_and_syncs_once():
    # Uneven micro-batches, and ranks with different numbers of examples.
    results = run_local_group(_ddp_accumulation_on_rank, 2, ([(5, 2, 3), (1, 6)],))
    for result in results:
        assert result["max_diff"] < ATOL
        assert result["syncs"] == 1 < result["micro"]  # no_sync on all but the last micro-batch
