"""Tests of chapter20.vocab.autoencoder (note, topic 3): a small autoencoder learns a code, never
reconstructs better than PCA on the rows it was fitted to (Eckart–Young, its decoder being
linear), reads sparse rows as it reads dense ones, and rejects bad input."""

import random

import numpy as np
import pytest
import torch

from chapter20.vocab.autoencoder import train_autoencoder
from chapter20.vocab.pca import pca_compress


def _low_rank(n=256, d=24, rank=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, rank)) @ rng.normal(size=(rank, d)) + 0.05 * rng.normal(size=(n, d))
    return torch.from_numpy(np.abs(x).astype(np.float32))  # non-negative, like counts


def test_it_learns_a_code_and_never_beats_pca_on_its_training_rows():
    x = _low_rank()
    pca = pca_compress(x, 3, exact=True)
    short = train_autoencoder(x, 3, epochs=1, batch_size=32, lr=1e-2)
    long = train_autoencoder(x, 3, epochs=40, batch_size=32, lr=1e-2)
    assert long.epoch_loss[-1] < long.epoch_loss[0]
    error = long.reconstruction_error(x)
    assert error < short.reconstruction_error(x) and error < 0.5  # it learnt the structure
    # A linear decoder reconstructs within a 3-dim affine subspace; PCA's is the best one.
    assert error >= pca.reconstruction_error(x) - 1e-6
    assert long.transform(x).shape == (256, 3) and (long.transform(x) >= 0).all()  # ReLU codes
    assert long.encoder_bytes == (24 * 3 + 3) * 4 and long.k == 3 and long.input_dim == 24
    assert long.fit_seconds > 0


def test_sparse_rows_train_as_their_dense_rows():
    x = _low_rank(n=64, d=12)
    x[x < 1.0] = 0.0  # mostly zeros
    dense = train_autoencoder(x, 2, epochs=3, batch_size=16, seed=3)
    sparse = train_autoencoder(x.to_sparse(), 2, epochs=3, batch_size=16, seed=3)
    # The same seeded steps; a sparse product sums in another order: float32 rounding.
    torch.testing.assert_close(sparse.encoder.weight, dense.encoder.weight, rtol=1e-4, atol=1e-5)
    assert sparse.reconstruction_error(x.to_sparse()) == pytest.approx(
        dense.reconstruction_error(x), rel=1e-4
    )


@pytest.mark.parametrize(
    "kwargs, error, argument",
    [
        ({"k": 0}, ValueError, "k"),
        ({"k": 25}, ValueError, "k"),
        ({"k": 2, "epochs": 0}, ValueError, "epochs"),
        ({"k": 2, "lr": 0.0}, ValueError, "lr"),
        ({"k": 2, "batch_size": 1.5}, TypeError, "batch_size"),
        ({"k": 2, "on_epoch": 3}, TypeError, "on_epoch"),
    ],
)
def test_bad_input_is_rejected_with_the_argument_named(kwargs, error, argument):
    with pytest.raises(error, match=argument):
        train_autoencoder(_low_rank(n=8), **kwargs)


def test_training_is_seeded_and_gives_back_the_callers_generators():
    x = torch.randn(40, 12, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    before = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    first = train_autoencoder(x, 4, epochs=2, seed=1)
    again = train_autoencoder(x, 4, epochs=2, seed=1)
    assert torch.equal(first.encoder.weight, again.encoder.weight)  # bitwise for a seed
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]
    assert np.array_equal(np.random.get_state()[1], before[2])


def test_the_copy_after_each_epoch_is_the_run_of_that_many_epochs():
    """One run scores a grid of epoch counts: the frozen copy ``on_epoch`` gets after epoch e
    is bitwise what ``epochs=e`` returns, and later epochs do not change it."""
    x = _low_rank(n=64, d=12)
    kept = []
    last = train_autoencoder(x, 3, epochs=4, batch_size=16, seed=2, on_epoch=kept.append)
    assert [len(result.epoch_loss) for result in kept] == [1, 2, 3, 4]
    for epochs in (1, 3):
        alone = train_autoencoder(x, 3, epochs=epochs, batch_size=16, seed=2)
        assert torch.equal(kept[epochs - 1].encoder.weight, alone.encoder.weight)
        assert torch.equal(kept[epochs - 1].decoder.weight, alone.decoder.weight)
        assert kept[epochs - 1].epoch_loss == alone.epoch_loss
    assert torch.equal(kept[-1].encoder.weight, last.encoder.weight)
    assert not any(p.requires_grad for p in kept[0].encoder.parameters())
