"""chapter20.distributed: the local process-group launcher that multi-rank tests build on."""

import pytest
import torch
import torch.distributed as dist

from chapter20.distributed import free_port, group_rank_and_size, run_local_group


def _rank_and_sum() -> tuple[int, int, float]:
    rank, world = group_rank_and_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    return rank, world, float(value)


def _fail_on_rank_one() -> int:
    rank, _ = group_rank_and_size()
    if rank == 1:
        raise ValueError("rank one refuses")
    return rank


def test_world_of_one_without_a_group():
    assert not dist.is_initialized()
    assert group_rank_and_size() == (0, 1)


def test_free_port_is_a_valid_port():
    assert 0 < free_port() < 65536


def test_run_local_group_returns_every_rank_in_order():
    results = run_local_group(_rank_and_sum, 3)
    # 1 + 2 + 3 summed by a real gloo all-reduce, seen by every rank.
    assert results == [(0, 3, 6.0), (1, 3, 6.0), (2, 3, 6.0)]


def test_a_failing_rank_raises_with_its_traceback():
    with pytest.raises(RuntimeError, match="rank 1 of 2 failed") as info:
        run_local_group(_fail_on_rank_one, 2)
    assert "rank one refuses" in str(info.value)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"world_size": 0}, ValueError),
        ({"world_size": 2.0}, TypeError),
        ({"world_size": 2, "timeout_s": 0}, ValueError),
    ],
)
def test_bad_arguments_are_rejected(kwargs, error):
    with pytest.raises(error):
        run_local_group(_rank_and_sum, **kwargs)


def test_fn_must_be_callable():
    with pytest.raises(TypeError, match="fn must be callable"):
        run_local_group("not a function", 2)
