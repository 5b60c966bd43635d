"""Word vocabularies and pruning rare words (the note on efficient embedding training, topic 3;
claim C29).

Every embedding table has one row per vocabulary entry, so the vocabulary decides the size of
the largest matrix of a word-embedding model. :func:`build_vocab` keeps the words seen at least
``min_count`` times (the vocabulary ``chapter20.word2vec.skipgram`` trains on);
:meth:`Vocabulary.oov_rate` and :meth:`Vocabulary.matrix_bytes` say what pruning costs and
saves, :func:`pruning_table` measures both over several thresholds, and
:meth:`Vocabulary.bag_of_words` turns texts into the sparse input of claim C28.

The other two levers of topic 3 are subwords (``chapter20.vocab.bpe``, C30) and compressing
the input dimension (``chapter20.vocab.pca``, C28). The experiments built on them are in
``chapter20.labs.nb10_vocab`` and ``chapter20.labs.nb10_word_vectors``.
"""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from chapter20.core.checks import check_int

# pandas costs every torchrun worker half a second to import; only the tables need it.
if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Vocabulary",
    "build_vocab",
    "count_words",
    "element_bytes",
    "pruning_table",
]


def element_bytes(dtype: torch.dtype) -> int:
    """Bytes of one element of ``dtype`` (note, topic 3): an embedding matrix of ``rows × dim``
    takes ``rows × dim × element_bytes(dtype)``. TypeError for anything but a torch.dtype."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    return torch.empty((), dtype=dtype).element_size()


def _iter_tokens(tokens: Iterable[Any], name: str) -> Iterable[str]:
    """The tokens of ``tokens``: an iterable of tokens, or of token sequences (texts)."""
    if isinstance(tokens, str):
        raise TypeError(f"{name} must be an iterable of tokens or of token lists, not a str")
    for item in tokens:
        if isinstance(item, str):
            yield item
        else:
            yield from item


@dataclass(frozen=True)
class Vocabulary:
    """Words kept by :func:`build_vocab`, most frequent first (note, topic 3).

    ``words[i]`` is the word with id ``i`` and ``counts[i]`` its exact count in the corpus.
    Every pruned or unseen word maps to ``unk_id`` (== ``len(words)``): a model that keeps an
    unknown row has ``len(words) + 1`` rows; word2vec, like gensim, drops unknown words instead.
    ``total_types`` is the number of distinct words in the corpus before pruning (0 when the
    vocabulary was built by hand).
    """

    words: tuple[str, ...]
    counts: np.ndarray
    min_count: int
    total_tokens: int
    index: dict[str, int] = field(repr=False, compare=False)
    total_types: int = 0

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.index

    @classmethod
    def from_counts(
        cls, counts: Counter[str], total: int, min_count: int, max_size: int | None
    ) -> Vocabulary:
        """The words of ``counts`` (:func:`count_words` of a corpus of ``total`` tokens) seen at
        least ``min_count`` times, at most ``max_size`` of them (None: all), ranked as
        :func:`build_vocab` ranks them (note, topic 3). The arguments are taken as they are:
        :func:`build_vocab` is the checked way. ValueError when ``min_count`` removes every word."""
        # Counter keeps first-appearance order and sorted() is stable: ties stay in corpus order.
        ranked = [
            w
            for w in sorted(counts, key=counts.__getitem__, reverse=True)
            if counts[w] >= min_count
        ]
        if not ranked:
            raise ValueError(
                f"min_count={min_count} removes every word: the most frequent word occurs "
                f"{max(counts.values())} times"
            )
        ranked = ranked[:max_size]
        return cls(
            words=tuple(ranked),
            counts=np.array([counts[w] for w in ranked], dtype=np.int64),
            min_count=min_count,
            total_tokens=total,
            index={w: i for i, w in enumerate(ranked)},
            total_types=len(counts),
        )

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
        ids = np.fromiter(map(self.index.get, tokens, repeat(unk)), dtype=np.int64)
        return ids[ids != unk] if drop_unknown else ids

    def oov_rate(self, tokens: Iterable[Any]) -> float:
        """Share of ``tokens`` (held-out text, note topic 3) that map to ``unk_id``.

        ``tokens`` is an iterable of tokens, or of token sequences (texts, articles). A word
        counts as out of vocabulary whether it was pruned or never seen. ``ValueError`` when
        there is no token, ``TypeError`` for a bare string.
        """
        total = unknown = 0
        for token in _iter_tokens(tokens, "tokens"):
            total += 1
            unknown += token not in self.index
        if total == 0:
            raise ValueError("tokens is empty: no held-out token to measure an OOV rate on")
        return unknown / total

    def matrix_bytes(
        self, dim: int, dtype: torch.dtype = torch.float32, *, with_unk: bool = True
    ) -> int:
        """Bytes of an embedding matrix for this vocabulary (note, topic 3; claim C29):
        ``(len(self) + with_unk) × dim × element size of dtype``. Exact for one dense table;
        gradients and optimizer state come on top (Adam: 3 × this again)."""
        dim = check_int("dim", dim, 1)
        return (len(self.words) + int(bool(with_unk))) * dim * element_bytes(dtype)

    def bag_of_words(
        self, texts: Iterable[Sequence[str]], *, binary: bool = False, dtype=torch.float32
    ) -> torch.Tensor:
        """Texts as a sparse ``[len(texts), len(self)]`` COO tensor of word counts (or 0/1
        with ``binary=True``): the sparse one-hot / bag-of-words input of the note's PCA example
        (topic 3, claim C28). Unknown words are left out (a text of unknown words is an
        all-zero row); the result is coalesced and its values sum to the in-vocabulary tokens.
        """
        lengths: list[int] = []
        flat: list[str] = []
        for text in texts:
            if isinstance(text, str):
                raise TypeError("texts must be an iterable of token sequences, not of strings")
            lengths.append(len(text))
            flat.extend(text)
        if not lengths:
            raise ValueError("texts is empty: no document to build a bag-of-words matrix from")
        n, width = len(lengths), len(self.words)
        # One pass over all tokens, then the (row, id) pairs counted at once: np.unique returns
        # them sorted, which is the coalesced order (row-major), with their counts as values.
        ids = self.encode(flat)
        rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
        known = ids != self.unk_id
        keys, counts = np.unique(rows[known] * width + ids[known], return_counts=True)
        indices = torch.from_numpy(np.stack([keys // width, keys % width]))
        matrix = torch.sparse_coo_tensor(
            indices,
            torch.from_numpy(counts).to(dtype),
            (n, width),
            is_coalesced=True,
            check_invariants=True,
        )
        if binary:
            matrix = torch.sparse_coo_tensor(
                matrix.indices(),
                torch.ones_like(matrix.values()),
                matrix.shape,
                is_coalesced=True,
                check_invariants=True,
            )
        return matrix


def count_words(texts: Iterable[Sequence[str]], name: str = "texts") -> Counter[str]:
    """Exact counts of the words of ``texts``, an iterable of token sequences, in order of first
    appearance (note, topic 3): what :func:`build_vocab` ranks, counted once for several
    thresholds by :func:`pruning_table`. TypeError for strings in place of token sequences,
    ValueError for a corpus without tokens; the errors name the argument ``name``."""
    counts: Counter[str] = Counter()
    if isinstance(texts, str):
        raise TypeError(f"{name} must be an iterable of token sequences, not a str")
    for text in texts:
        if isinstance(text, str):
            raise TypeError(f"{name} must be an iterable of token sequences, not of strings")
        counts.update(text)
    if not counts:
        raise ValueError(f"{name} is empty: the corpus has no tokens to build a vocabulary from")
    return counts


def build_vocab(
    texts: Iterable[Sequence[str]], *, min_count: int, max_size: int | None = None
) -> Vocabulary:
    """The words of ``texts`` seen at least ``min_count`` times, at most ``max_size`` of them.

    Note, topic 3 (pruning rare tokens); word2vec's pruning is ``Word2VecConfig.min_count``,
    which its trainers pass. Words are ranked by count, ties by first appearance,
    so the result is deterministic; ``counts`` are exact. ``texts`` is an iterable of token
    sequences (sentences or documents). Raises ``ValueError`` for ``min_count < 1``,
    ``max_size < 1``, an empty corpus, or a ``min_count`` that removes every word (the error
    gives the highest count seen); ``TypeError`` for strings in place of token sequences.
    """
    min_count = check_int("min_count", min_count, 1)
    if max_size is not None:
        max_size = check_int("max_size", max_size, 1)
    counts = count_words(texts)
    return Vocabulary.from_counts(counts, sum(counts.values()), min_count, max_size)


def pruning_table(
    train_texts: Iterable[Sequence[str]],
    heldout_texts: Iterable[Sequence[str]],
    min_counts: Sequence[int] = (1, 2, 3, 5, 10, 20),
    *,
    dim: int = 300,
    dtype: torch.dtype = torch.float32,
) -> pd.DataFrame:
    """What pruning rare words saves and costs, one row per ``min_count`` (note, topic 3;
    claim C29).

    Columns: ``min_count``; ``kept_types`` and ``type_share`` (of the distinct training words);
    ``token_coverage`` (share of training tokens kept); ``heldout_oov_rate`` (share of held-out
    tokens that map to UNK, pruned or never seen); ``matrix_bytes`` (an embedding matrix of
    ``dim`` columns with an UNK row, in ``dtype``) and ``matrix_ratio`` (relative to the first
    row). The corpus is counted once; each row equals ``build_vocab(train_texts, min_count=m)``.
    """
    import pandas as pd

    if isinstance(min_counts, (str, numbers.Number)) or not len(min_counts):
        raise ValueError("min_counts must be a non-empty sequence of ints >= 1")
    min_counts = [check_int("min_counts[i]", m, 1) for m in min_counts]
    dim = check_int("dim", dim, 1)
    counts = count_words(train_texts, "train_texts")
    heldout = list(_iter_tokens(heldout_texts, "heldout_texts"))
    if not heldout:
        raise ValueError("heldout_texts is empty: no held-out token to measure OOV on")
    total = sum(counts.values())
    records = []
    for m in min_counts:
        vocab = Vocabulary.from_counts(counts, total, m, None)
        records.append(
            {
                "min_count": m,
                "kept_types": len(vocab),
                "type_share": len(vocab) / len(counts),
                "token_coverage": vocab.coverage,
                "heldout_oov_rate": vocab.oov_rate(heldout),
                "matrix_bytes": vocab.matrix_bytes(dim, dtype),
            }
        )
    frame = pd.DataFrame(records)
    frame["matrix_ratio"] = frame["matrix_bytes"] / frame["matrix_bytes"].iloc[0]
    return frame
