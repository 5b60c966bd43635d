"""Tests for chapter20.word2vec.corpus and chapter20.word2vec.sampling (note, topic 1): the real
corpus, skip-gram pairs and windows, gensim's subsampling and the noise sampler."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from word2vec_helpers import zipf_counts

from chapter20.vocab.vocabulary import build_vocab
from chapter20.word2vec.corpus import corpus_sentences, encode_corpus
from chapter20.word2vec.sampling import (
    NoiseSampler,
    keep_probabilities,
    noise_distribution,
    skipgram_pairs,
    skipgram_windows,
)


def test_corpus_sentences():
    lee = corpus_sentences("lee")
    assert len(lee) == 300
    both = corpus_sentences("wiki+lee")
    assert both[-300:] == lee
    with pytest.raises(ValueError, match="name"):
        corpus_sentences("wiki-2")


def _unique_word_corpus():
    # Every token distinct, so with min_count=1 a word's id is its position in the corpus.
    lengths = [5, 1, 8, 3, 12]
    sentences, k = [], 0
    for length in lengths:
        sentences.append([f"w{k + i}" for i in range(length)])
        k += length
    vocab = build_vocab(sentences, min_count=1)
    return sentences, vocab, encode_corpus(sentences, vocab)


def test_skipgram_pairs_stay_in_sentences_and_windows_in_corpus_order():
    sentences, vocab, corpus = _unique_word_corpus()
    assert corpus.ids.tolist() == list(range(sum(map(len, sentences))))
    sentence_of = corpus.sentence
    for window in (1, 2, 5):
        gen = torch.Generator().manual_seed(window)
        inputs, outputs, kept = skipgram_pairs(corpus, window, None, gen)
        assert kept == len(corpus.ids)
        assert torch.all(sentence_of[inputs] == sentence_of[outputs])
        distance = (inputs - outputs).abs()
        assert distance.min() >= 1 and distance.max() <= window
        assert torch.all(outputs[1:] >= outputs[:-1])  # corpus order of the predicted word
        # a position's window is the same on both sides: 2 * b pairs away from sentence ends
        if window == 1:
            assert len(inputs) == 2 * sum(len(s) - 1 for s in sentences)


def test_skipgram_windows_hold_exactly_the_pairs(lee):
    vocab = build_vocab(lee, min_count=5)
    corpus = encode_corpus(lee, vocab)
    keep = torch.as_tensor(keep_probabilities(vocab.counts, 1e-3))
    inputs, outputs, kept = skipgram_pairs(corpus, 5, keep, torch.Generator().manual_seed(3))
    pad = len(vocab)
    windows = skipgram_windows(corpus, 5, keep, torch.Generator().manual_seed(3), pad)
    window_outputs, contexts, pairs, kept_too = windows
    used = contexts != pad
    assert pairs == len(inputs) and kept_too == kept and contexts.shape[1] == 10
    assert torch.equal(window_outputs.repeat_interleave(used.sum(1)), outputs)
    assert torch.equal(contexts[used], inputs)
    assert used.any(1).all()


def test_skipgram_pairs_draw_every_window_size_and_are_deterministic():
    sentences = [[f"w{i}" for i in range(400)]]
    vocab = build_vocab(sentences, min_count=1)
    corpus = encode_corpus(sentences, vocab)
    first = skipgram_pairs(corpus, 4, None, torch.Generator().manual_seed(0))
    again = skipgram_pairs(corpus, 4, None, torch.Generator().manual_seed(0))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    inputs, outputs, _ = first
    reach = torch.zeros(400, dtype=torch.int64).scatter_reduce_(
        0, outputs, (inputs - outputs).abs(), "amax", include_self=False
    )
    interior = reach[4:-4]
    assert set(interior.tolist()) == {1, 2, 3, 4}  # b ~ U{1..window}
    counts = torch.bincount(outputs, minlength=400)[4:-4]
    assert torch.equal(counts, 2 * interior)  # symmetric window around each word


def test_keep_probabilities_are_gensims(lee):
    from gensim.models import Word2Vec

    model = Word2Vec(sg=1, min_count=5, sample=1e-3, vector_size=8)
    model.build_vocab(lee)
    vocab = build_vocab(lee, min_count=5)
    ours = keep_probabilities(vocab.counts, 1e-3)
    index = [model.wv.key_to_index[w] for w in vocab.words]
    theirs = np.array([model.wv.get_vecattr(i, "sample_int") for i in index]) / (2**32 - 1)
    assert np.allclose(ours, theirs, atol=1e-9)  # gensim stores them as uint32
    assert ours.min() < 0.5 and ours.max() == 1.0
    assert np.all(keep_probabilities(vocab.counts, 0) == 1)
    with pytest.raises(ValueError, match="sample"):
        keep_probabilities(vocab.counts, -1e-3)


def test_subsampling_keeps_each_word_with_its_probability():
    counts = zipf_counts(20, total=20000)
    sentences = [[f"w{i}"] * int(c) for i, c in enumerate(counts)]
    vocab = build_vocab(sentences, min_count=1)
    corpus = encode_corpus(sentences, vocab)
    keep = torch.as_tensor(keep_probabilities(vocab.counts, 1e-2))
    _, _, kept = skipgram_pairs(corpus, 2, keep, torch.Generator().manual_seed(0))
    expected = float((keep.numpy() * vocab.counts).sum())
    # Binomial noise: well within 5 standard deviations.
    assert abs(kept - expected) < 5 * math.sqrt(expected)


def test_noise_sampler_follows_unigram_to_the_three_quarters():
    counts = zipf_counts(30)
    p = noise_distribution(counts)
    assert np.allclose(p, counts**0.75 / (counts**0.75).sum())
    sampler = NoiseSampler(p)
    draws = sampler.sample(400_000, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=30).double() / len(draws)
    # 400K draws: the standard error of each frequency is below 8e-4.
    assert torch.allclose(freq, torch.as_tensor(p), atol=4e-3)
    first = sampler.sample(1000, torch.Generator().manual_seed(7))
    assert torch.equal(first, sampler.sample(1000, torch.Generator().manual_seed(7)))
