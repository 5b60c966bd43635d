"""The bag-of-words classification pipeline of the note on efficient embedding training, topic 3
(claim C28: compress a sparse input before the embedding layer).

The note's PCA example: Wikipedia sentences as sparse bag-of-words rows over a 10,000-word
vocabulary (:func:`bag_of_words_data`), optionally compressed by a PCA fitted on the training
rows (:func:`compress_bag_of_words`), read by a learned layer in one of the ways of
``chapter20.vocab.sparse_input`` (:func:`projection_model`) and trained, one step at a time
(:func:`classifier_step`), to predict each sentence's article: :func:`projection_accuracy`, the
held-out accuracy that says whether the compressed input keeps the signal. Notebook 10 proves,
times and compares these (``chapter20.labs.nb10_vocab``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from chapter20.core.checks import check_int, check_real
from chapter20.core.corpora import wiki_sentences
from chapter20.core.device import get_device, set_seed, synchronize
from chapter20.vocab.pca import PCAResult, pca_compress
from chapter20.vocab.sparse_input import VARIANTS, BagOfWordsBatches, ProjectionModel
from chapter20.vocab.vocabulary import Vocabulary, build_vocab

# pandas costs every torchrun worker half a second to import; only the accuracy table needs it.
if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "LAYER_WIDTH",
    "STEP_BATCH",
    "BagOfWordsData",
    "CompressedInput",
    "adam_optimizer",
    "bag_of_words_data",
    "check_variants",
    "classifier_step",
    "compress_bag_of_words",
    "projection_accuracy",
    "projection_model",
]

#: The width of the learned layer each variant feeds and the rows of one training step: the
#: defaults of :func:`projection_accuracy` and of notebook 10's timing of one step.
LAYER_WIDTH = 128
STEP_BATCH = 256


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
    """Fit :func:`chapter20.vocab.pca.pca_compress` on ``data.train`` (sparse, never
    densified) and project both splits to ``k`` dimensions; the fit is timed once (C28)."""
    start = time.perf_counter()
    pca = pca_compress(data.train, k, seed=seed, niter=niter)
    synchronize(pca.components.device)
    seconds = time.perf_counter() - start
    return CompressedInput(pca, seconds, pca.transform(data.train), pca.transform(data.test))


def projection_model(
    kind: str,
    data: BagOfWordsData,
    compressed: CompressedInput | None,
    out_dim: int,
    seed: int,
    device: torch.device | str,
) -> ProjectionModel:
    """The classifier of variant ``kind`` for ``data`` (C28): a :class:`ProjectionModel` with
    ``out_dim`` features (the fitted projection of ``compressed`` for the PCA variants),
    initialised right after ``set_seed(seed)``, so every variant starts from the same draws."""
    set_seed(seed)
    pca = compressed.pca if compressed is not None else None
    model = ProjectionModel(kind, data.input_dim, out_dim, data.n_classes, pca=pca)
    return model.to(device)


def adam_optimizer(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    """Adam over every parameter of ``model`` at ``lr``: the classifiers' optimizer (C28)."""
    lr = check_real("lr", lr, minimum=0.0, exclusive=True, finite=True)
    return torch.optim.Adam(model.parameters(), lr=lr)


def check_variants(variants: Sequence[str], compressed: CompressedInput | None) -> list[str]:
    """``variants`` as a list, each one of :data:`VARIANTS`; ``ValueError`` for none, an unknown
    one, or a PCA variant without ``compressed`` (C28)."""
    variants = list(variants)
    if not variants or any(v not in VARIANTS for v in variants):
        raise ValueError(f"variants must be a non-empty subset of {VARIANTS}, got {variants}")
    if compressed is None and any(v.startswith("pca") for v in variants):
        raise ValueError("the pca variants need compressed=compress_bag_of_words(data, k)")
    return variants


def classifier_step(
    model: ProjectionModel,
    optimizer: torch.optim.Optimizer,
    inputs: tuple[torch.Tensor, ...],
    labels: torch.Tensor,
) -> torch.Tensor:
    """One training step of the classifier (C28): gradients cleared, cross-entropy of
    ``model(*inputs)`` against the article ``labels``, backward, ``optimizer.step()``. Returns
    the loss, detached."""
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(*inputs), labels)
    loss.backward()
    optimizer.step()
    return loss.detach()


def projection_accuracy(
    data: BagOfWordsData,
    compressed: CompressedInput | None = None,
    *,
    variants: Sequence[str] = ("embedding_bag", "pca_precomputed"),
    out_dim: int = LAYER_WIDTH,
    epochs: int = 3,
    batch_size: int = STEP_BATCH,
    lr: float = 3e-3,
    seed: int = 0,
    device: torch.device | str | None = None,
    optimizer: Callable[[torch.nn.Module, float], torch.optim.Optimizer] = adam_optimizer,
) -> pd.DataFrame:
    """Does the compressed input keep the signal? Train each variant to predict a sentence's
    article from its bag of words and report held-out accuracy (C28).

    Same seed, same batches and same optimizer (``optimizer(model, lr)``, by default
    :func:`adam_optimizer`; the ``embedding_bag_sparse`` variant needs one for sparse gradients,
    e.g. ``chapter20.techniques.optimizers.sparse_optimizers``) for every variant. Columns:
    ``variant``, ``train_loss`` (mean over the last epoch), ``test_accuracy``, and
    ``chance_accuracy`` (the most frequent test article's share).
    """
    import pandas as pd

    variants = check_variants(variants, compressed)
    if not callable(optimizer):
        raise TypeError(f"optimizer must be callable (model, lr), got {type(optimizer).__name__}")
    if optimizer is adam_optimizer and "embedding_bag_sparse" in variants:
        raise ValueError("the embedding_bag_sparse variant needs an optimizer for sparse gradients")
    epochs = check_int("epochs", epochs, 1)
    batch_size = check_int("batch_size", batch_size, 1)
    dev = torch.device(device) if device is not None else get_device()
    z_train = compressed.train_z if compressed is not None else None
    z_test = compressed.test_z if compressed is not None else None
    train = BagOfWordsBatches(data.train, z_train, dev)
    test = BagOfWordsBatches(data.test, z_test, dev)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    orders = [rng.permutation(train.n) for _ in range(epochs)]
    chance = float(torch.bincount(data.test_labels).max()) / len(data.test_labels)
    records = []
    for kind in variants:
        model = projection_model(kind, data, compressed, out_dim, seed, dev)
        optim = optimizer(model, lr)
        for order in orders:
            losses = []
            for start in range(0, train.n, batch_size):
                sel = order[start : start + batch_size]
                labels = data.train_labels[torch.from_numpy(sel)].to(dev)
                losses.append(float(classifier_step(model, optim, train.make(kind, sel), labels)))
        records.append({
            "variant": kind, "train_loss": float(np.mean(losses)),
            "test_accuracy": _accuracy(model, test, kind, data.test_labels.to(dev)),
            "chance_accuracy": chance,
        })  # fmt: skip
    return pd.DataFrame(records)


def _accuracy(
    model: ProjectionModel, test: BagOfWordsBatches, kind: str, labels: torch.Tensor
) -> float:
    """The share of ``test``'s rows whose article ``model`` predicts, in blocks of 4,096 rows."""
    correct = 0
    with torch.no_grad():
        for start in range(0, test.n, 4096):
            sel = np.arange(start, min(start + 4096, test.n))
            pred = model(*test.make(kind, sel)).argmax(dim=1)
            correct += int((pred == labels[start : start + len(sel)]).sum())
    return correct / test.n
