"""Tests of chapter20.vocab.bpe (note, topic 3; C30): byte-level BPE, an exact round trip with no
unknown token, sizes against a word vocabulary."""

import numpy as np
import pytest

from chapter20.vocab.bpe import (
    BPE_UNK,
    apply_merges,
    bpe_table,
    learn_merges,
    normalize_text,
    train_bpe,
)


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


def test_word_tokens_spell_a_word_as_inside_a_text(bpe_small):
    for word in ("police", "officers", "unpredictability", "x_y"):
        inside = bpe_small.tokens("the " + word)[len(bpe_small.tokens("the")) :]
        assert bpe_small.word_tokens(word) == inside
        assert bpe_small.word_tokens(word, after_space=False) == bpe_small.tokens(word)
    assert bpe_small.word_tokens("police") != bpe_small.tokens("police")  # "Ġpolice" vs "p"...
    with pytest.raises(ValueError, match="one word"):
        bpe_small.word_tokens("two words")


def _piece_counts(bpe, texts):
    from collections import Counter

    return Counter(piece for text in texts for piece in bpe.pre_tokenize(text))


def test_learn_merges_equals_the_merges_tokenizers_learns(bpe_small, lee_split):
    from tokenizers import pre_tokenizers

    counts = _piece_counts(bpe_small, lee_split[0])
    merges = learn_merges(counts, 600, alphabet=pre_tokenizers.ByteLevel.alphabet())
    assert len(merges) == 600 - 257  # the byte alphabet and [UNK], then one entry per merge
    assert merges == bpe_small.merges  # merge for merge, in the same order
    # min_frequency: a tiny corpus stops early, as tokenizers does.
    tiny = [["abab", "abab", "cd"]]
    expected = train_bpe(tiny, 300, min_frequency=2)
    learnt = learn_merges(_piece_counts(expected, tiny), 300, min_frequency=2)
    assert learnt == expected.merges and learnt[0] == ("a", "b")


def test_apply_merges_spells_every_heldout_piece_as_tokenizers_does(bpe_small, lee_split):
    ranks = {pair: rank for rank, pair in enumerate(bpe_small.merges)}
    pieces = sorted(set(_piece_counts(bpe_small, lee_split[1])))
    assert len(pieces) > 1000
    for piece in pieces:
        expected = [token.value for token in bpe_small.tokenizer.model.tokenize(piece)]
        assert apply_merges(piece, ranks) == expected, piece
    assert apply_merges("Ġzzz", {}) == ["Ġ", "z", "z", "z"]  # no merge: single symbols


@pytest.mark.parametrize(
    "call, error, argument",
    [
        (lambda: learn_merges({"ab": 2}, 0), ValueError, "vocab_size"),
        (lambda: learn_merges({"ab": 2}, 10, min_frequency=-1), ValueError, "min_frequency"),
        (lambda: learn_merges({"ab": 0}, 10), ValueError, "word_counts"),
    ],
)
def test_learn_merges_bad_input(call, error, argument):
    with pytest.raises(error, match=argument):
        call()
