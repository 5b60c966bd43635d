"""Tests of chapter20.capstone.evaluation: the Lee correlation, the baselines, held-out
retrieval."""

import numpy as np
import pytest
import torch

from chapter20.capstone import evaluation
from chapter20.core.corpora import lee_human_similarity


def test_lee_score_of_the_human_matrix_is_one_and_of_its_negation_minus_one():
    human = lee_human_similarity()
    assert evaluation.lee_score(human).pearson == pytest.approx(1.0)
    assert evaluation.lee_score(human).spearman == pytest.approx(1.0)
    assert evaluation.lee_score(-human).pearson == pytest.approx(-1.0)


def test_lee_score_reads_only_the_upper_triangle():
    human = lee_human_similarity()
    scrambled = human.copy()
    scrambled[np.tril_indices(50, -1)] = np.random.default_rng(0).random(1225)
    assert evaluation.lee_score(scrambled) == evaluation.lee_score(human)


def test_lee_score_rejects_bad_matrices():
    with pytest.raises(ValueError, match=r"\[50, 50\]"):
        evaluation.lee_score(np.eye(49))
    bad = np.eye(50)
    bad[0, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        evaluation.lee_score(bad)


def test_cosine_matrix_matches_torch_and_refuses_zero_rows():
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    expected = torch.nn.functional.cosine_similarity(x[:, None], x[None], dim=-1)
    np.testing.assert_allclose(evaluation.cosine_matrix(x), expected.numpy(), atol=1e-6)
    np.testing.assert_allclose(evaluation.cosine_matrix(x[:2], x[3:]), expected[:2, 3:], atol=1e-6)
    x[2] = 0
    with pytest.raises(ValueError, match=r"rows \[2\]"):
        evaluation.cosine_matrix(x)


def test_score_encoder_on_lee_sees_the_raw_documents():
    seen = []

    def encode(texts):
        seen.extend(texts)
        return np.random.default_rng(0).normal(size=(len(texts), 8))

    score = evaluation.score_encoder_on_lee(encode)
    assert len(seen) == 50 and "Brian Greig" in seen[0]
    assert abs(score.pearson) < 0.2  # random vectors: no agreement


def test_retrieval_recall_perfect_random_and_chance():
    anchors = [f"a{i}" for i in range(20)]
    positives = [f"p{i}" for i in range(20)]
    ids = {t: i % 20 for i, t in enumerate(anchors + positives)}
    perfect = evaluation.retrieval_recall(lambda ts: torch.eye(20)[[ids[t] for t in ts]],
                                          anchors, positives)  # fmt: skip
    assert perfect == {"recall@1": 1.0, "chance@1": 0.05, "recall@10": 1.0, "chance@10": 0.5}
    # A constant encoder ties every candidate: a tie does not count as found.
    constant = evaluation.retrieval_recall(lambda ts: torch.ones(len(ts), 3), anchors, positives)
    assert constant["recall@1"] == 0.0 and constant["recall@10"] == 0.0
    with pytest.raises(ValueError, match="anchors"):
        evaluation.retrieval_recall(lambda ts: torch.ones(len(ts), 3), anchors, positives[:-1])


def test_heldout_pairs_come_from_articles_the_training_documents_never_hold():
    from chapter20.capstone.views import training_documents

    anchors, positives = evaluation.heldout_sentence_pairs(limit=300)
    assert len(anchors) == len(positives) == 300
    training = "\n".join(" ".join(doc) for doc in training_documents(("wiki",)))
    for split in ("test", "validation"):
        anchors, _ = evaluation.heldout_sentence_pairs(limit=100, split=split)
        assert sum(a in training for a in anchors) < 5  # only stock phrases may repeat


def test_validation_and_test_pairs_are_disjoint_articles():
    from chapter20.capstone.views import article_splits

    train, validation, test = article_splits()
    assert len(validation) >= 1 and len(test) >= 1
    assert not ({id(a) for a in train} & {id(a) for a in validation + test})
    test_anchors, _ = evaluation.heldout_sentence_pairs(None)
    validation_anchors, _ = evaluation.heldout_sentence_pairs(None, split="validation")
    assert len(set(test_anchors) & set(validation_anchors)) < 5  # stock phrases ("see also")
    with pytest.raises(ValueError, match="split"):
        evaluation.heldout_sentence_pairs(split="train")
    with pytest.raises(ValueError, match="validation_fraction"):
        evaluation.heldout_sentence_pairs(split="validation", validation_fraction=0)


def test_evaluate_scores_reads_a_scorer_and_leaves_undefined_figures_nan():
    anchors = [f"a{i}" for i in range(10)]
    positives = [f"p{i}" for i in range(10)]
    index = {t: i % 10 for i, t in enumerate(anchors + positives)}

    def identity(queries, candidates):
        return np.equal.outer(
            [index.get(q, -1) for q in queries], [index.get(c, -2) for c in candidates]
        ).astype(float)

    out = evaluation.evaluate_scores(identity, (anchors, positives), cosine=False)
    assert out["mrr"] == 1.0 and out["recall@1"] == 1.0
    assert np.isnan(out["lee_pearson"]) and "alignment" not in out
    encoder = evaluation.encoder_scorer(lambda ts: torch.eye(10)[[index[t] for t in ts]])
    np.testing.assert_allclose(encoder(anchors, positives), np.eye(10))


def test_correlations_match_scipy():
    from scipy.stats import pearsonr, spearmanr

    rng = np.random.default_rng(1)
    x = rng.normal(size=500)
    y = np.round(x + rng.normal(size=500), 1)  # ties, as in the human ratings
    assert evaluation._pearson(x, y) == pytest.approx(pearsonr(x, y)[0], abs=1e-12)
    rho = evaluation._pearson(evaluation._ranks(x), evaluation._ranks(y))
    assert rho == pytest.approx(spearmanr(x, y)[0], abs=1e-12)
