"""§20.1.1 pipeline stages, §20.3.2 ZeRO-1, §20.4.1 overlap and no_sync, on real gloo groups.

Tolerances: the pipeline and the single process compute the same sums in another order
(per micro-batch means, then their mean, vs each example weighted by 1/B), so float32
rounding: 1e-6 absolute on gradients of order 1e-2. ZeRO-1 runs the same AdamW update on the
same gradients, only on another rank, so it is compared bitwise.
"""

from types import SimpleNamespace

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch

from chapter20.core.corpora import encode_texts
from chapter20.core.models import TransformerEncoder
from chapter20.labs import nb12_parallelism as lab
from chapter20.labs import nb12_practices as practices
from chapter20.techniques.ddp_hooks import predicted_overlap
from chapter20.techniques.distributed import run_in_one_group
from chapter20.techniques.optimizers import make_optimizer
from chapter20.techniques.parallelism import (
    RankMonitor,
    TokenizingPairs,
    balanced_split,
    find_straggler,
    own_seconds,
    tensor_parallel_block,
)
from chapter20.techniques.pipeline import (
    bubble_fraction,
    deep_encoder,
    grid_idle_share,
    pipeline_p2p_bytes,
    schedule_grid,
    split_stages,
)
from chapter20.techniques.zero import zero1_partition, zero1_state_bytes

SMALL = {"vocab_size": 50, "width": 16, "depth": 4, "classes": 5}


def test_bubble_formula_and_p2p_bytes():
    assert bubble_fraction(1, 8) == 0
    assert bubble_fraction(2, 1) == pytest.approx(0.5)
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    # forward activations + their gradients at each boundary, independent of micro-batches
    assert pipeline_p2p_bytes(32, 16, 2) == 2 * 32 * 16 * 4
    assert pipeline_p2p_bytes(32, 16, 3, element_size=2) == 2 * 2 * 32 * 16 * 2


def test_split_stages_balances_dense_weights_and_composes_to_the_model():
    torch.manual_seed(0)
    model = deep_encoder(**SMALL)
    parts = split_stages(model, 2)
    assert [len(p) for p in parts] == [3, 3]  # embedding + 2 blocks | 2 blocks + head
    x = torch.randint(0, 50, (4, 6))
    assert torch.equal(parts[1](parts[0](x)), model(x))
    assert all(len(p) >= 1 for p in split_stages(model, len(model)))
    with pytest.raises(ValueError, match="stages"):
        split_stages(model, len(model) + 1)


ZERO = {"vocab_size": 200, "d_model": 16, "n_heads": 2, "n_layers": 1, "max_len": 8}


#: Every multi-rank check of this file, run in one 2-rank group (a group costs seconds to start).
JOBS = {
    "pipeline": (lab.pipeline_on_rank, (("gpipe", "1f1b"), (1, 4), 32, 1, SMALL)),
    "zero": (lab.zero_on_rank, (3, 12, ZERO)),
    "no_sync": (lab.no_sync_on_rank, (4, 16, SMALL)),
    "l2": (practices.l2_on_rank, (3, 16)),
}


@pytest.fixture(scope="module")
def group():
    return run_in_one_group(2, JOBS, timeout_s=600.0)


@pytest.fixture(scope="module")
def pipeline(group):
    return lab.pipeline_results([r["pipeline"] for r in group], 32, SMALL)


def test_pipelined_step_equals_the_single_process_step(pipeline):
    _, proofs = pipeline
    loss, grads = lab.single_process_gradients(4, batch=32, model=SMALL)
    assert set(proofs) == {"gpipe", "1f1b"}
    for kind, proof in proofs.items():
        assert len(proof["losses"]) == proof["micro_batches"] == 4, kind
        assert sum(proof["losses"]) / 4 == pytest.approx(loss, abs=1e-6), kind
        assert proof["grads"].keys() == grads.keys()
        for name, grad in grads.items():
            assert torch.allclose(proof["grads"][name], grad, atol=1e-6, rtol=0), (kind, name)


def test_pipeline_sends_activations_and_gradients_once(pipeline):
    table, _ = pipeline
    assert (table["sent_bytes"] == table["bytes_formula"]).all()
    # 1F1B needs a micro-batch in every stage: M = 1 runs under GPipe only
    assert sorted(zip(table["schedule"], table["micro_batches"])) == [
        ("1f1b", 4), ("gpipe", 1), ("gpipe", 4)
    ]  # fmt: skip
    assert table["bubble_measured"].between(0, 1).all()


def test_zero1_equals_adamw_and_shards_the_state(group):
    results = [r["zero"] for r in group]
    assert all(r["max_weight_diff"] == 0.0 for r in results)  # same update, bitwise
    for r in results:
        assert all(a == b for a, b in r["losses"])
    plain = results[0]["plain_state_bytes"]
    shares = [r["zero_state_bytes"] for r in results]
    assert sum(shares) == plain  # every moment held by exactly one rank
    assert all(0 < s < plain for s in shares)


def test_no_sync_defers_the_allreduce_to_the_last_micro_batch(group):
    counts = group[0]["no_sync"]
    assert counts["with_no_sync"] >= 1
    assert counts["without_no_sync"] == 4 * counts["with_no_sync"]


def test_corrected_l2_on_two_ranks_equals_one_process(group):
    frame = practices.corrected_l2(3, 16, ranks=[r["l2"] for r in group])
    assert list(frame["world"]) == [1, 2, 2]
    one = practices.l2_on_rank(3, 16)
    assert one["wrapped"] == "TrainedModule"
    for rank in (r["l2"] for r in group):
        assert rank["wrapped"] == "DistributedDataParallel"
        assert rank["temperature"] == pytest.approx(one["temperature"], rel=1e-5)
        assert rank["checksum"] == pytest.approx(one["checksum"], rel=1e-5)
    assert one["temperature"] != pytest.approx(0.1)  # it was learned
    gaps = practices.l2_gaps(frame)
    assert gaps["weights"] < 1e-5 and gaps["temperature"] < 1e-5
    assert gaps["count"] == one["weights"].size > 2_000 * 32


def test_predicted_overlap():
    one = predicted_overlap([4_000_000], 1.0, 2, 1e-5, 1e9)
    assert one["hidden_fraction"] == 0  # a single bucket is ready only at the end
    many = predicted_overlap([1_000_000] * 4, 1.0, 2, 0.0, 1e9)
    assert many["hidden_fraction"] == pytest.approx(0.75)
    short = predicted_overlap([1_000_000] * 4, 1e-3, 2, 0.0, 1e9)  # backward too short to hide
    assert short["exposed_seconds"] == pytest.approx(short["comm_seconds"] - 1e-3)
    with pytest.raises(ValueError, match="bucket_bytes"):
        predicted_overlap([], 1.0, 2, 0.0, 1e9)


def test_fused_and_foreach_adamw_equal_the_for_loop():
    params = {}
    for label, kind, extra in practices.ADAMW_VARIANTS[:3]:
        generator = torch.Generator().manual_seed(0)
        params[label] = [torch.nn.Parameter(torch.randn(100, generator=generator)) for _ in "ab"]
        optimizer = make_optimizer(params[label], kind, 1e-2, **extra)
        for _ in range(3):
            for p in params[label]:
                p.grad = torch.randn(100, generator=generator)
            optimizer.step()
    for label in ("foreach", "fused"):
        for a, b in zip(params[label], params["for-loop"]):
            assert torch.allclose(a, b, atol=1e-6, rtol=0), label


def test_the_plain_loop_adamw_reference_equals_every_kernel():
    gaps = practices.adamw_reference_gap(steps=3)
    assert set(gaps) == {"for-loop", "foreach", "fused"}
    assert max(gaps.values()) < 1e-6


def test_overlap_findings_read_the_blocking_hook():
    frame = pd.DataFrame({
        "variant": ["buckets of 1 MiB", "buckets of 1000 MiB", "blocking hook",
                    "no_sync (no communication)"],
        "step_ms": [10.0, 12.0, 30.0, 8.0], "range_ms": [0.5, 0.5, 0.5, 0.5],
    })  # fmt: skip
    lines = lab.overlap_findings(frame)
    assert len(lines) == 3 and lines[-1].startswith("blocking hook")
    assert "slower" in lines[-1] or "×" in lines[-1]
    assert lines[0].startswith("buckets of 1 MiB: communication hidden behind the backward: 50%")


def test_the_blocking_variant_is_named_by_the_buckets_ddp_chose():
    default = SimpleNamespace(bucket_bytes_cap=25 * 2**20, bucket_bytes_cap_default=True)
    first = torch.distributed._DEFAULT_FIRST_BUCKET_BYTES / 2**20
    assert lab.blocking_label(default) == (
        f"blocking hook (25 MiB buckets, the first {first:g} MiB: DDP's default)"
    )
    chosen = SimpleNamespace(bucket_bytes_cap=4 * 2**20, bucket_bytes_cap_default=False)
    assert lab.blocking_label(chosen) == "blocking hook (4 MiB buckets)"
    frame = pd.DataFrame({
        "variant": ["buckets of 1000 MiB", lab.blocking_label(default),
                    "no_sync (no communication)"],
        "step_ms": [12.0, 30.0, 8.0], "range_ms": [0.5, 0.5, 0.5],
    })  # fmt: skip
    (line,) = lab.overlap_findings(frame)
    assert line.startswith(lab.blocking_label(default) + ", each bucket waited for")


def test_overlap_findings_print_no_hidden_share_for_indistinguishable_times():
    frame = pd.DataFrame({
        "variant": ["buckets of 1 MiB", "buckets of 1000 MiB", "no_sync (no communication)"],
        "step_ms": [10.0, 12.0, 8.0], "range_ms": [3.0, 3.0, 3.0],
        "hidden_measured": [0.5, 0.0, float("nan")], "hidden_model": [0.9, 0.0, float("nan")],
    })  # fmt: skip
    lines = lab.overlap_findings(frame)
    assert lines[0] == (
        "buckets of 1 MiB: hidden share not measurable here: step times indistinguishable"
    )
    assert "indistinguishable" in lines[1] and not any("%" in line for line in lines)
    assert lab.hidden_measurable(frame) == {"buckets of 1 MiB": False}
    fig = lab.plot_overlap(frame)
    texts = [text.get_text() for text in fig.axes[0].texts]
    assert texts == ["not measurable: times indistinguishable"]
    plt.close(fig)


def test_tokenizing_pairs_equal_encoding_beforehand():
    pairs = [(["the", "cat", "sat"], ["a", "dog"]), (["zebra"], ["the", "end", "of", "it"])]
    vocabulary = {"the": 2, "cat": 3, "a": 4, "dog": 5}
    dataset = TokenizingPairs(pairs, vocabulary, 3)
    anchors, positives = next(iter(torch.utils.data.DataLoader(dataset, batch_size=2)))
    assert torch.equal(anchors, encode_texts([p[0] for p in pairs], vocabulary, 3))
    assert torch.equal(positives, encode_texts([p[1] for p in pairs], vocabulary, 3))


# --- stragglers: per-rank monitoring, detection, dynamic batch sizing (§20.4) -------------------


def _rows(data: tuple[float, float], step: tuple[float, float], shares=(128, 128), steps=4):
    return [
        {"rank": r, "step": i, "batch": shares[r], "data_seconds": data[r],
         "step_seconds": step[r], "iteration_seconds": data[r] + step[r]}
        for i in range(steps) for r in (0, 1)
    ]  # fmt: skip


def test_own_seconds_separate_waiting_from_work():
    # rank 1 loads for 25 ms; rank 0's step carries the wait: 45 ms against rank 1's 20 ms
    own = own_seconds(_rows((0.0, 0.025), (0.045, 0.020)))
    assert own == pytest.approx({0: 0.020, 1: 0.045})
    assert find_straggler(_rows((0.0, 0.025), (0.045, 0.020))) == 1
    # balanced work: nobody holds the others up (rank 0 computes more per step, no wait)
    balanced = _rows((0.0, 0.015), (0.035, 0.020), shares=(176, 80))
    assert find_straggler(balanced) is None
    assert find_straggler(_rows((0.0, 0.0), (0.02, 0.02))) is None


def test_balanced_split_is_proportional_whole_and_complete():
    assert balanced_split([2.0, 1.0], 300) == [200, 100]
    assert balanced_split([1.0, 1.0, 1.0], 10) == [4, 3, 3]
    assert sum(balanced_split([5.0, 0.001], 64)) == 64
    assert balanced_split([5.0, 0.001], 64, minimum=4)[1] == 4
    with pytest.raises(ValueError, match="total"):
        balanced_split([1.0, 1.0], 3, minimum=2)
    with pytest.raises(ValueError, match="rates"):
        balanced_split([1.0, 0.0], 8)


def test_rank_monitor_logs_data_step_and_cpu_share():
    import time

    monitor = RankMonitor()
    for step in range(2):
        with monitor.iteration(step, 8):
            with monitor.data_wait():
                time.sleep(0.01)
            with monitor.step():
                sum(range(20_000))
    rows = monitor.gathered()  # a world of one: its own rows
    assert [r["step"] for r in rows] == [0, 1] and all(r["batch"] == 8 for r in rows)
    assert all(r["data_seconds"] >= 0.009 for r in rows)
    assert all(r["iteration_seconds"] >= r["data_seconds"] + r["step_seconds"] for r in rows)
    assert all(0 <= r["cpu_share"] <= 1.5 for r in rows)


# --- the mechanisms of notebook 12 in a few lines (techniques: pipeline, parallelism, zero) ---


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages,count", [(2, 2), (2, 8), (3, 5), (4, 4), (4, 16)])
def test_schedule_grid_idle_share_is_the_bubble_formula(kind, stages, count):
    """Exact: the grid counts whole slots, the formula is their ratio."""
    slots = schedule_grid(kind, stages, count)
    assert len(slots) == 2 * stages * count  # every forward and backward, once
    for (s, op, m), t in slots.items():  # dependencies hold
        if op == "F" and s > 0:
            assert t > slots[(s - 1, "F", m)]
        if op == "B":
            assert t > slots[(s + 1, "B", m)] if s < stages - 1 else t > slots[(s, "F", m)]
    assert grid_idle_share(slots) == pytest.approx(bubble_fraction(stages, count), abs=1e-12)


def test_one_f_one_b_holds_at_most_s_micro_batches_in_flight():
    stages, count = 4, 8
    slots = schedule_grid("1f1b", stages, count)
    for s in range(stages):
        events = sorted((t, op) for (r, op, _), t in slots.items() if r == s)
        in_flight = peak = 0
        for _, op in events:
            in_flight += 1 if op == "F" else -1
            peak = max(peak, in_flight)
        assert peak <= stages - s
    with pytest.raises(ValueError, match="kind"):
        schedule_grid("zigzag", 2, 2)


@pytest.mark.parametrize("shards", [1, 2, 4])
def test_tensor_parallel_block_equals_the_whole_block(shards):
    """float32 rounding: the hidden units' products are summed in shards, then added."""
    torch.manual_seed(0)
    up, down, x = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16), torch.randn(8, 16)
    with torch.no_grad():
        whole = down(torch.nn.functional.gelu(up(x)))
        split = tensor_parallel_block(x, up, down, shards)
    assert torch.allclose(split, whole, atol=1e-6)


def test_zero1_partition_is_greedy_by_size_and_complete():
    params = [torch.zeros(n) for n in (10, 40, 30, 20)]
    # 40 -> rank 0; 30 -> rank 1; 20 -> rank 1 (30 < 40); 10 -> rank 0 (40 < 50)
    assert zero1_partition(params, 2) == [0, 0, 1, 1]
    assert zero1_state_bytes(params, 2) == [8 * 50 + 8, 8 * 50 + 8]
    assert zero1_partition(params, 1) == [0, 0, 0, 0]


def test_zero1_partition_matches_zero_redundancy_optimizer(group):
    """The state each rank of the 2-rank group holds is the reference partition's, exactly."""
    params = list(TransformerEncoder(**ZERO, dropout=0.0).parameters())
    held = [r["zero"]["zero_state_bytes"] for r in sorted(group, key=lambda r: r["zero"]["rank"])]
    assert held == zero1_state_bytes(params, 2)


def test_zero_results_read_the_ranks_state_against_w_and_the_planner(group):
    frame = lab.zero_results([r["zero"] for r in group], global_batch=12)
    assert list(frame["rank"]) == [0, 1] and (frame["world_size"] == 2).all()
    assert frame["zero_state_bytes"].sum() == frame["plain_state_bytes"].iloc[0]
    assert frame["share"].sum() == pytest.approx(1.0)
    with pytest.raises(TypeError, match="jobs"):
        run_in_one_group(2, {"x": (None, ())})


def test_two_node_launch_reads_its_committed_record(monkeypatch):
    monkeypatch.delenv("CHAPTER20_SCALE", raising=False)
    row, source = practices.two_node_launch()
    assert source.startswith("recorded 20") and "\nreproduce: chapter20 bench practices" in source
    assert row.world_size == 2 and row.backend == "gloo"
    assert row.command_shown.startswith("torchrun --nnodes=2 --node_rank=0")
    summary = {"world_size": 2, "backend": "gloo", "first_loss": 5.0, "final_loss": 4.0}
    frame = practices.two_node_row({"command": "c", "line": "done:", "summary": summary})
    assert list(frame.columns) == [
        "command_shown", "line", "world_size", "backend", "first_loss", "final_loss",
    ]  # fmt: skip
