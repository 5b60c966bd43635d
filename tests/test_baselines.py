"""Tests of chapter20.capstone.baselines (§20.7): each classic baseline computes what its
reference computes (gensim's LSI projection, the BM25 formula, gensim's TF-IDF figure on Lee),
the LSI size is chosen on the validation pairs, and bad input is refused."""

import math

import numpy as np
import pytest

from chapter20.capstone import baselines
from chapter20.capstone.evaluation import cosine_matrix, lee_score
from chapter20.core.corpora import lee_background, lee_documents


@pytest.fixture(scope="module")
def background():
    return [doc for doc in lee_background() if doc]


def test_lsi_is_gensims_lsi_projection(background):
    """Our exact SVD and gensim's LsiModel give the same document cosines on the Lee set, to
    1e-3: gensim's stochastic SVD run to convergence (several passes, 6 power iterations, 200
    extra directions; its default single pass is off by up to 0.075 here)."""
    from gensim.corpora import Dictionary
    from gensim.models import LsiModel, TfidfModel
    from gensim.utils import simple_preprocess

    topics = 20
    ours = baselines.fit_baseline("lsi", background, lsi_topics=topics)
    documents = lee_documents()
    dictionary = Dictionary(background)
    tfidf = TfidfModel(dictionary=dictionary)
    corpus = [tfidf[dictionary.doc2bow(d)] for d in background]
    lsi = LsiModel(
        corpus,
        id2word=dictionary,
        num_topics=topics,
        random_seed=0,
        onepass=False,
        power_iters=6,
        extra_samples=200,
    )
    vectors = np.zeros((len(documents), topics))
    for i, text in enumerate(documents):
        for j, value in lsi[tfidf[dictionary.doc2bow(simple_preprocess(text))]]:
            vectors[i, j] = value
    np.testing.assert_allclose(ours.score(documents, documents), cosine_matrix(vectors), atol=1e-3)


def test_bm25_scores_are_the_okapi_formula():
    documents = [["cat", "sat", "mat"], ["dog", "sat"], ["cat", "cat", "ran", "far", "away"]]
    model = baselines.fit_baseline("bm25", documents)
    assert not model.cosine
    scores = model.score(["cat sat"], [" ".join(d) for d in documents])
    k1, b, epsilon = 1.5, 0.75, 0.25
    n, avgdl = len(documents), np.mean([len(d) for d in documents])
    df = {"cat": 2, "sat": 2}
    raw = {t: math.log((n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
    vocabulary_idf = [
        math.log((n - f + 0.5) / (f + 0.5)) for f in (2, 2, 1, 1, 1, 1, 1)
    ]  # cat sat mat dog ran far away
    floor = epsilon * np.mean(vocabulary_idf)
    idf = {t: v if v > 0 else floor for t, v in raw.items()}  # gensim's floor for common words
    expected = []
    for doc in documents:
        total = 0.0
        for term in ("cat", "sat"):
            tf = doc.count(term)
            total += idf[term] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / avgdl))
        expected.append(total)
    np.testing.assert_allclose(scores[0], expected, rtol=1e-5)


def test_tfidf_on_lee_background_is_gensims_figure(background):
    # Deterministic (no randomness in TF-IDF): the figure this machine measured, to 3 decimals.
    model = baselines.fit_baseline("tfidf", background)
    documents = lee_documents()
    score = lee_score(model.score(documents, documents))
    assert score.pearson == pytest.approx(0.5464, abs=5e-4)
    assert score.spearman == pytest.approx(0.2380, abs=5e-4)


def test_a_text_with_no_known_word_ties_with_everything(background):
    model = baselines.fit_baseline("lsi", background, lsi_topics=10)
    scores = model.score(["zzzz qqqq"], ["the fire", "the rain"])
    assert scores.tolist() == [[0.0, 0.0]]


def test_lsi_size_is_chosen_on_validation_mrr(background):
    study = baselines.lsi_size_study(background, sizes=(10, 50, 1000))
    assert study["topics"].tolist() == [10, 50]  # 1000 > the 300 documents' rank: dropped
    assert study["chosen"].sum() == 1
    assert study.loc[study["chosen"], "mrr"].item() == study["mrr"].max()


def test_corpora_and_bad_input(background):
    assert len(baselines.corpus_documents("lee_background")) == len(background)
    with pytest.raises(ValueError, match="corpus"):
        baselines.corpus_documents("books")
    with pytest.raises(ValueError, match="method"):
        baselines.fit_baseline("glove", background)
    with pytest.raises(ValueError, match="documents"):
        baselines.fit_baseline("tfidf", [])
    with pytest.raises(ValueError, match="lsi_topics"):
        baselines.fit_baseline("lsi", background, lsi_topics=301)
    with pytest.raises(TypeError, match="seed"):
        baselines.fit_baseline("doc2vec", background, seed=0.5)
