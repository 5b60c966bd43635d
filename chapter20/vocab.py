"""Vocabulary and dimensionality (the note on efficient embedding training, topic 3).

Every embedding table has one row per vocabulary entry, so the vocabulary decides the size of
the largest matrix of a word-embedding model. This module builds the word vocabulary that
``chapter20.word2vec`` trains on, with the statistics that show what pruning rare words costs
and saves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from chapter20.checks import check_int

__all__ = ["Vocabulary", "build_vocab"]


@dataclass(frozen=True)
class Vocabulary:
    """Words kept by :func:`build_vocab`, most frequent first (note, topic 3).

    ``words[i]`` is the word with id ``i`` and ``counts[i]`` its exact count in the corpus.
    Every pruned or unseen word maps to ``unk_id`` (== ``len(words)``): a model that keeps an
    unknown row has ``len(words) + 1`` rows; word2vec, like gensim, drops unknown words instead.
    """

    words: tuple[str, ...]
    counts: np.ndarray
    min_count: int
    total_tokens: int
    index: dict[str, int] = field(repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.index

    @property
    def unk_id(self) -> int:
        """The id of every word outside the vocabulary (one past the last kept word)."""
        return len(self.words)

    @property
    def kept_tokens(self) -> int:
        """Corpus tokens whose word was kept."""
        return int(self.counts.sum())

    @property
    def coverage(self) -> float:
        """Share of the corpus tokens that the kept words cover (1.0 when nothing is pruned)."""
        return self.kept_tokens / self.total_tokens

    def id_of(self, word: str) -> int:
        """The id of ``word``, or ``unk_id`` when it was pruned or never seen."""
        return self.index.get(word, self.unk_id)

    def encode(self, tokens: Iterable[str], *, drop_unknown: bool = False) -> np.ndarray:
        """Token ids (int64); unknown words become ``unk_id``, or are left out with
        ``drop_unknown=True`` (word2vec's convention)."""
        unk = self.unk_id
        ids = np.fromiter((self.index.get(t, unk) for t in tokens), dtype=np.int64)
        return ids[ids != unk] if drop_unknown else ids


def build_vocab(
    texts: Iterable[Sequence[str]], *, min_count: int = 5, max_size: int | None = None
) -> Vocabulary:
    """The words of ``texts`` seen at least ``min_count`` times, at most ``max_size`` of them.

    Note, topic 3 (pruning rare tokens). Words are ranked by count, ties by first appearance,
    so the result is deterministic. ``texts`` is an iterable of token sequences (sentences or
    documents). Raises ``ValueError`` for ``min_count < 1``, ``max_size < 1``, an empty corpus,
    or a ``min_count`` that removes every word (the error gives the highest count seen).
    """
    min_count = check_int("min_count", min_count, 1)
    if max_size is not None:
        max_size = check_int("max_size", max_size, 1)
    counts: Counter[str] = Counter()
    for text in texts:
        if isinstance(text, str):
            raise TypeError("texts must be an iterable of token sequences, not of strings")
        counts.update(text)
    total = sum(counts.values())
    if total == 0:
        raise ValueError("texts is empty: the corpus has no tokens to build a vocabulary from")
    # Counter keeps first-appearance order and sorted() is stable: ties stay in corpus order.
    ranked = [w for w in sorted(counts, key=counts.__getitem__, reverse=True) if counts[w] >= min_count]
    if not ranked:
        raise ValueError(
            f"min_count={min_count} removes every word: the most frequent word occurs "
            f"{max(counts.values())} times"
        )
    ranked = ranked[:max_size]
    return Vocabulary(
        words=tuple(ranked),
        counts=np.array([counts[w] for w in ranked], dtype=np.int64),
        min_count=min_count,
        total_tokens=total,
        index={w: i for i, w in enumerate(ranked)},
    )
