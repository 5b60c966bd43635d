"""Vocabulary and compression, run and measured: the experiments behind notebook 10 (the note on
efficient embedding training, topic 3; claims C28–C30).

- the note's PCA example (C28): Wikipedia sentences as sparse bag-of-words rows over a
  10,000-word vocabulary, fed to a learned layer directly (``nn.Linear`` on the densified rows,
  or ``nn.EmbeddingBag`` on the sparse ones) or through a fixed PCA projection to 300
  dimensions: :func:`bag_of_words_data`, :func:`compress_bag_of_words`,
  :func:`projection_equivalence` (the proofs), :func:`sparse_projection_benchmark` (bytes and
  step time), :func:`projection_accuracy` (does the compressed input keep the signal?);
- PCA of word vectors against a word-similarity score (C28 applied to embeddings):
  :func:`pca_quality_curve`, which takes any ``(words, vectors)`` and a scoring function;
- subword vectors composed into word vectors (C30's quality side): :func:`compose_word_vectors`,
  trained and scored over seeds by :func:`subword_quality` and :func:`subword_summary`;
- the figures of notebook 10 and ``benchmark()`` for the command line.

The package side (pruning, BPE, ``pca_compress``) is ``chapter20.vocab.vocabulary``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from chapter20.capstone.evaluation import summarize_seeds
from chapter20.core.checks import check_int, check_real
from chapter20.core.corpora import wiki_sentences, word_similarity
from chapter20.core.device import get_device, set_seed, synchronize
from chapter20.core.measure import (
    format_bytes,
    gradients_of,
    tensor_bytes,
    time_interleaved,
)
from chapter20.core.plotting import new_figure, new_panels
from chapter20.vocab.vocabulary import (
    BPETokenizer,
    PCAResult,
    Vocabulary,
    build_vocab,
    pca_compress,
)

__all__ = [
    "VARIANTS",
    "BagOfWordsData",
    "CompressedInput",
    "ProjectionModel",
    "bag_of_words_data",
    "benchmark",
    "break_even_out_dim",
    "compose_word_vectors",
    "compress_bag_of_words",
    "pca_quality_curve",
    "plot_bpe",
    "plot_explained_variance",
    "plot_pca_quality",
    "plot_projection",
    "plot_pruning",
    "projection_accuracy",
    "projection_equivalence",
    "sparse_projection_benchmark",
    "SubwordRuns",
    "subword_quality",
    "subword_summary",
]

VARIANTS = (
    "dense_linear",
    "embedding_bag",
    "embedding_bag_sparse",
    "pca_online",
    "pca_precomputed",
)
"""How the embedding layer reads a bag-of-words row (C28):

- ``dense_linear``: ``nn.Linear(V, D)`` on the row densified to V floats;
- ``embedding_bag``: ``nn.EmbeddingBag(V, D, mode="sum")`` on the row's word ids and counts
  (the same function as ``dense_linear``, never densified); its gradient is a dense V × D
  matrix and Adam updates every row every step;
- ``embedding_bag_sparse``: the same layer with ``sparse=True`` and ``torch.optim.SparseAdam``:
  only the rows of the batch's words get a gradient and an update (the head keeps Adam);
- ``pca_online``: the fixed PCA projection V → k applied to the sparse row inside the step, then
  a learned ``nn.Linear(k, D)``;
- ``pca_precomputed``: the same, with the projection applied once to the data set beforehand
  (the note's "compress before the embedding layer": the model only sees k-dim rows).
"""

_INPUTS = {
    "dense_linear": "dense {V:,}-dim rows",
    "embedding_bag": "sparse {V:,}-dim rows (ids + counts)",
    "embedding_bag_sparse": "sparse {V:,}-dim rows, sparse gradients",
    "pca_online": "sparse {V:,}-dim rows, projected to {k} in the step",
    "pca_precomputed": "{k}-dim rows projected beforehand",
}


# --------------------------------------------------------------------------------------------
# Data: sentences as bag-of-words rows
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BagOfWordsData:
    """Wikipedia sentences as sparse bag-of-words rows, labelled with their article (C28).

    ``train``/``test``: sparse COO float32 ``[sentences, len(vocab)]`` count matrices;
    ``train_labels``/``test_labels``: the article index of each sentence (int64); the
    vocabulary holds the most frequent words of the training sentences only.
    """

    vocab: Vocabulary
    train: torch.Tensor
    test: torch.Tensor
    train_labels: torch.Tensor
    test_labels: torch.Tensor
    n_classes: int

    @property
    def input_dim(self) -> int:
        """Width of a bag-of-words row (the vocabulary size)."""
        return len(self.vocab)

    def describe(self) -> str:
        """One deterministic line about the data set."""
        nnz = self.train._nnz() / self.train.shape[0]
        return (
            f"{self.train.shape[0]:,} training and {self.test.shape[0]:,} test sentences from "
            f"{self.n_classes} articles; {self.input_dim:,}-word vocabulary; "
            f"{nnz:.1f} non-zeros per row ({nnz / self.input_dim:.2%} dense)"
        )


def bag_of_words_data(
    vocab_size: int = 10_000,
    *,
    test_fraction: float = 0.1,
    seed: int = 0,
    limit_articles: int | None = None,
    binary: bool = False,
) -> BagOfWordsData:
    """The note's sparse input (topic 3, C28): every sentence of the Wikipedia sample as a
    bag-of-words row over the ``vocab_size`` most frequent training words (word counts, or 0/1
    with ``binary``), labelled by its article. Sentences are split at random (seeded) into
    train and test; the vocabulary sees the training side only. Warns when the training
    sentences have fewer than ``vocab_size`` distinct words."""
    vocab_size = check_int("vocab_size", vocab_size, 1)
    fraction = check_real("test_fraction", test_fraction, finite=True)
    if not 0 < fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    articles = wiki_sentences(limit_articles)
    sentences = [s for article in articles for s in article]
    labels = np.array([i for i, article in enumerate(articles) for _ in article], dtype=np.int64)
    order = np.random.default_rng(check_int("seed", seed, 0)).permutation(len(sentences))
    n_test = round(fraction * len(sentences))
    if not 1 <= n_test < len(sentences):
        raise ValueError(f"test_fraction={test_fraction} leaves no sentence on one side")
    test_idx, train_idx = np.sort(order[:n_test]), np.sort(order[n_test:])
    train_sentences = [sentences[i] for i in train_idx]
    vocab = build_vocab(train_sentences, min_count=1, max_size=vocab_size)
    if len(vocab) < vocab_size:
        warnings.warn(
            f"vocab_size={vocab_size} but the training sentences have only {len(vocab)} "
            "distinct words",
            stacklevel=2,
        )
    return BagOfWordsData(
        vocab=vocab,
        train=vocab.bag_of_words(train_sentences, binary=binary),
        test=vocab.bag_of_words([sentences[i] for i in test_idx], binary=binary),
        train_labels=torch.from_numpy(labels[train_idx]),
        test_labels=torch.from_numpy(labels[test_idx]),
        n_classes=len(articles),
    )


@dataclass(frozen=True)
class CompressedInput:
    """A PCA projection fitted on the training rows and the rows it produces (C28).

    ``fit_seconds`` is the one-off cost of the fit (one run, wall clock); ``train_z`` and
    ``test_z`` are the dense k-dim rows (``pca.transform`` of the sparse matrices).
    """

    pca: PCAResult
    fit_seconds: float
    train_z: torch.Tensor
    test_z: torch.Tensor

    def describe(self) -> str:
        """One line: k, explained variance and how it was computed (deterministic)."""
        kept = float(self.pca.explained_variance_ratio.sum())
        return (
            f"PCA {self.pca.input_dim:,} → {self.pca.k} dims ({self.pca.method}): "
            f"{kept:.1%} of the variance kept"
        )


def compress_bag_of_words(
    data: BagOfWordsData, k: int = 300, *, seed: int = 0, niter: int = 2
) -> CompressedInput:
    """Fit :func:`chapter20.vocab.vocabulary.pca_compress` on ``data.train`` (sparse, never
    densified)
    and project both splits to ``k`` dimensions; the fit is timed once (C28)."""
    start = time.perf_counter()
    pca = pca_compress(data.train, k, seed=seed, niter=niter)
    synchronize(pca.components.device)
    seconds = time.perf_counter() - start
    return CompressedInput(pca, seconds, pca.transform(data.train), pca.transform(data.test))


# --------------------------------------------------------------------------------------------
# Models and batches
# --------------------------------------------------------------------------------------------


class ProjectionModel(nn.Module):
    """An embedding layer over a bag-of-words row, then a linear classifier (C28).

    ``kind`` is one of :data:`VARIANTS`. The embedding layer maps the row to ``out_dim``
    features without a bias (``embedding_bag`` and ``dense_linear`` compute the same function
    when ``layer.weight`` of one is the transpose of the other's); the PCA variants hold the
    projection as buffers (fixed: no gradient, no optimizer state).
    """

    def __init__(
        self,
        kind: str,
        input_dim: int,
        out_dim: int,
        n_classes: int,
        pca: PCAResult | None = None,
    ):
        super().__init__()
        if kind not in VARIANTS:
            raise ValueError(f"kind must be one of {VARIANTS}, got {kind!r}")
        input_dim = check_int("input_dim", input_dim, 1)
        out_dim = check_int("out_dim", out_dim, 1)
        n_classes = check_int("n_classes", n_classes, 2)
        self.kind = kind
        if kind.startswith("pca"):
            if pca is None:
                raise ValueError(f"kind={kind!r} needs the fitted pca")
            if pca.input_dim != input_dim:
                raise ValueError(f"pca has {pca.input_dim} input dims, input_dim={input_dim}")
            if kind == "pca_online":
                self.register_buffer("components_t", pca.components.T.contiguous())
                self.register_buffer("shift", pca.mean @ pca.components.T)
            self.layer = nn.Linear(pca.k, out_dim, bias=False)
        elif kind.startswith("embedding_bag"):
            sparse = kind == "embedding_bag_sparse"
            self.layer = nn.EmbeddingBag(input_dim, out_dim, mode="sum", sparse=sparse)
        else:
            self.layer = nn.Linear(input_dim, out_dim, bias=False)
        self.head = nn.Linear(out_dim, n_classes)

    def embed(self, *inputs: torch.Tensor) -> torch.Tensor:
        """The ``out_dim`` features of a batch (inputs as produced by ``_Batches``)."""
        if self.kind.startswith("embedding_bag"):
            ids, offsets, weights = inputs
            return self.layer(ids, offsets, per_sample_weights=weights)
        (x,) = inputs
        if self.kind == "pca_online":
            x = torch.sparse.mm(x, self.components_t) - self.shift
        return self.layer(x)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Class logits ``[batch, n_classes]``."""
        return self.head(self.embed(*inputs))


class _Batches:
    """Rows of a coalesced sparse matrix (and its PCA rows) in the form each variant reads."""

    def __init__(self, matrix: torch.Tensor, z: torch.Tensor | None, device: torch.device):
        indices = matrix.indices().cpu().numpy()
        self.n, self.dim = matrix.shape
        self.cols = indices[1]
        self.values = matrix.values().cpu().numpy()
        self.indptr = np.searchsorted(indices[0], np.arange(self.n + 1))
        self.z = z
        self.device = device

    def make(self, kind: str, rows: np.ndarray) -> tuple[torch.Tensor, ...]:
        if kind == "pca_precomputed":
            return (self.z[torch.from_numpy(rows).to(self.z.device)].to(self.device),)
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        lengths = ends - starts
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        flat = np.repeat(starts - offsets, lengths) + np.arange(lengths.sum())
        ids = torch.from_numpy(self.cols[flat]).to(self.device)
        weights = torch.from_numpy(self.values[flat]).to(self.device)
        if kind.startswith("embedding_bag"):
            return ids, torch.from_numpy(offsets).to(self.device), weights
        batch_rows = torch.from_numpy(np.repeat(np.arange(len(rows)), lengths)).to(self.device)
        shape = (len(rows), self.dim)
        if kind == "dense_linear":
            dense = torch.zeros(shape, dtype=weights.dtype, device=self.device)
            return (dense.index_put_((batch_rows, ids), weights, accumulate=True),)
        sparse = torch.sparse_coo_tensor(
            torch.stack([batch_rows, ids]),
            weights,
            shape,
            is_coalesced=True,
            check_invariants=False,  # built from a coalesced matrix: valid by construction
        )
        return (sparse,)


def _model(kind, data: BagOfWordsData, compressed, out_dim, seed, device) -> ProjectionModel:
    set_seed(seed)
    pca = compressed.pca if compressed is not None else None
    model = ProjectionModel(kind, data.input_dim, out_dim, data.n_classes, pca=pca)
    return model.to(device)


def _optimizers(model: ProjectionModel, lr: float) -> list[torch.optim.Optimizer]:
    """Adam for every parameter; SparseAdam for a sparse-gradient EmbeddingBag."""
    if model.kind == "embedding_bag_sparse":
        return [
            torch.optim.SparseAdam(list(model.layer.parameters()), lr=lr),
            torch.optim.Adam(model.head.parameters(), lr=lr),
        ]
    return [torch.optim.Adam(model.parameters(), lr=lr)]


def _check_variants(variants: Sequence[str], compressed) -> list[str]:
    variants = list(variants)
    if not variants or any(v not in VARIANTS for v in variants):
        raise ValueError(f"variants must be a non-empty subset of {VARIANTS}, got {variants}")
    if compressed is None and any(v.startswith("pca") for v in variants):
        raise ValueError("the pca variants need compressed=compress_bag_of_words(data, k)")
    return variants


# --------------------------------------------------------------------------------------------
# Proofs, bytes and time, accuracy
# --------------------------------------------------------------------------------------------


def projection_equivalence(
    data: BagOfWordsData,
    compressed: CompressedInput,
    *,
    rows: int = 64,
    out_dim: int = 16,
    seed: int = 0,
) -> pd.DataFrame:
    """What must be equal in the C28 experiment, checked on ``rows`` training rows (CPU):

    - ``nn.EmbeddingBag`` (sum, counts as weights) on the sparse rows == ``nn.Linear`` on the
      densified rows, forward and weight gradient, with the same weights;
    - the PCA projection applied inside the step == applied beforehand (``pca_online`` ==
      ``pca_precomputed``);
    - ``pca.transform`` of the sparse rows == of the dense rows.

    Returns ``check, max_abs_diff, tolerance`` (float32 rounding: sums of up to ``rows``
    non-zeros in different orders), for ``measure.format_difference``.
    """
    rows = check_int("rows", rows, 1)
    cpu = torch.device("cpu")
    pca = compressed.pca.to(cpu)
    batches = _Batches(data.train, compressed.train_z.to(cpu), cpu)
    sel = np.arange(min(rows, data.train.shape[0]))
    bag = _model("embedding_bag", data, None, out_dim, seed, cpu)
    linear = _model("dense_linear", data, None, out_dim, seed, cpu)
    with torch.no_grad():
        linear.layer.weight.copy_(bag.layer.weight.T)
        linear.head.load_state_dict(bag.head.state_dict())
    labels = data.train_labels[sel]
    out_bag = bag(*batches.make("embedding_bag", sel))
    out_lin = linear(*batches.make("dense_linear", sel))
    F.cross_entropy(out_bag, labels).backward()
    F.cross_entropy(out_lin, labels).backward()
    online = ProjectionModel("pca_online", data.input_dim, out_dim, data.n_classes, pca)
    pre = ProjectionModel("pca_precomputed", data.input_dim, out_dim, data.n_classes, pca)
    pre.layer.load_state_dict(online.layer.state_dict())
    pre.head.load_state_dict(online.head.state_dict())
    with torch.no_grad():
        out_online = online(*batches.make("pca_online", sel))
        out_pre = pre(*batches.make("pca_precomputed", sel))
    sparse_rows = batches.make("pca_online", sel)[0]
    z_sparse = pca.transform(sparse_rows)
    z_dense = pca.transform(sparse_rows.to_dense())

    def diff(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.detach() - b.detach()).abs().max())

    records = [
        ("EmbeddingBag(sparse) == Linear(dense): output", diff(out_bag, out_lin), 1e-5),
        (
            "EmbeddingBag(sparse) == Linear(dense): weight gradient",
            diff(bag.layer.weight.grad, linear.layer.weight.grad.T),
            1e-6,
        ),
        ("PCA in the step == PCA beforehand: output", diff(out_online, out_pre), 1e-4),
        ("pca.transform(sparse) == pca.transform(dense)", diff(z_sparse, z_dense), 1e-4),
    ]
    return pd.DataFrame(records, columns=["check", "max_abs_diff", "tolerance"])


def break_even_out_dim(input_dim: int, k: int) -> dict[str, float]:
    """The output width D above which the fixed projection V → k (+ a learned k × D layer) is
    smaller than a learned V × D layer (C28), counting float32 elements:

    - ``weights``: ``V·D > V·k + k·D``  ⇔  ``D > V·k / (V − k)``;
    - ``training_state`` (weights + gradients + Adam's two moments for the learned part,
      the fixed projection once): ``4·V·D > V·k + 4·k·D``  ⇔  ``D > V·k / (4·(V − k))``.
    """
    input_dim, k = check_int("input_dim", input_dim, 2), check_int("k", k, 1)
    if k >= input_dim:
        raise ValueError(f"k must be < input_dim ({input_dim}), got {k}")
    return {
        "weights": input_dim * k / (input_dim - k),
        "training_state": input_dim * k / (4 * (input_dim - k)),
    }


def sparse_projection_benchmark(
    data: BagOfWordsData,
    compressed: CompressedInput | None = None,
    *,
    variants: Sequence[str] = VARIANTS,
    out_dim: int = 128,
    batch_size: int = 256,
    lr: float = 1e-3,
    warmup: int = 3,
    repeat: int = 15,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> pd.DataFrame:
    """Bytes and step time of each way to feed the sparse input to a learned layer (C28).

    One training step = forward, cross-entropy on the article label, backward, Adam step, on
    a batch of ``batch_size`` random training rows (a fresh batch each call, same batches for
    every variant); the variants are timed interleaved (``measure.time_interleaved``).
    Columns: ``variant``, ``input``; ``layer_params`` and ``layer_bytes`` (the learned
    embedding layer); ``fixed_bytes`` (the projection held as buffers); ``gradient_bytes`` and
    ``optimizer_bytes`` (measured after a step, whole model); ``state_bytes`` (parameters,
    fixed projection, gradients and optimizer state of the whole model: what a training step
    holds besides activations); ``dataset_bytes`` (the training inputs as stored: sparse, or
    dense k-dim rows once projected beforehand); ``step_ms`` (median) and
    ``time_vs_embedding_bag``; ``fit_s`` (the PCA fit, a one-off cost; NaN without PCA).
    The fixed projection of ``pca_precomputed`` counts too: it is needed to embed new rows.
    """
    variants = _check_variants(variants, compressed)
    batch_size = check_int("batch_size", batch_size, 1)
    dev = torch.device(device) if device is not None else get_device()
    z = compressed.train_z if compressed is not None else None
    batches = _Batches(data.train, z, dev)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    n_batches = 4  # distinct batches, cycled: enough to defeat caching of one batch
    selections = [rng.choice(batches.n, size=batch_size, replace=False) for _ in range(n_batches)]
    labels = [data.train_labels[torch.from_numpy(s)].to(dev) for s in selections]
    k = compressed.pca.k if compressed is not None else 0
    steps, models, optimizers = {}, {}, {}
    for kind in variants:
        model = _model(kind, data, compressed, out_dim, seed, dev)
        optimizer = _optimizers(model, lr)
        inputs = [batches.make(kind, s) for s in selections]
        counter = iter(range(10**9))

        def step(model=model, optimizer=optimizer, inputs=inputs, counter=counter):
            i = next(counter) % n_batches
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(*inputs[i]), labels[i]).backward()
            for opt in optimizer:
                opt.step()

        step()
        models[kind], optimizers[kind], steps[kind] = model, optimizer, step
    sizes = {
        kind: (tensor_bytes(gradients_of(models[kind])), tensor_bytes(optimizers[kind]))
        for kind in variants
    }
    timings = time_interleaved(steps, warmup=warmup, repeat=repeat, device=dev)
    records = []
    for kind in variants:
        model = models[kind]
        if kind == "pca_online":
            fixed = tensor_bytes(list(model.buffers()))
        elif kind == "pca_precomputed":
            # The model holds no projection, but it must be kept to embed any new row.
            fixed = compressed.pca.projection_bytes
        else:
            fixed = 0
        gradient_bytes, optimizer_bytes = sizes[kind]
        params = tensor_bytes(list(model.parameters()))
        records.append(
            {
                "variant": kind,
                "input": _INPUTS[kind].format(V=data.input_dim, k=k),
                "layer_params": sum(p.numel() for p in model.layer.parameters()),
                "layer_bytes": tensor_bytes(model.layer),
                "fixed_bytes": fixed,
                "gradient_bytes": gradient_bytes,
                "optimizer_bytes": optimizer_bytes,
                "state_bytes": params + fixed + gradient_bytes + optimizer_bytes,
                "dataset_bytes": tensor_bytes(
                    compressed.train_z if kind == "pca_precomputed" else data.train
                ),
                "step_ms": timings[kind].median * 1e3,
                "fit_s": compressed.fit_seconds if kind.startswith("pca") else float("nan"),
            }
        )
    frame = pd.DataFrame(records)
    if "embedding_bag" in variants:
        base = frame.loc[frame["variant"] == "embedding_bag", "step_ms"].iloc[0]
        frame["time_vs_embedding_bag"] = frame["step_ms"] / base
    return frame


def projection_accuracy(
    data: BagOfWordsData,
    compressed: CompressedInput | None = None,
    *,
    variants: Sequence[str] = ("embedding_bag", "pca_precomputed"),
    out_dim: int = 128,
    epochs: int = 3,
    batch_size: int = 256,
    lr: float = 3e-3,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> pd.DataFrame:
    """Does the compressed input keep the signal? Train each variant to predict a sentence's
    article from its bag of words and report held-out accuracy (C28).

    Same seed, same batches and same optimizer (Adam) for every variant. Columns:
    ``variant``, ``train_loss`` (mean over the last epoch), ``test_accuracy``, and
    ``chance_accuracy`` (the most frequent test article's share).
    """
    variants = _check_variants(variants, compressed)
    epochs = check_int("epochs", epochs, 1)
    batch_size = check_int("batch_size", batch_size, 1)
    dev = torch.device(device) if device is not None else get_device()
    z_train = compressed.train_z if compressed is not None else None
    z_test = compressed.test_z if compressed is not None else None
    train, test = _Batches(data.train, z_train, dev), _Batches(data.test, z_test, dev)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    orders = [rng.permutation(train.n) for _ in range(epochs)]
    test_labels = data.test_labels.to(dev)
    chance = float(torch.bincount(data.test_labels).max()) / len(data.test_labels)
    records = []
    for kind in variants:
        model = _model(kind, data, compressed, out_dim, seed, dev)
        optimizer = _optimizers(model, lr)
        for order in orders:
            losses = []
            for start in range(0, train.n, batch_size):
                sel = order[start : start + batch_size]
                model.zero_grad(set_to_none=True)
                loss = F.cross_entropy(
                    model(*train.make(kind, sel)),
                    data.train_labels[torch.from_numpy(sel)].to(dev),
                )
                loss.backward()
                for opt in optimizer:
                    opt.step()
                losses.append(float(loss.detach()))
        correct = 0
        with torch.no_grad():
            for start in range(0, test.n, 4096):
                sel = np.arange(start, min(start + 4096, test.n))
                pred = model(*test.make(kind, sel)).argmax(dim=1)
                correct += int((pred == test_labels[start : start + len(sel)]).sum())
        records.append(
            {
                "variant": kind,
                "train_loss": float(np.mean(losses)),
                "test_accuracy": correct / test.n,
                "chance_accuracy": chance,
            }
        )
    return pd.DataFrame(records)


# --------------------------------------------------------------------------------------------
# PCA of word vectors vs a quality score; subword vectors composed into word vectors
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubwordRuns:
    """C30's runs (:func:`subword_quality`): ``frame``, one row per seed and model (``"words"``
    or ``"bpe <size>"``): ``rows`` of the embedding matrix, ``rho_same_pairs`` (WordSim-353
    Spearman ρ on the pairs the word model knows), ``same_pairs``, ``rho_all_pairs`` and
    ``oov_pairs`` (pairs left out), ``seconds`` of training; ``word_model``: the first seed's
    word-level vectors (``chapter20.word2vec.vectors.WordVectors``), for later sections."""

    frame: pd.DataFrame
    word_model: Any


def subword_quality(
    train_articles: Sequence[Sequence[str]],
    sentences: Sequence[Sequence[str]],
    sizes: Sequence[int] = (4_000, 8_000),
    seeds: Sequence[int] = (1, 2, 3),
    *,
    min_count: int = 5,
    jobs: int = 1,
    **w2v: Any,
) -> SubwordRuns:
    """Word vectors vs composed BPE subword vectors, seed after seed (note, topic 3; C30).

    For each seed: word2vec (``chapter20.word2vec.trainer.train_word2vec`` with ``w2v``'s settings)
    on ``sentences`` pruned at ``min_count``, and for each BPE size (trained once on
    ``train_articles``) on the subwords of the same sentences; a word's subword vector is the mean
    of its pieces' (:func:`compose_word_vectors`). Both are scored on WordSim-353 on the same pairs
    (those the word model knows), the subword vectors also on every pair.

    ``jobs``: trainings run at once, in threads. On a CPU, two single-worker trainings of
    different models use two cores far better than one training with two Hogwild workers,
    whose threads fight over the same rows (the small BPE tables most of all); each run is
    deterministic for its seed whatever ``jobs`` is, with ``workers=1`` in ``w2v``."""
    from chapter20.vocab.vocabulary import train_bpe
    from chapter20.word2vec.trainer import train_word2vec
    from chapter20.word2vec.vectors import evaluate_word_pairs

    if not len(seeds):
        raise ValueError("seeds must name at least one seed")
    sizes = [check_int("sizes[i]", size, 257) for size in sizes]
    jobs = check_int("jobs", jobs, 1)
    table = word_similarity("wordsim353")
    pair_words = sorted(set(table["word1"]) | set(table["word2"]))
    bpes = {size: train_bpe(train_articles, size) for size in sizes}
    corpora = {"words": (sentences, min_count)}
    corpora.update(
        {f"bpe {size}": (bpe.tokenize_corpus(sentences), 1) for size, bpe in bpes.items()}
    )
    with ThreadPoolExecutor(jobs) as pool:
        runs = {
            (seed, name): pool.submit(train_word2vec, text, min_count=count, seed=seed, **w2v)
            for seed in seeds
            for name, (text, count) in corpora.items()
        }
        trained = {key: run.result() for key, run in runs.items()}
    records = []
    for (seed, name), model in trained.items():
        if name == "words":
            rows, same = len(model), evaluate_word_pairs(model.words, model.vectors)
            every = same
        else:
            bpe, vectors = bpes[int(name.split()[1])], (model.words, model.vectors)
            words = trained[seed, "words"].words
            rows = bpe.vocab_size
            same = evaluate_word_pairs(*compose_word_vectors(bpe, words, *vectors))
            every = evaluate_word_pairs(*compose_word_vectors(bpe, pair_words, *vectors))
        records.append({
            "seed": seed, "model": name, "rows": rows, "rho_same_pairs": same.spearman,
            "same_pairs": same.pairs - same.oov_pairs, "rho_all_pairs": every.spearman,
            "oov_pairs": every.oov_pairs, "seconds": model.stats.seconds,
        })  # fmt: skip
    return SubwordRuns(pd.DataFrame(records), trained[seeds[0], "words"])


def subword_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model of :func:`subword_quality`: ρ on the same pairs as mean ± standard deviation
    over seeds, ``delta`` (its ρ minus the word model's, seed by seed) as mean ± std, chance
    (the standard deviation of a chance ρ over the scored pairs, ``1 / sqrt(pairs - 1)``, mean
    0) and the weakest run in those standard deviations, rows and pairs left out."""
    words = frame[frame.model == "words"].set_index("seed")["rho_same_pairs"]
    frame = frame.assign(delta=frame.rho_same_pairs - frame.seed.map(words))
    stats = summarize_seeds(frame, by="model", columns=("rho_same_pairs", "delta", "rho_all_pairs"))
    grouped = frame.groupby("model", sort=False)
    chance_sd = 1.0 / np.sqrt(grouped["same_pairs"].min() - 1.0)
    out = stats.set_index("model")
    out["chance_sd"] = chance_sd
    out["weakest_in_chance_sds"] = grouped["rho_same_pairs"].min() / chance_sd
    out["rows"] = grouped["rows"].first()
    out["oov_pairs"] = grouped["oov_pairs"].max()
    return out


def plot_pruning(table: pd.DataFrame):
    """Pruning's saving and cost (C29): embedding-matrix size and held-out OOV vs min_count."""
    fig, (left, right) = new_panels(2, "Pruning rare words (Wikipedia sample)", figsize=(10, 4))
    left.plot(table["min_count"], table["matrix_bytes"] / 2**20, "o-")
    for row in table.itertuples():
        left.annotate(
            f"{row.kept_types:,} words",
            (row.min_count, row.matrix_bytes / 2**20),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=8,
        )
    left.set_xlim(0, table["min_count"].max() * 1.3)  # room for the last point's label
    left.set_xlabel("min_count")
    left.set_ylabel("embedding matrix (MiB)")
    left.set_title("matrix size")
    right.plot(table["min_count"], 100 * table["heldout_oov_rate"], "o-", color="#C44E52")
    right.set_xlabel("min_count")
    right.set_ylabel("held-out tokens out of vocabulary (%)")
    right.set_title("held-out OOV")
    return fig


def plot_bpe(table: pd.DataFrame):
    """BPE vocabulary size vs tokens per word, and held-out OOV of BPE vs a word vocabulary
    with the same number of rows (C30)."""
    fig, (left, right) = new_panels(2, "BPE subwords (Wikipedia sample)", figsize=(10, 4))
    left.plot(table["vocab_size"], table["tokens_per_word"], "o-")
    left.axhline(1.0, color="#8C8C8C", linestyle=":", label="one token per word")
    left.set_xscale("log")
    left.set_xlabel("BPE vocabulary size (entries)")
    left.set_ylabel("held-out tokens per word")
    left.set_title("sequence length")
    left.legend()
    right.plot(table["vocab_size"], 100 * table["word_vocab_oov_rate"], "o-", label="words")
    right.plot(table["vocab_size"], 100 * table["heldout_unk_rate"], "s-", label="BPE")
    right.set_xscale("log")
    right.set_xlabel("embedding rows")
    right.set_ylabel("held-out tokens out of vocabulary (%)")
    right.set_title("OOV at equal matrix size")
    right.legend()
    return fig


def plot_pca_quality(frame: pd.DataFrame, *, score_label: str = "WordSim-353 Spearman ρ"):
    """Explained variance and the quality score vs k, the uncompressed score as a line (C28)."""
    part = frame[frame["compressed"]]
    original = frame[~frame["compressed"]]
    fig, (left, right) = new_panels(2, "PCA-compressed word vectors", figsize=(10, 4))
    left.plot(part["k"], 100 * part["explained_variance"], "o-")
    left.set_xlabel("k (dimensions kept)")
    left.set_ylabel("explained variance (%)")
    left.set_title("variance kept")
    right.plot(part["k"], part["score"], "o-", label="compressed")
    if len(original):
        right.axhline(
            float(original["score"].iloc[0]),
            color="#8C8C8C",
            linestyle=":",
            label=f"original ({int(original['k'].iloc[0])} dims)",
        )
    right.set_xlabel("k (dimensions kept)")
    right.set_ylabel(score_label)
    right.set_title("quality")
    right.set_ylim(0, 1.15 * max(float(frame["score"].max()), 0.0) or 1.0)  # from 0: no zoom
    right.legend(loc="lower right")
    return fig


def plot_projection(table: pd.DataFrame):
    """Training-state bytes and step time per variant of the sparse-input layer (C28)."""
    fig, (left, right) = new_panels(2, "Sparse input: raw vs PCA-projected", figsize=(11, 4))
    labels = list(table["variant"])
    positions = np.arange(len(labels))
    parts = {
        "learned layer": table["layer_bytes"],
        "fixed projection": table["fixed_bytes"],
        "gradients": table["gradient_bytes"],
        "optimizer state": table["optimizer_bytes"],
    }
    bottom = np.zeros(len(labels))
    for name, values in parts.items():
        heights = np.asarray(values, dtype=float) / 2**20
        left.bar(positions, heights, bottom=bottom, label=name, width=0.7)
        bottom += heights
    left.set_xticks(positions, labels, rotation=30, ha="right")
    left.set_xlabel("how the layer reads the input")
    left.set_ylabel("bytes (MiB)")
    left.set_title("training state")
    left.legend(fontsize=8)
    right.bar(positions, table["step_ms"], width=0.7, color="#55A868")
    right.set_xticks(positions, labels, rotation=30, ha="right")
    right.set_xlabel("how the layer reads the input")
    right.set_ylabel("step time (ms, median)")
    right.set_title("forward + backward + Adam")
    return fig


def plot_explained_variance(pca: PCAResult, title: str = "Explained variance"):
    """Cumulative explained variance of a fitted PCA vs k."""
    fig, ax = new_figure(title, "k (dimensions kept)", "cumulative explained variance (%)")
    cumulative = 100 * pca.explained_variance_ratio.cumsum(0).cpu().numpy()
    ax.plot(np.arange(1, pca.k + 1), cumulative)
    return fig


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def benchmark() -> None:
    """The C28 measurement in one run: bag-of-words over 10,000 words, PCA to 300, four ways
    to feed it to a 128-wide layer: bytes and step time (for ``python -m chapter20 bench``)."""
    data = bag_of_words_data()
    print(data.describe())
    compressed = compress_bag_of_words(data, 300)
    print(f"{compressed.describe()}; fit {compressed.fit_seconds:.1f} s")
    table = sparse_projection_benchmark(data, compressed)
    for row in table.itertuples():
        print(
            f"  {row.variant:<16} layer {format_bytes(row.layer_bytes):>10}  "
            f"fixed {format_bytes(row.fixed_bytes):>10}  state {format_bytes(row.state_bytes):>10}"
            f"  step {row.step_ms:7.2f} ms ({row.time_vs_embedding_bag:.2f}× EmbeddingBag)"
        )
