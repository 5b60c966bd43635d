"""chapter20.vocab.compression_proofs: notebook 10's proofs of the randomized sparse PCA and of the
autoencoder, on small random sparse matrices (fast); and the check of a subword record's row
(``labs.nb10_word_vectors``)."""

import pandas as pd
import pytest
import torch

from chapter20.labs import nb10_word_vectors as vectors_lab
from chapter20.vocab import compression_proofs as compression


def _sparse(rows=80, cols=200, seed=0):
    generator = torch.Generator().manual_seed(seed)
    dense = torch.rand(rows, cols, generator=generator)
    dense = torch.where(dense > 0.9, torch.ceil(dense * 3), torch.zeros_like(dense))
    return dense.to_sparse().coalesce()


def test_pca_proof_centring_is_exact_and_randomized_keeps_at_most_the_exact_variance():
    proof = compression.pca_proof(_sparse(), rows=60, k=5)
    assert proof["rows"] == 60 and proof["method"] == "randomized SVD (sparse)"
    assert proof["centring_max_diff"] < 1e-10  # float64 rounding of the same sums
    assert proof["kept_randomized"] <= proof["kept_exact"] + 1e-12
    assert proof["kept_randomized"] > 0.9 * proof["kept_exact"]
    assert proof["top_relative_error"] < 0.1


def test_autoencoder_proof_codes_of_sparse_and_dense_rows_agree_and_the_bound_holds():
    proof = compression.autoencoder_proof(_sparse(), rows=60, k=5, epochs=3)
    assert proof["sparse_dense_max_diff"] < 1e-5  # float32 rounding of sums in another order
    assert proof["bound_holds"] and proof["autoencoder_error"] >= proof["pca_error"] - 1e-6
    assert 0 < proof["pca_error"] < 1


def test_word_model_check_refuses_a_record_without_its_row_before_training():
    record = pd.DataFrame({"model": ["words"], "seed": [1], "rho_same_pairs": [0.3]})
    with pytest.raises(ValueError, match="live check"):
        vectors_lab.word_model_check(record)


def test_the_live_check_row_is_in_the_record_and_in_no_summary():
    """The record holds one row of the live check (seed 1's word model, fewer epochs), and the
    study's rows, the ones C30 is judged on, leave it out."""
    from chapter20.core.paths import data_file

    record = pd.read_csv(data_file(vectors_lab.SUBWORD_STUDY))
    assert (record["model"] == vectors_lab.CHECK_MODEL).sum() == 1
    study = vectors_lab.study_rows(record)
    assert vectors_lab.CHECK_MODEL not in set(study["model"]) and len(study) == len(record) - 1
