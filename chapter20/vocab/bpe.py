"""Byte-level BPE subwords (the note on efficient embedding training, topic 3; claim C30).

:func:`train_bpe` trains a byte-level BPE vocabulary in memory with Hugging Face ``tokenizers``:
its 256 byte symbols spell any text, so no held-out text falls out of the vocabulary.
:class:`BPETokenizer` encodes and decodes (an exact round trip of :func:`normalize_text`),
spells words as inside a text and counts tokens per word; :func:`bpe_table` measures several
sizes against a word vocabulary with as many embedding rows (``chapter20.vocab.vocabulary``).

What a merge is, in a few lines of Python: :func:`learn_merges` learns them as the trainer of
``tokenizers`` does (count every adjacent pair of symbols, weighted by the word's count; merge
the most frequent; update the counts of the pairs around each merged occurrence; repeat) and
:func:`apply_merges` spells a word with them (merge the adjacent pair learnt first, until no
pair is a merge). Both are tested equal to ``tokenizers``' own, merge for merge and spelling
for spelling; the package trains and encodes with ``tokenizers``, which is faster.
"""

from __future__ import annotations

import heapq
import itertools
import json
import numbers
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from chapter20.core.checks import check_int
from chapter20.vocab.vocabulary import Vocabulary, count_words, element_bytes

# pandas costs every torchrun worker half a second to import; only the tables need it.
if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "BPE_UNK",
    "BPETokenizer",
    "apply_merges",
    "bpe_table",
    "learn_merges",
    "normalize_text",
    "train_bpe",
]

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

    @property
    def merges(self) -> list[tuple[str, str]]:
        """The learnt merges, first learnt first: each joins two symbols into one entry."""
        merges = json.loads(self.tokenizer.to_str())["model"]["merges"]
        return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]

    def pre_tokenize(self, text: str | Sequence[str]) -> list[str]:
        """The pieces BPE spells one by one (byte-level words: ``"Ġthe"`` for " the"), after
        the normaliser: what :func:`learn_merges` counts and :func:`apply_merges` spells."""
        normal = self.tokenizer.normalizer.normalize_str(self._text(text))
        return [piece for piece, _ in self.tokenizer.pre_tokenizer.pre_tokenize_str(normal)]

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
        return self.vocab_size * check_int("dim", dim, 1) * element_bytes(dtype)


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


def _merge_in_word(word: list[int], pair: tuple[int, int], new: int) -> list[tuple]:
    """Replace every occurrence of ``pair`` in ``word`` (symbol ids, left to right, in place)
    by ``new``; returns the changes of the counts of the pairs around each: ``(pair, ±1)``."""
    changes, i = [], 0
    while i < len(word) - 1:
        if (word[i], word[i + 1]) == pair:
            if i > 0:
                changes += [((word[i - 1], pair[0]), -1), ((word[i - 1], new), 1)]
            word[i : i + 2] = [new]
            if i < len(word) - 1:
                changes += [((pair[1], word[i + 1]), -1), ((new, word[i + 1]), 1)]
        i += 1
    return changes


def learn_merges(
    word_counts: Mapping[str, int],
    vocab_size: int,
    *,
    alphabet: Iterable[str] = (),
    special_tokens: Sequence[str] = (BPE_UNK,),
    min_frequency: int = 0,
) -> list[tuple[str, str]]:
    """BPE's merges learnt from ``word_counts`` (pre-tokenised pieces, :meth:`BPETokenizer.
    pre_tokenize`, and their counts), as the trainer of ``tokenizers`` learns them (note,
    topic 3; claim C30), until the vocabulary (``special_tokens``, the symbols of ``alphabet``
    and of the words, then one entry per new merge) holds ``vocab_size`` entries. Symbols are
    numbered in that order (the alphabet by code point) and a tie between equally frequent
    pairs goes to the smaller pair of numbers; pairs seen fewer than ``min_frequency`` times
    are not merged. Equal to :attr:`BPETokenizer.merges` of :func:`train_bpe` with the same
    text and settings (tested); a minimal version, to read: ``train_bpe`` is far faster."""
    vocab_size = check_int("vocab_size", vocab_size, 1)
    min_frequency = check_int("min_frequency", min_frequency, 0)
    symbols = sorted(set(alphabet).union(*map(set, word_counts)), key=ord)
    names = list(dict.fromkeys([*special_tokens, *symbols]))
    ids = {name: i for i, name in enumerate(names)}
    words = [[ids[c] for c in word] for word in word_counts]
    counts = [check_int("word_counts[word]", c, 1) for c in word_counts.values()]
    pair_counts, where = Counter(), defaultdict(set)
    for i, word in enumerate(words):
        for pair in zip(word, word[1:]):
            pair_counts[pair] += counts[i]
            where[pair].add(i)
    order = itertools.count()  # never compare two entries' word sets
    queue = [(-pair_counts[p], p, next(order), words_at) for p, words_at in where.items()]
    heapq.heapify(queue)  # the most frequent pair first, then the smaller pair of ids
    merges = []
    while len(names) < vocab_size and queue:
        count, pair, _, words_at = heapq.heappop(queue)
        if -count != pair_counts[pair]:  # counted before an earlier merge changed it
            heapq.heappush(queue, (-pair_counts[pair], pair, next(order), words_at))
            continue
        if -count < max(1, min_frequency):
            break
        name = names[pair[0]] + names[pair[1]]
        if name not in ids:  # two merges can spell the same entry: it keeps its first id
            ids[name] = len(names)
            names.append(name)
        new = ids[name]
        merges.append((names[pair[0]], names[pair[1]]))
        where = defaultdict(set)
        for i in words_at:
            for changed, sign in _merge_in_word(words[i], pair, new):
                pair_counts[changed] += sign * counts[i]
                if sign > 0:
                    where[changed].add(i)
        for p, words_at in where.items():
            if pair_counts[p] > 0:
                heapq.heappush(queue, (-pair_counts[p], p, next(order), words_at))
    return merges


def apply_merges(piece: str, ranks: Mapping[tuple[str, str], int]) -> list[str]:
    """``piece`` (one pre-tokenised word) spelt with BPE's merges (note, topic 3): from single
    symbols, repeatedly join the adjacent pair whose merge was learnt first — the lowest
    ``ranks[pair]``, the merge's place in the learnt order; the leftmost of equals — until no
    adjacent pair is a merge. Equal to the spelling of ``tokenizers``' BPE model with the same
    merges (tested). ``ranks``: e.g. ``{pair: r for r, pair in enumerate(merges)}``."""
    symbols = list(piece)
    while len(symbols) > 1:
        pairs = zip(symbols, symbols[1:])
        rank, i = min((ranks.get(pair, len(ranks)), i) for i, pair in enumerate(pairs))
        if rank == len(ranks):  # no adjacent pair is a merge
            break
        symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
    return symbols


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
    import pandas as pd

    if isinstance(vocab_sizes, (str, numbers.Number)) or not len(vocab_sizes):
        raise ValueError("vocab_sizes must be a non-empty sequence of ints >= 257")
    vocab_sizes = [check_int("vocab_sizes[i]", size, 257) for size in vocab_sizes]
    train = [list(t) for t in train_texts]
    heldout = [list(t) for t in heldout_texts]
    heldout_strings = _texts_as_strings(heldout, "heldout_texts")
    dim = check_int("dim", dim, 1)
    counts = count_words(train, "train_texts")
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
        words = Vocabulary.from_counts(counts, total, 1, max(1, bpe.vocab_size - 1))
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
