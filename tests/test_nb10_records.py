"""Notebook 10's records (labs/nb10_records): the BPE table and the autoencoder against PCA."""

from types import SimpleNamespace

import pandas as pd
import pytest

from chapter20.core.study_record import provenance_line, read_study
from chapter20.labs import nb10_records as records
from chapter20.labs import nb10_vocab as vocab_lab

TRAIN = [["the", "cat", "sat", "on", "the", "mat"] * 20, ["a", "dog", "ran", "far"] * 20]
TEST = [["the", "dog", "sat", "far", "away"]]


def test_a_bpe_row_trained_again_matches_itself_and_a_changed_row_does_not():
    frame = records.bpe_study(TRAIN, TEST, (300,))
    _, _, diff = records.bpe_row_check(frame, TRAIN, TEST, size=300)
    assert diff == 0
    changed = frame.assign(tokens_per_word=frame["tokens_per_word"] + 0.5)
    assert records.bpe_row_check(changed, TRAIN, TEST, size=300)[2] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="no single row"):
        records.bpe_row_check(frame, TRAIN, TEST, size=400)


def test_pca_row_check_reads_the_fit_and_the_classifier_of_this_run():
    record = pd.DataFrame(
        {"method": ["PCA", "autoencoder, 1 epoch", "PCA"], "seed": [0, 0, 1],
         "heldout_error": [0.7, 0.72, 0.7], "test_accuracy": [0.5, 0.4, 0.6]}
    )  # fmt: skip
    pca = SimpleNamespace(reconstruction_error=lambda rows: 0.7 if rows == "test" else 1.0)
    row, live = vocab_lab.pca_row_check(record, SimpleNamespace(test="test"),
                                      SimpleNamespace(pca=pca), 0.5)  # fmt: skip
    assert row["test_accuracy"] == 0.5 and live == {"heldout_error": 0.7, "test_accuracy": 0.5}


def test_the_committed_records_hold_every_size_and_three_seeds_of_both_methods():
    bpe = read_study(records.BPE_FILE)
    assert bpe["requested_size"].tolist() == list(records.BPE_SIZES)
    assert "reproduce: chapter20 bench bpe-sizes" in provenance_line(bpe)
    versus = read_study(vocab_lab.AUTOENCODER_FILE)
    seeds, epochs = vocab_lab.AUTOENCODER_SEEDS, vocab_lab.AUTOENCODER_EPOCHS
    assert versus.groupby("method").size().tolist() == [len(seeds)] * (1 + len(epochs))
    assert sorted(versus.epochs.dropna().astype(int).unique()) == list(epochs)
    held_out = versus.dropna(subset=["heldout_error"])  # PCA and the chosen count, every seed
    assert held_out.method.value_counts().tolist() == [len(seeds)] * 2
    grid = ",".join(map(str, epochs))
    assert f"reproduce: chapter20 bench autoencoder --seeds 0,1,2 --epochs {grid}" in (
        provenance_line(versus)
    )


def test_autoencoder_summary_compares_the_seed_means_against_their_noise():
    record = _grid_record()
    table, lines = records.autoencoder_summary(record)
    assert list(table.index) == ["PCA", "autoencoder, 3 epochs"]  # the count not chosen is out
    assert table.loc["autoencoder, 3 epochs", ("heldout_error", "mean")] == pytest.approx(0.80)
    assert len(lines) == 2 and "higher" in lines[0] and "indistinguishable" in lines[1]


def _grid_record():
    """PCA, an autoencoder at 1 epoch (validation only) and at 3 (chosen), seeds 0-2."""
    nan = float("nan")
    return pd.DataFrame(
        {"method": ["PCA", "autoencoder, 1 epoch", "autoencoder, 3 epochs"] * 3,
         "epochs": [nan, 1, 3] * 3, "chosen": [nan, False, True] * 3,
         "seed": [0, 0, 0, 1, 1, 1, 2, 2, 2],
         "validation_error": [nan, 0.9, 0.8, nan, 0.91, 0.81, nan, 0.89, 0.79],
         "validation_accuracy": [nan, 0.3, 0.5, nan, 0.31, 0.49, nan, 0.3, 0.5],
         "heldout_error": [0.70, nan, 0.80, 0.70, nan, 0.81, 0.70, nan, 0.79],
         "test_accuracy": [0.50, nan, 0.50, 0.51, nan, 0.50, 0.50, nan, 0.51],
         }
    )  # fmt: skip


def test_autoencoder_grid_shows_the_validation_scores_and_the_choice():
    table, line = records.autoencoder_grid(_grid_record())
    assert list(table.index) == [1, 3] and table[("chosen", "")].tolist() == [False, True]
    assert table.loc[3, ("validation_error", "mean")] == pytest.approx(0.80)
    assert line.startswith("chosen on validation: 3 epochs") and "largest count tried" in line
    assert line.endswith("peaks at 3 epochs")
