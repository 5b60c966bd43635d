"""Vocabulary and dimensionality (the note on efficient embedding training, topic 3).

Every embedding table has one row per vocabulary entry, so the vocabulary decides the size of
the largest matrix of a word-embedding model; the input dimension decides the size of a layer
that reads sparse features. This module holds the three levers of topic 3 and what each costs:

- **pruning rare words** (claim C29): :func:`build_vocab` (the vocabulary ``chapter20.word2vec``
  trains on), :meth:`Vocabulary.oov_rate`, :meth:`Vocabulary.matrix_bytes`, :func:`pruning_table`;
- **BPE subwords** (claim C30): :func:`train_bpe` (Hugging Face ``tokenizers``, byte-level, so
  no held-out text can fall out of the vocabulary), :func:`bpe_table`;
- **PCA compression** of dense or sparse inputs (claim C28): :func:`pca_compress`.

The experiments built on them (a 10,000-dim bag-of-words input projected to 300 dims, PCA of
word vectors against word-similarity ρ) are in ``chapter20.labs.nb10_vocab``.
"""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from chapter20.core.checks import check_int

__all__ = [
    "BPE_UNK",
    "BPETokenizer",
    "PCAResult",
    "Vocabulary",
    "bpe_table",
    "build_vocab",
    "normalize_text",
    "pca_compress",
    "pruning_table",
    "train_bpe",
]


# --------------------------------------------------------------------------------------------
# Word vocabulary and pruning (claim C29)
# --------------------------------------------------------------------------------------------


def _element_size(dtype: torch.dtype) -> int:
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
        return (len(self.words) + int(bool(with_unk))) * dim * _element_size(dtype)

    def bag_of_words(
        self, texts: Iterable[Sequence[str]], *, binary: bool = False, dtype=torch.float32
    ) -> torch.Tensor:
        """Texts as a sparse ``[len(texts), len(self)]`` COO tensor of word counts (or 0/1
        with ``binary=True``): the sparse one-hot / bag-of-words input of the note's PCA example
        (topic 3, claim C28). Unknown words are left out (a text of unknown words is an
        all-zero row); the result is coalesced and its values sum to the in-vocabulary tokens.
        """
        rows: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        n = 0
        for n, text in enumerate(texts, start=1):
            if isinstance(text, str):
                raise TypeError("texts must be an iterable of token sequences, not of strings")
            ids = self.encode(text, drop_unknown=True)
            cols.append(ids)
            rows.append(np.full(len(ids), n - 1, dtype=np.int64))
        if n == 0:
            raise ValueError("texts is empty: no document to build a bag-of-words matrix from")
        indices = torch.from_numpy(np.stack([np.concatenate(rows), np.concatenate(cols)]))
        values = torch.ones(indices.shape[1], dtype=dtype)
        matrix = torch.sparse_coo_tensor(
            indices, values, (n, len(self.words)), check_invariants=True
        ).coalesce()
        if binary:
            matrix = torch.sparse_coo_tensor(
                matrix.indices(),
                torch.ones_like(matrix.values()),
                matrix.shape,
                is_coalesced=True,
                check_invariants=True,
            )
        return matrix


def _count_texts(texts: Iterable[Sequence[str]], name: str = "texts") -> Counter[str]:
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


def _vocab_from_counts(
    counts: Counter[str], total: int, min_count: int, max_size: int | None
) -> Vocabulary:
    # Counter keeps first-appearance order and sorted() is stable: ties stay in corpus order.
    ranked = [
        w for w in sorted(counts, key=counts.__getitem__, reverse=True) if counts[w] >= min_count
    ]
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
        total_types=len(counts),
    )


def build_vocab(
    texts: Iterable[Sequence[str]], *, min_count: int = 5, max_size: int | None = None
) -> Vocabulary:
    """The words of ``texts`` seen at least ``min_count`` times, at most ``max_size`` of them.

    Note, topic 3 (pruning rare tokens). Words are ranked by count, ties by first appearance,
    so the result is deterministic; ``counts`` are exact. ``texts`` is an iterable of token
    sequences (sentences or documents). Raises ``ValueError`` for ``min_count < 1``,
    ``max_size < 1``, an empty corpus, or a ``min_count`` that removes every word (the error
    gives the highest count seen); ``TypeError`` for strings in place of token sequences.
    """
    min_count = check_int("min_count", min_count, 1)
    if max_size is not None:
        max_size = check_int("max_size", max_size, 1)
    counts = _count_texts(texts)
    return _vocab_from_counts(counts, sum(counts.values()), min_count, max_size)


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
    if isinstance(min_counts, (str, numbers.Number)) or not len(min_counts):
        raise ValueError("min_counts must be a non-empty sequence of ints >= 1")
    min_counts = [check_int("min_counts[i]", m, 1) for m in min_counts]
    dim = check_int("dim", dim, 1)
    counts = _count_texts(train_texts, "train_texts")
    heldout = list(_iter_tokens(heldout_texts, "heldout_texts"))
    if not heldout:
        raise ValueError("heldout_texts is empty: no held-out token to measure OOV on")
    total = sum(counts.values())
    records = []
    for m in min_counts:
        vocab = _vocab_from_counts(counts, total, m, None)
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


# --------------------------------------------------------------------------------------------
# BPE subwords (claim C30)
# --------------------------------------------------------------------------------------------

BPE_UNK = "[UNK]"
"""The unknown token every :func:`train_bpe` vocabulary holds (id 0). Byte-level BPE never
emits it, because its 256 byte symbols spell any text; it is there so that the zero OOV rate
is a count of this id, measured, rather than an assumption."""

_WHITESPACE = Regex(r"\s+")


def normalize_text(text: str | Sequence[str]) -> str:
    """The text a :class:`BPETokenizer` round-trips exactly (note, topic 3): lower case, runs
    of whitespace replaced by one space, no leading or trailing space. A token sequence is
    joined by single spaces first. ``decode(encode(t)) == normalize_text(t)`` for any ``t``."""
    if not isinstance(text, str):
        if not all(isinstance(t, str) for t in text):
            raise TypeError("text must be a str or a sequence of str tokens")
        text = " ".join(text)
    return " ".join(text.lower().split())


@dataclass(frozen=True)
class BPETokenizer:
    """A byte-level BPE vocabulary trained by :func:`train_bpe` (note, topic 3; claim C30).

    Guarantees: ``decode(encode(text)) == normalize_text(text)`` for every text (byte-level:
    256 byte symbols are in the vocabulary, so nothing is out of vocabulary and ``unk_id`` is
    never produced); ``vocab_size`` is the actual size, which can be below ``requested_size``
    when the corpus runs out of pairs to merge.
    """

    tokenizer: Tokenizer = field(repr=False)
    requested_size: int

    @property
    def vocab_size(self) -> int:
        """Rows of an embedding table for these subwords (special token included)."""
        return self.tokenizer.get_vocab_size()

    @property
    def unk_id(self) -> int:
        """The id of :data:`BPE_UNK` (0); byte-level encoding never produces it."""
        return self.tokenizer.token_to_id(BPE_UNK)

    def _text(self, text: str | Sequence[str]) -> str:
        if isinstance(text, str):
            return text
        if not all(isinstance(t, str) for t in text):
            raise TypeError("text must be a str or a sequence of str tokens")
        return " ".join(text)

    def encode(self, text: str | Sequence[str]) -> np.ndarray:
        """Subword ids (int64) of a text (a str, or a token sequence joined by spaces)."""
        return np.asarray(self.tokenizer.encode(self._text(text)).ids, dtype=np.int64)

    def encode_batch(self, texts: Iterable[str | Sequence[str]]) -> list[np.ndarray]:
        """:meth:`encode` of each text, in parallel (Rust threads)."""
        encodings = self.tokenizer.encode_batch([self._text(t) for t in texts])
        return [np.asarray(e.ids, dtype=np.int64) for e in encodings]

    def tokens(self, text: str | Sequence[str]) -> list[str]:
        """Subword strings of a text (byte-level: a leading ``Ġ`` marks a space)."""
        return self.tokenizer.encode(self._text(text)).tokens

    def word_tokens(self, word: str, *, after_space: bool = True) -> list[str]:
        """Subword strings of one word as BPE spells it inside a text, after a space (the
        spelling almost every occurrence has; ``after_space=False``: at the start of a text).
        Byte-level BPE spells the two differently (``"Ġpolice"`` vs ``"p", "ol", "ice"``), so a
        word's vector composed from its subwords should use this one, not ``tokens(word)``."""
        if not isinstance(word, str):
            raise TypeError(f"word must be a str, got {type(word).__name__}")
        word = normalize_text(word)
        if not word or " " in word:
            raise ValueError(f"word must be one word (no whitespace), got {word!r}")
        text = " " + word if after_space else word
        pieces = self.tokenizer.pre_tokenizer.pre_tokenize_str(text)
        return [
            token.value for piece, _ in pieces for token in self.tokenizer.model.tokenize(piece)
        ]

    def tokenize_corpus(self, texts: Iterable[str | Sequence[str]]) -> list[list[str]]:
        """Each text as a list of subword strings: a corpus that ``build_vocab`` and word2vec
        can train subword embeddings on."""
        encodings = self.tokenizer.encode_batch([self._text(t) for t in texts])
        return [e.tokens for e in encodings]

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """The normalised text of ``ids`` (exact inverse of :meth:`encode`)."""
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def tokens_per_word(self, texts: Iterable[str | Sequence[str]]) -> float:
        """Subword tokens per whitespace-separated word over ``texts`` (1.0 = every word is
        one token; more = longer sequences for the model)."""
        texts = [self._text(t) for t in texts]
        words = sum(len(t.split()) for t in texts)
        if words == 0:
            raise ValueError("texts is empty: no word to count tokens per word on")
        return sum(len(ids) for ids in self.encode_batch(texts)) / words

    def unk_count(self, texts: Iterable[str | Sequence[str]]) -> int:
        """How many subword tokens of ``texts`` are ``unk_id`` (0 by construction; measured)."""
        return int(sum((ids == self.unk_id).sum() for ids in self.encode_batch(texts)))

    def matrix_bytes(self, dim: int, dtype: torch.dtype = torch.float32) -> int:
        """Bytes of an embedding matrix with one row per subword: ``vocab_size × dim × size``."""
        return self.vocab_size * check_int("dim", dim, 1) * _element_size(dtype)


def _texts_as_strings(texts: Iterable[Sequence[str]], name: str) -> list[str]:
    if isinstance(texts, str):
        raise TypeError(f"{name} must be an iterable of token sequences, not a str")
    out = []
    for text in texts:
        if isinstance(text, str):
            raise TypeError(f"{name} must be an iterable of token sequences, not of strings")
        out.append(" ".join(text))
    if not any(out):
        raise ValueError(f"{name} is empty: no text to train or measure BPE on")
    return out


def train_bpe(
    texts: Iterable[Sequence[str]], vocab_size: int, *, min_frequency: int = 2
) -> BPETokenizer:
    """Train a byte-level BPE vocabulary of at most ``vocab_size`` entries on ``texts``
    (note, topic 3; claim C30), in memory, with Hugging Face ``tokenizers``.

    ``texts`` is an iterable of token sequences (as for :func:`build_vocab`); each is joined by
    spaces. The pipeline: normaliser (lower case, whitespace runs → one space, strip), GPT-2's
    byte-level pre-tokeniser and decoder, the 256 byte symbols as initial alphabet and
    :data:`BPE_UNK` as the one special token; pairs seen fewer than ``min_frequency`` times are
    not merged. Training has no randomness: the same texts give the same vocabulary.
    ``vocab_size`` must be >= 257 (the byte alphabet plus UNK) — ``ValueError`` otherwise.
    """
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab_size = check_int("vocab_size", vocab_size, len(alphabet) + 1)
    min_frequency = check_int("min_frequency", min_frequency, 0)
    strings = _texts_as_strings(texts, "texts")
    tokenizer = Tokenizer(models.BPE(unk_token=BPE_UNK))
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Lowercase(), normalizers.Replace(_WHITESPACE, " "), normalizers.Strip()]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[BPE_UNK],
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tokenizer.train_from_iterator(strings, trainer=trainer, length=len(strings))
    return BPETokenizer(tokenizer=tokenizer, requested_size=vocab_size)


def bpe_table(
    train_texts: Iterable[Sequence[str]],
    heldout_texts: Iterable[Sequence[str]],
    vocab_sizes: Sequence[int] = (500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000),
    *,
    dim: int = 300,
    dtype: torch.dtype = torch.float32,
    min_frequency: int = 2,
) -> pd.DataFrame:
    """BPE vocabularies of several sizes trained on ``train_texts`` and measured on
    ``heldout_texts`` (note, topic 3; claim C30), one row per requested size.

    Columns: ``requested_size``, ``vocab_size`` (actual); ``tokens_per_word`` (held out);
    ``heldout_unk_tokens`` and ``heldout_unk_rate`` (UNK ids among the held-out subwords —
    zero by construction, counted); ``roundtrip_exact`` (decode(encode(t)) equals the
    normalised text for every held-out text); ``matrix_bytes`` (``vocab_size × dim``);
    ``word_vocab_oov_rate``: the held-out OOV rate of a *word* vocabulary with the same number
    of embedding rows (the ``vocab_size - 1`` most frequent training words plus an UNK row) —
    what the same matrix bytes buy without subwords.
    """
    if isinstance(vocab_sizes, (str, numbers.Number)) or not len(vocab_sizes):
        raise ValueError("vocab_sizes must be a non-empty sequence of ints >= 257")
    vocab_sizes = [check_int("vocab_sizes[i]", size, 257) for size in vocab_sizes]
    train = [list(t) for t in train_texts]
    heldout = [list(t) for t in heldout_texts]
    heldout_strings = _texts_as_strings(heldout, "heldout_texts")
    dim = check_int("dim", dim, 1)
    counts = _count_texts(train, "train_texts")
    total = sum(counts.values())
    records = []
    for size in vocab_sizes:
        bpe = train_bpe(train, size, min_frequency=min_frequency)
        encoded = bpe.encode_batch(heldout_strings)
        n_tokens = sum(len(ids) for ids in encoded)
        n_unk = int(sum((ids == bpe.unk_id).sum() for ids in encoded))
        exact = all(
            bpe.decode(ids) == normalize_text(text) for ids, text in zip(encoded, heldout_strings)
        )
        words = _vocab_from_counts(counts, total, 1, max(1, bpe.vocab_size - 1))
        records.append(
            {
                "requested_size": bpe.requested_size,
                "vocab_size": bpe.vocab_size,
                "tokens_per_word": n_tokens / sum(len(t.split()) for t in heldout_strings),
                "heldout_unk_tokens": n_unk,
                "heldout_unk_rate": n_unk / n_tokens,
                "roundtrip_exact": exact,
                "matrix_bytes": bpe.matrix_bytes(dim, dtype),
                "word_vocab_oov_rate": words.oov_rate(heldout),
            }
        )
    return pd.DataFrame(records)


# --------------------------------------------------------------------------------------------
# PCA compression (claim C28)
# --------------------------------------------------------------------------------------------

EXACT_MAX_SIDE = 2_000
"""``pca_compress`` uses an exact SVD by default when min(n, d) is at most this ..."""
EXACT_MAX_ELEMENTS = 2**25
"""... and the dense centred matrix has at most this many elements (128 MiB in float32)."""


def _as_matrix(x: Any, name: str) -> tuple[torch.Tensor, bool]:
    """``x`` as a 2-D floating tensor, and whether it is sparse (then a coalesced COO tensor).

    Accepts torch tensors (strided, COO, CSR, CSC), NumPy arrays and SciPy sparse matrices.
    Integer and boolean data become float32, half precisions float32, float64 stays float64.
    """
    if type(x).__module__.startswith("scipy.sparse"):
        coo = x.tocoo()
        indices = torch.from_numpy(np.stack([coo.row, coo.col]).astype(np.int64))
        x = torch.sparse_coo_tensor(
            indices, torch.from_numpy(np.asarray(coo.data)), coo.shape, check_invariants=True
        )
    elif isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    elif not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch tensor (dense or sparse), a NumPy array or a SciPy sparse "
            f"matrix, got {type(x).__name__}"
        )
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D [samples, features], got shape {tuple(x.shape)}")
    if x.is_complex():
        raise TypeError(f"{name} must be real, got {x.dtype}")
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    sparse = x.layout != torch.strided
    if sparse:
        x = (x if x.layout == torch.sparse_coo else x.to_sparse_coo()).coalesce().to(dtype)
        values = x.values()
    else:
        x = x.to(dtype)
        values = x
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return x, sparse


def _sign_fix(components: torch.Tensor) -> torch.Tensor:
    """Make each component's largest-magnitude entry positive: SVD's sign is arbitrary, this
    makes exact, randomized, dense and sparse results comparable (as scikit-learn's svd_flip)."""
    pivot = components.abs().argmax(dim=1, keepdim=True)
    signs = torch.sign(components.gather(1, pivot))
    return components * torch.where(signs == 0, torch.ones_like(signs), signs)


def _centred_sq_norm(x: torch.Tensor, sparse: bool, mean: torch.Tensor) -> float:
    """‖x − 1·meanᵀ‖²_F in float64, without densifying a sparse ``x``."""
    if not sparse:
        return float(((x.double() - mean.double()) ** 2).sum())
    n = x.shape[0]
    col_sums = torch.sparse.sum(x, dim=0).to_dense().double()
    mean64 = mean.double()
    sq = float((x.values().double() ** 2).sum())
    return sq - 2 * float(col_sums @ mean64) + n * float(mean64 @ mean64)


def _orth(y: torch.Tensor, passes: int = 2) -> torch.Tensor:
    """An orthonormal basis of the columns of a tall float64 ``y``: CholeskyQR (``y L⁻ᵀ`` with
    ``LLᵀ = yᵀy``), several times faster than Householder QR on CPUs. Two passes make the
    basis orthonormal to float64 rounding (CholeskyQR2); one pass is enough between power
    iterations, which only need a well-conditioned basis. QR is the fallback when ``y`` is too
    ill-conditioned for Cholesky."""
    for _ in range(passes):
        factor, info = torch.linalg.cholesky_ex(y.T @ y)
        if int(info) != 0:
            return torch.linalg.qr(y).Q
        y = torch.linalg.solve_triangular(factor.T, y, upper=True, left=False)
    eye = torch.eye(y.shape[1], dtype=y.dtype, device=y.device)
    if passes >= 2 and float((y.T @ y - eye).abs().max()) > 1e-8:
        return torch.linalg.qr(y).Q
    return y


def _wide_svd(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Singular values (descending) and right singular vectors of a wide float64 ``b`` (q × d,
    q ≪ d) through the q × q Gram matrix; exact SVD when a small singular value would make
    the Gram route inaccurate."""
    eigenvalues, u = torch.linalg.eigh(b @ b.T)
    eigenvalues, u = eigenvalues.flip(0), u.flip(1)
    s = eigenvalues.clamp_min(0).sqrt()
    # Gram eigenvectors lose ~eps·(s_max/s_i)² of accuracy: use them only while that is < 1e-8.
    if s[0] == 0 or float(s[-1] / s[0]) < 1e-4:
        _, s, vh = torch.linalg.svd(b, full_matrices=False)
        return s, vh
    return s, (u.T @ b) / s[:, None]


def _randomized_pca_sparse(
    x: torch.Tensor, mean: torch.Tensor, q: int, niter: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Singular values and right singular vectors (q of each) of the centred sparse ``x``
    (Halko, Martinsson & Tropp 2011, Alg. 4.4, in float64): the mean is subtracted as a
    rank-one correction, ``(X − 1μᵀ)B = XB − 1(μᵀB)``, so nothing of size n × d is dense."""
    # COO, not CSR: CSR is a beta layout in torch (it warns) and no faster here.
    x = x.double()
    xt = x.t().coalesce()
    mean = mean.double()

    def right(b: torch.Tensor) -> torch.Tensor:  # (X − 1μᵀ) b,  n × q
        return torch.sparse.mm(x, b) - (mean @ b)[None, :]

    def left(b: torch.Tensor) -> torch.Tensor:  # (X − 1μᵀ)ᵀ b,  d × q
        return torch.sparse.mm(xt, b) - mean[:, None] * b.sum(dim=0)[None, :]

    omega = torch.randn(x.shape[1], q, generator=generator, dtype=torch.float64, device=x.device)
    basis = _orth(right(omega), passes=1 if niter else 2)
    for i in range(niter):
        basis = _orth(right(_orth(left(basis), passes=1)), passes=2 if i == niter - 1 else 1)
    return _wide_svd(left(basis).T)


@dataclass(frozen=True)
class PCAResult:
    """A fitted PCA projection from ``d`` input dimensions to ``k`` (note, topic 3; C28).

    ``components`` (k × d, orthonormal rows, largest-magnitude entry of each positive),
    ``mean`` (d,), ``explained_variance`` (k,, sample variance along each component) and
    ``explained_variance_ratio`` (k,, share of the input's *total* variance, so its sum is the
    share the k components keep). ``method`` says how it was computed: ``"exact SVD"`` (the
    exact principal components), ``"torch.pca_lowrank"`` (dense, randomized) or
    ``"randomized SVD (sparse)"`` (randomized, centring implicit); the randomized ones are
    approximations whose explained variance is at most the exact one.
    """

    components: torch.Tensor
    mean: torch.Tensor
    explained_variance: torch.Tensor
    explained_variance_ratio: torch.Tensor
    total_variance: float
    n_samples: int
    method: str

    @property
    def k(self) -> int:
        """Dimensions kept (rows of ``components``)."""
        return self.components.shape[0]

    @property
    def input_dim(self) -> int:
        """Dimensions of the input (columns of ``components``)."""
        return self.components.shape[1]

    @property
    def projection_bytes(self) -> int:
        """Bytes of the fixed projection a model must store (components and mean)."""
        return self.components.nbytes + self.mean.nbytes

    def to(self, device: torch.device | str) -> PCAResult:
        """The same projection with its tensors on ``device``."""
        return PCAResult(
            components=self.components.to(device),
            mean=self.mean.to(device),
            explained_variance=self.explained_variance.to(device),
            explained_variance_ratio=self.explained_variance_ratio.to(device),
            total_variance=self.total_variance,
            n_samples=self.n_samples,
            method=self.method,
        )

    def truncated(self, k: int) -> PCAResult:
        """The same projection keeping only the first ``k`` components. With the exact method
        this *is* the k-component PCA (principal components are nested), so one fit at the
        largest k serves a whole k-sweep."""
        k = check_int("k", k, 1)
        if k > self.k:
            raise ValueError(f"k must be <= {self.k} (the components fitted), got {k}")
        return PCAResult(
            components=self.components[:k],
            mean=self.mean,
            explained_variance=self.explained_variance[:k],
            explained_variance_ratio=self.explained_variance_ratio[:k],
            total_variance=self.total_variance,
            n_samples=self.n_samples,
            method=self.method,
        )

    def _input(self, x: Any) -> tuple[torch.Tensor, bool]:
        x, sparse = _as_matrix(x, "x")
        if x.shape[1] != self.input_dim:
            raise ValueError(f"x must have {self.input_dim} columns, got {x.shape[1]}")
        return x.to(device=self.components.device, dtype=self.components.dtype), sparse

    def transform(self, x: Any) -> torch.Tensor:
        """``(x − mean) @ components.T``: the k-dim coordinates (dense ``[n, k]``). A sparse
        ``x`` stays sparse: the mean is subtracted after the product, as ``mean @ components.T``.
        """
        x, sparse = self._input(x)
        shift = self.mean @ self.components.T
        product = torch.sparse.mm(x, self.components.T) if sparse else x @ self.components.T
        return product - shift

    def inverse_transform(self, z: torch.Tensor | np.ndarray) -> torch.Tensor:
        """``z @ components + mean``: the closest point to the input in the k-dim subspace."""
        z = torch.as_tensor(z, dtype=self.components.dtype, device=self.components.device)
        if z.dim() != 2 or z.shape[1] != self.k:
            raise ValueError(f"z must be [n, {self.k}], got shape {tuple(z.shape)}")
        return z @ self.components + self.mean

    def reconstruction_error(self, x: Any) -> float:
        """Relative squared error ‖x_c − x̂_c‖²_F / ‖x_c‖²_F of reconstructing the centred
        ``x`` from k components (0 = nothing lost). On the fitted data with the exact method it
        equals ``1 − explained_variance_ratio.sum()``. A sparse ``x`` is never densified."""
        x, sparse = self._input(x)
        total = _centred_sq_norm(x, sparse, self.mean)
        if total == 0:
            raise ValueError("x has no variance around the fitted mean: the error is undefined")
        z = self.transform(x)
        if sparse:  # orthonormal components: ‖x_c − z C‖² = ‖x_c‖² − ‖z‖²
            residual = total - float((z.double() ** 2).sum())
        else:
            residual = float(((x - self.inverse_transform(z)).double() ** 2).sum())
        return max(residual, 0.0) / total


def pca_compress(
    x: Any,
    k: int,
    *,
    exact: bool | None = None,
    seed: int = 0,
    niter: int = 2,
    oversample: int = 10,
) -> PCAResult:
    """Fit a PCA projection of ``x`` (n samples × d features) to ``k`` dimensions (note,
    topic 3; claim C28: compress a sparse input before the embedding layer).

    ``x``: a dense tensor or NumPy array, a torch sparse tensor (COO, CSR, CSC) or a SciPy
    sparse matrix. ``exact=None`` chooses an exact SVD of the centred data (``torch.linalg.svd``)
    when ``min(n, d) <= 2000`` and ``n·d <= 2**25``, else a randomized method with
    ``k + oversample`` probe vectors and ``niter`` power iterations: ``torch.pca_lowrank`` for
    dense input; for sparse input the same algorithm with the centring done implicitly, because
    ``torch.pca_lowrank(center=True)`` materialises a dense n × d mean matrix for a sparse
    input (as large as the densified input). The exact path densifies a sparse input.
    Deterministic for ``seed`` (the global RNG is left untouched). ``k`` must be in
    ``1..min(n, d)`` and n >= 2, else ``ValueError``.
    """
    x, sparse = _as_matrix(x, "x")
    n, d = x.shape
    if n < 2:
        raise ValueError(f"x must have at least 2 rows (samples) to have a variance, got {n}")
    k = check_int("k", k, 1)
    if k > min(n, d):
        raise ValueError(
            f"k must be <= min(n_samples, n_features) = {min(n, d)} for x of shape ({n}, {d}), "
            f"got k={k}"
        )
    seed = check_int("seed", seed, 0)
    niter = check_int("niter", niter, 0)
    oversample = check_int("oversample", oversample, 0)
    if exact is None:
        exact = min(n, d) <= EXACT_MAX_SIDE and n * d <= EXACT_MAX_ELEMENTS
    if sparse:
        mean = torch.sparse.sum(x, dim=0).to_dense() / n
    else:
        mean = x.mean(dim=0)
    total_variance = _centred_sq_norm(x, sparse, mean) / (n - 1)
    q = min(k + oversample, n, d)
    if exact:
        dense = x.to_dense() if sparse else x
        _, s, vh = torch.linalg.svd(dense - mean, full_matrices=False)
        method = "exact SVD"
    elif sparse:
        generator = torch.Generator(device=x.device).manual_seed(seed)
        s, vh = _randomized_pca_sparse(x, mean, q, niter, generator)
        s, vh = s.to(x.dtype), vh.to(x.dtype)
        method = "randomized SVD (sparse)"
    else:
        # pca_lowrank draws from the global RNG: fork it so that the caller's stream is kept.
        devices = []
        if x.device.type == "cuda":
            devices = [
                x.device.index if x.device.index is not None else torch.cuda.current_device()
            ]
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            _, s, v = torch.pca_lowrank(x, q=q, center=True, niter=niter)
        vh = v.T
        method = "torch.pca_lowrank"
    components = _sign_fix(vh[:k].contiguous())
    variance = s[:k] ** 2 / (n - 1)
    ratio = variance / total_variance if total_variance > 0 else torch.zeros_like(variance)
    return PCAResult(
        components=components,
        mean=mean,
        explained_variance=variance,
        explained_variance_ratio=ratio,
        total_variance=total_variance,
        n_samples=n,
        method=method,
    )
