"""Tests of chapter20.vocab.pca (note, topic 3; C28): exact and randomized PCA of dense and sparse
input against numpy's SVD."""

import random
import warnings

import numpy as np
import pytest
import scipy.sparse
import torch

from chapter20.vocab.pca import pca_compress


def numpy_pca(x, k):
    """Reference: numpy SVD of the centred matrix."""
    centred = x - x.mean(axis=0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    total = (s**2).sum()
    return vt[:k], (s[:k] ** 2) / total, (s[k:] ** 2).sum() / total


def same_up_to_sign(a, b):
    """Max |a - b| after matching each row's sign (SVD's sign is arbitrary)."""
    a, b = np.asarray(a), np.asarray(b)
    signs = np.sign((a * b).sum(axis=1, keepdims=True))
    return np.abs(a - signs * b).max()


def test_pca_matches_numpy_svd(low_rank_matrix):
    x = low_rank_matrix()
    result = pca_compress(x, 5)
    components, ratio, tail = numpy_pca(x, 5)
    assert result.method == "exact SVD"
    # float64 throughout: agreement to float64 rounding of an SVD (1e-10).
    assert same_up_to_sign(result.components.numpy(), components) < 1e-10
    np.testing.assert_allclose(result.explained_variance_ratio.numpy(), ratio, atol=1e-12)
    np.testing.assert_allclose(result.mean.numpy(), x.mean(axis=0), atol=1e-12)
    assert result.reconstruction_error(x) == pytest.approx(tail, abs=1e-10)
    # Orthonormal components, largest entry of each positive.
    c = result.components
    assert torch.allclose(c @ c.T, torch.eye(5, dtype=c.dtype), atol=1e-12)
    assert (c.gather(1, c.abs().argmax(1, keepdim=True)) > 0).all()


def test_pca_reconstruction_error_falls_with_k(low_rank_matrix):
    x = low_rank_matrix(n=80, d=30, rank=10, noise=0.3)
    errors = [pca_compress(x, k).reconstruction_error(x) for k in range(1, 31)]
    assert all(b < a for a, b in zip(errors, errors[1:-1]))
    assert errors[-1] == pytest.approx(0.0, abs=1e-12)
    for k, error in zip(range(1, 31), errors):
        assert error == pytest.approx(numpy_pca(x, k)[2], abs=1e-10)


def test_pca_transform_and_inverse(low_rank_matrix):
    x = low_rank_matrix(n=50, d=12, rank=12, noise=0.0)
    full = pca_compress(x, 12)
    z = full.transform(x)
    assert torch.allclose(full.inverse_transform(z), torch.from_numpy(x), atol=1e-10)
    np.testing.assert_allclose(z.var(dim=0).numpy(), full.explained_variance.numpy(), rtol=1e-9)
    assert full.explained_variance_ratio.sum().item() == pytest.approx(1.0, abs=1e-12)
    # Truncation keeps the leading components: the k-component fit is a prefix.
    five = pca_compress(x, 5)
    assert torch.allclose(full.truncated(5).components, five.components, atol=1e-10)


def test_pca_sparse_input_equals_dense():
    rng = np.random.default_rng(1)
    dense = (rng.random((60, 25)) < 0.15) * rng.integers(1, 4, (60, 25)).astype(np.float64)
    reference = pca_compress(dense, 6)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
        csr = torch.from_numpy(dense).to_sparse_csr()
    inputs = {
        "torch COO": torch.from_numpy(dense).to_sparse(),
        "torch CSR": csr,
        "scipy CSR": scipy.sparse.csr_matrix(dense),
    }
    for name, x in inputs.items():
        result = pca_compress(x, 6)
        # Same exact SVD after densifying: equal to float64 rounding.
        assert torch.allclose(result.components, reference.components, atol=1e-10), name
        assert torch.allclose(result.transform(x), reference.transform(dense), atol=1e-10), name
        assert result.reconstruction_error(x) == pytest.approx(
            reference.reconstruction_error(dense), abs=1e-10
        )


def test_randomized_pca_agrees_with_exact(low_rank_matrix):
    x = low_rank_matrix(n=300, d=80, rank=6, noise=0.01)
    exact = pca_compress(x, 6, exact=True)
    sparse = pca_compress(torch.from_numpy(x).to_sparse(), 6, exact=False, seed=3)
    dense = pca_compress(x, 6, exact=False, seed=3)
    assert sparse.method == "randomized SVD (sparse)" and dense.method == "torch.pca_lowrank"
    # A clear spectral gap after 6 components: randomized subspace iteration recovers them to
    # ~(σ7/σ6)^(2·niter+1) ≈ 1e-9 relative; 1e-6 leaves room.
    for approx in (sparse, dense):
        assert same_up_to_sign(approx.components, exact.components) < 1e-6
        assert torch.allclose(
            approx.explained_variance_ratio, exact.explained_variance_ratio, rtol=1e-6
        )


def test_randomized_pca_is_seeded_and_leaves_global_rng_alone(low_rank_matrix):
    x = torch.from_numpy(low_rank_matrix(n=200, d=60, rank=30, noise=0.5)).float()
    torch.manual_seed(123)
    random.seed(5)
    np.random.seed(5)
    before = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    a = pca_compress(x.to_sparse(), 10, exact=False, seed=7)
    b = pca_compress(x.to_sparse(), 10, exact=False, seed=7)
    c = pca_compress(x, 10, exact=False, seed=7)  # seeded by set_seed: torch, Python, NumPy
    assert torch.equal(torch.get_rng_state(), before[0])  # each generator given back
    assert random.getstate() == before[1] and np.array_equal(np.random.get_state()[1], before[2])
    assert torch.equal(a.components, b.components)
    assert c.components.dtype == torch.float32 and a.components.dtype == torch.float32
    # Randomized with few power iterations on a flat spectrum: at most the exact variance.
    exact = pca_compress(x, 10, exact=True)
    assert a.explained_variance_ratio.sum() <= exact.explained_variance_ratio.sum() * (1 + 1e-5)


def test_sparse_randomized_pca_never_densifies():
    # 20,000 × 50,000 would be 4 GB dense; the implicit centring keeps it to the sparse
    # matrix and a few 20,000 × q blocks.
    n, d, nnz = 20_000, 50_000, 60_000
    rng = np.random.default_rng(0)
    indices = torch.from_numpy(np.stack([rng.integers(0, n, nnz), rng.integers(0, d, nnz)]))
    x = torch.sparse_coo_tensor(indices, torch.ones(nnz), (n, d), check_invariants=True)
    result = pca_compress(x, 4, exact=None)
    assert result.method == "randomized SVD (sparse)"
    assert result.components.shape == (4, d)
    assert 0 < result.explained_variance_ratio.sum() < 1


@pytest.mark.parametrize(
    "call, error, argument",
    [
        (lambda: pca_compress(np.ones((5, 3)), 4), ValueError, "k must be <= min"),
        (lambda: pca_compress(np.ones((5, 3)), 0), ValueError, "k must be"),
        (lambda: pca_compress(np.ones((5, 3)), 2.0), TypeError, "k must be"),
        (lambda: pca_compress(np.ones((1, 3)), 1), ValueError, "at least 2 rows"),
        (lambda: pca_compress(np.ones(5), 1), ValueError, "2-D"),
        (lambda: pca_compress([[1.0, 2.0], [3.0, 4.0]], 1), TypeError, "x must be"),
        (lambda: pca_compress(np.array([[1.0, np.nan], [0, 1]]), 1), ValueError, "NaN"),
        (lambda: pca_compress(np.eye(4), 2).transform(np.eye(3)), ValueError, "4 columns"),
        (lambda: pca_compress(np.eye(4), 2).truncated(3), ValueError, "k must be <= 2"),
    ],
)
def test_pca_bad_input(call, error, argument):
    with pytest.raises(error, match=argument):
        call()
