"""Tests of chapter20.vocab.tokenizers: word and subword ids, specs, padding."""

import numpy as np
import pytest

from chapter20.core.corpora import PAD_ID, UNKNOWN_ID
from chapter20.vocab import tokenizers

DOCS = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "sat"], ["the", "dog", "ran"]]


def test_word_tokenizer_ids_unknown_and_round_trip_through_spec():
    tok = tokenizers.build_tokenizer(DOCS, "word", min_count=1, vocab_size=6)
    assert tok.words[:2] == ("the", "sat")  # most frequent first
    assert tok.vocab_size == 6  # 4 words + padding + unknown
    ids = tok.encode("The zebra sat!")
    assert ids.tolist() == [2, UNKNOWN_ID, 3]
    again = tokenizers.tokenizer_from_spec(tok.spec())
    assert again.encode("the zebra sat").tolist() == ids.tolist()
    assert PAD_ID not in ids


def test_word_tokenizer_min_count():
    tok = tokenizers.build_tokenizer(DOCS, "word", min_count=2)
    assert set(tok.words) == {"the", "sat", "dog"}


def test_subword_tokenizer_reserves_padding_and_round_trips():
    texts = [["police", "said", "the", "fire", "started"]] * 20 + [["firefighters", "said"]] * 5
    tok = tokenizers.build_tokenizer(texts, "bpe", vocab_size=300)
    ids = tok.encode("Police said firefighters")
    assert ids.min() >= 1 and ids.max() < tok.vocab_size
    assert tokenizers.tokenizer_from_spec(tok.spec()).encode("police said").tolist() == (
        tok.encode("police said").tolist()
    )


def test_tokenizer_errors():
    with pytest.raises(ValueError, match="kind"):
        tokenizers.build_tokenizer(DOCS, "char")
    with pytest.raises(ValueError, match="tokenizer spec"):
        tokenizers.tokenizer_from_spec({"kind": "nope"})
    with pytest.raises(TypeError, match="str"):
        tokenizers.build_tokenizer(DOCS, "word", min_count=1).encode(3)


def test_pad_batch():
    out = tokenizers.pad_batch([np.array([5, 6, 7]), np.array([8])], 2)
    assert out.tolist() == [[5, 6], [8, PAD_ID]]
    with pytest.raises(ValueError, match=r"rows\[1\]"):
        tokenizers.pad_batch([np.array([1]), np.array([], dtype=np.int64)])
