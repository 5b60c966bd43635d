"""The two compressions of a sparse input proven (the note on efficient embedding training, topic
3; claim C28), as notebook 10 prints them.

- :func:`pca_proof`: the randomized PCA of ``chapter20.vocab.pca`` on sparse rows, with the
  centring left implicit, against the exact SVD of the same rows densified and centred: the
  identity it relies on, the variance it keeps and the subspace it finds.
- :func:`autoencoder_proof`: the autoencoder of ``chapter20.vocab.autoencoder`` reads sparse rows
  as it reads dense ones, and, trained on rows where the exact PCA is computable, cannot
  reconstruct them better than PCA at the same size (Eckart–Young): a bound its error must obey.
"""

from __future__ import annotations

import torch

from chapter20.core.checks import check_int
from chapter20.vocab.autoencoder import train_autoencoder
from chapter20.vocab.pca import pca_compress

__all__ = ["autoencoder_proof", "pca_proof"]


def _first_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """The first ``rows`` rows of a sparse COO matrix, still sparse."""
    rows = min(check_int("rows", rows, 2), x.shape[0])
    return x.index_select(0, torch.arange(rows)).coalesce()


def _exact(dense: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Explained variance (k,), components (k × d) and total variance of the exact PCA of the
    rows of ``dense`` (float64), through the eigenvectors of the small rows × rows Gram matrix
    of the centred rows: ``V = Cᵀ U / σ``, exact, and far cheaper than the SVD of a wide C."""
    centred = dense - dense.mean(0)
    eigenvalues, u = torch.linalg.eigh(centred @ centred.T)
    eigenvalues, u = eigenvalues.flip(0)[:k].clamp_min(0), u.flip(1)[:, :k]
    sigma = eigenvalues.sqrt()
    n = dense.shape[0]
    return eigenvalues / (n - 1), (centred.T @ u / sigma).T, float((centred**2).sum()) / (n - 1)


def pca_proof(x: torch.Tensor, rows: int = 500, k: int = 20, seed: int = 0) -> dict:
    """The randomized sparse PCA against the exact one on the first ``rows`` rows of the sparse
    ``x`` (note, topic 3; C28), ``seed`` seeding its random range finder and probe. Returns:

    - ``centring_max_diff``: max |(X − 1μᵀ)B − (XB − 1(μᵀB))| for a random B, the identity that
      keeps the centred matrix implicit (float64 rounding);
    - ``kept_randomized`` / ``kept_exact``: the share of the variance the k components keep
      (the randomized one can only be lower: its components span a subspace of the data's);
    - ``top_relative_error``: the largest relative error of the first ``k // 2`` components'
      variances (the trailing ones converge last, the leading ones first)."""
    k, seed = check_int("k", k, 1), check_int("seed", seed, 0)
    sub = _first_rows(x, rows).double()
    fit = pca_compress(sub, k, exact=False, seed=seed)
    variance, _, total = _exact(sub.to_dense(), k)
    mean = fit.mean.double()
    probe = torch.randn(sub.shape[1], 8, generator=torch.Generator().manual_seed(seed),
                        dtype=torch.float64)  # fmt: skip
    explicit = (sub.to_dense() - mean) @ probe
    implicit = torch.sparse.mm(sub, probe) - (mean @ probe)[None, :]
    half = max(1, k // 2)
    relative = (fit.explained_variance[:half].double() - variance[:half]).abs() / variance[:half]
    return {
        "rows": sub.shape[0],
        "k": k,
        "method": fit.method,
        "centring_max_diff": float((explicit - implicit).abs().max()),
        "kept_randomized": float(fit.explained_variance_ratio.sum()),
        "kept_exact": float(variance.sum()) / total,
        "top_relative_error": float(relative.max()),
    }


def autoencoder_proof(
    x: torch.Tensor, rows: int = 500, k: int = 20, epochs: int = 5, seed: int = 0
) -> dict:
    """The autoencoder's two guarantees on the first ``rows`` rows of the sparse ``x`` (note,
    topic 3): ``sparse_dense_max_diff``, the largest difference between the codes of the sparse
    rows and of the same rows densified; and the Eckart–Young bound: trained ``epochs`` on those
    rows, its reconstruction error on them (``autoencoder_error``) is at least the exact PCA's
    at the same ``k`` (``pca_error``, one minus the share of variance its k components keep),
    since its linear decoder reconstructs within a k-dim affine subspace and PCA's is the best
    one. ``bound_holds`` says whether it did."""
    k, seed = check_int("k", k, 1), check_int("seed", seed, 0)
    sub = _first_rows(x, rows)
    ae = train_autoencoder(sub, k, epochs=check_int("epochs", epochs, 1), seed=seed)
    dense = sub.to_dense()
    codes_diff = float((ae.transform(sub) - ae.transform(dense)).abs().max())
    variance, _, total = _exact(dense.double(), k)
    pca_error = 1.0 - float(variance.sum()) / total
    ae_error = ae.reconstruction_error(sub)
    return {
        "rows": sub.shape[0],
        "k": k,
        "epochs": epochs,
        "sparse_dense_max_diff": codes_diff,
        "autoencoder_error": ae_error,
        "pca_error": pca_error,
        "bound_holds": ae_error >= pca_error - 1e-6,
    }
