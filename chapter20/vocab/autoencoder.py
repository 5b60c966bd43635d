"""A small autoencoder as the alternative to PCA for compressing a sparse input (the note on
efficient embedding training, topic 3: "PCA or autoencoders").

:func:`train_autoencoder` learns a code of ``k`` numbers per row: an encoder ``ReLU(x Wᵀ + b)``
that reads the sparse row without densifying it, and a linear decoder back to the ``d`` input
dimensions, trained by Adam to minimise the squared reconstruction error. PCA
(``chapter20.vocab.pca``) fits a linear code in one randomized SVD; the autoencoder trains for
epochs, and its encoder may bend. Its decoder, though, reconstructs every row within a
``k``-dimensional affine subspace, and PCA's is the best such subspace (Eckart–Young): on the
rows it was fitted to, the autoencoder's reconstruction error can approach PCA's but never go
below it. Notebook 10 measures the error, what a classifier reads from the codes, and the cost.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from chapter20.core.checks import check_int, check_real
from chapter20.core.device import seeded
from chapter20.vocab.pca import _as_matrix

__all__ = [
    "AutoencoderResult",
    "train_autoencoder",
]


@dataclass(frozen=True)
class AutoencoderResult:
    """A trained autoencoder from ``d`` input dimensions to ``k`` (note, topic 3): ``encoder``
    (``nn.Linear(d, k)``, then ReLU), ``decoder`` (``nn.Linear(k, d)``), the training rows'
    ``mean`` (the reference of the relative error), the wall time of training
    (``fit_seconds``) and the mean loss of each epoch (``epoch_loss``)."""

    encoder: nn.Linear
    decoder: nn.Linear
    mean: torch.Tensor
    fit_seconds: float
    epoch_loss: tuple[float, ...]

    @property
    def k(self) -> int:
        """Dimensions of the code."""
        return self.encoder.out_features

    @property
    def input_dim(self) -> int:
        """Dimensions of the input."""
        return self.encoder.in_features

    @property
    def encoder_bytes(self) -> int:
        """Bytes of what must be kept to encode a new row (the encoder's weight and bias)."""
        return sum(p.nbytes for p in self.encoder.parameters())

    def _input(self, x: Any) -> tuple[torch.Tensor, bool]:
        x, sparse = _as_matrix(x, "x")
        if x.shape[1] != self.input_dim:
            raise ValueError(f"x must have {self.input_dim} columns, got {x.shape[1]}")
        return x.to(device=self.mean.device, dtype=self.mean.dtype), sparse

    @torch.no_grad()
    def transform(self, x: Any) -> torch.Tensor:
        """The ``k``-dim codes of the rows of ``x`` (dense ``[n, k]``; a sparse ``x`` is never
        densified)."""
        x, sparse = self._input(x)
        return _encode(self.encoder, x, sparse)

    @torch.no_grad()
    def reconstruction_error(self, x: Any, batch_size: int = 1024) -> float:
        """Relative squared error ‖x − x̂‖²_F / ‖x − mean‖²_F of the rows of ``x`` decoded from
        their codes — the measure of :meth:`PCAResult.reconstruction_error`, so the two compare
        (0 = nothing lost; 1 = no better than the mean). Batched: one ``[batch, d]`` block at
        a time."""
        x, sparse = self._input(x)
        batch_size = check_int("batch_size", batch_size, 1)
        error = total = 0.0
        for start in range(0, x.shape[0], batch_size):
            rows = _rows(x, sparse, start, start + batch_size)
            dense = rows.to_dense() if sparse else rows
            error += float(((dense - self.decoder(_encode(self.encoder, rows, sparse))) ** 2).sum())
            total += float(((dense - self.mean) ** 2).sum())
        if total == 0:
            raise ValueError("x has no variance around the training mean: the error is undefined")
        return error / total


def _encode(encoder: nn.Linear, x: torch.Tensor, sparse: bool) -> torch.Tensor:
    product = torch.sparse.mm(x, encoder.weight.T) if sparse else x @ encoder.weight.T
    return torch.relu(product + encoder.bias)


def _rows(x: torch.Tensor, sparse: bool, start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of ``x`` (a coalesced sparse COO matrix stays sparse)."""
    if not sparse:
        return x[start:stop]
    return x.index_select(0, torch.arange(start, min(stop, x.shape[0]), device=x.device))


def train_autoencoder(
    x: Any,
    k: int,
    *,
    epochs: int = 1,
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
    on_epoch: Callable[[AutoencoderResult], None] | None = None,
) -> AutoencoderResult:
    """Train an autoencoder to ``k`` dimensions on the rows of ``x`` (dense, or sparse and
    never densified beyond one batch; note, topic 3): ``epochs`` passes in a seeded random
    order, ``batch_size`` rows per Adam step (``lr``), loss the mean squared error of the
    dense reconstruction. The decoder starts at the rows' mean (the best constant, weights
    zero), so the first steps learn structure, not the average. Deterministic for ``seed`` on
    the CPU. ``k`` in ``1..d``, else ``ValueError``. ``on_epoch``, when given, receives after
    every epoch a frozen copy of the autoencoder so far (its ``epoch_loss`` has one entry per
    epoch done): the copy after ``e`` epochs is what ``epochs=e`` returns, the seeded order of
    every epoch being the same, so one run scores a grid of epoch counts."""
    x, sparse = _as_matrix(x, "x")
    n, d = x.shape
    k = check_int("k", k, 1)
    if k > d:
        raise ValueError(f"k must be <= the input's {d} dimensions, got {k}")
    epochs = check_int("epochs", epochs, 1)
    batch_size = check_int("batch_size", batch_size, 1)
    lr = check_real("lr", lr, minimum=0, exclusive=True, finite=True)
    if on_epoch is not None and not callable(on_epoch):
        raise TypeError(f"on_epoch must be callable or None, got {type(on_epoch).__name__}")
    generator = torch.Generator().manual_seed(check_int("seed", seed, 0, maximum=2**32 - 1))
    mean = (torch.sparse.sum(x, dim=0).to_dense() if sparse else x.sum(0)) / n
    with seeded(seed):  # nn.Linear's initialisation, seeded, the caller's generators kept
        encoder, decoder = nn.Linear(d, k).to(x.dtype), nn.Linear(k, d).to(x.dtype)
    with torch.no_grad():  # reconstruct the mean at first: no random noise on top of it
        decoder.weight.zero_()
        decoder.bias.copy_(mean)
    optimizer = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=lr)
    losses = []
    start = time.perf_counter()
    for _ in range(epochs):
        order, total = torch.randperm(n, generator=generator), 0.0
        for first in range(0, n, batch_size):
            rows = order[first : first + batch_size]
            batch = x.index_select(0, rows)
            target = batch.to_dense() if sparse else batch
            loss = nn.functional.mse_loss(decoder(_encode(encoder, batch, sparse)), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(rows)
        losses.append(total / n)
        if on_epoch is not None:
            frozen = [_frozen(copy.deepcopy(m)) for m in (encoder, decoder)]
            on_epoch(AutoencoderResult(*frozen, mean, time.perf_counter() - start, tuple(losses)))
    seconds = time.perf_counter() - start
    return AutoencoderResult(_frozen(encoder), _frozen(decoder), mean, seconds, tuple(losses))


def _frozen(module: nn.Linear) -> nn.Linear:
    """``module`` with its gradients dropped and no longer required (trained, read only)."""
    for parameter in module.parameters():
        parameter.grad = None
    return module.requires_grad_(False)
