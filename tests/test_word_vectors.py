"""Tests for chapter20.vocab.word_vectors (note, topic 3): PCA of word vectors scored at each k
(C28 applied to embeddings) and word vectors composed from BPE subwords' (C30)."""

import numpy as np
import pytest

from chapter20.vocab.word_vectors import compose_word_vectors, pca_quality_curve


def test_pca_quality_curve_with_a_synthetic_score(low_rank_matrix):
    words = [f"w{i}" for i in range(200)]
    vectors = low_rank_matrix(n=200, d=20, rank=4, noise=0.05).astype(np.float32)
    seen = []

    def score(ws, vs):
        # A deterministic stand-in for a word-similarity ρ: cosine of row 0 with row 1.
        assert list(ws) == words
        seen.append(vs)
        return float(vs[0] @ vs[1] / (np.linalg.norm(vs[0]) * np.linalg.norm(vs[1])))

    frame = pca_quality_curve(words, vectors, [8, 2, 4, 20], score)
    assert [v.shape[1] for v in seen] == [20] * 5  # reconstructed: back in 20 dims
    assert list(frame["k"]) == [20, 2, 4, 8, 20]
    assert list(frame["compressed"]) == [False, True, True, True, True]
    variance = frame.loc[frame["compressed"], "explained_variance"].to_numpy()
    assert all(np.diff(variance) > 0) and variance[-1] == pytest.approx(1.0, abs=1e-5)
    assert variance[1] > 0.99  # four signal components
    # k = d reconstructs the vectors: same vectors (float32 rounding), same score.
    np.testing.assert_allclose(seen[-1], vectors, atol=1e-4)
    assert frame["score"].iloc[-1] == pytest.approx(frame["score"].iloc[0], abs=1e-5)
    assert list(frame["matrix_bytes"]) == [200 * k * 4 for k in (20, 2, 4, 8, 20)]
    assert list(frame["projection_bytes"]) == [0] + [(k * 20 + 20) * 4 for k in (2, 4, 8, 20)]

    seen.clear()
    pca_quality_curve(words, vectors, [3, 5], score, space="projected")
    assert [v.shape[1] for v in seen] == [20, 3, 5]
    assert abs(seen[1].mean(axis=0)).max() < 1e-4  # projected codes are centred
    with pytest.raises(ValueError, match="ks must be <="):
        pca_quality_curve(words, vectors, [21], score)
    with pytest.raises(ValueError, match="space"):
        pca_quality_curve(words, vectors, [2], score, space="other")


def test_compose_word_vectors_averages_subwords(bpe_small):
    pieces = bpe_small.word_tokens("police")
    subwords = sorted(set(pieces))
    vectors = np.arange(len(subwords) * 3, dtype=np.float32).reshape(-1, 3)
    kept, out = compose_word_vectors(bpe_small, ["police", "zzzq"], subwords, vectors)
    assert kept == ["police"]
    expected = np.mean([vectors[subwords.index(p)] for p in pieces], axis=0)
    np.testing.assert_allclose(out[0], expected, rtol=1e-6)
