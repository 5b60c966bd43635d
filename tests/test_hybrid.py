"""§20.7 what a dense encoder adds to BM25 (``chapter20.capstone.hybrid``): the word-overlap
buckets, the per-bucket metrics (every candidate competing), the score fusion and the choice of
its weight on the validation pairs."""

from __future__ import annotations

import numpy as np
import pytest

from chapter20.capstone import hybrid


def test_overlap_buckets_are_none_one_or_two_and_three_or_more():
    buckets = hybrid.overlap_buckets(np.array([0, 1, 2, 3, 7]))
    assert buckets.tolist() == ["0", "1-2", "1-2", "3+", "3+"]
    assert set(buckets) <= set(hybrid.OVERLAP_BUCKETS)


def test_shared_content_words_ignore_stop_words_and_repeats():
    """ "the", "on", "and", "of" are gensim stop words and count for nothing; "cat", said twice
    on each side, counts once; the case is folded as gensim's tokeniser folds it."""
    anchors = ["The cat sat on the mat", "The cat and the dog", "of the and on"]
    positives = ["the CAT and the cat ran", "A dog, a cat and a mat", "on and of the"]
    assert hybrid.content_words(anchors[0]) == {"cat", "sat", "mat"}
    assert hybrid.shared_content_words(anchors, positives).tolist() == [1, 2, 0]
    with pytest.raises(ValueError, match="anchors"):
        hybrid.shared_content_words(anchors, positives[:2])


def test_bucket_metrics_are_the_hand_computed_ranks_over_every_candidate():
    """Four queries, positives on the diagonal; ties count against the positive. By hand:
    query 0 rank 1, query 1 rank 2 (candidate 0 scores higher), query 2 rank 3 (candidate 3
    higher and candidate 0 tied), query 3 rank 4 (all three others higher). Query 3's rank
    counts candidates 0–2, whose queries sit in other buckets: every candidate competes."""
    scores = np.array(
        [
            [0.9, 0.1, 0.2, 0.3],
            [0.8, 0.5, 0.1, 0.2],
            [0.4, 0.1, 0.4, 0.6],
            [0.7, 0.6, 0.5, 0.1],
        ]
    )
    rows = hybrid.bucket_metrics(scores, np.array(["0", "1-2", "0", "3+"]))
    by_bucket = {row["bucket"]: row for row in rows}
    assert [row["bucket"] for row in rows] == list(hybrid.OVERLAP_BUCKETS)
    assert by_bucket["0"]["pairs"] == 2
    assert by_bucket["0"]["mrr"] == pytest.approx((1 + 1 / 3) / 2)
    assert by_bucket["0"]["recall@1"] == pytest.approx(0.5)
    assert by_bucket["1-2"]["mrr"] == pytest.approx(1 / 2) and by_bucket["1-2"]["recall@1"] == 0
    assert by_bucket["3+"]["mrr"] == pytest.approx(1 / 4)
    assert all(row["recall@10"] == 1.0 for row in rows)  # 4 candidates: all within 10
    # A bucket with no pair has no figure (NaN), not a zero.
    empty = {r["bucket"]: r for r in hybrid.bucket_metrics(scores, np.array(["0"] * 4))}
    assert empty["3+"]["pairs"] == 0 and np.isnan(empty["3+"]["mrr"])
    assert empty["0"]["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    with pytest.raises(ValueError, match="buckets"):
        hybrid.bucket_metrics(scores, np.array(["0", "3+"]))


def test_fusion_at_weight_one_is_the_encoder_and_at_zero_the_lexical_method():
    """The fusion standardises each row, which keeps its order: at weight 1 every query ranks
    its candidates as the encoder does, at 0 as the lexical method does (continuous random
    scores: no ties)."""
    rng = np.random.default_rng(0)
    encoder, lexical = rng.normal(size=(6, 9)), 5 + 3 * rng.random((6, 9))
    ranked = lambda scores: np.argsort(scores, axis=1)  # noqa: E731
    np.testing.assert_array_equal(
        ranked(hybrid.fused_scores(encoder, lexical, 1.0)), ranked(encoder)
    )
    np.testing.assert_array_equal(
        ranked(hybrid.fused_scores(encoder, lexical, 0.0)), ranked(lexical)
    )
    assert not np.array_equal(ranked(encoder), ranked(lexical))  # the two weights differ
    # A constant row (a query with no known word) adds nothing instead of dividing by zero.
    flat = hybrid.fused_scores(encoder, np.zeros_like(lexical), 0.5)
    np.testing.assert_array_equal(ranked(flat), ranked(encoder))
    with pytest.raises(ValueError, match="shape"):
        hybrid.fused_scores(encoder, lexical[:, :4], 0.5)
    for weight in (-0.1, 1.5):
        with pytest.raises(ValueError, match="weight"):
            hybrid.fused_scores(encoder, lexical, weight)


def _scorer(matrices: dict[tuple[str, ...], np.ndarray]):
    """A scorer that returns the matrix given for its queries."""
    return lambda queries, candidates: matrices[tuple(queries)]


def test_the_fusion_weight_is_chosen_on_validation_and_reported_on_test():
    """On validation the encoder ranks every positive first by a hair (0.99 for a distractor),
    while BM25 puts the distractor far ahead: any share of BM25 loses the positive, so only
    weight 1.0 reaches validation MRR 1. On test the roles swap (BM25 perfect, the encoder
    ranks every positive 2nd): the weight stays the validation's choice, and the reported test
    MRR is the encoder's 0.5, not the 1.0 that choosing on test would give."""
    n = 6
    validation = ([f"v{i}" for i in range(n)], [f"v{i}+" for i in range(n)])
    test = ([f"t{i}" for i in range(n)], [f"t{i}+" for i in range(n)])
    distractor = np.roll(np.eye(n), 1, axis=1)  # candidate i + 1 for query i
    encoder = _scorer({tuple(validation[0]): np.eye(n) + 0.99 * distractor,
                       tuple(test[0]): 0.5 * np.eye(n) + distractor})  # fmt: skip
    lexical = _scorer({tuple(validation[0]): distractor, tuple(test[0]): np.eye(n)})
    figures = hybrid.hybrid_figures(encoder, lexical, validation, test)
    assert figures["hybrid_weight"] == 1.0
    assert figures["hybrid_mrr"] == pytest.approx(0.5)
    assert figures["hybrid_recall@1"] == 0.0 and figures["hybrid_recall@10"] == 1.0
    # With the encoder's validation margin widened, a mixed weight also ranks every positive
    # first, and the first (smallest) weight of the highest MRR is chosen.
    confident = _scorer({tuple(validation[0]): np.eye(n), tuple(test[0]): np.eye(n)})
    mixed = hybrid.hybrid_figures(confident, lexical, validation, test)
    assert mixed["hybrid_weight"] == 0.6 and mixed["hybrid_mrr"] == 1.0
