"""Tests of chapter20.capstone.metrics (§20.7): retrieval metrics against hand-computed values,
their chance levels against random rankings, and the geometry against Wang & Isola's
definitions on vectors."""

import numpy as np
import pytest
import torch

from chapter20.capstone import metrics


def test_ranks_count_ties_against_the_positive():
    scores = np.array([[0.9, 0.1, 0.2], [0.5, 0.5, 0.1], [0.3, 0.7, 0.1]])
    assert metrics.positive_ranks(scores).tolist() == [1, 2, 3]
    assert metrics.positive_ranks(np.ones((4, 4))).tolist() == [4, 4, 4, 4]  # no credit


def test_retrieval_metrics_by_hand():
    scores = np.array([[4, 3, 2, 1], [3, 2, 1, 0], [0, 3, 2, 1], [9, 8, 7, 1]], dtype=float)
    ranks = metrics.positive_ranks(scores)
    assert ranks.tolist() == [1, 2, 2, 4]
    out = metrics.retrieval_metrics(scores, ks=(1, 3), ndcg_at=3)
    assert out["recall@1"] == pytest.approx(0.25)
    assert out["recall@3"] == pytest.approx(0.75)
    assert out["chance@1"] == pytest.approx(0.25) and out["chance@3"] == pytest.approx(0.75)
    assert out["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 2 + 1 / 4) / 4)
    assert out["chance_mrr"] == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    assert out["ndcg@3"] == pytest.approx((1 + 2 / np.log2(3) + 0) / 4)
    assert out["chance_ndcg@3"] == pytest.approx((1 + 1 / np.log2(3) + 1 / np.log2(4)) / 4)


def test_chance_levels_are_what_random_rankings_get_on_average():
    rng = np.random.default_rng(0)
    runs = [metrics.retrieval_metrics(rng.random((50, 50))) for _ in range(400)]
    for key, chance in (("recall@10", "chance@10"), ("mrr", "chance_mrr"),
                        ("ndcg@10", "chance_ndcg@10")):  # fmt: skip
        mean = np.mean([r[key] for r in runs])
        assert mean == pytest.approx(runs[0][chance], rel=0.05), key


def test_perfect_scores_reach_every_maximum():
    out = metrics.retrieval_metrics(np.eye(30))
    assert out["recall@1"] == out["mrr"] == out["ndcg@10"] == 1.0


def test_geometry_matches_the_definitions_on_vectors():
    generator = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(40, 8, generator=generator), dim=1)
    y = torch.nn.functional.normalize(x + 0.3 * torch.randn(40, 8, generator=generator), dim=1)
    align = (x - y).norm(dim=1).pow(2).mean().item()
    assert metrics.alignment((x * y).sum(1).numpy()) == pytest.approx(align, rel=1e-5)
    distances = torch.pdist(y).pow(2)  # distinct pairs i < j
    unif = distances.mul(-2).exp().mean().log().item()
    cosines = (y @ y.T).double().numpy()
    assert metrics.uniformity(cosines) == pytest.approx(unif, rel=1e-5)
    off = cosines[~np.eye(40, dtype=bool)]
    assert metrics.mean_cosine(cosines) == pytest.approx(off.mean())
    out = metrics.geometry((x @ y.T).numpy(), cosines)
    assert set(out) == {"alignment", "uniformity", "mean_cosine"}


def test_a_collapsed_embedding_is_perfectly_aligned_and_not_uniform():
    same = np.ones((10, 10))
    assert metrics.alignment(np.ones(10)) == 0.0
    assert metrics.uniformity(same) == pytest.approx(0.0)
    assert metrics.mean_cosine(same) == pytest.approx(1.0)


def test_bad_input():
    with pytest.raises(ValueError, match="square"):
        metrics.retrieval_metrics(np.ones((3, 4)))
    with pytest.raises(ValueError, match="NaN"):
        metrics.positive_ranks(np.full((3, 3), np.nan))
    with pytest.raises(TypeError, match="ks"):
        metrics.retrieval_metrics(np.eye(3), ks=3)
    with pytest.raises(ValueError, match="t must"):
        metrics.uniformity(np.eye(3), t=0)
    with pytest.raises(ValueError, match="cosines"):
        metrics.alignment([])
