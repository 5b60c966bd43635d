"""PCA compression of dense or sparse inputs (the note on efficient embedding training, topic 3;
claim C28: compress a sparse input before the embedding layer).

:func:`pca_compress` fits a projection to ``k`` dimensions: an exact SVD when the data is
small, else a randomized method; for a sparse input the centring stays implicit, so nothing of
size n × d is made dense. The :class:`PCAResult` it returns transforms, maps back, truncates to
fewer components (with the exact method, one fit serves a whole k-sweep) and measures its
reconstruction error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from chapter20.core.checks import check_int
from chapter20.core.device import seeded

__all__ = [
    "PCAResult",
    "pca_compress",
]

EXACT_MAX_SIDE = 2_000
"""``pca_compress`` uses an exact SVD by default when min(n, d) is at most this ..."""
EXACT_MAX_ELEMENTS = 2**25
"""... and the dense centred matrix has at most this many elements (128 MiB in float32)."""


def _as_matrix(x: Any, name: str) -> tuple[torch.Tensor, bool]:
    """``x`` as a 2-D floating tensor, and whether it is sparse (then a coalesced COO tensor).

    Accepts torch tensors (strided, COO, CSR, CSC), NumPy arrays and SciPy sparse matrices.
    Integer and boolean data become float32, half precisions float32, float64 stays float64.
    """
    if type(x).__module__.startswith("scipy.sparse"):
        coo = x.tocoo()
        indices = torch.from_numpy(np.stack([coo.row, coo.col]).astype(np.int64))
        x = torch.sparse_coo_tensor(
            indices, torch.from_numpy(np.asarray(coo.data)), coo.shape, check_invariants=True
        )
    elif isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    elif not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch tensor (dense or sparse), a NumPy array or a SciPy sparse "
            f"matrix, got {type(x).__name__}"
        )
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D [samples, features], got shape {tuple(x.shape)}")
    if x.is_complex():
        raise TypeError(f"{name} must be real, got {x.dtype}")
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    sparse = x.layout != torch.strided
    if sparse:
        x = (x if x.layout == torch.sparse_coo else x.to_sparse_coo()).coalesce().to(dtype)
        values = x.values()
    else:
        x = x.to(dtype)
        values = x
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return x, sparse


def _sign_fix(components: torch.Tensor) -> torch.Tensor:
    """Make each component's largest-magnitude entry positive: SVD's sign is arbitrary, this
    makes exact, randomized, dense and sparse results comparable (as scikit-learn's svd_flip)."""
    pivot = components.abs().argmax(dim=1, keepdim=True)
    signs = torch.sign(components.gather(1, pivot))
    return components * torch.where(signs == 0, torch.ones_like(signs), signs)


def _centred_sq_norm(x: torch.Tensor, sparse: bool, mean: torch.Tensor) -> float:
    """‖x − 1·meanᵀ‖²_F in float64, without densifying a sparse ``x``."""
    if not sparse:
        return float(((x.double() - mean.double()) ** 2).sum())
    n = x.shape[0]
    col_sums = torch.sparse.sum(x, dim=0).to_dense().double()
    mean64 = mean.double()
    sq = float((x.values().double() ** 2).sum())
    return sq - 2 * float(col_sums @ mean64) + n * float(mean64 @ mean64)


def _orth(y: torch.Tensor, passes: int = 2) -> torch.Tensor:
    """An orthonormal basis of the columns of a tall float64 ``y``: CholeskyQR (``y L⁻ᵀ`` with
    ``LLᵀ = yᵀy``), several times faster than Householder QR on CPUs. Two passes make the
    basis orthonormal to float64 rounding (CholeskyQR2); one pass is enough between power
    iterations, which only need a well-conditioned basis. QR is the fallback when ``y`` is too
    ill-conditioned for Cholesky."""
    for _ in range(passes):
        factor, info = torch.linalg.cholesky_ex(y.T @ y)
        if int(info) != 0:
            return torch.linalg.qr(y).Q
        y = torch.linalg.solve_triangular(factor.T, y, upper=True, left=False)
    eye = torch.eye(y.shape[1], dtype=y.dtype, device=y.device)
    if passes >= 2 and float((y.T @ y - eye).abs().max()) > 1e-8:
        return torch.linalg.qr(y).Q
    return y


def _wide_svd(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Singular values (descending) and right singular vectors of a wide float64 ``b`` (q × d,
    q ≪ d) through the q × q Gram matrix; exact SVD when a small singular value would make
    the Gram route inaccurate."""
    eigenvalues, u = torch.linalg.eigh(b @ b.T)
    eigenvalues, u = eigenvalues.flip(0), u.flip(1)
    s = eigenvalues.clamp_min(0).sqrt()
    # Gram eigenvectors lose ~eps·(s_max/s_i)² of accuracy: use them only while that is < 1e-8.
    if s[0] == 0 or float(s[-1] / s[0]) < 1e-4:
        _, s, vh = torch.linalg.svd(b, full_matrices=False)
        return s, vh
    return s, (u.T @ b) / s[:, None]


def _randomized_pca_sparse(
    x: torch.Tensor, mean: torch.Tensor, q: int, niter: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Singular values and right singular vectors (q of each) of the centred sparse ``x``
    (Halko, Martinsson & Tropp 2011, Alg. 4.4, in float64): the mean is subtracted as a
    rank-one correction, ``(X − 1μᵀ)B = XB − 1(μᵀB)``, so nothing of size n × d is dense."""
    # COO, not CSR: CSR is a beta layout in torch (it warns) and no faster here.
    x = x.double()
    xt = x.t().coalesce()
    mean = mean.double()

    # The dense factor row-major: torch's sparse @ dense is ~4x slower on a column-major one,
    # which is what solve_triangular (in _orth) returns.
    def right(b: torch.Tensor) -> torch.Tensor:  # (X − 1μᵀ) b,  n × q
        return torch.sparse.mm(x, b.contiguous()) - (mean @ b)[None, :]

    def left(b: torch.Tensor) -> torch.Tensor:  # (X − 1μᵀ)ᵀ b,  d × q
        return torch.sparse.mm(xt, b.contiguous()) - mean[:, None] * b.sum(dim=0)[None, :]

    omega = torch.randn(x.shape[1], q, generator=generator, dtype=torch.float64, device=x.device)
    basis = _orth(right(omega), passes=1 if niter else 2)
    for i in range(niter):
        basis = _orth(right(_orth(left(basis), passes=1)), passes=2 if i == niter - 1 else 1)
    return _wide_svd(left(basis).T)


@dataclass(frozen=True)
class PCAResult:
    """A fitted PCA projection from ``d`` input dimensions to ``k`` (note, topic 3; C28).

    ``components`` (k × d, orthonormal rows, largest-magnitude entry of each positive),
    ``mean`` (d,), ``explained_variance`` (k,, sample variance along each component) and
    ``explained_variance_ratio`` (k,, share of the input's *total* variance, so its sum is the
    share the k components keep). ``method`` says how it was computed: ``"exact SVD"`` (the
    exact principal components), ``"torch.pca_lowrank"`` (dense, randomized) or
    ``"randomized SVD (sparse)"`` (randomized, centring implicit); the randomized ones are
    approximations whose explained variance is at most the exact one.
    """

    components: torch.Tensor
    mean: torch.Tensor
    explained_variance: torch.Tensor
    explained_variance_ratio: torch.Tensor
    total_variance: float
    n_samples: int
    method: str

    @property
    def k(self) -> int:
        """Dimensions kept (rows of ``components``)."""
        return self.components.shape[0]

    @property
    def input_dim(self) -> int:
        """Dimensions of the input (columns of ``components``)."""
        return self.components.shape[1]

    @property
    def projection_bytes(self) -> int:
        """Bytes of the fixed projection a model must store (components and mean)."""
        return self.components.nbytes + self.mean.nbytes

    def to(self, device: torch.device | str) -> PCAResult:
        """The same projection with its tensors on ``device``."""
        return PCAResult(
            components=self.components.to(device),
            mean=self.mean.to(device),
            explained_variance=self.explained_variance.to(device),
            explained_variance_ratio=self.explained_variance_ratio.to(device),
            total_variance=self.total_variance,
            n_samples=self.n_samples,
            method=self.method,
        )

    def truncated(self, k: int) -> PCAResult:
        """The same projection keeping only the first ``k`` components. With the exact method
        this *is* the k-component PCA (principal components are nested), so one fit at the
        largest k serves a whole k-sweep."""
        k = check_int("k", k, 1)
        if k > self.k:
            raise ValueError(f"k must be <= {self.k} (the components fitted), got {k}")
        return PCAResult(
            components=self.components[:k],
            mean=self.mean,
            explained_variance=self.explained_variance[:k],
            explained_variance_ratio=self.explained_variance_ratio[:k],
            total_variance=self.total_variance,
            n_samples=self.n_samples,
            method=self.method,
        )

    def _input(self, x: Any) -> tuple[torch.Tensor, bool]:
        x, sparse = _as_matrix(x, "x")
        if x.shape[1] != self.input_dim:
            raise ValueError(f"x must have {self.input_dim} columns, got {x.shape[1]}")
        return x.to(device=self.components.device, dtype=self.components.dtype), sparse

    def transform(self, x: Any) -> torch.Tensor:
        """``(x − mean) @ components.T``: the k-dim coordinates (dense ``[n, k]``). A sparse
        ``x`` stays sparse: the mean is subtracted after the product, as ``mean @ components.T``.
        """
        x, sparse = self._input(x)
        shift = self.mean @ self.components.T
        weight = self.components.T
        # row-major for the sparse product, ~4x faster than multiplying by the transposed view
        product = torch.sparse.mm(x, weight.contiguous()) if sparse else x @ weight
        return product - shift

    def inverse_transform(self, z: torch.Tensor | np.ndarray) -> torch.Tensor:
        """``z @ components + mean``: the closest point to the input in the k-dim subspace."""
        z = torch.as_tensor(z, dtype=self.components.dtype, device=self.components.device)
        if z.dim() != 2 or z.shape[1] != self.k:
            raise ValueError(f"z must be [n, {self.k}], got shape {tuple(z.shape)}")
        return z @ self.components + self.mean

    def reconstruction_error(self, x: Any) -> float:
        """Relative squared error ‖x_c − x̂_c‖²_F / ‖x_c‖²_F of reconstructing the centred
        ``x`` from k components (0 = nothing lost). On the fitted data with the exact method it
        equals ``1 − explained_variance_ratio.sum()``. A sparse ``x`` is never densified."""
        x, sparse = self._input(x)
        total = _centred_sq_norm(x, sparse, self.mean)
        if total == 0:
            raise ValueError("x has no variance around the fitted mean: the error is undefined")
        z = self.transform(x)
        if sparse:  # orthonormal components: ‖x_c − z C‖² = ‖x_c‖² − ‖z‖²
            residual = total - float((z.double() ** 2).sum())
        else:
            residual = float(((x - self.inverse_transform(z)).double() ** 2).sum())
        return max(residual, 0.0) / total


def pca_compress(
    x: Any,
    k: int,
    *,
    exact: bool | None = None,
    seed: int = 0,
    niter: int = 2,
    oversample: int = 10,
) -> PCAResult:
    """Fit a PCA projection of ``x`` (n samples × d features) to ``k`` dimensions (note,
    topic 3; claim C28: compress a sparse input before the embedding layer).

    ``x``: a dense tensor or NumPy array, a torch sparse tensor (COO, CSR, CSC) or a SciPy
    sparse matrix. ``exact=None`` chooses an exact SVD of the centred data (``torch.linalg.svd``)
    when ``min(n, d) <= 2000`` and ``n·d <= 2**25``, else a randomized method with
    ``k + oversample`` probe vectors and ``niter`` power iterations: ``torch.pca_lowrank`` for
    dense input; for sparse input the same algorithm with the centring done implicitly, because
    ``torch.pca_lowrank(center=True)`` materialises a dense n × d mean matrix for a sparse
    input (as large as the densified input). The exact path densifies a sparse input.
    Deterministic for ``seed`` (the global RNG is left untouched). ``k`` must be in
    ``1..min(n, d)`` and n >= 2, else ``ValueError``.
    """
    x, sparse = _as_matrix(x, "x")
    n, d = x.shape
    if n < 2:
        raise ValueError(f"x must have at least 2 rows (samples) to have a variance, got {n}")
    k = check_int("k", k, 1)
    if k > min(n, d):
        raise ValueError(
            f"k must be <= min(n_samples, n_features) = {min(n, d)} for x of shape ({n}, {d}), "
            f"got k={k}"
        )
    seed = check_int("seed", seed, 0, maximum=2**32 - 1)  # what set_seed takes
    niter = check_int("niter", niter, 0)
    oversample = check_int("oversample", oversample, 0)
    if exact is None:
        exact = min(n, d) <= EXACT_MAX_SIDE and n * d <= EXACT_MAX_ELEMENTS
    if sparse:
        mean = torch.sparse.sum(x, dim=0).to_dense() / n
    else:
        mean = x.mean(dim=0)
    total_variance = _centred_sq_norm(x, sparse, mean) / (n - 1)
    q = min(k + oversample, n, d)
    if exact:
        dense = x.to_dense() if sparse else x
        _, s, vh = torch.linalg.svd(dense - mean, full_matrices=False)
        method = "exact SVD"
    elif sparse:
        generator = torch.Generator(device=x.device).manual_seed(seed)
        s, vh = _randomized_pca_sparse(x, mean, q, niter, generator)
        s, vh = s.to(x.dtype), vh.to(x.dtype)
        method = "randomized SVD (sparse)"
    else:
        # pca_lowrank draws from the global RNG: seeded in a block that gives it back.
        devices = []
        if x.device.type == "cuda":
            devices = [
                x.device.index if x.device.index is not None else torch.cuda.current_device()
            ]
        with seeded(seed, devices):
            _, s, v = torch.pca_lowrank(x, q=q, center=True, niter=niter)
        vh = v.T
        method = "torch.pca_lowrank"
    components = _sign_fix(vh[:k].contiguous())
    variance = s[:k] ** 2 / (n - 1)
    ratio = variance / total_variance if total_variance > 0 else torch.zeros_like(variance)
    return PCAResult(
        components=components,
        mean=mean,
        explained_variance=variance,
        explained_variance_ratio=ratio,
        total_variance=total_variance,
        n_samples=n,
        method=method,
    )
