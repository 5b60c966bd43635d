"""Notebook 09, sections 4 and 5 (the note, topics 1 and 2): the recorded quality study of our
skip-gram trainers and of data-parallel word2vec, and its one live check.

Training every trainer on the real corpus for three seeds takes minutes on two cores, so it runs
once, by :func:`quality_benchmark`, and is committed as ``data/word2vec_quality.csv``
(``core.study_record.write_study``: date, machine, load, command). The notebook reads it back
(:func:`study_rows`) and reruns one seed of our negative sampling live (:func:`live_check`).
The record holds, per seed:

- ``study == "trainers"``: our negative sampling and hierarchical softmax and gensim's, five
  epochs; the **untrained** vectors (the same model before its first step, under the same
  evaluation); the **control**, our negative sampling stopped after one epoch, which the
  comparison with gensim must tell apart; and the full softmax given the time our negative
  sampling needed (claim C24's condition);
- ``study == "data_parallel"``: two ranks combining their copies 8 times per epoch, and the
  control that combines them once, at the end (one row per rank).

Speeds depend on the load of the machine that ran the study: the notebook reads quality, counts
and bytes from the record and measures speeds live.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import torch
import torch.distributed as dist

from chapter20.core.checks import check_int
from chapter20.core.seed_statistics import beyond_noise, summarize_seeds
from chapter20.techniques.distributed import run_local_group
from chapter20.word2vec.corpus import corpus_sentences
from chapter20.word2vec.data_parallel import train_word2vec_data_parallel
from chapter20.word2vec.skipgram_config import Word2VecConfig
from chapter20.word2vec.skipgram_training import untrained_vectors
from chapter20.word2vec.trainers import COMPARISON, score_run, softmax_at_equal_time, train

__all__ = [
    "DP_VARIANTS",
    "DP_MORE_VARIANTS",
    "data_parallel_runs",
    "QUALITY_STUDY",
    "UNTRAINED_VECTORS",
    "EPOCH_CONTROL",
    "STUDY_TRAINERS",
    "LIVE_TOLERANCE",
    "LIVE_TRAINER",
    "trainer_study",
    "quality_benchmark",
    "study_rows",
    "learned_table",
    "live_check",
]

#: The variants the notebook runs at its default scale: ``name -> (syncs_per_epoch, combine,
#: alpha)``. The control, chosen before the run, combines copies that trained apart for the
#: whole run: the metric must see the harm.
DP_VARIANTS = {
    "2 ranks, changes summed 8× per epoch": (8, "sum", Word2VecConfig().alpha),
    "2 ranks, combined once at the end (control)": (0, "sum", Word2VecConfig().alpha),
}
#: More variants, with ``CHAPTER20_SCALE`` ≥ 2: model averaging at word2vec's rate, which
#: halves every pair's step, and at twice the rate (§20.4.1's linear scaling rule).
DP_MORE_VARIANTS = {
    "2 ranks, averaged 8× per epoch": (8, "average", Word2VecConfig().alpha),
    "2 ranks, averaged 8× per epoch, alpha × 2": (8, "average", 2 * Word2VecConfig().alpha),
}


def _rank_runs(corpus: str, seeds: tuple[int, ...], variants: dict) -> list[dict]:
    """What each rank of :func:`data_parallel_runs` does: every variant for every seed, with
    the rank's words/s, its sync time and ρ, and the largest difference between the ranks'
    final vectors (max − min over the ranks, all-reduced)."""
    sentences = corpus_sentences(corpus)
    records = []
    for seed in seeds:
        for name, (syncs, combine, alpha) in variants.items():
            config = Word2VecConfig(alpha=alpha, seed=seed, workers=1, progress=False)
            run = train_word2vec_data_parallel(
                sentences, config, syncs_per_epoch=syncs, combine=combine
            )
            vectors = torch.from_numpy(run.vectors.vectors)
            high, low = vectors.clone(), vectors.clone()
            dist.all_reduce(high, op=dist.ReduceOp.MAX)
            dist.all_reduce(low, op=dist.ReduceOp.MIN)
            stats = run.vectors.stats
            records.append({
                "variant": name, "seed": seed, "rank": run.rank,
                "wordsim353": run.vectors.evaluate_word_pairs("wordsim353").spearman,
                "simlex999": run.vectors.evaluate_word_pairs("simlex999").spearman,
                "words_per_second": stats.words_per_second, "seconds": stats.seconds,
                "sync_seconds": run.sync_seconds, "syncs": run.syncs,
                "sync_bytes": run.table_bytes, "rank_spread": float((high - low).max()),
            })  # fmt: skip
    return records


def data_parallel_runs(
    corpus: str = "wiki+lee",
    seeds: tuple[int, ...] = (1, 2, 3),
    variants: dict | None = None,
    *,
    world_size: int = 2,
) -> pd.DataFrame:
    """Train :data:`DP_VARIANTS` (or ``variants``) on ``corpus`` with ``world_size`` gloo ranks,
    one worker each, for every seed, with notebook 09's settings (``Word2VecConfig()``; negative
    sampling): one row per variant, seed and rank (see :func:`_rank_runs`)."""
    variants = DP_VARIANTS if variants is None else variants
    ranks = run_local_group(
        _rank_runs, world_size, (corpus, tuple(seeds), variants), timeout_s=3600
    )
    return pd.DataFrame([record for rank in ranks for record in rank])


#: The committed record (``data/<name>``).
QUALITY_STUDY = "word2vec_quality.csv"
#: The untrained model's rows: the input vectors a run of :data:`LIVE_TRAINER` starts from,
#: before any step (``chapter20.word2vec.skipgram_training.untrained_vectors``).
UNTRAINED_VECTORS = "untrained"
#: The control of the comparison with gensim: our negative sampling after one epoch of five.
EPOCH_CONTROL = "ours negative, 1 epoch (control)"
#: The trainers of the study, each five epochs with the comparisons' settings
#: (``chapter20.word2vec.trainers.COMPARISON``).
STUDY_TRAINERS = ("ours negative", "gensim negative", "ours hierarchical", "gensim hierarchical")
#: The run of the study that the notebook reruns live, one seed of it.
LIVE_TRAINER = "ours negative"
#: How far a live rerun's ρ may fall from its row of the record: the tolerance within which the
#: study calls two trainers' ρ equal (``nb09_word2vec.MATCH_TOLERANCE``). Two Hogwild threads
#: make two runs of one seed differ (the order of their updates is not fixed), by more than
#: three seeds' standard deviation can estimate; one epoch of five stays far outside it.
LIVE_TOLERANCE = 0.05


def trainer_study(
    corpus: str = "wiki+lee",
    seeds: tuple[int, ...] = (1, 2, 3),
    config: Word2VecConfig = COMPARISON,
) -> pd.DataFrame:
    """Per seed (``config``'s seed replaced): :data:`STUDY_TRAINERS` with ``config``'s settings,
    the vectors a run of ours starts from (:data:`UNTRAINED_VECTORS`), :data:`EPOCH_CONTROL`
    and the full softmax given the seconds our negative sampling took on the same seed
    (``softmax_at_equal_time``; its ``epochs`` is the share of one epoch it saw). One row per
    run, as ``compare_trainers`` writes them."""
    sentences = corpus_sentences(corpus)
    records = []
    for seed in seeds:
        run = replace(config, seed=seed)
        records.append(score_run(UNTRAINED_VECTORS, untrained_vectors(sentences, run), seed, 0))
        seconds = None
        for trainer in STUDY_TRAINERS:
            wv = train(trainer, sentences, run)
            records.append(score_run(trainer, wv, seed, wv.stats.epochs))
            seconds = wv.stats.seconds if trainer == "ours negative" else seconds
        wv = train("ours negative", sentences, replace(run, epochs=1))
        records.append(score_run(EPOCH_CONTROL, wv, seed, 1))
        wv, share = softmax_at_equal_time(corpus, seconds, run)
        records.append(score_run("ours softmax", wv, seed, share))
    return pd.DataFrame(records).fillna({"words_per_second": 0.0, "seconds": 0.0})


def quality_benchmark(
    corpus: str = "wiki+lee",
    seeds: tuple[int, ...] = (1, 2, 3),
    out: str = "",
    config: Word2VecConfig = COMPARISON,
):
    """``chapter20 bench word2vec-quality``: :func:`trainer_study` (with ``config``) and the
    data-parallel runs (:func:`data_parallel_runs`, :data:`DP_VARIANTS`) for ``seeds``; with
    ``out`` written as the record notebook 09 reads (``data/word2vec_quality.csv``)."""
    from chapter20.core.study_record import study_output, write_study

    seeds = tuple(check_int("seed", s, 0) for s in seeds)
    trainers = trainer_study(corpus, seeds, config).assign(study="trainers")
    ranks = data_parallel_runs(corpus, seeds, DP_VARIANTS).rename(columns={"variant": "trainer"})
    frame = pd.concat([trainers, ranks.assign(study="data_parallel")], ignore_index=True)
    print(frame.drop(columns=["device"]).round(4).to_string(index=False))
    if study_output(out):
        command = "chapter20 bench word2vec-quality"
        print("written:", write_study(frame, study_output(out), command))
    return frame


def study_rows(live: bool) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The rows sections 4 and 5 judge: ``(trainers, data_parallel, source)``. With ``live``
    (``CHAPTER20_SCALE`` >= 2) the whole study runs now, the data-parallel runs with
    :data:`DP_MORE_VARIANTS` too; else the committed record, and ``source`` says when and on
    which machine it was measured (the command that reproduces it is ``command`` in the
    record)."""
    if live:
        trainers = trainer_study()
        variants = {**DP_VARIANTS, **DP_MORE_VARIANTS}
        return trainers, data_parallel_runs("wiki+lee", (1, 2, 3), variants), "this run"
    from chapter20.core.study_record import read_study, value_span

    record = read_study(QUALITY_STUDY)
    trainers = record[record.study == "trainers"].reset_index(drop=True)
    ranks = record[record.study == "data_parallel"].rename(columns={"trainer": "variant"})
    counts = ["rank", "syncs", "sync_bytes"]  # integers, read back as floats beside NaN
    ranks = ranks.astype({c: "int64" for c in counts})
    source = (
        f"recorded {record.measured_on.iloc[0]} on "
        f"{record.machine.iloc[0]} (load average {value_span(record.load_average)})"
    )
    return trainers, ranks.reset_index(drop=True), source


def learned_table(trainers: pd.DataFrame, *, with_reference: bool = False) -> pd.DataFrame:
    """Per run of the record's trainer study (with ``with_reference``, the untrained vectors
    first, marked as the reference): WordSim-353 and SimLex-999 ρ as mean ± standard deviation
    over the seeds, and whether each is above the untrained vectors' beyond the seed spread
    (``seed_statistics.beyond_noise``: the gap of the means more than twice the larger standard
    deviation)."""
    stats = summarize_seeds(trainers, by="trainer", columns=("wordsim353", "simlex999"))
    names = [UNTRAINED_VECTORS] * with_reference + [
        n for n in stats.trainer if n != UNTRAINED_VECTORS
    ]
    rows = []
    for name in names:
        row = {"trainer": name}
        for column in ("wordsim353", "simlex999"):
            line = stats.set_index("trainer").loc[name]
            row[column] = f"{line[f'{column}_mean']:.3f} ± {line[f'{column}_std']:.3f}"
            row[f"{column}_learned"] = (
                "(reference)"
                if name == UNTRAINED_VECTORS
                else beyond_noise(stats, name, UNTRAINED_VECTORS, by="trainer", column=column)
            )
        rows.append(row)
    return pd.DataFrame(rows).set_index("trainer")


def equal_time_finding(trainers: pd.DataFrame, softmax: str = "ours softmax") -> str:
    """Notebook 09, section 4: the full softmax given our negative sampling's time, next to it,
    compared like with like: a ratio of WordSim-353 ρ only when both runs learned (beyond the
    untrained vectors' seed spread, :func:`learned_table`); otherwise which one left its start."""
    table = learned_table(trainers)
    ours, full = table.loc["ours negative"], table.loc[softmax]
    if ours.wordsim353_learned and full.wordsim353_learned:
        means = trainers.groupby("trainer").wordsim353.mean()
        ratio = means["ours negative"] / means[softmax]
        return f"both learned; WordSim-353 ρ, ours negative over the full softmax: x{ratio:.2f}"
    learned = {True: "learned", False: "stayed at the untrained level"}
    return (
        f"WordSim-353 ρ at equal time: our negative sampling {ours.wordsim353} "
        f"({learned[bool(ours.wordsim353_learned)]}), the full softmax {full.wordsim353} "
        f"({learned[bool(full.wordsim353_learned)]}): no ratio of ρ is drawn from a run that "
        "did not leave its start"
    )


def live_check(
    trainers: pd.DataFrame,
    config: Word2VecConfig = COMPARISON,
    *,
    sentences: list | None = None,
    gensim_share: int = 5,
) -> tuple[dict, str]:
    """Seed ``config.seed`` of the study's ``"ours negative"`` (the record's settings, ``config``)
    rerun now, and gensim's negative sampling for one epoch on every ``gensim_share``-th
    sentence beside it, for its speed only: ``(rows, line)``, the live rows (``score_run``'s
    fields; gensim's: its speed) and one line: the rerun's ρ against its row of the record,
    within :data:`LIVE_TOLERANCE` on both sets. ``sentences``: the record's corpus
    (``corpus_sentences("wiki+lee")``) if already read."""
    sentences = corpus_sentences("wiki+lee") if sentences is None else sentences
    seed = config.seed
    ours = train(LIVE_TRAINER, sentences, config)
    gensim = train("gensim negative", sentences[::gensim_share], replace(config, epochs=1))
    rows = {"ours": score_run(LIVE_TRAINER, ours, seed, ours.stats.epochs),
            "gensim": {"words_per_second": gensim.stats.words_per_second}}  # fmt: skip
    recorded = trainers[(trainers.trainer == LIVE_TRAINER) & (trainers.seed == seed)].iloc[0]
    parts, within = [], []
    for column, name in (("wordsim353", "WordSim-353"), ("simlex999", "SimLex-999")):
        live, row = rows["ours"][column], recorded[column]
        within.append(abs(live - row) <= LIVE_TOLERANCE)
        parts.append(f"{name} ρ {live:.3f} (recorded {row:.3f})")
    line = (
        f"{LIVE_TRAINER}, seed {seed}, {ours.stats.epochs:g} epochs, rerun here: "
        + ", ".join(parts) + f"; within {LIVE_TOLERANCE}: {'✓' if all(within) else '✗'}"
    )  # fmt: skip
    return rows, line
