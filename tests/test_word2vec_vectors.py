"""Tests for chapter20.word2vec.vectors (note, topic 1): word vectors' lookup and neighbours,
and word-pair evaluation, as gensim computes them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chapter20.core.corpora import word_similarity_path
from chapter20.vocab.vocabulary import build_vocab
from chapter20.word2vec.corpus import corpus_sentences
from chapter20.word2vec.vectors import WordVectors, evaluate_word_pairs


def test_word_vectors_lookup_and_neighbours_match_gensim():
    gen = np.random.default_rng(0)
    words = tuple(f"w{i}" for i in range(50))
    wv = WordVectors(words, gen.standard_normal((50, 6)).astype(np.float32))
    kv = wv.to_gensim()
    assert np.array_equal(wv["w3"], kv["w3"])
    assert math.isclose(wv.similarity("w1", "w2"), float(kv.similarity("w1", "w2")), abs_tol=1e-6)
    ours = wv.most_similar("w7", topn=5)
    theirs = kv.most_similar("w7", topn=5)
    assert [w for w, _ in ours] == [w for w, _ in theirs]
    assert np.allclose([s for _, s in ours], [s for _, s in theirs], atol=1e-6)
    with pytest.raises(KeyError):
        wv["nope"]


@pytest.mark.parametrize("name", ["wordsim353", "simlex999"])
def test_evaluate_word_pairs_equals_gensims(name):
    # Random vectors over the real vocabulary, plus a case variant: only the mechanics matter.
    vocab = build_vocab(corpus_sentences("wiki+lee"), min_count=5)
    words = list(vocab.words) + ["Tiger"]
    vectors = np.random.default_rng(1).standard_normal((len(words), 20)).astype(np.float32)
    ours = evaluate_word_pairs(words, vectors, name)
    kv = WordVectors(tuple(words), vectors).to_gensim()
    pearson, spearman, oov = kv.evaluate_word_pairs(word_similarity_path(name))
    assert ours.oov_ratio == pytest.approx(oov, abs=1e-12)
    # Cosines in float64 here and float32 in gensim: ranks, hence ρ, agree to rounding.
    assert ours.spearman == pytest.approx(spearman.statistic, abs=1e-6)
    assert ours.pearson == pytest.approx(pearson.statistic, abs=1e-5)
    assert 0 < ours.oov_pairs < ours.pairs
    strict = evaluate_word_pairs(words, vectors, name, case_insensitive=False)
    _, spearman, oov = kv.evaluate_word_pairs(word_similarity_path(name), case_insensitive=False)
    assert strict.oov_ratio == pytest.approx(oov) and strict.spearman == pytest.approx(
        spearman.statistic, abs=1e-6
    )


def test_evaluate_word_pairs_rejects_bad_input():
    with pytest.raises(ValueError, match="vectors"):
        evaluate_word_pairs(["a", "b"], np.zeros((3, 4)))
    with pytest.raises(ValueError, match="no pair"):
        evaluate_word_pairs(["qqqq", "zzzz"], np.ones((2, 4)))
    with pytest.raises(ValueError, match="name"):
        evaluate_word_pairs(["a"], np.ones((1, 4)), "nope")
