"""§20.7 Where a dense encoder beats lexical matching, and what it adds to BM25.

Two readings of a trained encoder beside the tuned BM25 of ``chapter20.capstone.baselines``:

- **Word overlap buckets** (:func:`overlap_buckets`): each held-out pair is put in a bucket by
  the number of distinct content words (gensim's tokens minus its stop words) the sentence
  shares with its successor: none, one or two, three or more. A lexical method can only find a
  successor through shared words; an encoder can also find it through related ones.
  :func:`bucket_metrics` scores any method per bucket, over the same full candidate list.
- **Score fusion** (:func:`fused_scores`): each query's scores from the encoder and from BM25
  are standardised over the candidates (z-scores, so that the two scales meet) and mixed with a
  weight; :func:`hybrid_figures` chooses the weight on the validation pairs and reports the
  test figures at it (weight 0 is BM25 alone, 1 the encoder alone).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from chapter20.capstone.metrics import positive_ranks, retrieval_metrics
from chapter20.core.checks import check_real

__all__ = [
    "FUSION_WEIGHTS",
    "OVERLAP_BUCKETS",
    "bucket_metrics",
    "content_words",
    "fused_scores",
    "hybrid_figures",
    "overlap_buckets",
    "shared_content_words",
]

#: The buckets of shared content words between a sentence and its successor.
OVERLAP_BUCKETS = ("0", "1-2", "3+")
#: The encoder's weights in the fusion the validation pairs choose from (0: BM25 alone).
FUSION_WEIGHTS = tuple(round(w, 2) for w in np.linspace(0.0, 1.0, 11))

Scorer = Callable[[list[str], list[str]], np.ndarray]


def content_words(text: str) -> set[str]:
    """The distinct content words of ``text``: gensim's tokens (``simple_preprocess``, as the
    encoder's word tokeniser and the baselines see text) that are not gensim's stop words."""
    from gensim.parsing.preprocessing import STOPWORDS
    from gensim.utils import simple_preprocess

    return set(simple_preprocess(text)) - STOPWORDS


def shared_content_words(anchors: Sequence[str], positives: Sequence[str]) -> np.ndarray:
    """The number of content words each anchor shares with its positive (:func:`content_words`)."""
    if len(anchors) != len(positives):
        raise ValueError(f"{len(anchors)} anchors but {len(positives)} positives")
    return np.array(
        [len(content_words(a) & content_words(p)) for a, p in zip(anchors, positives)], int
    )


def overlap_buckets(shared: np.ndarray) -> np.ndarray:
    """The bucket (of :data:`OVERLAP_BUCKETS`) of each pair's count of shared content words."""
    shared = np.asarray(shared)
    return np.where(shared == 0, "0", np.where(shared <= 2, "1-2", "3+"))


def bucket_metrics(scores, buckets: np.ndarray) -> list[dict]:
    """Recall@1, recall@10 and MRR of a score matrix (queries × candidates, positives on the
    diagonal) over the queries of each bucket, every candidate still competing: one dict per
    bucket of :data:`OVERLAP_BUCKETS` with its ``pairs`` count."""
    ranks = positive_ranks(scores)
    buckets = np.asarray(buckets)
    if buckets.shape != ranks.shape:
        raise ValueError(
            f"buckets must hold one entry per query ({len(ranks)}), got {buckets.shape}"
        )
    rows = []
    for bucket in OVERLAP_BUCKETS:
        mine = ranks[buckets == bucket]
        figures = {"recall@1": np.nan, "recall@10": np.nan, "mrr": np.nan}
        if len(mine):
            figures = {"recall@1": float((mine <= 1).mean()),
                       "recall@10": float((mine <= 10).mean()),
                       "mrr": float((1 / mine).mean())}  # fmt: skip
        rows.append({"bucket": bucket, "pairs": int(len(mine)), **figures})
    return rows


def _standardised(scores: np.ndarray) -> np.ndarray:
    """Each row minus its mean, over its standard deviation (a constant row becomes 0)."""
    scores = np.asarray(scores, dtype=np.float64)
    std = scores.std(axis=1, keepdims=True)
    centred = scores - scores.mean(axis=1, keepdims=True)
    return np.divide(centred, std, out=np.zeros_like(centred), where=std > 0)


def fused_scores(encoder: np.ndarray, lexical: np.ndarray, weight: float) -> np.ndarray:
    """``weight`` × the encoder's standardised scores + (1 − ``weight``) × the lexical method's,
    row by row (each query's scores standardised over its candidates)."""
    weight = check_real("weight", weight, minimum=0.0, maximum=1.0)
    encoder, lexical = np.asarray(encoder), np.asarray(lexical)
    if encoder.shape != lexical.shape:
        raise ValueError(f"score matrices differ in shape: {encoder.shape} vs {lexical.shape}")
    return weight * _standardised(encoder) + (1.0 - weight) * _standardised(lexical)


def hybrid_figures(
    encoder: Scorer,
    lexical: Scorer,
    validation: tuple[list[str], list[str]],
    test: tuple[list[str], list[str]],
    weights: Sequence[float] = FUSION_WEIGHTS,
) -> dict[str, float]:
    """The fusion of ``encoder`` and ``lexical`` (scorers) at the weight of the highest
    validation MRR among ``weights``, measured on ``test``: ``hybrid_weight`` and
    ``hybrid_recall@1``, ``hybrid_recall@10``, ``hybrid_mrr``."""
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence) or not weights:
        raise TypeError(f"weights must be a non-empty sequence of numbers, got {weights!r}")
    weights = [check_real("weights", w, minimum=0.0, maximum=1.0) for w in weights]
    val_encoder, val_lexical = encoder(*validation), lexical(*validation)
    val_mrr = [retrieval_metrics(fused_scores(val_encoder, val_lexical, w))["mrr"] for w in weights]
    weight = float(weights[int(np.argmax(val_mrr))])
    metrics = retrieval_metrics(fused_scores(encoder(*test), lexical(*test), weight))
    return {"hybrid_weight": weight,
            **{f"hybrid_{k}": metrics[k] for k in ("recall@1", "recall@10", "mrr")}}  # fmt: skip
