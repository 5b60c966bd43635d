"""§20.7 Metrics of an embedding beyond the loss: retrieval quality and the geometry of the space.

Every function here reads a **score matrix** ``scores[i, j]`` between query ``i`` and candidate
``j`` whose true match is the diagonal (query ``i``'s positive is candidate ``i``), as the held-out
next-sentence retrieval of ``chapter20.capstone.evaluation`` builds it; the geometric ones read
cosine similarities. So an encoder, TF-IDF, LSI, Doc2Vec and BM25 are measured by the same code,
whatever their vectors are (dense, sparse, or none at all for BM25, which only scores).

- :func:`positive_ranks`: the rank of each query's positive among all candidates (1 = first); a
  candidate that ties with the positive counts as ranked above it, so a constant scorer gets no
  credit;
- :func:`retrieval_metrics`: recall@k, mean reciprocal rank (MRR) and NDCG@k, each next to the
  value a random ranking has in expectation (its chance level);
- :func:`alignment`, :func:`uniformity` (Wang & Isola, ICML 2020) and :func:`mean_cosine` (an
  isotropy measure: the mean cosine between unrelated texts, 0 for an isotropic embedding and 1
  for one where every text points the same way; Ethayarajh, EMNLP 2019): :func:`geometry`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chapter20.core.checks import check_int

__all__ = [
    "alignment",
    "geometry",
    "mean_cosine",
    "positive_ranks",
    "retrieval_metrics",
    "uniformity",
]


def _square(scores, name: str = "scores") -> np.ndarray:
    matrix = np.asarray(scores, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 2:
        raise ValueError(f"{name} must be a square [n, n] matrix with n >= 2, got {matrix.shape}")
    if not np.all(np.isfinite(matrix)):
        raise ValueError(f"{name} has NaN or infinite entries")
    return matrix


def _ks(ks: Sequence[int]) -> list[int]:
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Sequence) or not ks:
        raise TypeError(f"ks must be a non-empty sequence of ints, got {ks!r}")
    return [check_int("ks", k, 1) for k in ks]


def positive_ranks(scores) -> np.ndarray:
    """The rank (1-based) of each query's positive, the diagonal of ``scores`` ``[n, n]``, among
    its row: 1 + the number of other candidates scoring at least as high (ties count against)."""
    matrix = _square(scores)
    own = matrix.diagonal()[:, None]
    return (matrix >= own).sum(axis=1)  # the positive itself counts once: rank >= 1


def retrieval_metrics(scores, ks: Sequence[int] = (1, 10), ndcg_at: int = 10) -> dict[str, float]:
    """Retrieval quality of a score matrix with one relevant candidate per query (§20.7):
    ``recall@k`` (the positive among the first k), ``mrr`` (mean of 1 / rank) and ``ndcg@K``
    (with one relevant item, 1 / log2(1 + rank) if rank <= K, else 0), each with its chance
    level (``chance@k``, ``chance_mrr``, ``chance_ndcg@K``): the expectation under a uniformly
    random ranking of the ``n`` candidates (k / n; the harmonic number H_n / n; the mean of the
    discounts over the first K ranks divided by n)."""
    ks, ndcg_at = _ks(ks), check_int("ndcg_at", ndcg_at, 1)
    ranks = positive_ranks(scores)
    n = len(ranks)
    out: dict[str, float] = {}
    for k in ks:
        out[f"recall@{k}"] = float((ranks <= k).mean())
        out[f"chance@{k}"] = min(1.0, k / n)
    out["mrr"] = float((1.0 / ranks).mean())
    out["chance_mrr"] = float((1.0 / np.arange(1, n + 1)).sum() / n)
    discount = 1.0 / np.log2(1.0 + np.arange(1, n + 1))
    out[f"ndcg@{ndcg_at}"] = float(np.where(ranks <= ndcg_at, discount[ranks - 1], 0.0).mean())
    out[f"chance_ndcg@{ndcg_at}"] = float(discount[:ndcg_at].sum() / n)
    return out


def alignment(cosines) -> float:
    """Wang & Isola's alignment of positive pairs (§20.7): the mean squared distance
    ``E ||f(x) - f(y)||^2 = E (2 - 2 cos)`` between unit vectors of matching texts (``cosines``:
    the positive pairs' cosine similarities). 0 when every pair maps to one point; lower is
    better."""
    values = np.asarray(cosines, dtype=np.float64).ravel()
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("cosines must be a non-empty array of finite values")
    return float(np.mean(2.0 - 2.0 * values))


def _off_diagonal(cosines) -> np.ndarray:
    matrix = _square(cosines, "cosines")
    return matrix[~np.eye(len(matrix), dtype=bool)]


def uniformity(cosines, t: float = 2.0) -> float:
    """Wang & Isola's uniformity (§20.7): ``log E exp(-t ||f(x) - f(y)||^2)`` over pairs of
    distinct texts, from their cosine matrix ``[n, n]`` (the squared distance of unit vectors is
    ``2 - 2 cos``). Lower (more negative) means the texts spread more evenly over the sphere."""
    if not (isinstance(t, (int, float)) and np.isfinite(t) and t > 0):
        raise ValueError(f"t must be a finite number > 0, got {t!r}")
    exponents = -t * (2.0 - 2.0 * _off_diagonal(cosines))
    top = exponents.max()
    return float(top + np.log(np.mean(np.exp(exponents - top))))  # stable log-mean-exp


def mean_cosine(cosines) -> float:
    """The mean cosine similarity between distinct texts, from their cosine matrix ``[n, n]``
    (§20.7): an isotropy measure (Ethayarajh 2019): about 0 for an isotropic embedding, near 1
    when every vector points into one narrow cone."""
    return float(_off_diagonal(cosines).mean())


def geometry(pair_cosines, candidate_cosines) -> dict[str, float]:
    """Alignment of the positive pairs (the diagonal of ``pair_cosines``, queries × candidates)
    and uniformity and mean cosine of the candidates (``candidate_cosines``, candidates ×
    candidates), as one dict (§20.7)."""
    pairs = _square(pair_cosines, "pair_cosines")
    return {
        "alignment": alignment(pairs.diagonal()),
        "uniformity": uniformity(candidate_cosines),
        "mean_cosine": mean_cosine(candidate_cosines),
    }
