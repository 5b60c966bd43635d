"""How a learned layer reads a sparse bag-of-words input, directly or through a fixed PCA
projection (the note on efficient embedding training, topic 3; claim C28: compress a sparse
input before the embedding layer).

:data:`VARIANTS` are the ways to feed a V-dim bag-of-words row to a layer of width D;
:class:`ProjectionModel` is that layer and a linear classifier on top, for each of them, and
:class:`BagOfWordsBatches` makes each variant's inputs from one sparse matrix.
:func:`break_even_out_dim` says from which width D the fixed projection is the smaller model.
The experiments that prove, time and train these are ``chapter20.labs.nb10_vocab``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from chapter20.core.checks import check_int
from chapter20.vocab.pca import PCAResult

__all__ = [
    "VARIANTS",
    "BagOfWordsBatches",
    "ProjectionModel",
    "break_even_out_dim",
]

VARIANTS = (
    "dense_linear",
    "embedding_bag",
    "embedding_bag_sparse",
    "pca_online",
    "pca_precomputed",
)
"""How the embedding layer reads a bag-of-words row (note, topic 3; C28):

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


class ProjectionModel(nn.Module):
    """An embedding layer over a bag-of-words row, then a linear classifier (note, topic 3;
    C28).

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
        """The ``out_dim`` features of a batch (the inputs :class:`BagOfWordsBatches` makes)."""
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


class BagOfWordsBatches:
    """Batches of rows of a coalesced sparse bag-of-words matrix (and of its PCA rows ``z``) in
    the form each variant of :class:`ProjectionModel` reads (note, topic 3; C28): dense rows,
    word ids with offsets and counts, sparse rows, or the k-dim rows, on ``device``."""

    def __init__(self, matrix: torch.Tensor, z: torch.Tensor | None, device: torch.device):
        indices = matrix.indices().cpu().numpy()
        self.n, self.dim = matrix.shape
        self.cols = indices[1]
        self.values = matrix.values().cpu().numpy()
        self.indptr = np.searchsorted(indices[0], np.arange(self.n + 1))
        self.z = z
        self.device = device

    def make(self, kind: str, rows: np.ndarray) -> tuple[torch.Tensor, ...]:
        """The inputs of variant ``kind`` for the matrix rows ``rows`` (an index array)."""
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


def break_even_out_dim(input_dim: int, k: int) -> dict[str, float]:
    """The output width D above which the fixed projection V → k (+ a learned k × D layer) is
    smaller than a learned V × D layer (note, topic 3; C28), counting float32 elements:

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
