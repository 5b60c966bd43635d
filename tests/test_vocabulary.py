"""Tests of chapter20.vocab.vocabulary (note, topic 3; C29): exact counts, pruning rare words,
the OOV rate and the matrix it saves, bag-of-words rows."""

from collections import Counter

import numpy as np
import pytest
import torch

from chapter20.vocab.vocabulary import build_vocab, pruning_table


def test_counts_are_exact_and_ranked(lee_background):
    reference = Counter(t for doc in lee_background for t in doc)
    vocab = build_vocab(lee_background, min_count=3)
    assert vocab.total_tokens == sum(reference.values())
    assert vocab.total_types == len(reference)
    assert [int(c) for c in vocab.counts] == [reference[w] for w in vocab.words]
    assert set(vocab.words) == {w for w, c in reference.items() if c >= 3}
    assert all(np.diff(vocab.counts) <= 0)


def test_pruning_is_monotone_in_min_count(lee_background, lee_split):
    vocabs = [build_vocab(lee_background, min_count=m) for m in (1, 2, 3, 5, 10, 20)]
    heldout = lee_split[1]
    for small, large in zip(vocabs[1:], vocabs[:-1]):
        assert set(small.words) <= set(large.words)
        # Ranking is by count with stable ties: a pruned vocabulary is a prefix.
        assert large.words[: len(small)] == small.words
        assert small.kept_tokens <= large.kept_tokens
        assert small.matrix_bytes(50) < large.matrix_bytes(50)
        assert small.oov_rate(heldout) >= large.oov_rate(heldout)
    assert vocabs[0].coverage == 1.0


def test_pruned_words_map_to_unk(lee_background):
    full = build_vocab(lee_background, min_count=1)
    pruned = build_vocab(lee_background, min_count=5)
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
        (lambda: build_vocab([["a"]], min_count=1, max_size=0), ValueError, "max_size"),
        (lambda: build_vocab([], min_count=1), ValueError, "texts"),
        (lambda: build_vocab([[], []], min_count=1), ValueError, "texts"),
        (lambda: build_vocab(["a sentence", "as strings"], min_count=1), TypeError, "texts"),
        (lambda: build_vocab("a sentence", min_count=1), TypeError, "texts"),
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
