"""Tests for chapter20.labs.nb09_word2vec (note, topic 1): the quality table of notebook 09."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from chapter20.labs.nb09_word2vec import CHANCE_SDS, MATCH_TOLERANCE, quality_verdicts, summarize


def _runs() -> pd.DataFrame:
    rows = []
    for trainer, wordsim, simlex in (
        ("ours negative", (0.20, 0.22, 0.24), (0.10, 0.11, 0.12)),
        ("gensim negative", (0.21, 0.21, 0.21), (0.19, 0.19, 0.19)),
        ("ours hierarchical", (0.40, 0.40, 0.40), (0.20, 0.20, 0.20)),
    ):
        for seed, (ws, sl) in enumerate(zip(wordsim, simlex)):
            rows.append({
                "trainer": trainer, "device": "cpu", "seed": seed, "epochs": 5,
                "wordsim353": ws, "simlex999": sl, "wordsim_oov_%": 25.0, "simlex_oov_%": 45.0,
                "wordsim_scored": 101, "simlex_scored": 401, "words_per_second": 1e5,
                "seconds": 1.0,
            })  # fmt: skip
    return pd.DataFrame(rows)


def test_summarize_gives_mean_std_and_chance_per_set():
    summary = summarize(_runs())
    row = summary.loc["ours negative"]
    assert row.seeds == 3
    assert row.wordsim353 == pytest.approx(0.22) and row.wordsim_std == pytest.approx(0.02)
    assert row.simlex999 == pytest.approx(0.11) and row.simlex_std == pytest.approx(0.01)
    # Spearman's null: standard deviation 1 / sqrt(m - 1) over m scored pairs
    assert row.wordsim_chance_sd == pytest.approx(0.1)
    assert row.simlex_chance_sd == pytest.approx(0.05)
    assert list(summary.index) == ["ours negative", "gensim negative", "ours hierarchical"]


def test_quality_verdicts_apply_the_stated_thresholds():
    verdicts = quality_verdicts(summarize(_runs()))
    assert CHANCE_SDS == 3 and MATCH_TOLERANCE == 0.05
    ours = verdicts.loc["ours negative"]
    assert ours.wordsim == "0.220 ± 0.020"
    assert not ours.wordsim_above_chance  # 0.22 < 3 × 0.1
    assert not ours.simlex_above_chance  # 0.11 < 3 × 0.05
    assert ours.largest_gap_to_gensim == pytest.approx(0.08)  # SimLex: 0.19 - 0.11
    assert not ours.matches_gensim
    gensim = verdicts.loc["gensim negative"]
    assert gensim.simlex_above_chance and math.isnan(gensim.largest_gap_to_gensim)
    # no gensim hierarchical run: nothing to compare with
    assert math.isnan(verdicts.loc["ours hierarchical"].largest_gap_to_gensim)
    assert verdicts.loc["ours hierarchical"].wordsim_above_chance


def test_path_lengths_count_the_nodes_of_the_timed_batch():
    from chapter20.core.id_streams import zipf_counts, zipf_ids
    from chapter20.labs.nb09_step_cost import path_length_vs_vocab
    from chapter20.word2vec.huffman import build_huffman_tree

    paths = path_length_vs_vocab((100, 10_000), batch=256)
    tree = build_huffman_tree(zipf_counts(100))
    outputs = zipf_ids(256, 100, s=1.1, seed=1).numpy()  # step_time_vs_vocab's output words
    assert paths.mean_path.iloc[0] == pytest.approx(tree.lengths[outputs].mean())
    # Zipf words: fewer nodes than a balanced tree, more than the entropy's bits minus one
    assert (paths.mean_path < paths.log2_n).all() and (
        paths.mean_path > paths.entropy_bits - 1
    ).all()
    assert paths.per_log2_n.iloc[1] < paths.per_log2_n.iloc[0]


def _claim_inputs():
    steps = pd.DataFrame({
        "vocab": [1000, 1000, 1000, 10**5, 10**5, 10**5],
        "objective": ["negative", "hierarchical", "softmax"] * 2,
        "us_per_pair": [1.0, 2.0, 10.0, 2.0, 3.0, 2000.0],
    })  # fmt: skip
    steps_k10 = pd.DataFrame({"vocab": [10**5], "objective": ["negative"], "us_per_pair": [4.0]})
    paths = pd.DataFrame({
        "vocab": [1000, 10**6], "mean_path": [7.0, 11.0], "log2_n": [9.97, 19.93],
        "per_log2_n": [7.0 / 9.97, 11.0 / 19.93],
    })  # fmt: skip
    table = pd.DataFrame(
        {"wordsim353": [0.20, 0.21, 0.05], "simlex999": [0.10, 0.11, 0.01],
         "epochs": [5, 5, 0.02], "words_per_second": [8e5, 6e5, 2e3]},
        index=["ours negative", "gensim negative", "ours softmax"],
    )  # fmt: skip
    return steps, steps_k10, paths, table


def test_claim_evidence_shows_c25_on_counted_nodes_and_judges_c26_on_current_rows(monkeypatch):
    from chapter20.core.claims import check
    from chapter20.core.gpu_record import GpuFigure
    from chapter20.labs import nb09_word2vec as lab

    monkeypatch.setattr(lab, "current_gpu_figure", lambda quantity, modules: None)
    evidence = lab.claim_evidence(*_claim_inputs(), gpu=None)
    assert evidence["C24"]["measured"] == pytest.approx(500.0)  # min(2000 / 2, 2000 / 4)
    assert evidence["C25"]["measured"] == pytest.approx(7.0 / 9.97)
    assert evidence["C25"]["conditions"] == {"not growing with n": True}
    assert check("C25", **evidence["C25"]).verdict == "a definition, not testable"
    assert evidence["C26"]["measured"] is None
    assert check("C26", **evidence["C26"]).verdict == "needs a GPU"
    figure = GpuFigure("q", 12.0, "x", "NVIDIA H200", "2026-12-01", "", "", "bench", "", "w@1")
    monkeypatch.setattr(lab, "current_gpu_figure", lambda quantity, modules: figure)
    c26 = lab.claim_evidence(*_claim_inputs(), gpu=None)["C26"]
    assert c26["measured"] == 12.0 and check("C26", **c26).verdict == "holds"


def test_gpu_record_text_shows_rows_of_another_trainer_version_apart_from_current_ones():
    from chapter20.labs import nb09_word2vec as lab

    rows = lab.gpu_record_rows()
    assert not rows.current.any()  # the committed rows predate the trainer section 2 proves
    assert set(rows.quantity) <= set(lab.GPU_ROW_NAMES.values())
    text = lab.gpu_record_text(rows)
    assert text.splitlines()[0].endswith("proves: shown, not judged")
    assert "run A" not in text and "run B" not in text
    rows.loc[rows.index[-1], ["current", "date"]] = True, "2027-01-01"
    last = lab.gpu_record_text(rows).splitlines()[-2:]
    assert last[0].startswith("recorded 2027-01-01 on ") and last[0].endswith("claims check")
    assert last[1].strip().startswith(rows.quantity.iloc[-1])


def test_speed_findings_compare_each_of_ours_with_gensim_of_its_objective():
    from chapter20.labs.nb09_word2vec import speed_findings

    frame = _runs().assign(words_per_second=[2e5, 2.2e5, 2.1e5, 1e5, 1e5, 1e5, 5e4, 5e4, 5e4])
    (line,) = speed_findings(frame)  # ours hierarchical has no gensim run here
    assert line.startswith("ours negative: 2.10× faster than gensim negative")


def _data_parallel_table() -> pd.DataFrame:
    from chapter20.labs.nb09_data_parallel import data_parallel_summary

    runs = pd.DataFrame({
        "variant": ["dp"] * 4, "seed": [1, 1, 2, 2], "rank": [0, 1, 0, 1],
        "wordsim353": [0.20, 0.20, 0.22, 0.22], "simlex999": [0.1] * 4,
        "words_per_second": [1e5, 2e5, 3e5, 4e5], "seconds": [10.0] * 4,
        "sync_seconds": [1.0] * 4,
    })  # fmt: skip
    return data_parallel_summary(runs, _runs())


def test_data_parallel_summary_reads_rank_zero_and_the_sync_share():
    table = _data_parallel_table()
    assert list(table.index) == ["1 process, 2 Hogwild workers", "dp"]
    assert table.wordsim_gap["dp"] == pytest.approx(0.21 - 0.22)
    assert table.words_per_second["dp"] == 2.5e5 and table.sync_share["dp"] == pytest.approx(0.1)
    assert table.together_words_per_second["dp"] == pytest.approx(5e5)  # (1+2, 3+4) e6 / 10 s


def test_data_parallel_speed_findings_compare_the_ranks_with_one_process_and_the_sync_share():
    from chapter20.labs.nb09_data_parallel import data_parallel_speed_findings

    speed, syncs = data_parallel_speed_findings(_data_parallel_table(), "dp")
    # ranks together 5e5 words/s; one process: the median of "ours negative", 1e5
    assert speed.startswith("two ranks together (1 thread each): 5.00× faster than one process")
    assert syncs == (
        "time in the syncs (waiting for the other rank included): 10% of the training time "
        "(0.1 of 1)"
    )


def test_growth_findings_compare_the_objectives_growth_and_the_path_length_with_log2_n():
    from chapter20.labs.nb09_step_cost import growth_findings

    summary = pd.DataFrame(
        {"objective": ["negative", "hierarchical", "softmax"], "growth": [2.0, 4.0, 400.0]}
    )
    paths = pd.DataFrame({"mean_path": [10.0, 12.0], "log2_n": [10.0, 20.0]})
    steps = pd.DataFrame({
        "objective": ["negative"] * 2 + ["hierarchical"] * 2 + ["softmax"] * 2,
        "vocab": [10, 100] * 3,
        "us_min": [1.0, 2.0, 1.0, 4.0, 1.0, 400.0], "us_max": [1.0, 2.0, 1.0, 4.0, 1.0, 400.0],
    })  # fmt: skip
    hierarchical, softmax, nodes = growth_findings(summary, paths, steps)
    assert hierarchical.startswith(
        "hierarchical softmax's time per pair, growth: 2.00× higher than negative sampling's"
    )
    noisy = steps.assign(us_max=[1.0, 2.0, 1.0, 6.0, 1.0, 400.0])
    assert "indistinguishable" in growth_findings(summary, paths, noisy)[0]
    assert softmax.startswith(
        "full softmax's time per pair, growth: 100.00× higher than the hierarchical softmax's"
    )
    assert nodes.startswith("hierarchical softmax's nodes per pair, growth: 1.67× lower than log₂")


def test_profile_findings_compare_the_c_loop_with_the_plain_step_without_sampling_the_pairs():
    from chapter20.labs.nb09_step_cost import profile_findings

    profile = pd.DataFrame({
        "part": ["sample pairs (subsampling, windows)", "draw noise words", "gather rows",
                 "fused kernel (whole step)"],
        "us_per_pair": [1.0, 0.5, 1.5, 0.5], "path": ["plain"] * 3 + ["fused"],
    })  # fmt: skip
    (line,) = profile_findings(profile)  # plain: 0.5 + 1.5, sampling the pairs left out
    assert line == (
        "C loop (noise draws inside): 4.00× faster than plain step with its noise draws "
        "(0.5 µs per pair vs 2 µs per pair)"
    )
    assert profile_findings(profile[profile.path == "plain"]) == []  # no C loop ran


def test_learned_means_beyond_the_seed_spread_of_the_untrained_vectors():
    from chapter20.labs.nb09_study import UNTRAINED_VECTORS, learned_table

    runs = _runs()
    untrained = runs[runs.trainer == "ours negative"].assign(
        trainer=UNTRAINED_VECTORS, wordsim353=[0.05, 0.0, -0.05], simlex999=[0.08, 0.09, 0.10]
    )
    table = learned_table(pd.concat([runs, untrained], ignore_index=True))
    assert UNTRAINED_VECTORS not in table.index
    # WordSim: 0.22 ± 0.02 vs 0.00 ± 0.05: a gap of 0.22 > 2 × 0.05
    assert table.loc["ours negative", "wordsim353_learned"]
    # SimLex: 0.11 ± 0.01 vs 0.09 ± 0.01: a gap of 0.02, not more than 2 × 0.01
    assert not table.loc["ours negative", "simlex999_learned"]
    assert table.loc["ours negative", "wordsim353"] == "0.220 ± 0.020"


def test_the_records_untrained_rows_are_the_start_of_our_runs():
    """The untrained vectors are deterministic: the record's row is what the vectors a run of
    ours starts from score now, to the last digit (seed 1 of three)."""
    from dataclasses import replace

    from chapter20.labs.nb09_study import UNTRAINED_VECTORS, study_rows
    from chapter20.word2vec.corpus import corpus_sentences
    from chapter20.word2vec.skipgram_training import untrained_vectors
    from chapter20.word2vec.trainers import COMPARISON

    trainers, _, _ = study_rows(live=False)
    row = trainers[(trainers.trainer == UNTRAINED_VECTORS) & (trainers.seed == 1)].iloc[0]
    start = untrained_vectors(corpus_sentences("wiki+lee"), replace(COMPARISON, seed=1))
    assert start.evaluate_word_pairs("wordsim353").spearman == row.wordsim353
    assert start.evaluate_word_pairs("simlex999").spearman == row.simlex999


def test_the_record_holds_every_run_of_the_study():
    from chapter20.labs.nb09_study import (
        EPOCH_CONTROL,
        STUDY_TRAINERS,
        UNTRAINED_VECTORS,
        study_rows,
    )

    trainers, ranks, source = study_rows(live=False)
    expected = {*STUDY_TRAINERS, UNTRAINED_VECTORS, EPOCH_CONTROL, "ours softmax"}
    assert set(trainers.trainer) == expected
    assert (trainers.groupby("trainer").seed.nunique() == 3).all()  # three seeds each
    assert set(ranks.variant) >= {"2 ranks, combined once at the end (control)"}
    assert (ranks.rank_spread == 0).all()  # every rank ends with the same vectors
    assert source.startswith("recorded 20")


def test_sync_counts_count_one_sync_per_combination_of_the_copies():
    from chapter20.labs.nb09_data_parallel import sync_counts
    from chapter20.labs.nb09_study import study_rows

    _, ranks, _ = study_rows(live=False)
    counts = sync_counts(ranks)
    summed = counts.loc["2 ranks, changes summed 8× per epoch"]
    assert summed["syncs per rank"] == 8 * 5 and summed["tables per sync"] == 2
    assert summed["all-reduce calls per rank"] == 80
    control = counts.loc["2 ranks, combined once at the end (control)"]
    assert control["syncs per rank"] == 1 and control["tables per sync"] == 1
    assert summed["MB per rank per sync"] == pytest.approx(2 * control["MB per rank per sync"])


def test_the_live_check_reruns_a_studied_arm_at_the_studys_tolerance():
    from chapter20.labs.nb09_study import LIVE_TOLERANCE, LIVE_TRAINER, STUDY_TRAINERS

    assert LIVE_TRAINER in STUDY_TRAINERS and LIVE_TOLERANCE == MATCH_TOLERANCE
