"""Tests for chapter20.core.corpora: real corpora, caching, word-similarity sets, synthetic id
streams."""

import math
import warnings

import numpy as np
import pytest
import torch

from chapter20.core import corpora as data
from chapter20.core import id_streams


@pytest.fixture(scope="module")
def cache(test_cache):
    """The run's temporary cache (tests/conftest.py), never the user's ~/.cache."""
    return test_cache


@pytest.fixture(scope="module")
def sentences(cache):
    return data.wiki_sentences()


# --- Wikipedia sample -----------------------------------------------------------------------


def test_wiki_sample_size(sentences):
    # Measured with gensim 4.4: 106 articles, 22,453 sentences, 446,511 tokens (gensim's own
    # WikiCorpus keeps the same 106 articles and 452,944 tokens, short sentences included).
    n_tokens = sum(len(s) for article in sentences for s in article)
    assert 90 <= len(sentences) <= 120
    assert 400_000 <= n_tokens <= 500_000
    assert 18_000 <= sum(map(len, sentences)) <= 27_000


def test_wiki_sentences_are_clean(sentences):
    for article in sentences:
        assert sum(map(len, article)) >= data.ARTICLE_MIN_TOKENS
        for sentence in article:
            assert len(sentence) >= data.SENTENCE_MIN_TOKENS
            # gensim's tokenizer keeps word characters, so "km²" or "iso_" survive: no isalpha.
            assert all(isinstance(t, str) and t == t.lower() and t.strip() == t for t in sentence)
            assert all(2 <= len(t) <= 15 and not t[0].isdigit() for t in sentence)


def test_wiki_no_markup_left(sentences):
    vocab = {t for article in sentences for s in article for t in s}
    # Words of the articles are there; markup that filter_wiki removes is not ("redirect"
    # itself does occur, as an English verb).
    assert {"autism", "anarchism", "the"} <= vocab
    assert not {"nbsp", "infobox", "defaultsort"} & vocab


def test_wiki_articles_and_tokens_are_consistent(sentences):
    articles = data.wiki_articles()
    assert articles == [[t for s in article for t in s] for article in sentences]
    assert data.wiki_tokens() == [t for article in articles for t in article]
    assert data.wiki_articles(limit=3) == articles[:3]
    assert data.wiki_sentences(limit_articles=2) == sentences[:2]


def test_wiki_limit_validation(sentences):
    with pytest.raises(ValueError, match="limit_articles"):
        data.wiki_sentences(limit_articles=0)
    with pytest.raises(TypeError, match="limit"):
        data.wiki_articles(limit=2.5)
    with pytest.warns(UserWarning, match="only 106 articles"):
        assert data.wiki_sentences(limit_articles=10_000) == sentences


def test_second_call_hits_the_cache(sentences, cache, monkeypatch):
    assert len(list(cache.glob("wiki_sentences-*.json.gz"))) == 1

    def no_parse():
        raise AssertionError("parsed again although the cache is warm")

    monkeypatch.setattr(data, "_parse_wiki", no_parse)
    assert data.wiki_sentences() == sentences


def test_cache_version_change_reparses(monkeypatch, tmp_path):
    # A stand-in parser keeps this test fast; the real parse is covered by the tests above.
    monkeypatch.setenv("CHAPTER20_CACHE", str(tmp_path))
    calls = []

    def counting_parse():
        calls.append(1)
        return [[["tiny", "stand", "in"]] * len(calls)]

    monkeypatch.setattr(data, "_parse_wiki", counting_parse)
    assert data.wiki_sentences() == [[["tiny", "stand", "in"]]]
    assert data.wiki_sentences() == [[["tiny", "stand", "in"]]]
    assert len(calls) == 1  # cold, then warm
    monkeypatch.setattr(data, "_CACHE_VERSION", data._CACHE_VERSION + 1)
    assert data.wiki_sentences() == [[["tiny", "stand", "in"]] * 2]
    assert len(calls) == 2  # new processing version: the old cache file is not used
    assert len(list(tmp_path.glob("wiki_sentences-*.json.gz"))) == 2
    assert not list(tmp_path.glob("*.tmp"))  # atomic writes leave no temporary files


def test_unwritable_cache_warns_once(monkeypatch, tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    monkeypatch.setenv("CHAPTER20_CACHE", str(not_a_dir))
    monkeypatch.setattr(data, "_cache_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = data.lee_background()
        second = data.lee_background()
    assert first == second and len(first) == 300
    assert sum("cache unavailable" in str(w.message) for w in caught) == 1


def test_corrupt_cache_file_is_rebuilt(monkeypatch, tmp_path):
    monkeypatch.setenv("CHAPTER20_CACHE", str(tmp_path))
    expected = data.lee_background()
    (path,) = tmp_path.glob("lee_background-*.json.gz")
    path.write_bytes(b"not gzip")
    with pytest.warns(UserWarning, match="unreadable cache file"):
        assert data.lee_background() == expected
    assert data.lee_background() == expected  # rewritten, so read back silently


def test_cache_dir_default(monkeypatch, tmp_path):
    monkeypatch.delenv("CHAPTER20_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert data.cache_dir() == tmp_path / ".cache" / "chapter20"
    assert data.cache_dir().is_dir()


# --- Lee corpus -----------------------------------------------------------------------------


def test_lee_background():
    docs = data.lee_background()
    assert len(docs) == 300
    # Measured: 58,152 tokens, shortest document 43 tokens.
    assert 55_000 <= sum(map(len, docs)) <= 61_000
    assert all(len(doc) >= 20 for doc in docs)
    assert all(t == t.lower() and 2 <= len(t) <= 15 for doc in docs for t in doc)


# --- word similarity ------------------------------------------------------------------------


@pytest.mark.parametrize("name, rows", [("wordsim353", 353), ("simlex999", 999)])
def test_word_similarity(name, rows):
    df = data.word_similarity(name)
    assert list(df.columns) == ["word1", "word2", "score"]
    assert len(df) == rows
    assert df["score"].dtype == np.float64
    assert df["score"].between(0.0, 10.0).all()
    assert (df["word1"] == df["word1"].str.lower()).all()
    assert (df["word2"] == df["word2"].str.lower()).all()
    assert not df.isna().any().any()


def test_word_similarity_known_rows():
    ws = data.word_similarity("wordsim353")
    assert ws.iloc[0].tolist() == ["love", "sex", 6.77]
    assert ((ws.word1 == "jerusalem") & (ws.word2 == "israel")).any()  # "Jerusalem" lowercased
    # The original set lists money–cash twice (9.15 and 9.08); gensim keeps both rows.
    assert ((ws.word1 == "money") & (ws.word2 == "cash")).sum() == 2
    sl = data.word_similarity("simlex999")
    assert sl.iloc[0].tolist() == ["old", "new", 1.58]


@pytest.mark.parametrize("name", ["wordsim353", "simlex999"])
def test_word_similarity_matches_gensim_parsing(name):
    # gensim's evaluate_word_pairs reports the share of pairs with an unknown word among the
    # pairs it read. With a vocabulary of only the first 100 rows' words, that share equals
    # ours exactly only if both parsers read the same rows.
    from gensim.models import KeyedVectors

    df = data.word_similarity(name)
    words = sorted(set(df.word1[:100]) | set(df.word2[:100]))
    kv = KeyedVectors(vector_size=4)
    kv.add_vectors(words, np.random.default_rng(0).normal(size=(len(words), 4)))
    _, _, oov_ratio = kv.evaluate_word_pairs(data.word_similarity_path(name))
    unknown = ~(df.word1.isin(words) & df.word2.isin(words))
    assert 0 < unknown.sum() < len(df)
    assert oov_ratio == pytest.approx(100 * unknown.sum() / len(df), rel=1e-12)


def test_word_similarity_unknown_name():
    with pytest.raises(ValueError, match="simlex999.*wordsim353|wordsim353.*simlex999"):
        data.word_similarity("men3000")
    with pytest.raises(TypeError, match="name"):
        data.word_similarity_path(353)


# --- synthetic id streams -------------------------------------------------------------------


def test_zipf_probabilities_exact():
    p = id_streams.zipf_probabilities(1000, 1.1)
    assert p.dtype == np.float64 and p.shape == (1000,)
    assert math.isclose(p.sum(), 1.0, rel_tol=1e-12)
    assert np.all(np.diff(p) <= 0)
    assert math.isclose(p[0] / p[1], 2**1.1, rel_tol=1e-12)
    np.testing.assert_array_equal(id_streams.zipf_probabilities(7, 0), np.full(7, 1 / 7))
    np.testing.assert_array_equal(id_streams.zipf_probabilities(1, 3.0), [1.0])


@pytest.mark.parametrize("make", [id_streams.uniform_ids, id_streams.zipf_ids])
def test_ids_shape_dtype_range_and_determinism(make):
    ids = make((4, 5), 50, seed=1)
    assert ids.dtype == torch.int64 and ids.shape == (4, 5)
    assert int(ids.min()) >= 0 and int(ids.max()) < 50
    assert torch.equal(ids, make((4, 5), 50, seed=1))
    assert not torch.equal(ids, make((4, 5), 50, seed=2))
    assert make(7, 3).shape == (7,)
    assert make((0, 3), 3).shape == (0, 3)
    assert make(5, 1).tolist() == [0] * 5


def test_ids_do_not_touch_global_rng():
    torch.manual_seed(123)
    np.random.seed(123)
    expected_t, expected_np = torch.rand(3), np.random.rand(3)
    torch.manual_seed(123)
    np.random.seed(123)
    id_streams.zipf_ids(100, 10)
    id_streams.uniform_ids(100, 10)
    assert torch.equal(torch.rand(3), expected_t)
    np.testing.assert_array_equal(np.random.rand(3), expected_np)


def test_zipf_ids_match_probabilities():
    n, v = 200_000, 1000
    p = id_streams.zipf_probabilities(v, 1.1)
    counts = np.bincount(id_streams.zipf_ids(n, v, seed=0).numpy(), minlength=v)
    # Each count is Binomial(n, p_k); 5 binomial standard deviations is far outside chance
    # (the draw is seeded, so this cannot flake) yet catches an off-by-one in the inverse CDF.
    for k in range(10):
        std = math.sqrt(n * p[k] * (1 - p[k]))
        assert abs(counts[k] - n * p[k]) < 5 * std, k
    assert counts[0] == counts.max()


def test_zipf_s0_is_uniform():
    n, v = 100_000, 100
    counts = np.bincount(id_streams.zipf_ids(n, v, s=0, seed=3).numpy(), minlength=v)
    std = math.sqrt(n * (1 / v) * (1 - 1 / v))  # binomial std of one id's count
    assert np.abs(counts - n / v).max() < 5 * std


def test_zipf_large_vocabulary():
    ids = id_streams.zipf_ids(10_000, 10**7, seed=0)
    assert int(ids.min()) >= 0 and int(ids.max()) < 10**7
    assert (ids == 0).float().mean().item() > 0.05  # p[0] ≈ 0.10 for V = 10^7, s = 1.1


@pytest.mark.parametrize(
    "call, exc, arg",
    [
        (lambda: id_streams.zipf_ids(5, 0), ValueError, "num_embeddings"),
        (lambda: id_streams.uniform_ids(5, -3), ValueError, "num_embeddings"),
        (lambda: id_streams.uniform_ids(5, 10.0), TypeError, "num_embeddings"),
        (lambda: id_streams.zipf_ids((2, -1), 10), ValueError, "shape"),
        (lambda: id_streams.zipf_ids((2, 1.5), 10), TypeError, "shape"),
        (lambda: id_streams.uniform_ids("4", 10), TypeError, "shape"),
        (lambda: id_streams.zipf_ids(5, 10, s=-0.5), ValueError, "s must"),
        (lambda: id_streams.zipf_ids(5, 10, s=float("nan")), ValueError, "s must"),
        (lambda: id_streams.zipf_probabilities(10, "1"), TypeError, "s must"),
        (lambda: id_streams.zipf_ids(5, 10, seed=-1), ValueError, "seed"),
        (lambda: id_streams.uniform_ids(5, True), TypeError, "num_embeddings"),
    ],
)
def test_id_stream_validation(call, exc, arg):
    with pytest.raises(exc, match=arg):
        call()


# --- train/test split -----------------------------------------------------------------------


def test_train_test_split_articles():
    articles = [[f"w{i}"] for i in range(50)]
    train, test = data.train_test_split_articles(articles, 0.2, seed=0)
    assert len(test) == 10 and len(train) == 40
    assert sorted(train + test) == sorted(articles)  # a partition, by whole articles
    assert train == [a for a in articles if a in train]  # original order kept
    assert (train, test) == data.train_test_split_articles(articles, 0.2, seed=0)
    assert test != data.train_test_split_articles(articles, 0.2, seed=1)[1]


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_train_test_split_rejects_bad_fraction(fraction):
    with pytest.raises(ValueError, match="test_fraction"):
        data.train_test_split_articles([["a"], ["b"], ["c"]], fraction)


def test_train_test_split_needs_both_sides():
    with pytest.raises(ValueError, match="each side"):
        data.train_test_split_articles([["a"], ["b"], ["c"]], 0.1)
    with pytest.raises(TypeError, match="articles"):
        data.train_test_split_articles("abc", 0.5)


# --- text pairs ------------------------------------------------------------------------------


def test_next_sentence_pairs_do_not_overlap():
    from chapter20.core.corpora import next_sentence_pairs

    articles = [[["a"], ["b"], ["c"], ["d"], ["e"]], [["x"], ["y"]], [["lonely"]]]
    assert next_sentence_pairs(articles) == [(["a"], ["b"]), (["c"], ["d"]), (["x"], ["y"])]


def test_word_vocabulary_and_encoding():
    from chapter20.core.corpora import PAD_ID, UNKNOWN_ID, encode_texts, word_vocabulary

    texts = [["the", "cat", "the"], ["a", "cat"], ["the"]]
    vocabulary = word_vocabulary(texts, max_size=4)
    assert vocabulary == {"the": 2, "cat": 3}  # ids 0 and 1 are padding and unknown
    ids = encode_texts([["the", "dog", "cat"], ["cat"]], vocabulary, max_len=2)
    assert ids.tolist() == [[2, UNKNOWN_ID], [3, PAD_ID]]
    with pytest.raises(ValueError, match=r"texts\[0\] is empty"):
        encode_texts([[]], vocabulary, 2)
    with pytest.raises(ValueError, match="max_size"):
        word_vocabulary(texts, 2)


def test_shuffled_batches_cover_each_epoch_and_drop_the_short_batch():
    from chapter20.core.corpora import shuffled_batches

    batches = shuffled_batches(10, 3, torch.Generator().manual_seed(0))
    epoch = [next(batches) for _ in range(3)]
    assert all(len(b) == 3 for b in epoch)
    assert len(set(torch.cat(epoch).tolist())) == 9  # one row of 10 is left for the next epoch
    assert len(next(batches)) == 3  # the next epoch starts with a fresh full batch
    with pytest.raises(ValueError, match="batch must be <= size"):
        next(shuffled_batches(2, 3, torch.Generator()))


def test_lee_documents_are_the_fifty_unseen_documents():
    from gensim.utils import simple_preprocess

    docs = data.lee_documents()
    assert len(docs) == data.LEE_DOCUMENTS == 50
    assert all(isinstance(d, str) and len(d.split()) > 40 for d in docs)
    assert "Brian Greig" in docs[0]  # the file's first document, read in order
    assert any("\xa3" in d for d in docs)  # the Latin-1 pound sign decoded, not dropped
    background = {" ".join(d) for d in data.lee_background()}
    assert not any(" ".join(simple_preprocess(d)) in background for d in docs)


def test_lee_human_similarity_is_a_symmetric_matrix_of_averaged_ratings():
    m = data.lee_human_similarity()
    assert m.shape == (50, 50)
    np.testing.assert_array_equal(m, m.T)
    np.testing.assert_array_equal(np.diag(m), 1.0)
    upper = m[np.triu_indices(50, 1)]
    assert upper.size == data.LEE_PAIRS == 1225
    assert upper.min() >= 0 and upper.max() <= 1
    assert m[0, 1] == pytest.approx(0.3) and m[1, 0] == pytest.approx(0.3)
