"""Tests of chapter20.capstone.views: training documents, the view sampler, LSA vectors."""

import numpy as np
import pytest
import torch

from chapter20.capstone import views
from chapter20.core.corpora import PAD_ID

DOCS = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "sat"], ["the", "dog", "ran"]]


def test_passages_keep_sentences_whole_and_every_token():
    article = [["a"] * 5, ["b"] * 5, ["c"] * 5, ["d"] * 2]
    passages = views._passages(article, 8)
    assert passages == [["a"] * 5 + ["b"] * 5, ["c"] * 5 + ["d"] * 2]
    assert sum(map(len, passages)) == 17


def test_training_documents_sources():
    lee = views.training_documents(("lee",))
    assert len(lee) == 300
    with pytest.raises(ValueError, match="sources"):
        views.training_documents(("lee", "books"))


def test_idf_weights():
    docs = [np.array([2, 2, 3]), np.array([2, 4])]
    idf = views.idf_weights(docs, 6, offset=0.0, floor=0.01)
    assert idf[PAD_ID] == 0
    assert idf[2] == pytest.approx(0.01)  # in every document: the floor
    assert idf[3] == pytest.approx(np.log(2))
    assert idf[5] == pytest.approx(np.log(2))  # in none: as rare as the rarest
    shifted = views.idf_weights(docs, 6, offset=0.5, floor=0.01)
    assert shifted[3] == pytest.approx(np.log(2) - 0.5)
    with pytest.raises(ValueError, match="floor"):
        views.idf_weights(docs, 6, floor=0)


def _documents(n=12, length=30):
    return [np.arange(1, length + 1) + 100 * i for i in range(n)]


def test_views_are_spans_of_one_distinct_document():
    sampler = views.ViewSampler(_documents(), 8, min_span=4, max_span=10, word_dropout=0.0)
    anchors, positives = sampler.next_batch()
    assert anchors.shape == positives.shape == (8, 10)
    owners = []
    for a, p in zip(anchors, positives):
        a, p = a[a != PAD_ID], p[p != PAD_ID]
        assert 4 <= len(a) <= 10 and 4 <= len(p) <= 10
        assert (a // 100 == a[0] // 100).all() and (p // 100 == a[0] // 100).all()
        assert (a.diff() == 1).all()  # a contiguous span
        owners.append(int(a[0]) // 100)
    assert len(set(owners)) == 8  # no document twice: no false negative in the batch


def test_word_dropout_drops_but_never_empties():
    sampler = views.ViewSampler(_documents(), 12, min_span=1, max_span=20, word_dropout=0.9)
    anchors, _ = sampler.next_batch()
    assert ((anchors != PAD_ID).sum(1) >= 1).all()
    assert (anchors != PAD_ID).sum() < 12 * 20 * 0.5


def test_sampler_resumes_exactly_and_ranks_split_the_global_batch():
    docs = _documents()
    a = views.ViewSampler(docs, 6, seed=3)
    batches = [a.next_batch() for _ in range(4)]
    b = views.ViewSampler(docs, 6, seed=3)
    b.next_batch()
    state = b.state_dict()
    c = views.ViewSampler(docs, 6, seed=3)
    c.load_state_dict(state)
    for expected in batches[1:]:
        got = c.next_batch()
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    halves = [views.ViewSampler(docs, 6, seed=3, rank=r, world_size=2).batch_at(2) for r in (0, 1)]
    assert torch.equal(torch.cat([h[0] for h in halves]), batches[2][0])
    with pytest.raises(ValueError, match="seed"):
        views.ViewSampler(docs, 6, seed=4).load_state_dict(state)


def test_sampler_argument_checks():
    docs = _documents(4)
    with pytest.raises(ValueError, match="distinct"):
        views.ViewSampler(docs, 5)
    with pytest.raises(ValueError, match="max_span"):
        views.ViewSampler(docs, 2, min_span=8, max_span=4)
    with pytest.raises(ValueError, match="word_dropout"):
        views.ViewSampler(docs, 2, word_dropout=1.0)
    with pytest.raises(ValueError, match="divisible"):
        views.ViewSampler(docs, 3, world_size=2)


def test_lsa_word_vectors_span_the_documents_topics():
    # Two topics with disjoint words: words of one topic get similar vectors, unlike the other's.
    docs = [np.array([2, 3, 4, 2])] * 5 + [np.array([5, 6, 7, 5])] * 5
    weights = torch.ones(8)
    vectors = views.lsa_word_vectors(docs, weights, 2, seed=0)
    assert vectors.shape == (8, 2)
    assert vectors[0].abs().max() == 0 and vectors[1].abs().max() == 0  # ids no document holds
    unit = torch.nn.functional.normalize(vectors[2:], dim=1)
    cos = unit @ unit.T
    assert cos[0, 1] > 0.99 and abs(cos[0, 3]) < 1e-4
    assert torch.equal(vectors, views.lsa_word_vectors(docs, weights, 2, seed=0))
    with pytest.raises(ValueError, match="dim"):
        views.lsa_word_vectors(docs, weights, 11)


def test_fixed_views_repeat_and_random_views_do_not():
    docs = _documents(4, 200)
    fixed = views.ViewSampler(docs, 4, fixed_views=True, seed=1)
    fresh = views.ViewSampler(docs, 4, seed=1)

    def by_document(batch):
        return {int(a[0]) // 100: (a.tolist(), p.tolist()) for a, p in zip(*batch)}

    assert by_document(fixed.batch_at(0)) == by_document(fixed.batch_at(1))
    assert by_document(fresh.batch_at(0)) != by_document(fresh.batch_at(1))
