"""chapter20.techniques.distributed: the local process-group launcher that multi-rank tests build
on."""

import pytest
import torch
import torch.distributed as dist

from chapter20.techniques.distributed import free_port, group_rank_and_size, run_local_group


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


@pytest.fixture(scope="module")
def groups():
    """Every multi-rank check of this module on one gloo group per world size, started once
    (a start costs seconds): ``{world: [each rank's {name: result}]}`` (``jobs_on_rank``)."""
    from chapter20.labs.nb06_distributed import allreduce_sweep_on_rank, practices_on_rank
    from chapter20.labs.nb06_stragglers import straggler_job
    from chapter20.techniques.allreduce_timing import loopback_bytes
    from chapter20.techniques.distributed import jobs_on_rank

    two = {
        "ddp": (_ddp_cases, ()),
        "agreement": (_agreement, ()),
        "straggler": straggler_job(steps=4, delay_per_example=1e-3, vocab=500, dim=16),
    }
    if loopback_bytes() is not None:  # Linux's /proc/net/dev counts the loopback's bytes
        two["sweep"] = (allreduce_sweep_on_rank, (WIRE_SIZES, ("float32",), 1, 4))
    two["practices"] = (practices_on_rank, (8, 1))  # last: it provokes DDP's unused-parameter error
    three = {"sum": (_rank_and_sum, ()), "sampler": (_sampler_on_rank, ()), "ddp": (_ddp_cases, ())}
    return {
        world: run_local_group(jobs_on_rank, world, (jobs,), timeout_s=180.0)
        for world, jobs in ((2, two), (3, three))
    }


def _of(groups, world: int, name: str) -> list:
    """Each rank's result of job ``name`` on the group of ``world`` ranks."""
    return [rank[name] for rank in groups[world]]


WIRE_SIZES = (1 << 18, 1 << 20)


def test_run_local_group_returns_every_rank_in_order(groups):
    results = _of(groups, 3, "sum")
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


# --- launch from torchrun's environment -------------------------------------------------------


def test_without_torchrun_it_is_a_world_of_one(monkeypatch):
    from chapter20.techniques.distributed import distributed

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with distributed() as ctx:
        assert (ctx.rank, ctx.world_size, ctx.backend, ctx.created_group) == (0, 1, None, False)
        assert ctx.is_main
    assert not dist.is_initialized()


@pytest.mark.parametrize(
    "env, match",
    [
        ({"WORLD_SIZE": "2", "RANK": "0"}, "MASTER_ADDR and MASTER_PORT not set"),
        ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "x", "MASTER_PORT": "1"}, "do not fit"),
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE must be an integer"),
    ],
)
def test_a_misconfigured_launch_fails_fast_and_says_what_to_set(monkeypatch, env, match):
    from chapter20.techniques.distributed import init_distributed

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RuntimeError, match=match):
        init_distributed()


# --- learning rate ---------------------------------------------------------------------------


def test_linear_scaling_rule_and_warmup():
    from chapter20.techniques.distributed import scale_lr, warmup_schedule

    assert scale_lr(1e-3, 512, 4096) == pytest.approx(8e-3)  # the chapter's example (C14)
    with pytest.raises(ValueError, match="base_lr"):
        scale_lr(0, 512, 4096)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.8)
    schedule = warmup_schedule(optimizer, warmup_steps=4)
    rates = []
    for _ in range(6):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert rates == pytest.approx([0.2, 0.4, 0.6, 0.8, 0.8, 0.8])


# --- the sampler, DDP equivalence and compression on real gloo groups --------------------------


def _sampler_on_rank() -> dict:
    from chapter20.techniques.distributed import distributed_loader, set_epoch

    dataset = torch.utils.data.TensorDataset(torch.arange(103))
    loader = distributed_loader(dataset, batch_size=5, seed=3)
    epochs = []
    for epoch in range(2):
        set_epoch(loader, epoch)
        epochs.append([int(i) for (batch,) in loader for i in batch])
    return {"epochs": epochs}


def test_sampler_covers_each_epoch_once_across_ranks_and_reshuffles(groups):
    results = _of(groups, 3, "sampler")
    for epoch in range(2):
        seen = [i for r in results for i in r["epochs"][epoch]]
        assert len(seen) == len(set(seen)) == 90  # 103 // 3 = 34 each, 6 full batches of 5
    assert results[0]["epochs"][0] != results[0]["epochs"][1]  # reshuffled by set_epoch


def _regression(model, x, y, reduction):
    error = (model(x) - y).pow(2).sum(dim=1)
    return error.mean() if reduction == "mean" else error.sum()


def _ddp_steps(reduction: str, compress: str, steps: int = 3) -> dict:
    from chapter20.techniques.ddp_hooks import compress_gradients

    rank, world = group_rank_and_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
        stats = compress_gradients(model, compress)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(12, 8, generator=generator), torch.randn(12, 4, generator=generator)
        optimizer.zero_grad()
        _regression(
            model, x.tensor_split(world)[rank], y.tensor_split(world)[rank], reduction
        ).backward()
        optimizer.step()
    module = model.module if world > 1 else model
    return {
        "weights": [p.detach().clone() for p in module.parameters()],
        "ratio": stats.ratio if world > 1 else 1.0,
    }


def _ddp_cases() -> dict:
    return {
        ("mean", "none"): _ddp_steps("mean", "none"),
        ("mean", "fp16"): _ddp_steps("mean", "fp16"),
        ("sum", "none"): _ddp_steps("sum", "none", steps=1),  # one step: an exact ratio
    }


@pytest.fixture(scope="module")
def ddp_runs(groups):
    single = {
        "mean": _ddp_steps("mean", "none"),
        "sum": _ddp_steps("sum", "none", steps=1),
        "initial": _ddp_steps("mean", "none", steps=0)["weights"],
    }
    return single, {world: _of(groups, world, "ddp") for world in (2, 3)}


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_with_a_mean_loss_equals_one_process(ddp_runs, world):
    single, groups = ddp_runs
    for result in groups[world]:
        for got, expected in zip(result[("mean", "none")]["weights"], single["mean"]["weights"]):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)  # float32 rounding


def test_ddp_with_a_summed_loss_is_off_by_exactly_the_world_size(ddp_runs):
    # One SGD step from the same weights: DDP averages the ranks' gradients of their summed
    # losses, so the update is the single process's update divided by W.
    single, groups = ddp_runs
    start = single["initial"]
    for world, results in groups.items():
        for got, expected, first in zip(
            results[0][("sum", "none")]["weights"], single["sum"]["weights"], start
        ):
            torch.testing.assert_close(
                (got - first) * world, expected - first, rtol=1e-4, atol=1e-6
            )


def test_fp16_compression_halves_the_bytes_and_stays_close(ddp_runs):
    single, groups = ddp_runs
    for results in groups.values():
        compressed = results[0][("mean", "fp16")]
        assert compressed["ratio"] == 0.5
        for got, expected in zip(compressed["weights"], single["mean"]["weights"]):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-3)  # fp16 rounding
            assert not torch.equal(got, expected) or got.numel() < 8


def test_compression_rejects_bad_arguments():
    from chapter20.techniques.ddp_hooks import compress_gradients

    with pytest.raises(TypeError, match="DistributedDataParallel"):
        compress_gradients(torch.nn.Linear(2, 2), "fp16")


# --- notebook 06: stragglers, the wire, practices -------------------------------------------


def test_a_slow_input_pipeline_is_detected_and_rebalanced(groups):
    from chapter20.labs.nb06_stragglers import straggler_frames
    from chapter20.techniques.parallelism import find_straggler

    # Not a speed assertion: rank 1's loader sleeps 1 ms per example (128 ms a step), far more
    # than a step of this tiny encoder computes; the monitor must name rank 1, the balanced
    # split must give it the smaller share, and a step on the uneven shares must be the step on
    # even shares (float32 rounding).
    frame, result = straggler_frames(_of(groups, 2, "straggler"))
    assert set(frame["rank"]) == {0, 1} and set(frame["phase"]) == {"even", "balanced"}
    assert find_straggler(frame[frame["phase"] == "even"].to_dict("records")) == 1
    shares = result["splits"]["balanced"]
    assert sum(shares) == 256 and shares[1] < shares[0]
    assert result["uneven_vs_even"] < 1e-6


def test_gloo_puts_at_least_the_rings_bytes_on_the_wire(groups):
    import pandas as pd

    if "sweep" not in groups[2][0]:
        pytest.skip("no loopback byte counter here (/proc/net/dev is Linux's)")
    frame = pd.DataFrame(groups[2][0]["sweep"])
    # A ring on 2 ranks sends each rank's whole message once: the wire holds at least that;
    # other traffic only adds, and the fewest of 4 tries leaves little of it.
    assert (frame["wire_per_rank"] >= 0.99 * frame["bytes"]).all()
    assert (frame["wire_per_rank"] <= 1.5 * frame["bytes"]).all()


def test_wire_growth_recovers_a_known_slope():
    import pandas as pd

    from chapter20.labs.nb06_distributed import wire_growth

    sizes = [1 << k for k in range(16, 24, 2)]
    rows = [{"W": w, "dtype": "float32", "bytes": n, "wire_per_rank": 100 + slope * n}
            for w, slope in ((2, 1.0), (3, 4 / 3)) for n in sizes]  # fmt: skip
    growth = wire_growth(pd.DataFrame(rows)).set_index("W")
    assert growth.loc[3, "per_byte"] / growth.loc[2, "per_byte"] == pytest.approx(4 / 3)
    assert growth["exponent"].between(0.99, 1.01).all()


def test_notebook_06_claim_notes_report_the_numbers_they_are_given():
    import pandas as pd

    from chapter20.labs.nb06_distributed import (
        allreduce_growth_note,
        fp16_compression_note,
        link_speed_note,
        scaling_speedup_note,
    )

    per_byte = pd.Series({(2, "float32"): 1.0, (2, "float16"): 0.5, (3, "float32"): 4 / 3})
    # the ring's 4/3 per rank from W=2 to W=3 is x2 summed over the ranks (3 ranks vs 2)
    assert allreduce_growth_note(per_byte) == (
        "per-rank wire bytes per message byte: W=2 1.000, W=3 1.333; summed over ranks x2.00"
    )
    assert fp16_compression_note(0.5) == (
        "on the loopback wire, 2 gloo ranks; the DDP hook's count: 0.50; "
        "the run stays within 1e-3 of fp32"
    )
    slower = {"InfiniBand HDR 200 Gb/s": 12.0, "Ethernet 100 Gb/s": 24.0}
    assert link_speed_note(slower) == (
        "datasheet: NVLink (A100) / InfiniBand HDR x12, / 100 Gb Ethernet x24"
    )
    at = {
        "BERT-base, InfiniBand": pd.Series({"speedup": 62.61}),
        "encoder 1M x 128, InfiniBand": pd.Series({"speedup": 55.64}),
    }
    assert scaling_speedup_note(at) == (
        "the alpha-beta model's upper bound: BERT-base over InfiniBand x62.6, "
        "the 1M x 128 encoder x55.6"
    )


def test_ddp_refuses_an_unused_parameter_unless_told_to_look_for_it(groups):
    from chapter20.labs.nb06_distributed import practices_table

    frame, unused = practices_table(_of(groups, 2, "practices"))
    assert "Expected to have finished reduction in the prior iteration" in unused["error"]
    assert unused["unused_grad_with_flag"] is None  # trained two steps, the head untouched
    assert list(frame["variant"]) == [
        "as recommended", "find_unused_parameters=True", "a barrier after every step",
    ]  # fmt: skip


# --- collectives on the right device; one namespace per launch ---------------------------------


def _agreement() -> dict:
    from chapter20.techniques.distributed import any_rank, collective_device

    rank, _ = group_rank_and_size()
    return {
        "device": str(collective_device()),
        "only_rank_one": any_rank(rank == 1),
        "nobody": any_rank(False),
    }


def test_any_rank_agrees_on_the_groups_device(groups):
    results = _of(groups, 2, "agreement")
    assert results == [{"device": "cpu", "only_rank_one": True, "nobody": False}] * 2


def test_any_rank_in_a_world_of_one_is_the_flag():
    from chapter20.techniques.distributed import any_rank

    assert any_rank(True) is True and any_rank(False) is False


def test_cuda_groups_get_gloo_beside_nccl_and_more_local_ranks_than_gpus_fail(monkeypatch):
    from chapter20.techniques import distributed as module

    assert module._group_backend(torch.device("cuda", 0)) == "cpu:gloo,cuda:nccl"
    assert module._group_backend(torch.device("cpu")) == "gloo"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert module._device_for(1) == torch.device("cuda", 1)
    with pytest.raises(RuntimeError, match="LOCAL_RANK=2 but this node has 2 GPU"):
        module._device_for(2)  # not silently cuda:0, shared with local rank 0


def test_attempt_namespace_is_agreed_and_fresh_despite_stale_keys():
    """Two launches through one store (as torchrun's agent store outlives a restart): each
    launch's ranks agree on a namespace, and the second one is new although the store still
    holds every key of the first, including its tickets."""
    import threading

    from chapter20.techniques.distributed import _attempt_namespace

    store = dist.HashStore()

    def launch(world):
        names = [None] * world

        def rank(r):
            names[r] = _attempt_namespace(store, r, world, 30.0)

        threads = [threading.Thread(target=rank, args=(r,)) for r in reversed(range(world))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        return names

    first, second = launch(3), launch(3)
    assert len(set(first)) == 1 and len(set(second)) == 1
    assert first[0] != second[0]


def _join(environment: dict, results) -> None:
    """One worker as torchrun starts it (``environment``): join the group, all-reduce, report."""
    import os

    os.environ.update(environment)
    from chapter20.techniques.distributed import distributed

    with distributed(timeout_s=60) as ctx:
        value = torch.tensor([ctx.rank + 1.0])
        dist.all_reduce(value)
        results.put((ctx.rank, f"sum {value.item():g}"))


def test_a_replaced_node_joins_although_its_restart_count_differs():
    """torchrun's workers share the agent's store across restarts. After a spot node is
    replaced its agent counts restarts from 0 while the others are at 3: a prefix built from
    that counter splits the group (a hang until the timeout). The handshake does not. The
    workers start from the local groups' fork server (torch already imported), each with the
    environment torchrun would give it."""
    from datetime import timedelta

    from chapter20.techniques.distributed import preloaded_process_context

    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, None, True, timedelta(seconds=60))
    context = preloaded_process_context()
    outputs = []
    for counts in ((0, 0), (3, 0)):  # the first launch, then a replaced node on rank 1
        results, children = context.Queue(), []
        for rank, count in enumerate(counts):
            env = {
                "RANK": str(rank),
                "LOCAL_RANK": "0",
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "TORCHELASTIC_USE_AGENT_STORE": "True",
                "TORCHELASTIC_RESTART_COUNT": str(count),
                "CUDA_VISIBLE_DEVICES": "",
                "OMP_NUM_THREADS": "1",
            }
            children.append(context.Process(target=_join, args=(env, results), daemon=True))
            children[-1].start()
        reports = sorted(results.get(timeout=120) for _ in children)
        for child in children:
            child.join(timeout=60)
            outputs.append((child.exitcode, reports[len(outputs) % 2]))
    del store
    assert outputs == [(0, (0, "sum 3")), (0, (1, "sum 3"))] * 2


def _nccl_agreement() -> dict:
    from chapter20.techniques.distributed import any_rank, collective_device

    rank, _ = group_rank_and_size()
    return {"device": collective_device().type, "only_rank_one": any_rank(rank == 1)}


@pytest.mark.multigpu
def test_any_rank_agrees_under_nccl_alone():
    """Under a group with nccl only, a CPU flag fails on the first all-reduce; any_rank puts it
    on this rank's GPU."""
    results = run_local_group(_nccl_agreement, 2, backend="nccl")
    assert results == [{"device": "cuda", "only_rank_one": True}] * 2


@pytest.mark.multigpu
def test_default_cuda_group_reduces_cpu_and_cuda_tensors():
    results = run_local_group(_agreement, 2)  # "cpu:gloo,cuda:nccl", one GPU per rank
    assert [r["only_rank_one"] for r in results] == [True, True]


@pytest.mark.cuda
def test_more_local_ranks_than_gpus_is_a_clear_error():
    from chapter20.techniques.distributed import _device_for

    with pytest.raises(RuntimeError, match="two processes would share a GPU"):
        _device_for(torch.cuda.device_count())
