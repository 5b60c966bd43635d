"""§20.6 The training signal of the capstone encoder: documents and random views.

Next-sentence pairs give each sentence one positive, once: a small encoder memorises the 11K
pairs of the Wikipedia sample within a minute and then gets worse on unseen text. This module
gets far more signal out of the same text:

- **documents as units**: the training side of the Wikipedia sample (:func:`article_splits`:
  whole articles are held out for testing and for validation), cut into passages of about
  ``passage_tokens`` tokens at sentence boundaries, plus the 300 ``lee_background`` news
  documents (:func:`training_documents`);
- **many views per document**: each step draws a batch of *distinct* documents and, for each,
  two independent random spans (lengths drawn between ``min_span`` and ``max_span``) with
  word dropout (:class:`ViewSampler`). A document yields a fresh pair every time it is drawn,
  so an epoch never repeats and no in-batch negative comes from the positive's own document;
- **lexical weighting**: inverse document frequencies of the training documents
  (:func:`idf_weights`), the initial token weights of a weighted bag of embeddings;
- the documents are tokenised by the tokenisers that travel with the saved encoder
  (``chapter20.vocab.tokenizers``: whole words or byte-level BPE subwords).

The sampler is resumable exactly: batch ``n`` depends only on ``(seed, n)``, so its state is the
step count (``state_dict`` / ``load_state_dict``, as ``chapter20.training.checkpoints`` expects).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from chapter20.core.checks import check_int, check_real
from chapter20.core.corpora import (
    PAD_ID,
    lee_background,
    train_test_split_articles,
    wiki_sentences,
)
from chapter20.core.device import seeded
from chapter20.vocab.tokenizers import Tokenizer, pad_batch

__all__ = [
    "SOURCES",
    "TEST_FRACTION",
    "VALIDATION_FRACTION",
    "article_splits",
    "ViewSampler",
    "encode_documents",
    "idf_weights",
    "lsa_word_vectors",
    "training_documents",
]

#: Corpora the training documents can come from.
SOURCES = ("wiki", "lee")
#: The share of the Wikipedia sample's articles held out for testing (the held-out retrieval).
TEST_FRACTION = 0.1
#: The share of the remaining articles held out for validation: choices (the recipe, LSI's
#: size, when to stop) are made on their next-sentence pairs, never on the test pairs or on Lee.
VALIDATION_FRACTION = 0.1


# --- documents ------------------------------------------------------------------------------


def _passages(article: Sequence[Sequence[str]], passage_tokens: int) -> list[list[str]]:
    """Consecutive sentences of one article grouped into passages of about ``passage_tokens``
    tokens (a passage closes once it reaches the size; a short tail joins the last one)."""
    passages: list[list[str]] = []
    current: list[str] = []
    for sentence in article:
        current.extend(sentence)
        if len(current) >= passage_tokens:
            passages.append(current)
            current = []
    if current:
        if passages and len(current) < passage_tokens // 2:
            passages[-1].extend(current)
        else:
            passages.append(current)
    return passages


def _check_fraction(name: str, value: float, *, zero: bool = False) -> float:
    value = check_real(name, value, finite=True)
    if not ((value >= 0 if zero else value > 0) and value < 1):
        raise ValueError(f"{name} must be in {'[0' if zero else '(0'}, 1), got {value}")
    return value


def article_splits(
    test_fraction: float = TEST_FRACTION,
    validation_fraction: float = VALIDATION_FRACTION,
    *,
    seed: int = 0,
) -> tuple[list, list, list]:
    """The Wikipedia sample's articles (``wiki_sentences()``) as ``(train, validation, test)``
    (§20.6): ``test_fraction`` of the articles held out for testing
    (``chapter20.core.corpora.train_test_split_articles``), then ``validation_fraction`` of the
    rest held out for validation (none if 0). Whole articles, so no sentence of a held-out
    article is ever trained on; deterministic for ``seed``."""
    _check_fraction("test_fraction", test_fraction)
    _check_fraction("validation_fraction", validation_fraction, zero=True)
    seed = check_int("seed", seed, 0)
    train, test = train_test_split_articles(wiki_sentences(), test_fraction, seed=seed)
    if not validation_fraction:
        return train, [], test
    train, validation = train_test_split_articles(train, validation_fraction, seed=seed)
    return train, validation, test


def training_documents(
    sources: Sequence[str] = SOURCES,
    *,
    passage_tokens: int = 200,
    test_fraction: float = TEST_FRACTION,
    validation_fraction: float = VALIDATION_FRACTION,
    seed: int = 0,
    fraction: float = 1.0,
) -> list[list[str]]:
    """The documents the encoder trains on, as token lists (§20.6).

    ``"wiki"``: the training side of :func:`article_splits` (``test_fraction``,
    ``validation_fraction``, ``seed``) — the articles that
    :func:`chapter20.capstone.evaluation.heldout_sentence_pairs` tests or validates on are never
    here — cut into passages of about ``passage_tokens`` tokens at sentence boundaries.
    ``"lee"``: the 300 ``lee_background`` documents, whole (none of them is a Lee test
    document). ``fraction`` < 1 keeps that share of the documents, drawn by ``seed`` and in
    their order; a smaller fraction's documents are a subset of a larger one's (the data-scaling
    study doubles the text without changing what it already had).
    """
    if isinstance(sources, str) or not set(sources) <= set(SOURCES) or not sources:
        raise ValueError(f"sources must be a non-empty subset of {SOURCES}, got {sources!r}")
    passage_tokens = check_int("passage_tokens", passage_tokens, 1)
    _check_fraction("test_fraction", test_fraction)
    _check_fraction("validation_fraction", validation_fraction, zero=True)
    seed = check_int("seed", seed, 0)
    documents: list[list[str]] = []
    if "wiki" in sources:
        train, _, _ = article_splits(test_fraction, validation_fraction, seed=seed)
        for article in train:
            documents.extend(_passages(article, passage_tokens))
    if "lee" in sources:
        documents.extend(list(doc) for doc in lee_background() if doc)
    fraction = check_real("fraction", fraction, finite=True)
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if fraction < 1:
        order = np.random.default_rng([seed, 1]).permutation(len(documents))
        kept = np.sort(order[: max(1, round(fraction * len(documents)))])
        documents = [documents[i] for i in kept]
    return documents


def encode_documents(documents: Sequence[Sequence[str]], tokenizer: Tokenizer) -> list[np.ndarray]:
    """Each document's ids; documents that encode to nothing are dropped."""
    encoded = [tokenizer.ids(document) for document in documents]
    return [ids for ids in encoded if len(ids)]


def idf_weights(
    documents: Sequence[np.ndarray], vocab_size: int, *, offset: float = 1.0, floor: float = 0.05
) -> torch.Tensor:
    """Inverse document frequency of every id, float32 ``[vocab_size]`` (§20.6):
    ``log(N / df) - offset`` over the ``N`` documents, at least ``floor``. As in TF-IDF, a word
    found everywhere says little about which document a text is from; ``offset = 1`` sends
    every word in more than ``N / e`` of the documents to the floor (a small positive weight, so
    a text of such words still has a vector). An id no document holds counts as in one; padding
    gets 0."""
    vocab_size = check_int("vocab_size", vocab_size, 1)
    offset = check_real("offset", offset, finite=True)
    floor = check_real("floor", floor, finite=True)
    if floor <= 0:
        raise ValueError(f"floor must be > 0, got {floor}")
    if not documents:
        raise ValueError("documents is empty: no frequencies to count")
    df = np.zeros(vocab_size, dtype=np.float64)
    for ids in documents:
        df[np.unique(ids)] += 1
    idf = np.maximum(np.log(len(documents) / np.maximum(df, 1)) - offset, floor)
    idf[PAD_ID] = 0.0
    return torch.from_numpy(idf.astype(np.float32))


# --- views ----------------------------------------------------------------------------------


class ViewSampler:
    """Batches of two random views of ``batch`` distinct documents (§20.6).

    For each document drawn: two spans, each of a length drawn uniformly from
    ``[min_span, max_span]`` (capped at the document's length) at a uniform random start,
    independently (they may overlap, as in independent cropping), then each token dropped with
    probability ``word_dropout`` (at least one is kept). Documents are drawn without
    replacement within a batch, with probability proportional to ``len ** length_power`` (0:
    uniform; 1: by tokens, so long documents give more views).

    ``next_batch()`` returns ``(anchors, positives)``, ``[batch, max_span]`` int64 padded with
    ``PAD_ID``. Batch ``n`` is a function of ``(seed, n)`` alone: ``state_dict()`` is the step,
    and a sampler restored from it continues with exactly the batches an uninterrupted one
    would draw. ``rank``/``world_size`` give each rank its slice of the global batch.
    ``fixed_views=True`` is the control: a document gives the same two views (and dropout)
    every time it is drawn, as a fixed pair dataset does.
    """

    def __init__(
        self,
        documents: Sequence[np.ndarray],
        batch: int,
        *,
        min_span: int = 16,
        max_span: int = 64,
        word_dropout: float = 0.1,
        length_power: float = 0.5,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        fixed_views: bool = False,
    ):
        self.fixed_views = bool(fixed_views)
        self.documents = [np.asarray(d, dtype=np.int64) for d in documents]
        if not self.documents or any(len(d) == 0 for d in self.documents):
            raise ValueError("documents must be a non-empty list of non-empty id arrays")
        self.batch = check_int("batch", batch, 1)
        if self.batch > len(self.documents):
            raise ValueError(
                f"batch must be <= the number of documents ({len(self.documents)}) so that "
                f"its documents are distinct, got {batch}"
            )
        self.min_span = check_int("min_span", min_span, 1)
        self.max_span = check_int("max_span", max_span, self.min_span)
        self.word_dropout = check_real("word_dropout", word_dropout, finite=True)
        if not 0 <= self.word_dropout < 1:
            raise ValueError(f"word_dropout must be in [0, 1), got {word_dropout}")
        # beyond ±10 the weights len ** power overflow or single out one document
        power = check_real("length_power", length_power, minimum=-10.0, maximum=10.0)
        self.seed = check_int("seed", seed, 0)
        self.world_size = check_int("world_size", world_size, 1)
        self.rank = check_int("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got {rank}")
        if self.batch % self.world_size:
            raise ValueError(f"batch ({batch}) must be divisible by world_size ({world_size})")
        lengths = np.array([len(d) for d in self.documents], dtype=np.float64)
        weights = lengths**power
        self.probabilities = weights / weights.sum()
        self.step = 0

    def _view(self, document: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        length = min(len(document), int(rng.integers(self.min_span, self.max_span + 1)))
        start = int(rng.integers(0, len(document) - length + 1))
        view = document[start : start + length]
        if self.word_dropout:
            keep = rng.random(length) >= self.word_dropout
            if not keep.any():
                keep[int(rng.integers(length))] = True
            view = view[keep]
        return view

    def _pair(self, i: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        if self.fixed_views:
            rng = np.random.default_rng([self.seed, i, 1])
        return self._view(self.documents[i], rng), self._view(self.documents[i], rng)

    def batch_at(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's ``(anchors, positives)`` of global batch ``step``."""
        rng = np.random.default_rng([self.seed, check_int("step", step, 0)])
        chosen = rng.choice(len(self.documents), self.batch, replace=False, p=self.probabilities)
        pairs = [self._pair(int(i), rng) for i in chosen]
        share = self.batch // self.world_size
        mine = pairs[self.rank * share : (self.rank + 1) * share]
        return (pad_batch([a for a, _ in mine], self.max_span),
                pad_batch([p for _, p in mine], self.max_span))  # fmt: skip

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch; advances the step."""
        out = self.batch_at(self.step)
        self.step += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step, "seed": self.seed, "batch": self.batch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("seed") != self.seed or state.get("batch") != self.batch:
            raise ValueError(
                f"sampler state is for seed {state.get('seed')}, batch {state.get('batch')}; "
                f"this sampler has seed {self.seed}, batch {self.batch}"
            )
        self.step = check_int("step", state["step"], 0)


def lsa_word_vectors(
    documents: Sequence[np.ndarray], weights: torch.Tensor, dim: int, *, seed: int = 0,
    iterations: int = 4,
) -> torch.Tensor:  # fmt: skip
    """Word vectors from the training documents alone, to initialise an embedding table
    (§20.6; the note's dimensionality reduction, topic 3): the top ``dim`` right singular
    vectors of the documents × vocabulary matrix of TF-IDF rows (counts times ``weights``,
    each row L2-normalised), i.e. the term loadings of latent semantic analysis, rescaled so
    that the mean row norm is 1. ``[len(weights), dim]`` float32; rows of ids that no document
    holds (and padding) are 0. Randomized SVD (``torch.svd_lowrank``), seeded.

    With these rows and ``weights`` as token weights, a weighted bag of embeddings starts as
    LSA's document vectors; contrastive training moves on from there."""
    vocab_size = len(weights)
    dim = check_int("dim", dim, 1)
    seed = check_int("seed", seed, 0)
    iterations = check_int("iterations", iterations, 0, 1_000)
    if dim > min(len(documents), vocab_size):
        raise ValueError(
            f"dim must be <= min(documents, vocabulary) = {min(len(documents), vocab_size)}"
        )
    rows, cols, values = [], [], []
    w = weights.detach().cpu().numpy().astype(np.float64)
    for i, ids in enumerate(documents):
        unique, counts = np.unique(ids, return_counts=True)
        tfidf = counts * w[unique]
        norm = np.linalg.norm(tfidf)
        if norm > 0:
            rows.append(np.full(len(unique), i))
            cols.append(unique)
            values.append(tfidf / norm)
    matrix = torch.sparse_coo_tensor(
        np.stack([np.concatenate(rows), np.concatenate(cols)]),
        torch.from_numpy(np.concatenate(values).astype(np.float32)),
        (len(documents), vocab_size),
        check_invariants=True,
    ).coalesce()
    iterations = check_int("iterations", iterations, 0)
    with seeded(check_int("seed", seed, 0)):  # the randomized SVD's draws, generators kept
        _, _, v = torch.svd_lowrank(matrix, q=dim, niter=iterations)
    unused = torch.ones(vocab_size, dtype=torch.bool)
    unused[torch.from_numpy(np.unique(np.concatenate(cols)))] = False
    v[unused] = 0.0  # exactly: randomized SVD leaves rounding noise there
    return (v / v.norm(dim=1)[~unused].mean()).contiguous()
