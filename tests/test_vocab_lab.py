"""Tests of notebook 10's experiments (note, topic 3; C28–C30): chapter20.labs.nb10_vocab (the
sparse input: proofs, bytes and time, the autoencoder against PCA) and
chapter20.labs.nb10_word_vectors (subword vectors over seeds, figures). The pipeline they run is
tested in tests/test_bag_of_words.py and tests/test_word_vectors.py."""

import matplotlib
import numpy as np
import pandas as pd
import pytest

from chapter20.labs import nb10_records as records_lab
from chapter20.labs import nb10_vocab as vocab_lab
from chapter20.labs import nb10_word_vectors as vectors_lab
from chapter20.vocab.bpe import bpe_table
from chapter20.vocab.vocabulary import pruning_table
from chapter20.vocab.word_vectors import pca_quality_curve
from chapter20.word2vec.skipgram_config import Word2VecConfig

matplotlib.use("Agg")  # figures are only drawn, never shown


def test_subword_quality_scores_words_and_subwords_on_the_same_pairs(lee_split):
    # Half the training documents: twelve word2vec runs (3 models x 2 seeds, serial and in
    # threads) are the cost, and 600 BPE entries still fit in half of them.
    train = lee_split[0][: len(lee_split[0]) // 2]
    sentences = list(train)
    options = dict(config=Word2VecConfig(dim=16, epochs=1, progress=False, threads=1))
    runs = vectors_lab.subword_quality(
        train, sentences, (600,), seeds=(1, 2), control=300, **options
    )
    models = ["words", "bpe 600", "bpe 300 (control)"]
    untrained = runs.frame.model.str.endswith(vectors_lab.UNTRAINED)
    frame, start = runs.frame[~untrained], runs.frame[untrained]
    assert list(frame.model) == models * 2
    assert list(start.model) == [f"{m}{vectors_lab.UNTRAINED}" for m in models] * 2
    # the same model before its first step, scored on the same pairs, near no knowledge at all
    assert list(start.same_pairs) == list(frame.same_pairs) and (start.seconds == 0).all()
    assert (start.rho_same_pairs.abs() < frame.rho_same_pairs.abs().max() + 1).all()
    assert list(frame.rows[:3]) == [len(runs.word_model), 600, 300]
    assert list(frame.seed) == [1, 1, 1, 2, 2, 2]
    words = frame[frame.model == "words"]
    # Scored on the pairs the word model knows: the same count for every model of a seed.
    for seed in (1, 2):
        assert frame[frame.seed == seed].same_pairs.nunique() == 1
    assert (frame[frame.model != "words"].oov_pairs <= words.oov_pairs.iloc[0]).all()
    assert len(runs.word_model) == words.rows.iloc[0]
    summary = vectors_lab.subword_summary(runs.frame)
    assert list(summary.index) == ["words", "bpe 600", "bpe 300 (control)"]
    assert summary.loc["words", "delta_mean"] == 0 and summary.loc["words", "delta_std"] == 0
    by_seed = frame.set_index(["model", "seed"]).rho_same_pairs
    control = "bpe 300 (control)"
    expected = np.mean([by_seed[control, s] - by_seed["words", s] for s in (1, 2)])
    assert summary.loc[control, "delta_mean"] == pytest.approx(expected)
    means = start.groupby("model").rho_same_pairs.mean()
    assert summary.loc["words", "untrained_rho_mean"] == pytest.approx(means["words, untrained"])
    assert summary.learned.dtype == bool
    # Trainings two at a time (threads) give the same runs: each is deterministic for its seed.
    parallel = vectors_lab.subword_quality(
        train, sentences, (600,), seeds=(1, 2), control=300, jobs=2, **options
    )
    columns = [c for c in frame.columns if c != "seconds"]
    pd.testing.assert_frame_equal(parallel.frame[columns], runs.frame[columns])
    with pytest.raises(ValueError, match="seeds"):
        vectors_lab.subword_quality(train, sentences, (300,), seeds=(), **options)
    with pytest.raises(ValueError, match="jobs"):
        vectors_lab.subword_quality(train, sentences, (300,), jobs=0, **options)


def test_projection_equivalence(bag_of_words):
    frame = vocab_lab.projection_equivalence(*bag_of_words)
    assert len(frame) == 4
    assert (frame["max_abs_diff"] < frame["tolerance"]).all()


def test_sparse_projection_benchmark_bytes(bag_of_words):
    data_, compressed = bag_of_words
    frame = vocab_lab.sparse_projection_benchmark(
        data_, compressed, out_dim=8, batch_size=16, warmup=0, repeat=1, device="cpu"
    ).set_index("variant")
    v, k, d, c = 300, 20, 8, 3
    head = (d * c + c) * 4
    for raw in ("dense_linear", "embedding_bag"):
        assert frame.loc[raw, "layer_bytes"] == v * d * 4
        assert frame.loc[raw, "gradient_bytes"] == v * d * 4 + head
        assert frame.loc[raw, "optimizer_bytes"] >= 2 * (v * d * 4 + head)  # two moments
    assert frame.loc["embedding_bag_sparse", "gradient_bytes"] < v * d * 4 + head
    for pca in ("pca_online", "pca_precomputed"):
        assert frame.loc[pca, "layer_bytes"] == k * d * 4
        assert frame.loc[pca, "fixed_bytes"] >= k * v * 4
    assert (frame["step_ms"] > 0).all()


def test_figures_have_labelled_axes(lee_split, bag_of_words, low_rank_matrix):
    import matplotlib.pyplot as plt

    train, heldout = lee_split
    data_, compressed = bag_of_words
    figures = [
        vectors_lab.plot_pruning(pruning_table(train, heldout, (1, 5))),
        vectors_lab.plot_bpe(bpe_table(train[:50], heldout[:10], (300, 500))),
        vectors_lab.plot_pca_quality(
            pca_quality_curve(
                [f"w{i}" for i in range(30)], low_rank_matrix(30, 8), [2, 4], lambda w, v: 0.5
            )
        ),
        records_lab.plot_projection(
            vocab_lab.sparse_projection_benchmark(
                data_, compressed, out_dim=4, batch_size=8, warmup=0, repeat=1, device="cpu"
            )
        ),
        records_lab.plot_explained_variance(compressed.pca),
    ]
    for fig in figures:
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_ylabel()
        plt.close(fig)


def test_pca_step_speedup_evidence_reads_the_fastest_raw_variant_and_what_is_stored(
    bag_of_words,
):
    from chapter20.core.claims import check

    data_, compressed = bag_of_words
    bench = vocab_lab.sparse_projection_benchmark(
        data_, compressed, out_dim=8, batch_size=16, warmup=0, repeat=3, device="cpu"
    )
    evidence = vocab_lab.pca_step_speedup_evidence(bench, compressed, 16, "cpu")
    raw = bench[~bench.variant.str.startswith("pca")]
    pca = bench.set_index("variant").loc["pca_precomputed"]
    assert evidence["measured"] == pytest.approx(raw.step_ms.min() / pca.step_ms)
    stored = pca.layer_bytes + pca.fixed_bytes  # the learned layer and the projection it needs
    smaller = stored < raw.loc[raw.step_ms.idxmin(), "layer_bytes"]
    assert evidence["conditions"] == {"stored weights smaller": bool(smaller)}
    assert (bench.step_ms_min <= bench.step_ms).all() and (bench.step_ms <= bench.step_ms_max).all()
    assert check("C28", **evidence).verdict in ("holds", "does not hold")


def _subword_summary(control_delta):
    return pd.DataFrame(
        {"seeds": 3, "rho_same_pairs_mean": [0.35, 0.31, 0.29, 0.35 + control_delta],
         "delta_mean": [0.0, -0.04, -0.06, control_delta], "delta_std": [0.0, 0.02, 0.01, 0.01],
         "learned": [True, True, True, False], "rows": [8800, 4000, 8000, 500],
         "oov_pairs": [113, 0, 0, 0]},
        index=["words", "bpe 4000", "bpe 8000", "bpe 500 (control)"],
    )  # fmt: skip


@pytest.mark.parametrize(
    "control_delta, verdict", [(-0.25, "does not hold"), (-0.03, "inconclusive")]
)
def test_subword_quality_gap_evidence_judges_the_worse_size_and_needs_its_control_detected(
    control_delta, verdict
):
    from chapter20.core.claims import check

    bpe_sizes = pd.DataFrame({"vocab_size": [500, 4000, 8000], "heldout_unk_tokens": [0, 0, 0]})
    summary = _subword_summary(control_delta)
    evidence = vectors_lab.subword_quality_gap_evidence(summary, bpe_sizes)
    assert evidence["measured"] == pytest.approx(-0.06)  # the worse size; not the control
    assert all(evidence["conditions"].values())  # whether the control learned does not count
    assert evidence["control_detected"] == (control_delta < -vectors_lab.SUBWORD_MARGIN)
    assert check("C30", **evidence).verdict == verdict


def test_subword_comparisons_set_each_model_against_the_words_within_its_seed_spread():
    lines = vectors_lab.subword_comparisons(_subword_summary(-0.005))
    names = ["bpe 4000", "bpe 8000", "bpe 500 (control)"]
    assert [line.partition(",")[0] for line in lines] == names
    assert lines[0].startswith("bpe 4000, mean ρ on the same pairs: 1.13× lower than the word vec")
    # the control: 0.345 vs 0.35, within its delta_std of 0.01
    assert "indistinguishable from the word vectors' (0.345 vs 0.35)" in lines[2]


def test_projection_step_findings_compare_pca_with_each_raw_variant_within_the_ranges():
    bench = pd.DataFrame({
        "variant": ["dense_linear", "embedding_bag", "embedding_bag_sparse", "pca_precomputed"],
        "step_ms": [4.0, 1.05, 2.0, 1.0], "step_ms_min": [3.9, 0.8, 1.9, 0.9],
        "step_ms_max": [4.1, 1.3, 2.1, 1.1],
    })  # fmt: skip
    dense, bag, sparse = records_lab.projection_step_findings(bench)
    assert dense == "pca_precomputed step: 4.00× faster than dense_linear (1 ms vs 4 ms)"
    assert bag.startswith("pca_precomputed step: indistinguishable from embedding_bag")
    assert bag.endswith("within the spread of 0.5 ms")  # the larger range, embedding_bag's
    assert sparse.startswith("pca_precomputed step: 2.00× faster than embedding_bag_sparse")
    # the fit pays back against the fastest raw variant (embedding_bag, 0.05 ms a step saved)
    *_, payback = records_lab.projection_step_findings(bench, fit_seconds=0.5)
    assert payback == "the PCA fit (0.5 s) is paid back against embedding_bag after 10,000 steps"
    slower = bench.assign(step_ms=[4.0, 1.05, 2.0, 2.0])  # no step saved: never paid back
    assert records_lab.projection_step_findings(slower, 0.5)[-1].endswith("never")


def test_bpe_merge_proof_agrees_with_tokenizers(bpe_small, lee_split):
    proof = vectors_lab.bpe_merge_proof(bpe_small, lee_split[0], lee_split[1][:10], merges=50)
    assert proof["merges"] == 50 and proof["merges_equal"]
    assert proof["pieces"] > 100 and proof["pieces_spelt_equal"] == proof["pieces"]


def test_autoencoder_vs_pca_reports_both_codes(bag_of_words):
    data_, compressed = bag_of_words
    table = vocab_lab.autoencoder_vs_pca(data_, compressed, epochs=2, device="cpu")
    assert list(table.index) == ["PCA", "autoencoder, 2 epochs"] and (table.k == 20).all()
    assert ((table.heldout_error > 0) & (table.heldout_error < 1.5)).all()
    assert (table.test_accuracy >= 0).all() and (table.fit_s > 0).all()
    assert table.encoder_bytes["autoencoder, 2 epochs"] == (300 * 20 + 20) * 4


def test_autoencoder_study_chooses_its_epochs_on_validation_rows_only(bag_of_words):
    data_, compressed = bag_of_words
    frame = vocab_lab.autoencoder_study((0, 1), (1, 3), data=data_, compressed=compressed,
                                        device="cpu")  # fmt: skip
    grid = frame[frame.method != "PCA"]
    assert sorted(set(grid.epochs)) == [1, 3] and len(grid) == 4 and (frame.k == 20).all()
    chosen = grid.groupby("epochs").validation_error.mean().idxmin()
    assert (grid.chosen == (grid.epochs == chosen)).all()
    # Held-out figures for PCA and the chosen count only: the others are never scored on them.
    held_out = frame.dropna(subset=["heldout_error"])
    assert set(held_out.method) == {"PCA", grid[grid.chosen].method.iloc[0]}
    assert len(held_out) == 4 and held_out.test_accuracy.between(0, 1).all()
    # The validation rows are a share of the training rows, disjoint from the rest.
    split = vocab_lab._validation_split(data_, vocab_lab.VALIDATION_FRACTION)
    assert split.train.shape[0] + split.test.shape[0] == data_.train.shape[0]
    assert split.test.shape[0] == round(vocab_lab.VALIDATION_FRACTION * data_.train.shape[0])


def test_subword_quality_gap_evidence_needs_every_model_to_have_learned():
    """ "Learned" is the rule of every notebook: above the same model untrained, beyond the seed
    spread; a size that stayed at its start fails C30's condition, whatever its Δρ."""
    bpe_sizes = pd.DataFrame({"vocab_size": [500, 4000, 8000], "heldout_unk_tokens": [0, 0, 0]})
    summary = _subword_summary(-0.25).assign(learned=[True, False, True, True])
    evidence = vectors_lab.subword_quality_gap_evidence(summary, bpe_sizes)
    assert not evidence["conditions"][
        "every model learned (above itself untrained, beyond the seed spread)"
    ]
