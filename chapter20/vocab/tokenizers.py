"""Tokenisers that travel with a saved encoder (§20.6; note, topic 3): raw text in, int64 ids out.

- :class:`WordTokenizer`: whole words (gensim's ``simple_preprocess``), the words kept by a
  count threshold, every other word the unknown id;
- :class:`SubwordTokenizer`: byte-level BPE subwords (:func:`chapter20.vocab.bpe.train_bpe`),
  so that no word is unknown.

Both reserve id ``PAD_ID`` (0) for padding (:func:`pad_batch`) and describe themselves as a plain
dict (``spec()``) that :func:`tokenizer_from_spec` turns back, which is how an encoder file
(``chapter20.training.encoder_file``) stores them without pickled code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from chapter20.core.checks import check_int
from chapter20.core.corpora import PAD_ID, UNKNOWN_ID

__all__ = [
    "TOKENIZERS",
    "SubwordTokenizer",
    "Tokenizer",
    "WordTokenizer",
    "build_tokenizer",
    "pad_batch",
    "tokenizer_from_spec",
]

#: Tokeniser kinds (:func:`build_tokenizer`).
TOKENIZERS = ("word", "bpe")


def _words(text: str) -> list[str]:
    """The word tokens of a raw text: gensim's ``simple_preprocess`` (lowercase, alphabetic,
    2–15 characters), the tokenisation of ``lee_background`` and of the Lee test set."""
    from gensim.utils import simple_preprocess

    if not isinstance(text, str):
        raise TypeError(f"texts must be str, got {type(text).__name__}")
    return simple_preprocess(text)


# --- tokenisers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class WordTokenizer:
    """Whole-word ids (§20.6): ``words[i]`` has id ``i + 2``; ``PAD_ID`` (0) is padding and
    ``UNKNOWN_ID`` (1) every word not in ``words``."""

    words: tuple[str, ...]

    def __post_init__(self):
        object.__setattr__(self, "_index", {w: i + 2 for i, w in enumerate(self.words)})

    @property
    def vocab_size(self) -> int:
        """Rows of the embedding table (padding and unknown included)."""
        return len(self.words) + 2

    def ids(self, tokens: Sequence[str]) -> np.ndarray:
        """Ids (int64) of already tokenised words."""
        index = self._index
        return np.fromiter((index.get(t, UNKNOWN_ID) for t in tokens), np.int64, len(tokens))

    def encode(self, text: str) -> np.ndarray:
        """Ids of a raw text (tokenised with ``simple_preprocess``)."""
        return self.ids(_words(text))

    def spec(self) -> dict[str, Any]:
        """A plain dict (str and lists only) that :func:`tokenizer_from_spec` turns back."""
        return {"kind": "word", "words": list(self.words)}


@dataclass(frozen=True)
class SubwordTokenizer:
    """Byte-level BPE subword ids (§20.6; note, topic 3) shifted by one so that id 0 is
    padding: subword ``s`` of ``chapter20.vocab.bpe.BPETokenizer`` has id ``s + 1``. Words are
    ``simple_preprocess`` tokens joined by spaces, as for :class:`WordTokenizer`."""

    json: str

    def __post_init__(self):
        from tokenizers import Tokenizer

        object.__setattr__(self, "_tokenizer", Tokenizer.from_str(self.json))

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size() + 1

    def ids(self, tokens: Sequence[str]) -> np.ndarray:
        if not tokens:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self._tokenizer.encode(" ".join(tokens)).ids, dtype=np.int64) + 1

    def encode(self, text: str) -> np.ndarray:
        return self.ids(_words(text))

    def spec(self) -> dict[str, Any]:
        return {"kind": "bpe", "json": self.json}


Tokenizer = WordTokenizer | SubwordTokenizer


def build_tokenizer(
    documents: Sequence[Sequence[str]], kind: str = "word", *, vocab_size: int = 30_000,
    min_count: int = 2,
) -> Tokenizer:  # fmt: skip
    """A tokeniser fitted on the training ``documents`` (token lists) (§20.6).

    ``"word"``: the words seen at least ``min_count`` times, most frequent first (ties by first
    appearance), at most ``vocab_size - 2`` of them. ``"bpe"``: a byte-level BPE vocabulary of
    at most ``vocab_size - 1`` subwords (``chapter20.vocab.bpe.train_bpe``)."""
    if kind not in TOKENIZERS:
        raise ValueError(f"kind must be one of {TOKENIZERS}, got {kind!r}")
    vocab_size = check_int("vocab_size", vocab_size, 3)
    min_count = check_int("min_count", min_count, 1)
    if kind == "bpe":
        from chapter20.vocab.bpe import train_bpe

        return SubwordTokenizer(train_bpe(documents, vocab_size - 1).tokenizer.to_str())
    counts: dict[str, int] = {}
    for document in documents:
        for word in document:
            counts[word] = counts.get(word, 0) + 1
    ranked = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: -counts[w])
    return WordTokenizer(tuple(ranked[: vocab_size - 2]))


def tokenizer_from_spec(spec: dict[str, Any]) -> Tokenizer:
    """The tokeniser that ``spec()`` described (for a saved encoder)."""
    if not isinstance(spec, dict) or spec.get("kind") not in TOKENIZERS:
        raise ValueError(f"not a tokenizer spec (kind must be one of {TOKENIZERS})")
    if spec["kind"] == "word":
        return WordTokenizer(tuple(spec["words"]))
    return SubwordTokenizer(spec["json"])


def pad_batch(rows: Sequence[np.ndarray], length: int | None = None) -> torch.Tensor:
    """``[len(rows), length]`` int64 ids padded with ``PAD_ID`` (``length``: the longest row
    when None; longer rows are cut). A row with no id raises ValueError."""
    if length is None:
        length = max((len(r) for r in rows), default=1)
    length = check_int("length", length, 1)
    out = np.full((len(rows), length), PAD_ID, dtype=np.int64)
    for i, row in enumerate(rows):
        if not len(row):
            raise ValueError(f"rows[{i}] is empty; every text needs at least one token")
        row = row[:length]
        out[i, : len(row)] = row
    return torch.from_numpy(out)
