"""Tests for chapter20.vocab.vocabulary and chapter20.labs.nb10_vocab (note, topic 3): pruning, BPE,
PCA."""

import warnings
from collections import Counter

import matplotlib
import numpy as np
import pandas as pd
import pytest
import scipy.sparse
import torch

from chapter20.core import corpora as data
from chapter20.labs import nb10_vocab as vocab_lab
from chapter20.vocab.vocabulary import (
    BPE_UNK,
    bpe_table,
    build_vocab,
    normalize_text,
    pca_compress,
    pruning_table,
    train_bpe,
)

matplotlib.use("Agg")  # figures are only drawn, never shown


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One temporary cache for the module: corpora are parsed once, never into ~/.cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHAPTER20_CACHE", str(tmp_path_factory.mktemp("chapter20-cache")))
        yield


@pytest.fixture(scope="module")
def lee(cache):
    return data.lee_background()


@pytest.fixture(scope="module")
def lee_split(lee):
    return data.train_test_split_articles(lee, 0.2, seed=0)


@pytest.fixture(scope="module")
def bpe_small(lee_split):
    return train_bpe(lee_split[0], 600)


def low_rank_matrix(n=120, d=40, rank=6, noise=0.01, seed=0, dtype=np.float64):
    """A matrix with a clear spectral gap after ``rank`` components, plus an offset mean."""
    rng = np.random.default_rng(seed)
    scales = np.linspace(5.0, 1.0, rank)
    signal = (rng.standard_normal((n, rank)) * scales) @ rng.standard_normal((rank, d))
    return (signal + noise * rng.standard_normal((n, d)) + 3.0).astype(dtype)


def numpy_pca(x, k):
    """Reference: numpy SVD of the centred matrix."""
    centred = x - x.mean(axis=0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    total = (s**2).sum()
    return vt[:k], (s[:k] ** 2) / total, (s[k:] ** 2).sum() / total


def same_up_to_sign(a, b):
    """Max |a - b| after matching each row's sign (SVD's sign is arbitrary)."""
    a, b = np.asarray(a), np.asarray(b)
    signs = np.sign((a * b).sum(axis=1, keepdims=True))
    return np.abs(a - signs * b).max()


# --- pruning ----------------------------------------------------------------------------------


def test_counts_are_exact_and_ranked(lee):
    reference = Counter(t for doc in lee for t in doc)
    vocab = build_vocab(lee, min_count=3)
    assert vocab.total_tokens == sum(reference.values())
    assert vocab.total_types == len(reference)
    assert [int(c) for c in vocab.counts] == [reference[w] for w in vocab.words]
    assert set(vocab.words) == {w for w, c in reference.items() if c >= 3}
    assert all(np.diff(vocab.counts) <= 0)


def test_pruning_is_monotone_in_min_count(lee, lee_split):
    vocabs = [build_vocab(lee, min_count=m) for m in (1, 2, 3, 5, 10, 20)]
    heldout = lee_split[1]
    for small, large in zip(vocabs[1:], vocabs[:-1]):
        assert set(small.words) <= set(large.words)
        # Ranking is by count with stable ties: a pruned vocabulary is a prefix.
        assert large.words[: len(small)] == small.words
        assert small.kept_tokens <= large.kept_tokens
        assert small.matrix_bytes(50) < large.matrix_bytes(50)
        assert small.oov_rate(heldout) >= large.oov_rate(heldout)
    assert vocabs[0].coverage == 1.0


def test_pruned_words_map_to_unk(lee):
    full = build_vocab(lee, min_count=1)
    pruned = build_vocab(lee, min_count=5)
    rare = [w for w, c in zip(full.words, full.counts) if c < 5][:20]
    assert rare
    ids = pruned.encode(rare + ["never-seen-word", pruned.words[0]])
    assert ids.tolist() == [pruned.unk_id] * (len(rare) + 1) + [0]
    assert pruned.unk_id == len(pruned)
    assert pruned.encode(rare, drop_unknown=True).size == 0
    assert pruned.oov_rate(rare + [pruned.words[0]]) == pytest.approx(len(rare) / (len(rare) + 1))


def test_oov_rate_and_matrix_bytes_values():
    vocab = build_vocab([["a", "a", "b", "c"]], min_count=2)
    assert vocab.words == ("a",)
    assert vocab.oov_rate(["a", "b", "z", "a"]) == 0.5
    assert vocab.oov_rate([["a", "b"], ["z", "a"]]) == 0.5  # texts are flattened
    assert vocab.matrix_bytes(10) == 2 * 10 * 4  # one word + the UNK row, float32
    assert vocab.matrix_bytes(10, torch.float16, with_unk=False) == 1 * 10 * 2


def test_pruning_table_rows_equal_build_vocab(lee_split):
    train, heldout = lee_split
    table = pruning_table(train, heldout, (1, 5), dim=8)
    for row in table.itertuples():
        vocab = build_vocab(train, min_count=row.min_count)
        assert row.kept_types == len(vocab)
        assert row.token_coverage == vocab.coverage
        assert row.heldout_oov_rate == vocab.oov_rate(heldout)
        assert row.matrix_bytes == vocab.matrix_bytes(8)
    assert table["matrix_ratio"].iloc[0] == 1.0 and table["matrix_ratio"].iloc[1] < 0.5


def test_bag_of_words_counts():
    vocab = build_vocab([["a", "b", "a", "c"], ["b", "b", "d"]], min_count=1)
    texts = [["a", "a", "x"], ["d", "b", "b", "b"], ["x"]]
    matrix = vocab.bag_of_words(texts)
    assert matrix.shape == (3, len(vocab)) and matrix.is_coalesced()
    dense = matrix.to_dense()
    for row, text in enumerate(texts):
        expected = Counter(t for t in text if t in vocab)
        assert {vocab.words[j]: int(dense[row, j]) for j in dense[row].nonzero()[:, 0]} == expected
    assert vocab.bag_of_words(texts, binary=True).to_dense().max() == 1


@pytest.mark.parametrize(
    "call, error, argument",
    [
        (lambda: build_vocab([["a"]], min_count=0), ValueError, "min_count"),
        (lambda: build_vocab([["a"]], min_count=1.5), TypeError, "min_count"),
        (lambda: build_vocab([["a"]], max_size=0), ValueError, "max_size"),
        (lambda: build_vocab([], min_count=1), ValueError, "texts"),
        (lambda: build_vocab([[], []], min_count=1), ValueError, "texts"),
        (lambda: build_vocab(["a sentence", "as strings"]), TypeError, "texts"),
        (lambda: build_vocab("a sentence"), TypeError, "texts"),
        (lambda: build_vocab([["a"]], min_count=2), ValueError, "min_count=2"),
        (lambda: build_vocab([["a"]], min_count=1).oov_rate([]), ValueError, "tokens"),
        (lambda: build_vocab([["a"]], min_count=1).oov_rate("a"), TypeError, "tokens"),
        (lambda: build_vocab([["a"]], min_count=1).matrix_bytes(0), ValueError, "dim"),
        (lambda: pruning_table([["a"]], [["a"]], (0,)), ValueError, "min_counts"),
        (lambda: pruning_table([["a"]], [], (1,)), ValueError, "heldout_texts"),
    ],
)
def test_vocab_bad_input(call, error, argument):
    with pytest.raises(error, match=argument):
        call()


# --- BPE --------------------------------------------------------------------------------------


def test_bpe_round_trip_on_heldout_text(bpe_small, lee_split):
    heldout = lee_split[1]
    for doc in heldout[:40]:
        assert bpe_small.decode(bpe_small.encode(doc)) == normalize_text(doc)
    assert bpe_small.unk_count(heldout) == 0


def test_bpe_round_trip_normalises_and_never_needs_unk(bpe_small):
    # Upper case, runs of whitespace, characters never seen in training (CJK, emoji): the
    # byte alphabet spells them, so nothing maps to UNK and the round trip is exact.
    text = "  The   CAFÉ served 中文 and 🙂\tcrème brûlée  "
    ids = bpe_small.encode(text)
    assert (
        bpe_small.decode(ids) == normalize_text(text) == "the café served 中文 and 🙂 crème brûlée"
    )
    assert bpe_small.unk_id == 0 and bpe_small.tokenizer.id_to_token(0) == BPE_UNK
    assert bpe_small.unk_count([text]) == 0
    assert ids.dtype == np.int64 and ids.max() < bpe_small.vocab_size


def test_larger_bpe_vocabularies_give_fewer_tokens_per_word(lee_split):
    train, heldout = lee_split
    table = bpe_table(train, heldout, (300, 600, 1200, 2400), dim=16)
    assert list(table["vocab_size"]) == [300, 600, 1200, 2400]
    assert all(np.diff(table["tokens_per_word"]) < 0)
    assert table["tokens_per_word"].min() >= 1.0
    assert (table["heldout_unk_tokens"] == 0).all() and table["roundtrip_exact"].all()
    assert list(table["matrix_bytes"]) == [v * 16 * 4 for v in table["vocab_size"]]
    # A word vocabulary with as many rows loses held-out words that BPE still spells.
    assert (table["word_vocab_oov_rate"] > 0).all()


def test_bpe_is_deterministic_and_reports_actual_size(lee_split):
    train = lee_split[0][:30]
    first, second = train_bpe(train, 100_000), train_bpe(train, 100_000)
    assert first.tokenizer.get_vocab() == second.tokenizer.get_vocab()
    # A small corpus runs out of pairs to merge: the actual size is below the request.
    assert first.requested_size == 100_000 and 257 <= first.vocab_size < 100_000


def test_bpe_tokens_and_corpus(bpe_small):
    pieces = bpe_small.tokens(["police", "officers"])
    assert "".join(pieces).replace("Ġ", " ") == "police officers"
    assert bpe_small.tokenize_corpus([["police", "officers"]]) == [pieces]
    assert bpe_small.tokens_per_word([["police", "officers"]]) == len(pieces) / 2


@pytest.mark.parametrize(
    "call, error, argument",
    [
        (lambda: train_bpe([["a", "b"]], 256), ValueError, "vocab_size"),
        (lambda: train_bpe([], 300), ValueError, "texts"),
        (lambda: train_bpe(["a b c"], 300), TypeError, "texts"),
        (lambda: bpe_table([["a"]], [["a"]], ()), ValueError, "vocab_sizes"),
    ],
)
def test_bpe_bad_input(call, error, argument):
    with pytest.raises(error, match=argument):
        call()


# --- PCA --------------------------------------------------------------------------------------


def test_pca_matches_numpy_svd():
    x = low_rank_matrix()
    result = pca_compress(x, 5)
    components, ratio, tail = numpy_pca(x, 5)
    assert result.method == "exact SVD"
    # float64 throughout: agreement to float64 rounding of an SVD (1e-10).
    assert same_up_to_sign(result.components.numpy(), components) < 1e-10
    np.testing.assert_allclose(result.explained_variance_ratio.numpy(), ratio, atol=1e-12)
    np.testing.assert_allclose(result.mean.numpy(), x.mean(axis=0), atol=1e-12)
    assert result.reconstruction_error(x) == pytest.approx(tail, abs=1e-10)
    # Orthonormal components, largest entry of each positive.
    c = result.components
    assert torch.allclose(c @ c.T, torch.eye(5, dtype=c.dtype), atol=1e-12)
    assert (c.gather(1, c.abs().argmax(1, keepdim=True)) > 0).all()


def test_pca_reconstruction_error_falls_with_k():
    x = low_rank_matrix(n=80, d=30, rank=10, noise=0.3)
    errors = [pca_compress(x, k).reconstruction_error(x) for k in range(1, 31)]
    assert all(b < a for a, b in zip(errors, errors[1:-1]))
    assert errors[-1] == pytest.approx(0.0, abs=1e-12)
    for k, error in zip(range(1, 31), errors):
        assert error == pytest.approx(numpy_pca(x, k)[2], abs=1e-10)


def test_pca_transform_and_inverse():
    x = low_rank_matrix(n=50, d=12, rank=12, noise=0.0)
    full = pca_compress(x, 12)
    z = full.transform(x)
    assert torch.allclose(full.inverse_transform(z), torch.from_numpy(x), atol=1e-10)
    np.testing.assert_allclose(z.var(dim=0).numpy(), full.explained_variance.numpy(), rtol=1e-9)
    assert full.explained_variance_ratio.sum().item() == pytest.approx(1.0, abs=1e-12)
    # Truncation keeps the leading components: the k-component fit is a prefix.
    five = pca_compress(x, 5)
    assert torch.allclose(full.truncated(5).components, five.components, atol=1e-10)


def test_pca_sparse_input_equals_dense():
    rng = np.random.default_rng(1)
    dense = (rng.random((60, 25)) < 0.15) * rng.integers(1, 4, (60, 25)).astype(np.float64)
    reference = pca_compress(dense, 6)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
        csr = torch.from_numpy(dense).to_sparse_csr()
    inputs = {
        "torch COO": torch.from_numpy(dense).to_sparse(),
        "torch CSR": csr,
        "scipy CSR": scipy.sparse.csr_matrix(dense),
    }
    for name, x in inputs.items():
        result = pca_compress(x, 6)
        # Same exact SVD after densifying: equal to float64 rounding.
        assert torch.allclose(result.components, reference.components, atol=1e-10), name
        assert torch.allclose(result.transform(x), reference.transform(dense), atol=1e-10), name
        assert result.reconstruction_error(x) == pytest.approx(
            reference.reconstruction_error(dense), abs=1e-10
        )


def test_randomized_pca_agrees_with_exact():
    x = low_rank_matrix(n=300, d=80, rank=6, noise=0.01)
    exact = pca_compress(x, 6, exact=True)
    sparse = pca_compress(torch.from_numpy(x).to_sparse(), 6, exact=False, seed=3)
    dense = pca_compress(x, 6, exact=False, seed=3)
    assert sparse.method == "randomized SVD (sparse)" and dense.method == "torch.pca_lowrank"
    # A clear spectral gap after 6 components: randomized subspace iteration recovers them to
    # ~(σ7/σ6)^(2·niter+1) ≈ 1e-9 relative; 1e-6 leaves room.
    for approx in (sparse, dense):
        assert same_up_to_sign(approx.components, exact.components) < 1e-6
        assert torch.allclose(
            approx.explained_variance_ratio, exact.explained_variance_ratio, rtol=1e-6
        )


def test_randomized_pca_is_seeded_and_leaves_global_rng_alone():
    x = torch.from_numpy(low_rank_matrix(n=200, d=60, rank=30, noise=0.5)).float()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = pca_compress(x.to_sparse(), 10, exact=False, seed=7)
    b = pca_compress(x.to_sparse(), 10, exact=False, seed=7)
    c = pca_compress(x, 10, exact=False, seed=7)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(a.components, b.components)
    assert c.components.dtype == torch.float32 and a.components.dtype == torch.float32
    # Randomized with few power iterations on a flat spectrum: at most the exact variance.
    exact = pca_compress(x, 10, exact=True)
    assert a.explained_variance_ratio.sum() <= exact.explained_variance_ratio.sum() * (1 + 1e-5)


def test_sparse_randomized_pca_never_densifies():
    # 20,000 × 50,000 would be 4 GB dense; the implicit centring keeps it to the sparse
    # matrix and a few 20,000 × q blocks.
    n, d, nnz = 20_000, 50_000, 60_000
    rng = np.random.default_rng(0)
    indices = torch.from_numpy(np.stack([rng.integers(0, n, nnz), rng.integers(0, d, nnz)]))
    x = torch.sparse_coo_tensor(indices, torch.ones(nnz), (n, d), check_invariants=True)
    result = pca_compress(x, 4, exact=None)
    assert result.method == "randomized SVD (sparse)"
    assert result.components.shape == (4, d)
    assert 0 < result.explained_variance_ratio.sum() < 1


@pytest.mark.parametrize(
    "call, error, argument",
    [
        (lambda: pca_compress(np.ones((5, 3)), 4), ValueError, "k must be <= min"),
        (lambda: pca_compress(np.ones((5, 3)), 0), ValueError, "k must be"),
        (lambda: pca_compress(np.ones((5, 3)), 2.0), TypeError, "k must be"),
        (lambda: pca_compress(np.ones((1, 3)), 1), ValueError, "at least 2 rows"),
        (lambda: pca_compress(np.ones(5), 1), ValueError, "2-D"),
        (lambda: pca_compress([[1.0, 2.0], [3.0, 4.0]], 1), TypeError, "x must be"),
        (lambda: pca_compress(np.array([[1.0, np.nan], [0, 1]]), 1), ValueError, "NaN"),
        (lambda: pca_compress(np.eye(4), 2).transform(np.eye(3)), ValueError, "4 columns"),
        (lambda: pca_compress(np.eye(4), 2).truncated(3), ValueError, "k must be <= 2"),
    ],
)
def test_pca_bad_input(call, error, argument):
    with pytest.raises(error, match=argument):
        call()


# --- experiments (vocab_lab) ------------------------------------------------------------------


def test_pca_quality_curve_with_a_synthetic_score():
    words = [f"w{i}" for i in range(200)]
    vectors = low_rank_matrix(n=200, d=20, rank=4, noise=0.05).astype(np.float32)
    seen = []

    def score(ws, vs):
        # A deterministic stand-in for a word-similarity ρ: cosine of row 0 with row 1.
        assert list(ws) == words
        seen.append(vs)
        return float(vs[0] @ vs[1] / (np.linalg.norm(vs[0]) * np.linalg.norm(vs[1])))

    frame = vocab_lab.pca_quality_curve(words, vectors, [8, 2, 4, 20], score)
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
    vocab_lab.pca_quality_curve(words, vectors, [3, 5], score, space="projected")
    assert [v.shape[1] for v in seen] == [20, 3, 5]
    assert abs(seen[1].mean(axis=0)).max() < 1e-4  # projected codes are centred
    with pytest.raises(ValueError, match="ks must be <="):
        vocab_lab.pca_quality_curve(words, vectors, [21], score)
    with pytest.raises(ValueError, match="space"):
        vocab_lab.pca_quality_curve(words, vectors, [2], score, space="other")


def test_word_tokens_spell_a_word_as_inside_a_text(bpe_small):
    for word in ("police", "officers", "unpredictability", "x_y"):
        inside = bpe_small.tokens("the " + word)[len(bpe_small.tokens("the")) :]
        assert bpe_small.word_tokens(word) == inside
        assert bpe_small.word_tokens(word, after_space=False) == bpe_small.tokens(word)
    assert bpe_small.word_tokens("police") != bpe_small.tokens("police")  # "Ġpolice" vs "p"...
    with pytest.raises(ValueError, match="one word"):
        bpe_small.word_tokens("two words")


def test_compose_word_vectors_averages_subwords(bpe_small):
    pieces = bpe_small.word_tokens("police")
    subwords = sorted(set(pieces))
    vectors = np.arange(len(subwords) * 3, dtype=np.float32).reshape(-1, 3)
    kept, out = vocab_lab.compose_word_vectors(bpe_small, ["police", "zzzq"], subwords, vectors)
    assert kept == ["police"]
    expected = np.mean([vectors[subwords.index(p)] for p in pieces], axis=0)
    np.testing.assert_allclose(out[0], expected, rtol=1e-6)


def test_subword_quality_scores_words_and_subwords_on_the_same_pairs(lee_split):
    train, _ = lee_split
    sentences = list(train)
    options = dict(dim=16, epochs=1, progress=False, threads=1)
    runs = vocab_lab.subword_quality(train, sentences, (300, 600), seeds=(1, 2), **options)
    frame = runs.frame
    assert list(frame.model) == ["words", "bpe 300", "bpe 600"] * 2
    assert list(frame.seed) == [1, 1, 1, 2, 2, 2]
    words = frame[frame.model == "words"]
    # Scored on the pairs the word model knows: the same count for every model of a seed.
    for seed in (1, 2):
        assert frame[frame.seed == seed].same_pairs.nunique() == 1
    assert (frame[frame.model != "words"].oov_pairs <= words.oov_pairs.iloc[0]).all()
    assert len(runs.word_model) == words.rows.iloc[0]
    summary = vocab_lab.subword_summary(frame)
    assert list(summary.index) == ["words", "bpe 300", "bpe 600"]
    assert summary.loc["words", "delta_mean"] == 0 and summary.loc["words", "delta_std"] == 0
    by_seed = frame.set_index(["model", "seed"]).rho_same_pairs
    expected = np.mean([by_seed["bpe 300", s] - by_seed["words", s] for s in (1, 2)])
    assert summary.loc["bpe 300", "delta_mean"] == pytest.approx(expected)
    pairs = frame.same_pairs.min()
    assert summary.loc["words", "chance_sd"] == pytest.approx(1 / np.sqrt(pairs - 1))
    # Trainings two at a time (threads) give the same runs: each is deterministic for its seed.
    parallel = vocab_lab.subword_quality(
        train, sentences, (300, 600), seeds=(1, 2), jobs=2, **options
    )
    columns = [c for c in frame.columns if c != "seconds"]
    pd.testing.assert_frame_equal(parallel.frame[columns], frame[columns])
    with pytest.raises(ValueError, match="seeds"):
        vocab_lab.subword_quality(train, sentences, (300,), seeds=(), **options)
    with pytest.raises(ValueError, match="jobs"):
        vocab_lab.subword_quality(train, sentences, (300,), jobs=0, **options)


@pytest.fixture(scope="module")
def bow(cache):
    with pytest.warns(UserWarning, match="distinct words"):
        small = vocab_lab.bag_of_words_data(100_000, limit_articles=3, test_fraction=0.2)
    data_ = vocab_lab.bag_of_words_data(300, limit_articles=3, test_fraction=0.2)
    assert len(small.vocab) > 300
    return data_, vocab_lab.compress_bag_of_words(data_, 20)


def test_bag_of_words_data(bow):
    data_, _ = bow
    assert data_.input_dim == 300 and data_.n_classes == 3
    assert data_.train.shape[0] == len(data_.train_labels)
    assert data_.train.shape[0] + data_.test.shape[0] == sum(len(a) for a in data.wiki_sentences(3))


def test_projection_equivalence(bow):
    frame = vocab_lab.projection_equivalence(*bow)
    assert len(frame) == 4
    assert (frame["max_abs_diff"] < frame["tolerance"]).all()


def test_sparse_projection_benchmark_bytes(bow):
    data_, compressed = bow
    frame = vocab_lab.sparse_projection_benchmark(
        data_, compressed, out_dim=8, batch_size=16, warmup=0, repeat=1, device="cpu"
    ).set_index("variant")
    v, k, d, c = 300, 20, 8, 3
    head = (d * c + c) * 4
    for raw in ("dense_linear", "embedding_bag"):
        assert frame.loc[raw, "layer_bytes"] == v * d * 4
        assert frame.loc[raw, "gradient_bytes"] == v * d * 4 + head
        assert frame.loc[raw, "optimizer_bytes"] >= 2 * (v * d * 4 + head)  # two moments
    assert frame.loc["embedding_bag_sparse", "gradient_bytes"] < v * d * 4 + head
    for pca in ("pca_online", "pca_precomputed"):
        assert frame.loc[pca, "layer_bytes"] == k * d * 4
        assert frame.loc[pca, "fixed_bytes"] >= k * v * 4
    assert (frame["step_ms"] > 0).all()


def test_projection_accuracy_online_equals_precomputed(bow):
    frame = vocab_lab.projection_accuracy(
        *bow, variants=("pca_online", "pca_precomputed"), epochs=1, batch_size=128, device="cpu"
    )
    online, pre = frame.itertuples()
    assert online.test_accuracy == pre.test_accuracy
    assert online.train_loss == pytest.approx(pre.train_loss, rel=1e-4)
    assert 0 < online.chance_accuracy < 1


def test_break_even_out_dim():
    limits = vocab_lab.break_even_out_dim(10_000, 300)
    assert limits["weights"] == pytest.approx(10_000 * 300 / 9_700)
    assert limits["training_state"] == pytest.approx(limits["weights"] / 4)
    with pytest.raises(ValueError, match="k must be < input_dim"):
        vocab_lab.break_even_out_dim(300, 300)


def test_figures_have_labelled_axes(lee_split, bow):
    import matplotlib.pyplot as plt

    train, heldout = lee_split
    data_, compressed = bow
    figures = [
        vocab_lab.plot_pruning(pruning_table(train, heldout, (1, 5))),
        vocab_lab.plot_bpe(bpe_table(train[:50], heldout[:10], (300, 500))),
        vocab_lab.plot_pca_quality(
            vocab_lab.pca_quality_curve(
                [f"w{i}" for i in range(30)], low_rank_matrix(30, 8), [2, 4], lambda w, v: 0.5
            )
        ),
        vocab_lab.plot_projection(
            vocab_lab.sparse_projection_benchmark(
                data_, compressed, out_dim=4, batch_size=8, warmup=0, repeat=1, device="cpu"
            )
        ),
        vocab_lab.plot_explained_variance(compressed.pca),
    ]
    for fig in figures:
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_ylabel()
        plt.close(fig)
