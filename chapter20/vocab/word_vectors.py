"""Word vectors under the vocabulary's levers (the note on efficient embedding training, topic 3):
subword vectors composed into word vectors (claim C30's quality side) and word vectors
compressed by PCA, scored at each size (claim C28 applied to embeddings).

:func:`compose_word_vectors` gives each word the mean of its BPE pieces' vectors
(``chapter20.vocab.bpe``), so a subword model answers for words it never saw whole;
:func:`pca_quality_curve` compresses any ``(words, vectors)`` with
``chapter20.vocab.pca.pca_compress`` to each k and scores each with a given function (e.g.
WordSim-353's Spearman ρ). Notebook 10 runs both (``chapter20.labs.nb10_word_vectors``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from chapter20.core.checks import check_int
from chapter20.vocab.bpe import BPETokenizer
from chapter20.vocab.pca import pca_compress

# pandas costs every torchrun worker half a second to import; only the curve's table needs it.
if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "compose_word_vectors",
    "pca_quality_curve",
]


def _as_numpy(vectors: Any) -> np.ndarray:
    if isinstance(vectors, torch.Tensor):
        vectors = vectors.detach().cpu().numpy()
    vectors = np.asarray(vectors)
    if vectors.ndim != 2:
        raise ValueError(f"vectors must be 2-D [words, dim], got shape {vectors.shape}")
    return vectors


def _score(result: Any) -> float:
    """A score function's result as a float (a number, or an object with ``.spearman``)."""
    value = getattr(result, "spearman", result)
    return float(value)


def pca_quality_curve(
    words: Sequence[str],
    vectors: Any,
    ks: Sequence[int],
    score_fn: Callable[[Sequence[str], np.ndarray], Any],
    *,
    space: str = "reconstructed",
    exact: bool | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Word vectors compressed by PCA to each k, scored by ``score_fn`` (note, topic 3; C28).

    ``words[i]`` has vector ``vectors[i]`` (any ``[n, d]`` array: word2vec's, gensim's,
    synthetic); ``score_fn(words, vectors) -> ρ`` scores a set of vectors (e.g.
    ``lambda w, v: word2vec.evaluate_word_pairs(w, v).spearman``; an object with ``.spearman``
    is accepted too). PCA is fitted once at ``max(ks)``; with the exact method (the default
    for fewer than 2,000 dims) every smaller k is its prefix.

    ``space="reconstructed"`` (default) scores the k-dim codes mapped back to d dims, mean
    added: the best rank-k approximation of the vectors, equal to them at k = d (so the curve
    ends at the original score). ``"projected"`` scores the k-dim codes themselves: they are
    centred, and removing the mean changes cosines even at k = d — for weakly trained vectors
    that share a large common direction it can change ρ a lot, in either direction.

    Returns one row for the original vectors (``compressed=False``, ``k = d``) and one per k:
    ``k``, ``compressed``, ``explained_variance`` (cumulative share of the total variance),
    ``score``, ``matrix_bytes`` (the n × k codes in float32) and ``projection_bytes`` (the
    k × d components and the mean, needed to map codes back; 0 for the original).
    """
    if space not in ("projected", "reconstructed"):
        raise ValueError(f"space must be 'projected' or 'reconstructed', got {space!r}")
    if not callable(score_fn):
        raise TypeError(f"score_fn must be callable, got {type(score_fn).__name__}")
    words = list(words)
    array = _as_numpy(vectors)
    n, d = array.shape
    if len(words) != n:
        raise ValueError(f"words ({len(words)}) and vectors ({n} rows) differ in length")
    if isinstance(ks, (str, int)) or not len(ks):
        raise ValueError("ks must be a non-empty sequence of ints")
    ks = sorted({check_int("ks[i]", k, 1) for k in ks})
    if ks[-1] > min(n, d):
        raise ValueError(f"ks must be <= min(n_words, dim) = {min(n, d)}, got {ks[-1]}")
    import pandas as pd

    pca = pca_compress(array, ks[-1], exact=exact, seed=seed)
    records = [
        {
            "k": d,
            "compressed": False,
            "explained_variance": 1.0,
            "score": _score(score_fn(words, array.astype(np.float32))),
            "matrix_bytes": n * d * 4,
            "projection_bytes": 0,
        }
    ]
    for k in ks:
        part = pca.truncated(k)
        z = part.transform(array)
        if space == "reconstructed":
            z = part.inverse_transform(z)
        records.append(
            {
                "k": k,
                "compressed": True,
                "explained_variance": float(part.explained_variance_ratio.sum()),
                "score": _score(score_fn(words, z.cpu().numpy().astype(np.float32))),
                "matrix_bytes": n * k * 4,
                "projection_bytes": (k * d + d) * 4,
            }
        )
    return pd.DataFrame(records)


def compose_word_vectors(
    bpe: BPETokenizer,
    words: Sequence[str],
    subwords: Sequence[str],
    subword_vectors: Any,
) -> tuple[list[str], np.ndarray]:
    """Word vectors as the mean of their BPE subwords' vectors (note, topic 3; C30's quality
    side): ``subwords[i]`` (a subword string as ``bpe.tokens`` spells it) has vector
    ``subword_vectors[i]``, e.g. from word2vec trained on ``bpe.tokenize_corpus(texts)``.

    Words are spelled as inside a text (``bpe.word_tokens``: after a space, the spelling of
    almost every occurrence). Returns the words whose every subword has a vector, and their
    vectors (float32). With a subword model trained on the same corpus that is nearly every
    word, including words never seen whole; a word can still miss out when one of its pieces
    is an intermediate merge that the final encoding of the corpus never emits.
    """
    array = _as_numpy(subword_vectors)
    subwords = list(subwords)
    if len(subwords) != len(array):
        raise ValueError(f"subwords ({len(subwords)}) and vectors ({len(array)}) differ")
    index = {s: i for i, s in reversed(list(enumerate(subwords)))}
    kept, rows = [], []
    for word in words:
        pieces = bpe.word_tokens(word)
        if pieces and all(p in index for p in pieces):
            kept.append(word)
            rows.append(array[[index[p] for p in pieces]].astype(np.float64).mean(axis=0))
    if not kept:
        return [], np.zeros((0, array.shape[1]), dtype=np.float32)
    return kept, np.stack(rows).astype(np.float32)
