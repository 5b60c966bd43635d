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
    model = baselines.fit_baseline("bm25_gensim", documents)
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


@pytest.mark.parametrize(("k1", "b"), [(1.2, 0.75), (0.6, 0.25)])
def test_bm25_is_lucenes_bm25_as_bm25s_computes_it(k1, b):
    """Our Lucene BM25 equals an independent implementation, ``bm25s`` (method "lucene"), on
    30 held-out sentence pairs: both fitted on the candidates (their document frequencies and
    mean length), each query's distinct tokens scored against every candidate. bm25s is given
    gensim's tokens as lists, which it indexes as they are (no stemming, no stop words: its
    vocabulary is exactly those tokens). Tolerance 1e-5 relative: bm25s stores its per-term
    scores in float32, ours are float64."""
    import bm25s
    from gensim.utils import simple_preprocess

    from chapter20.capstone.evaluation import heldout_sentence_pairs

    queries, candidates = heldout_sentence_pairs(30)
    tokens = [simple_preprocess(text) for text in candidates]
    assert all(tokens)  # no empty candidate: both sides agree on every length
    ours = baselines.fit_baseline("bm25", tokens, bm25_k1=k1, bm25_b=b).score(queries, candidates)
    reference = bm25s.BM25(method="lucene", k1=k1, b=b)
    reference.index(tokens, show_progress=False)
    assert set(reference.vocab_dict) - {""} == {t for doc in tokens for t in doc}
    expected = np.zeros((len(queries), len(candidates)))
    for i, query in enumerate(queries):
        terms = [t for t in dict.fromkeys(simple_preprocess(query)) if t in reference.vocab_dict]
        if terms:  # a query with no indexed word scores 0 everywhere
            expected[i] = reference.get_scores(terms)
    assert (expected > 0).mean() > 0.5  # most pairs share a word: the comparison has substance
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


def test_bm25_idf_is_never_negative_unlike_gensims_okapi():
    """A word in every document ("sat") still adds a positive weight under Lucene's IDF, where
    gensim's Okapi IDF, log((N - df + 0.5) / (df + 0.5)), is negative and floored to a small
    share of the mean IDF: under ours a candidate holding "sat" beats one without it."""
    documents = [["cat", "sat"], ["dog", "sat", "down"], ["bird", "sat", "high"], ["fish"]]
    texts = [" ".join(d) for d in documents]
    ours = baselines.fit_baseline("bm25", documents).score(["sat"], texts)[0]
    assert (ours[:3] > 0).all() and ours[3] == 0.0
    # Lucene's IDF of a word in 3 of 4 documents: ln(1 + (4 - 3 + 0.5) / (3 + 0.5)) > 0.
    lengths = np.array([len(d) for d in documents], float)
    idf = math.log1p(1.5 / 3.5)
    norm = 1.2 * (1 - 0.75 + 0.75 * lengths[:3] / lengths.mean())
    np.testing.assert_allclose(ours[:3], idf / (1 + norm), rtol=1e-12)
    gensim_idf = math.log((4 - 3 + 0.5) / (3 + 0.5))
    assert gensim_idf < 0


def test_bm25_and_tfidf_settings_are_chosen_on_validation_mrr(background):
    """Each study marks exactly one row, the highest validation MRR, and chosen_settings reads
    that row back as fit_baseline's keyword arguments."""
    grid = baselines.bm25_grid_study(background, k1s=(0.3, 1.2), bs=(0.25, 1.0))
    assert len(grid) == 4 and grid["chosen"].sum() == 1
    assert grid.loc[grid["chosen"], "mrr"].item() == grid["mrr"].max()
    schemes = baselines.tfidf_scheme_study(background)
    assert schemes["scheme"].tolist() == list(baselines.TFIDF_SCHEMES)
    assert schemes["chosen"].sum() == 1
    assert schemes.loc[schemes["chosen"], "mrr"].item() == schemes["mrr"].max()
    chosen = baselines.chosen_settings("tfidf", background, study=schemes)
    assert chosen == {"tfidf_scheme": schemes.loc[schemes["chosen"], "scheme"].item()}
    best = grid.loc[grid["chosen"]].iloc[0]
    chosen_bm25 = baselines.chosen_settings("bm25", background, study=grid)
    assert chosen_bm25 == {"bm25_k1": best["k1"], "bm25_b": best["b"]}
    # A baseline's settings are the keyword arguments that fit it again.
    assert baselines.fit_baseline("tfidf", background, **chosen).settings == chosen
    assert baselines.fit_baseline("bm25", background, **chosen_bm25).settings == chosen_bm25


def test_bm25_and_tfidf_bad_settings_are_refused(background):
    with pytest.raises(ValueError, match="tfidf_scheme"):
        baselines.fit_baseline("tfidf", background, tfidf_scheme="xyz")
    for b in (-0.1, 1.5):
        with pytest.raises(ValueError, match="bm25_b"):
            baselines.fit_baseline("bm25", background, bm25_b=b)
    with pytest.raises(ValueError, match="bm25_k1"):
        baselines.fit_baseline("bm25", background, bm25_k1=-1.0)
