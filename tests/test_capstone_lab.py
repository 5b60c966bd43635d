"""Tests of notebook 11's labs: chapter20.labs.nb11_capstone (the synthesis tables),
nb11_recipe, nb11_scaling (the batch claim), nb11_baselines and nb11_ablation, and of the
readers of their records in chapter20.capstone.evaluation and scaling_readings."""

import numpy as np
import pandas as pd
import pytest

from chapter20.capstone import evaluation, scaling_readings
from chapter20.core.claim_criteria import section_order
from chapter20.core.claims import HOLDS, NEEDS_GPU, NOT_YET_MEASURED, audit, load_claims
from chapter20.labs import nb11_ablation as ablation_lab
from chapter20.labs import nb11_capstone as capstone_lab
from chapter20.labs import nb11_recipe as studies
from chapter20.labs import nb11_scaling as scaling_lab
from chapter20.training.early_stopping import EarlyStopping


def test_every_takeaway_claim_exists_and_none_is_repeated():
    ids = [c for _, claims in capstone_lab.takeaways() for c in claims]
    assert len(ids) == len(set(ids))
    assert set(ids) <= set(load_claims())


def test_takeaways_read_the_audit_not_retyped_text(tmp_path):
    frame = audit(tmp_path, record=False)  # nothing recorded: every claim "not yet measured"
    frame.loc[frame["id"] == "C05", "verdict"] = HOLDS
    frame.loc[frame["id"] == "C10", "verdict"] = NEEDS_GPU
    table = capstone_lab.takeaways_table(frame)
    assert len(table) == len(capstone_lab.takeaways())
    assert table.iloc[0]["verdicts"] == f"C01: {NOT_YET_MEASURED}; C05: {HOLDS}"
    assert table.iloc[2]["verdicts"] == f"C10: {NEEDS_GPU}"


def test_verdicts_by_section_counts_every_claim_and_sources_are_named(tmp_path):
    frame = audit(tmp_path, record=False)
    table = capstone_lab.verdicts_by_section(frame)
    assert table.to_numpy().sum() == 30
    assert table[NOT_YET_MEASURED].sum() == 30
    assert list(table.index)[0] == "overview"
    capstone_lab.plot_verdicts_by_section(table)
    sources = capstone_lab.audit_sources(frame)
    assert sources.sum() == 30 and "not yet measured" in sources.index[0]
    assert capstone_lab.audit_sources_line(frame) == (
        "verdicts: 30 not yet measured (no run, no record)"
    )


def test_audit_table_lists_every_claim_in_the_chapters_section_order(tmp_path):
    frame = audit(tmp_path, record=False)
    table = capstone_lab.audit_table(frame)
    assert sorted(table.index) == sorted(frame["id"]) and len(table) == 30
    keys = [section_order(s) for s in table["§"]]
    assert keys == sorted(keys)
    assert list(table.columns) == ["§", "claim", "verdict", "claimed", "measured", "notebook"]
    assert table["claim"].str.endswith("…").sum() == 0  # the claims' words in full
    by_section = capstone_lab.verdicts_by_section(frame)
    assert list(by_section.index) == list(dict.fromkeys(table["§"]))  # one order for both
    order = ["overview", "20.1.1", "20.2", "20.2.1", "20.10", "note"]
    assert sorted(reversed(order), key=section_order) == order


def test_further_reading_has_the_13_entries_of_20_8_each_placed_in_the_notebooks():
    entries = capstone_lab.reading_list("further reading")
    assert len(entries) == 13
    references = " ".join(reference for _, reference, _ in entries)
    named = [
        "PyTorch Distributed", "Megatron-LM", "ZeRO", "Mixed Precision Training",
        "8-bit Optimizers", "Sublinear Memory", "Horovod", "Low-Memory", "Imperative Style",
        "Systolic", "Resource Provisioning", "Four Minutes", "8-bit Floating Point",
    ]  # fmt: skip
    assert all(name in references for name in named)
    assert all("notebook" in adds for _, _, adds in entries)
    methods = capstone_lab.reading_list("methods")
    assert methods and all(reference and adds for _, reference, adds in methods)


def _quality_rows():
    return pd.DataFrame(
        {
            "method": ["encoder"] * 3 + ["bm25"] * 3,
            **{
                c: [0.6, 0.62, 0.64, np.nan, np.nan, np.nan]
                for c in ("lee_pearson", "alignment", "uniformity", "mean_cosine")
            },
            **{
                c: [0.1, 0.11, 0.12, 0.09, 0.09, 0.09]
                for c in ("recall@1", "recall@10", "mrr", "ndcg@10")
            },
            "chance_mrr": [0.006] * 6,
        }
    )


def test_quality_table_means_spreads_and_undefined_figures():
    table = capstone_lab.quality_table(_quality_rows())
    assert table.loc["encoder", "Lee r"] == "0.620 ± 0.020"
    assert table.loc["bm25", "Lee r"] == "—"
    assert table.loc["bm25", "MRR"] == "0.090 ± 0.000"
    capstone_lab.plot_quality(_quality_rows())


def test_goal_lines_judge_the_encoder_against_bm25_and_the_best_lsi_by_the_seed_noise():
    encoder = pd.DataFrame({"mrr": [0.10, 0.11, 0.12], "lee_pearson": [0.60, 0.62, 0.64]})
    baselines = pd.DataFrame({
        "method": ["bm25", "bm25", "lsi", "lsi"],
        "corpus": ["training text", "lee_background", "training text", "lee_background"],
        "settings": [{"bm25_k1": 0.6, "bm25_b": 0.75}, {}, {"lsi_topics": 800},
                     {"lsi_topics": 200}],
        "mrr": [0.115, 0.5, 0.1, 0.1], "lee_pearson": [np.nan, np.nan, 0.50, 0.61],
    })  # fmt: skip
    retrieval, lee = capstone_lab.goal_lines(encoder, "the encoder", baselines)
    assert retrieval.startswith("held-out MRR: BM25 (k1 0.6, b 0.75) (training text), 0.115,")
    assert retrieval.endswith("within the seed noise (twice the larger seed SD, 0.020)")
    assert lee.startswith("Lee r: the encoder, 0.620 ± 0.020, is higher than LSI-200")
    assert "within the seed noise" in lee
    far = encoder.assign(lee_pearson=[0.90, 0.91, 0.92])
    assert "beyond the seed noise" in capstone_lab.goal_lines(far, "the encoder", baselines)[1]
    with pytest.raises(ValueError, match="tuned BM25"):
        capstone_lab.goal_lines(encoder, "the encoder", baselines[baselines["method"] == "lsi"])


def test_the_composed_run_is_named_by_the_step_it_kept():
    def label(best):
        return capstone_lab.composed_run_label({"steps": 10, "early_stopping": {"best_step": best}})

    assert label(0) == "encoder, composed run, 10 steps (kept its start)"
    assert label(5) == "encoder, composed run, 10 steps (kept step 5)"
    assert capstone_lab.composed_run_label({"steps": 3, "early_stopping": None}).endswith(
        "(its last step)"
    )


def _curve(values, init="random", seed=0, every=50):
    return pd.DataFrame(
        {
            "init": init,
            "seed": seed,
            "step": np.arange(len(values)) * every,
            "val_mrr": values,
            "mrr": values,
            "recall@1": values,
            "lee_pearson": values,
        }
    )


def test_bucket_lines_name_each_buckets_leader_against_chance():
    buckets = np.array(["0", "0", "1-2", "3+"])
    runs = pd.DataFrame(
        {"mrr_overlap_0": [0.02, 0.04], "mrr_overlap_1-2": [0.1, 0.1], "mrr_overlap_3+": [0.5, 0.5]}
    )
    lexical = {"lexical": np.eye(4)}  # every positive ranked first: MRR 1 in every bucket
    lines = scaling_lab.bucket_lines(runs, lexical, buckets, chance=0.01)
    assert lines[0] == "0 shared: lexical leads; MRR over chance: encoder 3.0×, lexical 100.0×"
    assert len(lines) == 3 and all("lexical leads" in line for line in lines)
    with pytest.raises(ValueError, match="chance"):
        scaling_lab.bucket_lines(runs, lexical, buckets, chance=0.0)


def test_early_stopping_follows_the_stated_rule():
    # best at step 100, then three evaluations without a gain above 0.001: stop at 250
    curve = _curve([0.10, 0.12, 0.13, 0.1305, 0.129, 0.1309, 0.14, 0.15])
    rule = EarlyStopping(patience=3, min_delta=0.001)
    row = evaluation.early_stopping(curve, rule).iloc[0]
    assert (row["best_step"], row["stop_step"], row["steps"]) == (100, 250, 350)
    assert row["saved"] == pytest.approx(1 - 250 / 350)
    assert row["mrr_kept"] == 0.13 and row["mrr_end"] == 0.15  # what stopping gave up
    rising = evaluation.early_stopping(_curve([0.1, 0.2, 0.3]), rule).iloc[0]
    assert rising["stop_step"] == rising["steps"] == 100 and rising["saved"] == 0


def test_saturation_batch_is_where_no_larger_batch_beats_the_noise():
    rows = []
    for seed, noise in enumerate((-0.003, 0.0, 0.003)):
        for batch, value in ((32, 0.04), (128, 0.055), (512, 0.06), (2000, 0.0605)):
            rows.append(
                {"mode": "equal steps", "batch": batch, "seed": seed, "recall@1": value + noise}
            )
    frame = pd.DataFrame(rows)
    assert evaluation.saturation_batch(frame, "equal steps") == 128  # 512 is +0.005: within noise
    with pytest.raises(ValueError, match="mode"):
        evaluation.saturation_batch(frame, "equal documents")
    rows = [{**r, "recall@1": r["batch"] / 1e4} for r in rows]  # every step up helps
    assert evaluation.saturation_batch(pd.DataFrame(rows), "equal steps") == 2000


def _batch_results(values: dict[int, float], start_value: float = 0.05):
    """run_results-shaped rows of a batch study at equal steps: 3 seeds per batch."""
    rows = []
    for seed, noise in enumerate((-0.002, 0.0, 0.002)):
        for batch, value in values.items():
            rows.append({"budget": "steps", "batch": batch, "seed": seed, "mrr": value + noise,
                         "start_mrr": start_value + noise})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_batch_study_at_the_untrained_level_gives_no_trend_and_no_verdict():
    results = _batch_results({32: 0.051, 128: 0.052, 512: 0.07})  # 32, 128 within noise
    evidence = scaling_readings.batch_evidence(results)
    assert evidence["table"]["past_start"].tolist() == [False, False, True]
    assert evidence["table"]["untrained_mean"].iloc[0] == pytest.approx(0.05)
    assert evidence["trained"] is False and evidence["saturation"] is None
    claim = scaling_lab.batch_claim(evidence)
    assert claim["trained_past_start"] is False and claim["measured"] is None
    with pytest.raises(ValueError, match="budget"):
        scaling_readings.batch_evidence(results, "documents")


def test_a_batch_study_past_its_start_gives_its_trend():
    evidence = scaling_readings.batch_evidence(_batch_results({32: 0.07, 128: 0.08, 512: 0.0805}))
    assert evidence["trained"] is True and evidence["saturation"] == 128
    claim = scaling_lab.batch_claim(evidence)
    assert claim["measured"] == 128.0 and "batch 512: MRR 0.0805" in claim["note"]


def test_a_records_provenance_puts_the_command_on_a_reproduce_line():
    from chapter20.core.study_record import provenance_line, read_study

    lines = provenance_line(read_study(studies.RECIPE_FILE)).splitlines()
    assert lines[0].startswith("recorded 20") and "chapter20 bench" not in lines[0]
    assert lines[1].startswith("reproduce: chapter20 bench recipe") and len(lines) == 2


def test_ablation_configs_switch_one_technique_each():
    composed = ablation_lab.ablation_config("composed", 256, 64).training
    assert (
        composed.precision,
        composed.chunk_size,
        composed.activation_checkpointing,
        composed.optimizer,
        composed.state_32bit_tables,
    ) == ("bf16", 64, "every_layer", "adamw8bit", False)
    control = ablation_lab.ablation_config(ablation_lab.CONTROL, 256, 64)
    assert control.batch == 64 and control.training.chunk_size is None
    plain = ablation_lab.ablation_config("plain fp32 (every technique off)", 256, 64)
    assert plain.batch == 256 and plain.training.precision == "fp32"
    assert plain.training.chunk_size is None and plain.training.optimizer == "adamw_fused"
    with pytest.raises(ValueError, match="name"):
        ablation_lab.ablation_config("no such", 256, 64)


def test_ablation_summary_compares_each_effect_with_the_seed_noise():
    frame = pd.DataFrame(
        {
            "variant": ["composed"] * 3 + ["fp32 (no bf16)"] * 3 + ["small"] * 3,
            "seed": [0, 1, 2] * 3,
            "mrr": [0.10, 0.11, 0.12, 0.105, 0.115, 0.125, 0.05, 0.06, 0.07],
        }
    )
    summary = evaluation.ablation_summary(frame).set_index("variant")
    assert summary.loc["fp32 (no bf16)", "effect"] == pytest.approx(0.005)
    assert summary.loc["fp32 (no bf16)", "noise"] == pytest.approx(0.02)
    assert not summary.loc["fp32 (no bf16)", "beyond_noise"]
    assert summary.loc["small", "beyond_noise"]


def test_checkpointing_and_gradient_caching_do_not_change_the_composed_training():
    from chapter20.capstone.recipe import EncoderRecipe

    recipe = EncoderRecipe(sources=("lee",), vocab_size=3_000, dim=16, init="random")
    differences = ablation_lab.composed_equivalence(steps=2, batch=32, chunk=8, recipe=recipe)
    assert differences["no activation checkpointing"] == 0.0  # the same arithmetic, recomputed
    assert differences["no gradient caching (same batch)"] < 1e-3  # bf16 sums in other chunks


def test_a_written_study_carries_its_provenance(tmp_path):
    from chapter20.core.study_record import PROVENANCE, provenance_line, write_study

    path = write_study(pd.DataFrame({"x": [1, 2]}), str(tmp_path / "s.csv"), "chapter20 bench x")
    frame = pd.read_csv(path)
    assert set(PROVENANCE) <= set(frame.columns) and frame["x"].tolist() == [1, 2]
    line = provenance_line(frame)
    assert line.startswith("recorded 20") and line.endswith("\nreproduce: chapter20 bench x")
    with pytest.raises(ValueError, match="frame"):
        write_study(pd.DataFrame(), str(tmp_path / "e.csv"), "c")


@pytest.mark.parametrize(
    "name",
    [studies.RECIPE_FILE, ablation_lab.ABLATION_FILE, *scaling_lab.SCALING_FILES.values()],
)
def test_the_committed_studies_read_and_say_where_they_come_from(name):
    from chapter20.core.study_record import provenance_line, read_study

    frame = read_study(name)
    assert len(frame) and "chapter20 bench" in provenance_line(frame)


def _baseline_frame():
    lsi = pd.DataFrame(
        {"topics": [50, 100], "recall@1": [0.1, 0.2], "recall@10": [0.3, 0.4], "mrr": [0.15, 0.25]}
    ).assign(chosen=[False, True], study="choice", method="lsi", corpus="lee_background")
    table = pd.DataFrame(
        {
            "method": ["bm25", "doc2vec", "bm25", "doc2vec"],
            "corpus": "lee_background",
            "seed": [0, 0, 1, 1],
            "settings": ["{}", "{'doc2vec_epochs': 40}", "{}", "{'doc2vec_epochs': 40}"],
            "mrr": [0.08, 0.05, 0.08, 0.06],
        }
    ).assign(study="baselines")
    return pd.concat([lsi, table], ignore_index=True)


def test_the_baseline_record_splits_into_the_choice_studies_and_the_table_of_one_seed():
    from chapter20.labs import nb11_baselines as baselines_lab

    choices, table = baselines_lab.recorded_baselines(_baseline_frame(), seed=1)
    assert list(choices) == [("lsi", "lee_background")]
    assert choices[("lsi", "lee_background")]["chosen"].tolist() == [False, True]
    assert table["seed"].tolist() == [1, 1]
    assert table["settings"].tolist() == [{}, {"doc2vec_epochs": 40}]
    assert baselines_lab.choice_lines(choices) == [
        "lsi on lee_background: topics 100 chosen, at the grid's edge in topics"
    ]
    assert "topics" not in table.columns and "study" not in table.columns


def test_replaying_a_baseline_needs_one_row_of_the_record():
    from chapter20.labs import nb11_baselines as baselines_lab

    _, table = baselines_lab.split_study(_baseline_frame())
    with pytest.raises(ValueError, match="no single row"):
        baselines_lab.replay_baseline(table, "tfidf", "lee_background", seed=0)


def test_the_committed_baseline_record_holds_three_seeds_of_every_baseline_on_both_corpora():
    from chapter20.capstone.baselines import BASELINES, CORPORA
    from chapter20.core.study_record import provenance_line, read_study
    from chapter20.labs import nb11_baselines as baselines_lab

    record = read_study(baselines_lab.BASELINES_FILE)
    choices, table = baselines_lab.split_study(record)
    assert set(choices) == {(m, c) for m in ("lsi", "tfidf", "bm25") for c in CORPORA}
    assert all(study["chosen"].sum() == 1 for study in choices.values())
    counts = table.groupby(["method", "corpus"]).size()
    assert set(counts.index) == {(m, c) for m in BASELINES for c in CORPORA}
    assert (counts == len(baselines_lab.BASELINE_SEEDS)).all()
    assert "reproduce: chapter20 bench baselines" in provenance_line(record)
