"""§20.7 Judging a text encoder on benchmarks no one here wrote.

Two measurements, both on text the encoder never trained on:

- **Lee document similarity** (Lee, Pincombe & Welsh 2005; gensim's test data): 50 short news
  documents, every pair rated by about ten people. An encoder's cosine similarities are
  compared with the averaged human ratings over the 1,225 pairs (Pearson and Spearman). The
  raters agree with each other at about :data:`LEE_INTER_RATER` (Pearson), a practical ceiling.
- **Held-out next-sentence retrieval**: (sentence, next sentence) pairs of Wikipedia articles
  held out of training (:func:`heldout_sentence_pairs`: the test articles, or the validation
  articles on which choices are made); each sentence must find its successor among all
  successors. Recall@k, MRR and NDCG next to their chance levels, and the geometry of the
  space (``chapter20.capstone.metrics``).

Anything that scores text pairs enters as a **scorer** ``score(queries, candidates) -> [n, m]``:
an encoder's cosine similarities (:func:`encoder_scorer` of ``encode(texts) -> [n, d]``, e.g.
``chapter20.training.encoder_file.TextEncoder.encode``) or a classic baseline's
(``chapter20.capstone.baselines``). :func:`evaluate_scores` measures every figure of one.

A study's runs are read from their evaluations, with the seed statistics of
``chapter20.core.seed_statistics``: where §20.5's early stopping stops a recorded curve
(:func:`early_stopping`, the loop's own rule replayed), whether the runs of a batch left their
untrained start (:func:`past_start`), where gains in the batch stop (:func:`saturation_batch`),
and an ablation's effects against the seeds' noise (:func:`ablation_summary`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from chapter20.capstone.metrics import geometry, retrieval_metrics
from chapter20.capstone.views import TEST_FRACTION, VALIDATION_FRACTION, article_splits
from chapter20.core.checks import check_int
from chapter20.core.corpora import (
    LEE_DOCUMENTS,
    LEE_PAIRS,
    lee_documents,
    lee_human_similarity,
    next_sentence_pairs,
)
from chapter20.core.seed_statistics import beyond_noise, summarize_seeds
from chapter20.training.early_stopping import EarlyStopper, EarlyStopping

__all__ = [
    "LEE_INTER_RATER",
    "SPLITS",
    "LeeScore",
    "ablation_summary",
    "cosine_matrix",
    "early_stopping",
    "encoder_scorer",
    "evaluate_scores",
    "heldout_sentence_pairs",
    "lee_score",
    "past_start",
    "retrieval_recall",
    "saturation_batch",
    "score_encoder_on_lee",
]

#: Inter-rater agreement reported for the Lee set (Pearson of one rater against the others'
#: mean, about 0.6): an encoder near it is as good as a typical human judge.
LEE_INTER_RATER = 0.6
#: The held-out splits of the Wikipedia sample (``chapter20.capstone.views.article_splits``).
SPLITS = ("test", "validation")

Encode = Callable[[list[str]], "torch.Tensor | np.ndarray"]
Scorer = Callable[[list[str], list[str]], np.ndarray]


@dataclass(frozen=True)
class LeeScore:
    """Agreement of a similarity matrix with the Lee human judgments over ``pairs`` pairs."""

    pearson: float
    spearman: float
    pairs: int = LEE_PAIRS


def _upper(matrix: np.ndarray) -> np.ndarray:
    return matrix[np.triu_indices(LEE_DOCUMENTS, 1)]


@functools.lru_cache(maxsize=1)
def _human_pairs() -> np.ndarray:
    return _upper(lee_human_similarity())


def _unit_rows(vectors: torch.Tensor | np.ndarray) -> np.ndarray:
    """Rows scaled to length 1, float64; a zero row raises (its cosine is undefined, and a
    made-up 0 would bias the correlation)."""
    x = np.asarray(vectors.detach().cpu() if isinstance(vectors, torch.Tensor) else vectors)
    if x.ndim != 2:
        raise ValueError(f"vectors must be 2-D [n, d], got shape {x.shape}")
    x = x.astype(np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if not np.all(norms > 0):
        raise ValueError(f"rows {np.flatnonzero(norms[:, 0] == 0).tolist()} of vectors are zero")
    return x / norms


def cosine_matrix(
    vectors: torch.Tensor | np.ndarray, others: torch.Tensor | np.ndarray | None = None
) -> np.ndarray:
    """Cosine similarity of every row of ``vectors`` with every row of ``others`` (default: of
    ``vectors`` itself), float64 ``[n, m]``; a zero row raises."""
    x = _unit_rows(vectors)
    return x @ (x if others is None else _unit_rows(others)).T


def lee_score(similarity: np.ndarray) -> LeeScore:
    """Pearson and Spearman correlation between a ``[50, 50]`` similarity matrix of the Lee
    documents (in :func:`chapter20.core.corpora.lee_documents` order) and the human judgments, over
    the 1,225 pairs ``i < j`` (§20.7). Only the upper triangle is read."""
    similarity = np.asarray(similarity, dtype=np.float64)
    if similarity.shape != (LEE_DOCUMENTS, LEE_DOCUMENTS):
        raise ValueError(f"similarity must be [50, 50], got shape {similarity.shape}")
    model = _upper(similarity)
    if not np.all(np.isfinite(model)):
        raise ValueError("similarity has NaN or infinite entries")
    human = _human_pairs()
    return LeeScore(_pearson(model, human), _pearson(_ranks(model), _ranks(human)))


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x - x.mean(), y - y.mean()
    return float((x @ y) / np.sqrt((x @ x) * (y @ y)))


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (Spearman's rho is Pearson's r of these)."""
    return pd.Series(x).rank(method="average").to_numpy()


def score_encoder_on_lee(encode: Encode) -> LeeScore:
    """Encode the 50 Lee documents (raw text) and score their cosine similarities (§20.7)."""
    return lee_score(cosine_matrix(encode(lee_documents())))


# --- held-out retrieval ---------------------------------------------------------------------


def heldout_sentence_pairs(
    limit: int | None = 2_000,
    *,
    split: str = "test",
    test_fraction: float = TEST_FRACTION,
    validation_fraction: float = VALIDATION_FRACTION,
    seed: int = 0,
) -> tuple[list[str], list[str]]:
    """(sentence, next sentence) texts from Wikipedia articles held out of training (§20.7).

    ``split="test"``: the test articles of ``chapter20.capstone.views.article_splits`` with the
    same fractions and ``seed`` that the training documents use, so no article here was trained
    on; ``"validation"``: the validation articles, on which choices are made (never trained on
    either). Pairs do not overlap (``chapter20.core.corpora.next_sentence_pairs``); tokens are
    joined by spaces. ``limit``: the first that many pairs (None: all).
    """
    if limit is not None:
        limit = check_int("limit", limit, 1)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if split == "validation" and not validation_fraction:
        raise ValueError("split='validation' needs validation_fraction > 0")
    _, validation, test = article_splits(test_fraction, validation_fraction, seed=seed)
    pairs = next_sentence_pairs(test if split == "test" else validation)
    if limit is not None:
        pairs = pairs[:limit]
    return [" ".join(a) for a, _ in pairs], [" ".join(b) for _, b in pairs]


def encoder_scorer(encode: Encode) -> Scorer:
    """The scorer of an encoder (§20.7): the cosine similarity of its vectors,
    ``score(queries, candidates) -> [n, m]`` float64. Texts are encoded shortest first, so that
    each batch the encoder pads holds texts of similar length (the vectors are the same; only
    the padding, which a bag ignores, shrinks)."""
    if not callable(encode):
        raise TypeError(f"encode must be callable, got {type(encode).__name__}")

    def vectors(texts: list[str]) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        encoded = _numpy(encode([texts[i] for i in order]))
        out = np.empty_like(encoded)
        out[order] = encoded
        return out

    def score(queries: list[str], candidates: list[str]) -> np.ndarray:
        if queries is candidates:
            return cosine_matrix(vectors(queries))
        return cosine_matrix(vectors(queries), vectors(candidates))

    return score


def retrieval_recall(
    encode: Encode, anchors: list[str], positives: list[str], ks: Sequence[int] = (1, 10)
) -> dict[str, float]:
    """Recall@k of each anchor's own positive among all ``positives`` by cosine similarity,
    and chance (``k / len(positives)``), as ``{"recall@k": .., "chance@k": ..}`` (§20.7).
    A tie with the true positive counts against it (no credit for a constant encoder)."""
    _check_pairs(anchors, positives)
    metrics = retrieval_metrics(encoder_scorer(encode)(anchors, positives), ks)
    return {key: value for key, value in metrics.items() if key.startswith(("recall@", "chance@"))}


def _check_pairs(anchors: list[str], positives: list[str]) -> None:
    if len(anchors) != len(positives):
        raise ValueError(f"{len(anchors)} anchors but {len(positives)} positives")
    if len(anchors) < 2:
        raise ValueError("retrieval needs at least 2 pairs")


def evaluate_scores(
    score: Scorer, retrieval: tuple[list[str], list[str]], *, cosine: bool = True
) -> dict[str, float]:
    """Every §20.7 figure of one scorer, as a flat dict: Lee Pearson and Spearman
    (``lee_pearson``, ``lee_spearman``; NaN for a scorer that is not a similarity, ``cosine``
    False, e.g. BM25), the retrieval metrics of ``chapter20.capstone.metrics.retrieval_metrics``
    on ``retrieval`` (anchors, positives) with their chance levels, and, for cosine scorers, the
    geometry of the positives' space (alignment, uniformity, mean cosine)."""
    if not callable(score):
        raise TypeError(f"score must be callable, got {type(score).__name__}")
    anchors, positives = retrieval
    _check_pairs(anchors, positives)
    out = {"lee_pearson": float("nan"), "lee_spearman": float("nan")}
    if cosine:
        documents = lee_documents()
        lee = lee_score(score(documents, documents))
        out.update(lee_pearson=lee.pearson, lee_spearman=lee.spearman)
    pairs = score(anchors, positives)
    out.update(retrieval_metrics(pairs))
    if cosine:
        out.update(geometry(pairs, score(positives, positives)))
    return out


def _numpy(x) -> np.ndarray:
    return np.asarray(x.detach().cpu().float() if isinstance(x, torch.Tensor) else x)


# --------------------------------------------------------------------------------------------
# Reading a study's runs: what training adds, when to stop, where gains stop, an effect's noise
# --------------------------------------------------------------------------------------------


def early_stopping(
    curves: pd.DataFrame,
    rule: EarlyStopping,
    *,
    report: Sequence[str] = ("mrr", "recall@1", "lee_pearson"),
) -> pd.DataFrame:
    """§20.5's early stopping replayed over each run (init, seed) of ``curves``: the same
    :class:`~chapter20.training.early_stopping.EarlyStopper` a live run uses walks its
    evaluations in step order (the start included) and stops where that run would have. One
    row per run: the step it stops at and the best step (whose weights it keeps), the share of
    the run's steps saved, and each ``report`` column at the best step and at the run's end."""
    if not isinstance(rule, EarlyStopping) or not rule.enabled:
        raise ValueError(f"rule must be an EarlyStopping with a patience, got {rule!r}")
    rows = []
    for (init, seed), run in curves.groupby(["init", "seed"], sort=False):
        run = run.sort_values("step").set_index("step", drop=False)
        stopper = EarlyStopper(rule)
        for step, record in run.iterrows():
            stopper.observe(int(step), record.to_dict())
            if stopper.stopped:
                break
        total = int(run["step"].iloc[-1])
        stop = stopper.stopped_at if stopper.stopped else total
        row = {"init": init, "seed": seed, "stop_step": int(stop),
               "best_step": int(stopper.best_step), "steps": total,
               "saved": 1 - stop / total if total else 0.0}  # fmt: skip
        for column in report:
            row[f"{column}_kept"] = run.loc[stopper.best_step, column]
            row[f"{column}_end"] = run[column].iloc[-1]
        rows.append(row)
    return pd.DataFrame(rows)


def past_start(frame: pd.DataFrame, start: pd.DataFrame, mode: str, column: str = "recall@1"):
    """For each batch of ``mode``'s runs of a batch study (``frame``: a row per ``mode``,
    ``batch`` and ``seed``): ``column``'s mean ± std over seeds next to the untrained
    start's (:func:`untrained_start`), and ``past_start``, whether the runs beat the
    start by more than twice the larger standard deviation (``beyond_noise``). A batch whose runs
    fall short of that stayed at the untrained level and carries no trend (§20.6; C01)."""
    runs = frame[frame["mode"] == mode]
    if runs.empty:
        raise ValueError(f"mode must be one of {sorted(set(frame['mode']))}, got {mode!r}")
    both = pd.concat([start, runs]).assign(batch=lambda f: f["batch"].astype(str))
    summary = summarize_seeds(both, by="batch", columns=(column,))
    out = summary[summary["batch"] != "0"].copy()
    out["untrained_mean"] = summary.loc[summary["batch"] == "0", f"{column}_mean"].iloc[0]
    out["past_start"] = [
        beyond_noise(summary, b, "0", by="batch", column=column) for b in out["batch"]
    ]
    return out.assign(batch=out["batch"].astype(int)).reset_index(drop=True)


def saturation_batch(frame: pd.DataFrame, mode: str, column: str = "recall@1") -> int:
    """Where gains stop: the smallest batch of ``mode``'s runs that no larger batch beats by
    more than twice the larger of the two standard deviations over seeds
    (``chapter20.core.seed_statistics.beyond_noise``). The largest batch if every step up
    helps."""
    runs = frame[frame["mode"] == mode]
    if runs.empty:
        raise ValueError(f"mode must be one of {sorted(set(frame['mode']))}, got {mode!r}")
    summary = summarize_seeds(
        runs.assign(batch=runs["batch"].astype(str)), by="batch", columns=(column,)
    )
    sizes = sorted(int(b) for b in summary["batch"])
    for i, size in enumerate(sizes):
        if not any(
            beyond_noise(summary, str(b), str(size), by="batch", column=column)
            for b in sizes[i + 1 :]
        ):
            return size
    return sizes[-1]


def ablation_summary(frame: pd.DataFrame, column: str = "mrr") -> pd.DataFrame:
    """Per variant of an ablation (``frame``: a row per ``variant`` and seed, the reference
    variant named ``"composed"``): mean and std of ``column`` over seeds, its effect (the
    variant's mean minus the composed step's), the noise (twice the larger of the two seed
    standard deviations) and whether the effect is beyond it (§20.6)."""
    stats = frame.groupby("variant", sort=False)[column].agg(["mean", "std", "count"])
    base = stats.loc["composed"]
    out = stats.rename(columns={"count": "seeds"}).reset_index()
    out["effect"] = out["mean"] - base["mean"]
    out["noise"] = 2 * np.maximum(out["std"].fillna(0.0), base["std"])
    out["beyond_noise"] = out["effect"].abs() > out["noise"]
    return out
