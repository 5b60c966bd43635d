"""Trained word vectors and their evaluation on word-similarity sets (note, topic 1).

:class:`WordVectors` (what ``train_word2vec`` returns, with its :class:`TrainStats`) looks words
up and finds neighbours with gensim's semantics; :func:`evaluate_word_pairs` scores any words and
vectors on WordSim-353 or SimLex-999 the way gensim's ``evaluate_word_pairs`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from chapter20.core.checks import check_int
from chapter20.core.corpora import word_similarity_path
from chapter20.vocab.vocabulary import Vocabulary

__all__ = [
    "PairEvaluation",
    "TrainStats",
    "WordVectors",
    "evaluate_word_pairs",
]


@dataclass(frozen=True)
class TrainStats:
    """What one training run did and how long it took (note, topic 1).

    ``raw_words``: corpus tokens processed, out-of-vocabulary ones included, summed over
    epochs (gensim's "raw words", the basis of every words-per-second figure here);
    ``effective_words``: in-vocabulary words kept by subsampling (gensim's "effective words");
    ``seconds``: wall time of training (pair generation included, vocabulary building and
    corpus encoding excluded); ``epoch_loss``: mean loss per pair of each epoch; ``fused``:
    whether the fused per-pair kernels ran (``chapter20.word2vec.fused``), not the plain path.
    """

    objective: str
    device: str
    epochs: int
    raw_words: int
    effective_words: int
    pairs: int
    seconds: float
    batch_size: int = 0
    workers: int = 1
    epoch_loss: tuple[float, ...] = ()
    fused: bool = False

    @property
    def words_per_second(self) -> float:
        """Raw corpus words per second of training (the definition used for gensim too)."""
        return self.raw_words / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class WordVectors:
    """Trained word vectors (note, topic 1): ``words[i]`` has vector ``vectors[i]`` (float32).

    Lookup (``wv["word"]``), cosine :meth:`similarity`, :meth:`most_similar` and
    :meth:`evaluate_word_pairs` (gensim's semantics). ``stats`` describes the training run.
    """

    words: tuple[str, ...]
    vectors: np.ndarray
    stats: TrainStats | None = None
    index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        if self.vectors.ndim != 2 or len(self.vectors) != len(self.words):
            raise ValueError(
                f"vectors must be [len(words), dim]; got {self.vectors.shape} for "
                f"{len(self.words)} words"
            )
        if not self.index:
            self.index.update((w, i) for i, w in reversed(list(enumerate(self.words))))

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def __getitem__(self, word: str) -> np.ndarray:
        if word not in self.index:
            raise KeyError(f"{word!r} is not in the vocabulary ({len(self.words)} words)")
        return self.vectors[self.index[word]]

    def _unit(self) -> np.ndarray:
        norms = np.linalg.norm(self.vectors.astype(np.float64), axis=1, keepdims=True)
        return (self.vectors / np.where(norms > 0, norms, 1)).astype(np.float32)

    def similarity(self, word1: str, word2: str) -> float:
        """Cosine similarity of two words' vectors."""
        a, b = self[word1].astype(np.float64), self[word2].astype(np.float64)
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    def most_similar(self, word: str, topn: int = 10) -> list[tuple[str, float]]:
        """The ``topn`` words with the highest cosine similarity to ``word`` (itself excluded)."""
        topn = check_int("topn", topn, 1)
        self[word]  # KeyError for an unknown word
        unit = self._unit()
        sims = unit @ unit[self.index[word]]
        sims[self.index[word]] = -np.inf
        best = np.argsort(-sims, kind="stable")[:topn]
        return [(self.words[i], float(sims[i])) for i in best]

    def evaluate_word_pairs(self, name: str = "wordsim353", **kwargs) -> PairEvaluation:
        """:func:`evaluate_word_pairs` on these vectors."""
        return evaluate_word_pairs(self.words, self.vectors, name, **kwargs)

    def to_gensim(self):
        """The same vectors as a gensim ``KeyedVectors`` (for cross-checks)."""
        from gensim.models import KeyedVectors

        kv = KeyedVectors(self.vectors.shape[1], dtype=np.float32)
        kv.add_vectors(list(self.words), self.vectors.astype(np.float32))
        return kv


# --- evaluation -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PairEvaluation:
    """Word-similarity scores of a set of vectors, as gensim reports them (note, topic 1).

    ``spearman`` and ``pearson``: correlations between human scores and cosine similarities
    over the pairs whose two words are in the vocabulary; ``oov_pairs`` pairs were skipped,
    ``oov_ratio`` is their share of all ``pairs`` in percent (gensim's third return value).
    """

    name: str
    spearman: float
    pearson: float
    pairs: int
    oov_pairs: int

    @property
    def oov_ratio(self) -> float:
        return 100.0 * self.oov_pairs / self.pairs


def _word_pairs(name: str) -> list[tuple[str, str, float]]:
    """The pairs of a similarity set in their original case, parsed line by line as gensim's
    ``evaluate_word_pairs`` parses them (``data.word_similarity`` gives them lowercased)."""
    rows = []
    with open(word_similarity_path(name), encoding="utf-8") as f:
        for line in f:
            if not line or line.startswith("#"):
                continue
            try:
                a, b, score = line.split("\t")
                rows.append((a, b, float(score)))
            except (ValueError, TypeError):
                continue
    return rows


def evaluate_word_pairs(
    words: Sequence[str] | Vocabulary,
    vectors: np.ndarray | torch.Tensor,
    name: str = "wordsim353",
    *,
    case_insensitive: bool = True,
    restrict_vocab: int = 300_000,
) -> PairEvaluation:
    """Spearman ρ of ``vectors`` on WordSim-353 or SimLex-999, gensim's way (note, topic 1).

    ``words[i]`` has vector ``vectors[i]`` (any ``[len(words), dim]`` array: trained,
    PCA-reduced, ...; words ordered most frequent first, as a ``Vocabulary`` is). Mirrors
    ``KeyedVectors.evaluate_word_pairs``: only the first ``restrict_vocab`` words count; with
    ``case_insensitive`` words are compared upper-cased and the first (most frequent) of
    several case variants wins; a pair with an out-of-vocabulary word is skipped and counted;
    the similarity is the cosine. Raises ``ValueError`` if no pair is in the vocabulary.
    """
    words = list(words.words if isinstance(words, Vocabulary) else words)
    vectors = vectors.detach().cpu().numpy() if isinstance(vectors, torch.Tensor) else vectors
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or len(vectors) != len(words):
        raise ValueError(
            f"vectors must be [len(words), dim]; got {vectors.shape} for {len(words)} words"
        )
    restrict_vocab = check_int("restrict_vocab", restrict_vocab, 1)
    allowed = list(enumerate(words[:restrict_vocab]))
    if case_insensitive:
        lookup = {w.upper(): i for i, w in reversed(allowed)}
    else:
        lookup = {w: i for i, w in allowed}
    rows = _word_pairs(name)
    gold, model, oov = [], [], 0
    for a, b, score in rows:
        if case_insensitive:
            a, b = a.upper(), b.upper()
        if a not in lookup or b not in lookup:
            oov += 1
            continue
        va = vectors[lookup[a]].astype(np.float64)
        vb = vectors[lookup[b]].astype(np.float64)
        gold.append(score)
        model.append(float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb))))
    if not gold:
        raise ValueError(f"no pair of {name} has both words in the vocabulary")
    scores = pd.DataFrame({"gold": gold, "model": model})
    ranks = scores.rank()  # ties averaged: Spearman's rho is Pearson's r of these (no scipy)
    return PairEvaluation(
        name=name,
        spearman=float(ranks["gold"].corr(ranks["model"])),
        pearson=float(scores["gold"].corr(scores["model"])),
        pairs=len(rows),
        oov_pairs=oov,
    )
