"""Tests for chapter20.techniques.contrastive: InfoNCE against a hand-written reference, gradient
caching,
retrieval recall."""

import math
import subprocess
import sys

import pandas as pd
import pytest
import torch

from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.techniques.contrastive import info_nce, recall_at_k


def reference_info_nce(q, k, temperature):
    """InfoNCE written out: cosine logits / temperature, -log softmax of the diagonal."""
    q = q / q.norm(dim=1, keepdim=True)
    k = k / k.norm(dim=1, keepdim=True)
    logits = (q @ k.T) / temperature
    return -(logits.diag() - logits.logsumexp(dim=1)).mean()


@pytest.fixture
def pair():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(8, 5, generator=gen), torch.randn(8, 5, generator=gen)


# float32 tolerance: the reference divides by the norm and uses logsumexp, info_nce uses
# F.normalize and F.cross_entropy; both are float32 and differ only in rounding order.
TOL = {"rtol": 1e-5, "atol": 1e-6}


@pytest.mark.parametrize("temperature", [0.05, 0.5, 2.0])
def test_info_nce_matches_reference(pair, temperature):
    q, k = pair
    torch.testing.assert_close(
        info_nce(q, k, temperature), reference_info_nce(q, k, temperature), **TOL
    )


def test_info_nce_is_scale_invariant(pair):
    # Inputs are L2-normalised, so rescaling rows changes nothing (up to float32 rounding).
    q, k = pair
    scale = torch.arange(1, 9, dtype=torch.float32).unsqueeze(1)
    torch.testing.assert_close(info_nce(q * scale, k * 3.0), info_nce(q, k), **TOL)


def test_info_nce_symmetric_averages_both_directions(pair):
    q, k = pair
    both = (reference_info_nce(q, k, 0.1) + reference_info_nce(k, q, 0.1)) / 2
    torch.testing.assert_close(info_nce(q, k, 0.1, symmetric=True), both, **TOL)
    # The two directions really differ on this data, so the test could fail.
    assert not torch.allclose(info_nce(q, k, 0.1), info_nce(k, q, 0.1))


def test_info_nce_aligned_pairs_near_zero():
    # Orthogonal unit vectors matched with themselves: positive cosine 1, negatives 0.
    x = torch.eye(6)
    assert info_nce(x, x, temperature=0.01).item() < 1e-6
    # A random pairing of the same vectors is as bad as chance or worse.
    assert info_nce(x, x.roll(1, dims=0), temperature=0.01).item() > math.log(6)


def test_info_nce_uninformative_is_log_batch():
    # All cosines equal: the loss is the log of the number of candidates.
    x = torch.ones(5, 3)
    torch.testing.assert_close(info_nce(x, x, 0.1), torch.tensor(math.log(5)), **TOL)


def test_info_nce_half_precision_inputs_give_float32():
    q = torch.randn(4, 8).bfloat16()
    loss = info_nce(q, q)
    assert loss.dtype == torch.float32
    # bf16 inputs are upcast exactly, so the loss equals the float32 computation on them.
    torch.testing.assert_close(loss, reference_info_nce(q.float(), q.float(), 0.05), **TOL)


def test_info_nce_learnable_temperature_gets_gradient(pair):
    q, k = pair
    temperature = torch.tensor(0.1, requires_grad=True)
    info_nce(q, k, temperature).backward()
    assert temperature.grad is not None
    assert temperature.grad.item() != 0.0
    assert math.isfinite(temperature.grad.item())


def test_info_nce_learnable_temperature_no_warning():
    # torch emits this warning once per process, so it is checked in a fresh interpreter.
    code = (
        "import torch\n"
        "from chapter20.techniques.contrastive import info_nce\n"
        "t = torch.tensor(0.1, requires_grad=True)\n"
        "info_nce(torch.randn(4, 3), torch.randn(4, 3), t).backward()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_info_nce_inputs_get_gradients(pair):
    q, k = (t.clone().requires_grad_() for t in pair)
    info_nce(q, k).backward()
    assert q.grad is not None and k.grad is not None
    assert torch.count_nonzero(q.grad) > 0 and torch.count_nonzero(k.grad) > 0


@pytest.mark.parametrize(
    ("q_shape", "k_shape"), [((4, 3), (4, 5)), ((4, 3), (3, 3)), ((4,), (4,)), ((2, 3, 4),) * 2]
)
def test_info_nce_shape_mismatch(q_shape, k_shape):
    with pytest.raises(ValueError, match="same shape"):
        info_nce(torch.randn(q_shape), torch.randn(k_shape))


def test_info_nce_empty_batch():
    with pytest.raises(ValueError, match="at least one pair"):
        info_nce(torch.randn(0, 4), torch.randn(0, 4))


@pytest.mark.parametrize("temperature", [0.0, -0.1, torch.tensor(0.0), torch.tensor(-1.0)])
def test_info_nce_temperature_must_be_positive(pair, temperature):
    with pytest.raises(ValueError, match="temperature"):
        info_nce(*pair, temperature)


def test_info_nce_nan_temperature_raises(pair):
    with pytest.raises(ValueError, match="temperature"):
        info_nce(*pair, float("nan"))


# --- retrieval ------------------------------------------------------------------------------


def test_recall_at_k_counts_how_many_candidates_beat_the_positive():
    keys = torch.eye(4)
    anchors = keys[[0, 1, 3, 2]]  # rows 2 and 3 point at each other's positive
    identity = torch.nn.Identity()
    assert recall_at_k(identity, keys, keys, ks=(1,)) == {1: 1.0}
    assert recall_at_k(identity, anchors, keys, ks=(1, 2, 4)) == {1: 0.5, 2: 1.0, 4: 1.0}
    with pytest.raises(ValueError, match="same number"):
        recall_at_k(identity, keys, keys[:3])


# --- hard negatives and reductions -----------------------------------------------------------


def reference_with_hard_negatives(q, k, h, temperature):
    """Written out: each query's candidates are all keys, then the hard negatives."""
    q, k, h = (x / x.norm(dim=1, keepdim=True) for x in (q, k, h))
    logits = q @ torch.cat([k, h]).T / temperature
    return -(logits.diag() - logits.logsumexp(dim=1)).mean()


def test_hard_negatives_are_extra_candidates_after_the_keys(pair):
    q, k = pair
    h = torch.randn(5, 5, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(
        info_nce(q, k, 0.1, hard_negatives=h), reference_with_hard_negatives(q, k, h, 0.1), **TOL
    )
    # A hard negative equal to a query's positive makes that query's loss grow.
    assert info_nce(q, k, 0.1, hard_negatives=k[:1]) > info_nce(q, k, 0.1)


def test_reductions_agree(pair):
    q, k = pair
    losses = info_nce(q, k, 0.1, reduction="none")
    assert losses.shape == (8,)
    torch.testing.assert_close(losses.mean(), info_nce(q, k, 0.1), **TOL)
    torch.testing.assert_close(losses.sum(), info_nce(q, k, 0.1, reduction="sum"), **TOL)
    with pytest.raises(ValueError, match="reduction must be one of"):
        info_nce(q, k, reduction="max")


def test_hard_negatives_must_match_the_dim(pair):
    q, k = pair
    with pytest.raises(ValueError, match="hard_negatives must be"):
        info_nce(q, k, hard_negatives=torch.randn(3, 4))


# --- cross-rank negatives (real gloo groups) --------------------------------------------------


@pytest.fixture(scope="module")
def distributed_records():
    from chapter20.techniques.contrastive_proofs import distributed_proof

    return distributed_proof(world_sizes=(2, 4))


def test_distributed_info_nce_equals_single_process(distributed_records):
    # float32 rounding: the logits of a query come from a matmul of a different shape.
    frame = distributed_records
    assert set(frame["W"]) == {2, 4} and set(frame["hard"]) == {0, 2, 3}
    assert frame["sizes"].nunique() == 4  # even and uneven batch sizes at both W
    for column in (
        "one_way_loss_diff",
        "one_way_grad_diff",
        "symmetric_loss_diff",
        "symmetric_grad_diff",
    ):
        assert frame[column].max() < 1e-5, column


def test_plain_all_gather_has_no_gradient_and_gather_with_grad_has(distributed_records):
    even = distributed_records.dropna(subset=["plain_gather_requires_grad"])
    assert len(even) > 0
    assert not even["plain_gather_requires_grad"].astype(bool).any()
    assert even["gather_with_grad_requires_grad"].astype(bool).all()


def test_distributed_info_nce_without_a_group_is_info_nce(pair):
    from chapter20.techniques.contrastive import distributed_info_nce, gather_with_grad

    q, k = pair
    assert torch.equal(distributed_info_nce(q, k, 0.1), info_nce(q, k, 0.1))
    assert gather_with_grad(q) is q


# --- gradient caching ---------------------------------------------------------------------------


def test_grad_cache_equals_full_batch_with_dropout_and_replayed_rng():
    from chapter20.techniques.contrastive_proofs import grad_cache_proof

    for batch, chunk in ((22, 5), (9, 4), (8, 8), (7, 20)):  # uneven, even, one chunk, chunk > B
        result = grad_cache_proof(batch=batch, chunk_size=chunk)
        assert result["replayed"] < 1e-5, (batch, chunk)  # float32 rounding
        if chunk < batch:
            assert result["not_replayed"] > 1e-3  # other dropout masks: a real difference


def test_grad_cache_rejects_bad_arguments():
    from chapter20.techniques.contrastive import grad_cache_backward

    model = BagOfEmbeddingsEncoder(20, 4)
    ids = torch.randint(1, 20, (4, 3))
    with pytest.raises(ValueError, match="chunk_size"):
        grad_cache_backward(model, (ids, ids), info_nce, 0)
    with pytest.raises(TypeError, match="chunk_size"):
        grad_cache_backward(model, (ids, ids), info_nce, 2.5)
    with pytest.raises(ValueError, match="inputs"):
        grad_cache_backward(model, (), info_nce, 2)


def test_short_info_nce_equals_info_nce():
    from chapter20.techniques.contrastive_proofs import info_nce_proof

    assert info_nce_proof() < 1e-5  # float32 rounding: the mean is taken in another order


@pytest.mark.parametrize("chunk", [1, 5, 22])
def test_short_grad_cache_equals_the_full_batch_and_the_package(chunk):
    from chapter20.techniques.contrastive_proofs import grad_cache_reference_proof

    result = grad_cache_reference_proof(batch=22, chunk_size=chunk)
    assert result["vs_full_batch"] < 1e-5  # float32 rounding: chunks summed in another order
    assert result["vs_package"] == 0.0  # the same passes in the same order, without dropout


def test_strategy_runs_name_the_untrained_encoder_and_refuse_unknown_methods():
    from chapter20.core.corpora import PairData
    from chapter20.labs.nb02_strategies import train_pairs

    gen = torch.Generator().manual_seed(0)
    data = PairData(*torch.randint(1, 50, (4, 40, 6), generator=gen), vocab_size=50)
    untrained = train_pairs(data, "untrained", batch=8, micro=4, dim=8)
    assert untrained.steps == 0 and untrained.negatives == 0
    with pytest.raises(ValueError, match="method must be one of"):
        train_pairs(data, "huge batch")


def test_every_strategy_sees_the_same_training_pairs():
    from chapter20.core.corpora import PairData
    from chapter20.labs.nb02_strategies import STRATEGIES, run_table, train_pairs

    gen = torch.Generator().manual_seed(0)
    data = PairData(*torch.randint(1, 50, (4, 40, 6), generator=gen), vocab_size=50)
    runs = [train_pairs(data, m, batch=8, micro=4, steps=3, dim=8) for m in STRATEGIES]
    table = run_table(runs).set_index("method")
    assert table["pairs seen"].tolist() == [24] * len(STRATEGIES)
    assert table.loc["small batch", "steps"] == 6  # twice the steps of half the pairs
    assert table.loc["large batch", "steps"] == 3


def test_a_single_seed_prints_no_spread_no_gap_and_no_judgement():
    from chapter20.core.seed_statistics import versus_reference
    from chapter20.labs.nb02_strategies import beyond_seed_noise, seed_table

    runs = pd.DataFrame(
        {
            "method": ["large batch"] * 3 + ["small batch"] * 3 + ["gradient caching"],
            "recall@10": [0.10, 0.11, 0.09, 0.05, 0.06, 0.04, 0.12],
        }
    )
    summary = versus_reference(
        runs, by="method", reference="large batch", column="recall@10", chance=0.01
    )
    table = seed_table(summary).set_index("method")
    assert table.loc["gradient caching", ["recall@10_std", "gap"]].tolist() == ["—", "—"]
    assert table.loc["small batch", "gap"] == "-0.5000"
    assert table.loc["large batch", "recall@10_std"] == "0.0100"
    assert beyond_seed_noise(summary, "large batch", "small batch") is True
    assert beyond_seed_noise(summary, "small batch", "large batch") is False
    assert beyond_seed_noise(summary, "gradient caching", "small batch") is None
    with pytest.raises(ValueError, match="better must be one of"):
        beyond_seed_noise(summary, "huge batch", "small batch")
