"""Word vectors in notebook 10, run and measured (the note on efficient embedding training,
topic 3; claims C28–C30): what the vocabulary levers do to the vectors a model learns.

- subword vectors composed into word vectors (C30's quality side,
  ``chapter20.vocab.word_vectors.compose_word_vectors``), trained and scored over seeds by
  :func:`subword_quality` and :func:`subword_summary`, against the same models untrained;
- the figures of pruning (C29), of BPE sizes (C30) and of the PCA quality curve of word vectors
  (``chapter20.vocab.word_vectors.pca_quality_curve``, C28 applied to embeddings).

The sparse-input experiment of the same notebook and ``bench vocab`` are
``chapter20.labs.nb10_vocab``; the package side (pruning, BPE, ``pca_compress``, word vectors)
is ``chapter20.vocab``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import torch

from chapter20.core.checks import check_int
from chapter20.core.corpora import word_similarity
from chapter20.core.findings import compare
from chapter20.core.plotting import new_panels
from chapter20.core.seed_statistics import beyond_noise, summarize_seeds
from chapter20.vocab.bpe import BPETokenizer, apply_merges, learn_merges
from chapter20.vocab.word_vectors import compose_word_vectors
from chapter20.word2vec.skipgram_config import Word2VecConfig

__all__ = [
    "SUBWORD_MARGIN",
    "SubwordRuns",
    "pruned_matrix_ratio_evidence",
    "subword_quality_gap_evidence",
    "bpe_merge_proof",
    "plot_bpe",
    "plot_pca_quality",
    "plot_pruning",
    "subword_quality",
    "subword_summary",
    "UNTRAINED",
    "subword_comparisons",
    "SUBWORD_CONFIG",
    "SUBWORD_STUDY",
    "subword_study",
    "subword_benchmark",
    "word_model_check",
    "study_rows",
    "CHECK_MODEL",
]


# --------------------------------------------------------------------------------------------
# A BPE merge, learnt and applied in Python, against tokenizers
# --------------------------------------------------------------------------------------------


def bpe_merge_proof(
    bpe: BPETokenizer,
    train_texts: Sequence[Sequence[str]],
    heldout_texts: Sequence[Sequence[str]],
    merges: int = 1_000,
) -> dict[str, Any]:
    """``chapter20.vocab.bpe``'s few lines against ``tokenizers`` (note, topic 3; C30): the
    first ``merges`` merges that :func:`learn_merges` learns from ``train_texts`` (the texts
    ``bpe`` was trained on) against ``bpe.merges``, and every distinct held-out piece spelt by
    :func:`apply_merges` with all of ``bpe``'s merges against ``tokenizers``' BPE model.
    Returns the counts compared, how many agree, and the first merges learnt."""
    from tokenizers import pre_tokenizers

    counts = Counter(piece for text in train_texts for piece in bpe.pre_tokenize(text))
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    size = len(alphabet) + 1 + check_int("merges", merges, 1)  # the bytes and [UNK], then merges
    learnt = learn_merges(counts, size, alphabet=alphabet)
    ranks = {pair: rank for rank, pair in enumerate(bpe.merges)}
    pieces = sorted({piece for text in heldout_texts for piece in bpe.pre_tokenize(text)})
    spelt = sum(
        apply_merges(piece, ranks) == [t.value for t in bpe.tokenizer.model.tokenize(piece)]
        for piece in pieces
    )
    return {
        "merges": len(learnt), "merges_equal": learnt == bpe.merges[: len(learnt)],
        "pieces": len(pieces), "pieces_spelt_equal": spelt, "first_merges": learnt[:8],
    }  # fmt: skip


# --------------------------------------------------------------------------------------------
# Subword vectors against word vectors, seed after seed (C30)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubwordRuns:
    """C30's runs (:func:`subword_quality`): ``frame``, one row per seed and model (``"words"``
    or ``"bpe <size>"``): ``rows`` of the embedding matrix, ``rho_same_pairs`` (WordSim-353
    Spearman ρ on the pairs the word model knows), ``same_pairs``, ``rho_all_pairs`` and
    ``oov_pairs`` (pairs left out), ``seconds`` of training; ``word_model``: the first seed's
    word-level vectors (``chapter20.word2vec.vectors.WordVectors``), for later sections."""

    frame: pd.DataFrame
    word_model: Any


def subword_quality(
    train_articles: Sequence[Sequence[str]],
    sentences: Sequence[Sequence[str]],
    sizes: Sequence[int] = (4_000, 8_000),
    seeds: Sequence[int] = (1, 2, 3),
    *,
    control: int | None = None,
    config: Word2VecConfig | None = None,
    jobs: int = 1,
) -> SubwordRuns:
    """Word vectors vs composed BPE subword vectors, seed after seed (note, topic 3; C30).

    For each seed: word2vec (``chapter20.word2vec.skipgram_training.train_word2vec`` with
    ``config``'s settings, its seed replaced; None: the defaults) on ``sentences`` pruned at
    ``config.min_count``, and for each BPE size (trained once on ``train_articles``) on the
    subwords of the same sentences (pruned at 1); a word's subword vector is the mean of its
    pieces' (:func:`compose_word_vectors`). Both are scored on WordSim-353 on the same pairs
    (those the word model knows), the subword vectors also on every pair. ``control``: one more
    BPE size, trained and scored the same way, named ``"bpe <size> (control)"``: the harmful
    variant chosen before the run (a vocabulary cut to a fraction) that the metric must see.

    ``jobs``: trainings run at once, in threads. On a CPU, two single-worker trainings of
    different models use two cores far better than one training with two Hogwild workers,
    whose threads fight over the same rows (the small BPE tables most of all); each run is
    deterministic for its seed whatever ``jobs`` is, with ``workers=1`` in ``config``."""
    from chapter20.vocab.bpe import train_bpe
    from chapter20.word2vec.skipgram_training import train_word2vec, untrained_vectors
    from chapter20.word2vec.vectors import evaluate_word_pairs

    if not len(seeds):
        raise ValueError("seeds must name at least one seed")
    sizes = [check_int("sizes[i]", size, 257) for size in sizes]
    names = {f"bpe {size}": size for size in sizes}
    if control is not None:
        names[f"bpe {check_int('control', control, 257)} (control)"] = control
    jobs = check_int("jobs", jobs, 1)
    table = word_similarity("wordsim353")
    pair_words = sorted(set(table["word1"]) | set(table["word2"]))
    bpes = {size: train_bpe(train_articles, size) for size in set(names.values())}
    config = Word2VecConfig() if config is None else config
    corpora = {"words": (sentences, config.min_count)}
    corpora.update(
        {name: (bpes[size].tokenize_corpus(sentences), 1) for name, size in names.items()}
    )
    untrained = {
        (seed, name): untrained_vectors(text, replace(config, min_count=count, seed=seed))
        for seed in seeds
        for name, (text, count) in corpora.items()
    }
    with ThreadPoolExecutor(jobs) as pool:
        runs = {
            (seed, name): pool.submit(
                train_word2vec, text, replace(config, min_count=count, seed=seed)
            )
            for seed in seeds
            for name, (text, count) in corpora.items()
        }
        trained = {key: run.result() for key, run in runs.items()}
    records = []
    runs = [*trained.items(), *(((s, f"{n}{UNTRAINED}"), m) for (s, n), m in untrained.items())]
    for (seed, name), model in runs:
        base = name.removesuffix(UNTRAINED)
        if base == "words":
            rows, same = len(model), evaluate_word_pairs(model.words, model.vectors)
            every = same
        else:
            bpe, vectors = bpes[names[base]], (model.words, model.vectors)
            words = trained[seed, "words"].words
            rows = bpe.vocab_size
            same = evaluate_word_pairs(*compose_word_vectors(bpe, words, *vectors))
            every = evaluate_word_pairs(*compose_word_vectors(bpe, pair_words, *vectors))
        records.append({
            "seed": seed, "model": name, "rows": rows, "rho_same_pairs": same.spearman,
            "same_pairs": same.pairs - same.oov_pairs, "rho_all_pairs": every.spearman,
            "oov_pairs": every.oov_pairs,
            "seconds": model.stats.seconds if model.stats is not None else 0.0,
        })  # fmt: skip
    return SubwordRuns(pd.DataFrame(records), trained[seeds[0], "words"])


#: A model's name + this: the same model before its first step, what "learned" is measured against.
UNTRAINED = ", untrained"


def subword_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per trained model of :func:`subword_quality`: ρ on the same pairs as mean ± standard
    deviation over seeds, ``delta`` (its ρ minus the word model's, seed by seed) as mean ± std,
    ρ on all pairs; ``untrained_rho_mean``, the same model's before its first step; ``learned``,
    whether its ρ is above that beyond the seed spread (``seed_statistics.beyond_noise``); rows
    and pairs left out (C30)."""
    start = frame.model.str.endswith(UNTRAINED)
    trained = frame[~start]
    words = trained[trained.model == "words"].set_index("seed")["rho_same_pairs"]
    trained = trained.assign(delta=trained.rho_same_pairs - trained.seed.map(words))
    columns = ("rho_same_pairs", "delta", "rho_all_pairs")
    out = summarize_seeds(trained, by="model", columns=columns).set_index("model")
    both = summarize_seeds(frame, by="model", columns=("rho_same_pairs",))
    means = both.set_index("model")["rho_same_pairs_mean"]
    out["untrained_rho_mean"] = [means.get(f"{m}{UNTRAINED}", np.nan) for m in out.index]
    out["learned"] = [
        f"{m}{UNTRAINED}" in means.index
        and beyond_noise(both, m, f"{m}{UNTRAINED}", by="model", column="rho_same_pairs")
        for m in out.index
    ]
    grouped = trained.groupby("model", sort=False)
    out["rows"] = grouped["rows"].first()
    out["oov_pairs"] = grouped["oov_pairs"].max()
    return out


def subword_comparisons(summary: pd.DataFrame) -> list[str]:
    """Notebook 10, section 3 (C30): for each model of :func:`subword_summary` but the words,
    its mean ρ on the same pairs next to the word vectors', with the seed-to-seed standard
    deviation of its ``delta`` as the spread: one line each, printed by
    ``core.findings.compare``."""
    words = summary.loc["words", "rho_same_pairs_mean"]
    return [
        compare(f"{name}, mean ρ on the same pairs", row.rho_same_pairs_mean,
                "the word vectors'", words, spread=row.delta_std)
        for name, row in summary.drop(index="words").iterrows()
    ]  # fmt: skip


#: Notebook 10's subword study (C30): word2vec's settings, the BPE sizes, the control and the
#: seeds, shared by the notebook and ``chapter20 bench subwords`` (word2vec: gensim's defaults,
#: negative sampling, but 10 epochs, one worker per training).
SUBWORD_CONFIG = Word2VecConfig(epochs=10, workers=1, progress=False)
SUBWORD_SIZES, SUBWORD_CONTROL, SUBWORD_SEEDS = (4_000, 8_000), 500, (1, 2, 3)
#: The committed record of :func:`subword_benchmark`: the three seeds C30 is judged on when a
#: notebook run trains fewer.
SUBWORD_STUDY = "subword_quality.csv"


def subword_study(
    train_articles: Sequence[Sequence[str]],
    seeds: Sequence[int] = SUBWORD_SEEDS,
    *,
    device: Any = None,
    epochs: int | None = None,
    config: Word2VecConfig = SUBWORD_CONFIG,
) -> SubwordRuns:
    """:func:`subword_quality` with notebook 10's settings (``config``, on ``device``, for
    ``epochs`` if given) on every sentence of the Wikipedia sample, two trainings at once on a
    CPU (one per core), one at a time on an accelerator."""
    from chapter20.core.device import get_device
    from chapter20.word2vec.corpus import corpus_sentences

    device = get_device() if device is None else torch.device(device)
    config = replace(config, device=str(device))
    if epochs is not None:
        config = replace(config, epochs=check_int("epochs", epochs, 1))
    return subword_quality(
        train_articles, corpus_sentences("wiki"), SUBWORD_SIZES, seeds, control=SUBWORD_CONTROL,
        config=config, jobs=2 if device.type == "cpu" else 1,
    )  # fmt: skip


#: The live check of the subword study: seed 1's word model trained for fewer epochs than the
#: study, so that a notebook run reproduces a row of the record in half the time; its row is
#: part of the record (model :data:`CHECK_MODEL`) and of no summary.
CHECK_SEED, CHECK_EPOCHS = 1, 5
CHECK_MODEL = f"words, {CHECK_EPOCHS} epochs (live check)"


def _check_row(device=None, config: Word2VecConfig = SUBWORD_CONFIG) -> tuple[dict, Any]:
    """Seed :data:`CHECK_SEED`'s word model trained :data:`CHECK_EPOCHS` epochs, else with the
    study's settings (``config``), and its row in the study's columns; returns
    ``(row, vectors)``."""
    from chapter20.core.device import get_device
    from chapter20.word2vec.corpus import corpus_sentences
    from chapter20.word2vec.skipgram_training import train_word2vec
    from chapter20.word2vec.vectors import evaluate_word_pairs

    device = get_device() if device is None else torch.device(device)
    config = replace(config, seed=CHECK_SEED, epochs=CHECK_EPOCHS, device=str(device))
    vectors = train_word2vec(corpus_sentences("wiki"), config)
    score = evaluate_word_pairs(vectors.words, vectors.vectors)
    row = {
        "seed": CHECK_SEED, "model": CHECK_MODEL, "rows": len(vectors),
        "rho_same_pairs": score.spearman, "same_pairs": score.pairs - score.oov_pairs,
        "rho_all_pairs": score.spearman, "oov_pairs": score.oov_pairs,
        "seconds": vectors.stats.seconds,
    }  # fmt: skip
    return row, vectors


def subword_benchmark(out: str = "", config: Word2VecConfig = SUBWORD_CONFIG):
    """``chapter20 bench subwords``: :func:`subword_study` over :data:`SUBWORD_SEEDS` with
    ``config`` (about two minutes on two CPU cores) and its :func:`subword_summary`, printed,
    and the live check's row (:data:`CHECK_MODEL`); with ``out`` written as
    ``data/subword_quality.csv`` reads."""
    from chapter20.core.corpora import train_test_split_articles, wiki_articles
    from chapter20.core.study_record import study_output, write_study

    train, _ = train_test_split_articles(wiki_articles(), 0.1, seed=0)
    frame = subword_study(train, config=config).frame
    print(subword_summary(frame).round(3).to_string())
    frame = pd.concat([frame, pd.DataFrame([_check_row(config=config)[0]])], ignore_index=True)
    print(frame.round(3).to_string(index=False))
    if study_output(out):
        print("written:", write_study(frame, study_output(out), "chapter20 bench subwords"))


def study_rows(record: pd.DataFrame) -> pd.DataFrame:
    """The subword study's rows of its record: every row but the live check's."""
    return record[record["model"] != CHECK_MODEL].reset_index(drop=True)


def word_model_check(record: pd.DataFrame, *, device=None):
    """The live check of the subword study (C30): seed :data:`CHECK_SEED`'s word model trained
    again now for :data:`CHECK_EPOCHS` epochs, its WordSim-353 ρ next to the record's row of
    :data:`CHECK_MODEL`: returns ``(vectors, recorded_rho, rho)``; ``vectors`` serve the
    notebook's PCA of word vectors."""
    rows = record[record["model"] == CHECK_MODEL]
    if len(rows) != 1:
        raise ValueError(f"the record has no single row of {CHECK_MODEL!r}")
    row, vectors = _check_row(device)
    return vectors, float(rows["rho_same_pairs"].iloc[0]), float(row["rho_same_pairs"])


#: How far below the word vectors' mean ρ composed subword vectors may fall and still keep the
#: quality (C30's criterion, ``data/claims.csv``); the control is detected when it falls further.
SUBWORD_MARGIN = 0.05


def pruned_matrix_ratio_evidence(prune: pd.DataFrame) -> dict:
    """``ClaimsLog.check("C29", ...)``'s keyword arguments from a ``pruning_table``: the matrix
    at ``min_count`` 5 over 1, with the words kept and the held-out OOV rate in the note."""
    pruned, full = prune.set_index("min_count").loc[5], prune.set_index("min_count").loc[1]
    note = (
        f"{int(full['kept_types']):,} -> {int(pruned['kept_types']):,} words; held-out OOV "
        f"{full['heldout_oov_rate']:.1%} -> {pruned['heldout_oov_rate']:.1%}"
    )
    return {"measured": float(pruned["matrix_ratio"]), "unit": "× the min_count=1 matrix",
            "note": note}  # fmt: skip


def subword_quality_gap_evidence(summary: pd.DataFrame, bpe_sizes: pd.DataFrame) -> dict:
    """``ClaimsLog.check("C30", ...)``'s keyword arguments from :func:`subword_summary` (with a
    control) and ``bpe_table``: the worse mean Δρ of the BPE sizes (not the control), with the
    conditions that every model but the control learned (``learned``: above the same model
    untrained, beyond the seed spread) and that the smallest size has fewer rows than the word
    vocabulary, no held-out ``[UNK]`` and no pair left out; ``control_detected`` when the
    control's mean Δρ falls more than :data:`SUBWORD_MARGIN` below."""
    control = summary[summary.index.str.endswith("(control)")]
    sizes = summary.drop(index=["words", *control.index])
    smallest, worst = sizes.loc[sizes["rows"].idxmin()], sizes.loc[sizes["delta_mean"].idxmin()]
    unk = int(bpe_sizes.set_index("vocab_size").loc[int(smallest["rows"]), "heldout_unk_tokens"])
    runs = summary.drop(index=control.index)
    words = summary.loc["words"]
    no_gaps = smallest["rows"] < words["rows"] and unk == 0 and smallest["oov_pairs"] == 0
    note = "; ".join(
        f"{name}: Δρ {row.delta_mean:+.3f} ± {row.delta_std:.3f}, ρ {row.rho_same_pairs_mean:.3f} "
        f"vs {words['rho_same_pairs_mean']:.3f}, {int(row.rows):,} rows"
        for name, row in summary.drop(index="words").iterrows()
    )
    note += (
        f"; {int(words['rows']):,} word rows; held-out [UNK] {unk}; OOV pairs "
        f"{int(smallest['oov_pairs'])} vs {int(words['oov_pairs'])}; {int(words['seeds'])} seeds"
    )
    return {
        "measured": float(worst["delta_mean"]),
        "unit": "Δρ subword − word",
        "note": note,
        "conditions": {
            "every model learned (above itself untrained, beyond the seed spread)": bool(
                runs["learned"].all()
            ),
            "fewer rows, no [UNK], no pair left out": bool(no_gaps),
        },
        "control_detected": bool(len(control) and (control.delta_mean < -SUBWORD_MARGIN).all()),
    }


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def plot_pruning(table: pd.DataFrame):
    """Pruning's saving and cost (C29): embedding-matrix size and held-out OOV vs min_count."""
    fig, (left, right) = new_panels(2, "Pruning rare words (Wikipedia sample)", figsize=(10, 4))
    left.plot(table["min_count"], table["matrix_bytes"] / 2**20, "o-")
    for row in table.itertuples():
        left.annotate(
            f"{row.kept_types:,} words",
            (row.min_count, row.matrix_bytes / 2**20),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=8,
        )
    for axis in (left, right):  # the same min_count range on both panels, room for the labels
        axis.set_xlim(0, table["min_count"].max() * 1.3)
    left.set_xlabel("min_count")
    left.set_ylabel("embedding matrix (MiB)")
    left.set_title("matrix size")
    right.plot(table["min_count"], 100 * table["heldout_oov_rate"], "o-", color="#C44E52")
    right.set_xlabel("min_count")
    right.set_ylabel("held-out tokens out of vocabulary (%)")
    right.set_title("held-out OOV")
    return fig


def plot_bpe(table: pd.DataFrame):
    """BPE vocabulary size vs tokens per word, and held-out OOV of BPE vs a word vocabulary
    with the same number of rows (C30)."""
    from matplotlib.ticker import FixedLocator, NullLocator

    fig, (left, right) = new_panels(2, "BPE subwords (Wikipedia sample)", figsize=(10, 4))
    bpe, words = "#DD8452", "#4C72B0"  # one colour per series on both panels
    left.plot(table["vocab_size"], table["tokens_per_word"], "s-", color=bpe, label="BPE")
    left.axhline(1.0, color="#8C8C8C", linestyle=":", label="one token per word")
    left.set_ylabel("held-out tokens per word")
    left.set_title("sequence length")
    right.plot(table["vocab_size"], 100 * table["word_vocab_oov_rate"], "o-", color=words,
               label="words")  # fmt: skip
    right.plot(table["vocab_size"], 100 * table["heldout_unk_rate"], "s-", color=bpe, label="BPE")
    right.set_ylabel("held-out tokens out of vocabulary (%)")
    right.set_title("OOV at equal matrix size")
    sizes = sorted(int(v) for v in table["vocab_size"])
    for axis, label in ((left, "BPE vocabulary size (entries)"), (right, "embedding rows")):
        axis.set_xscale("log")  # ticks at the sizes measured only: no crowded minor labels
        axis.xaxis.set_major_locator(FixedLocator(sizes))
        axis.xaxis.set_minor_locator(NullLocator())
        axis.set_xticklabels([f"{v:,}" for v in sizes])
        axis.set_xlim(sizes[0] / 1.3, sizes[-1] * 1.3)
        axis.set_xlabel(label)
        axis.legend(loc="upper right", frameon=False)
    return fig


def plot_pca_quality(frame: pd.DataFrame, *, score_label: str = "WordSim-353 Spearman ρ"):
    """Explained variance and the quality score vs k, the uncompressed score as a line (C28)."""
    part = frame[frame["compressed"]]
    original = frame[~frame["compressed"]]
    fig, (left, right) = new_panels(2, "PCA-compressed word vectors", figsize=(10, 4))
    left.plot(part["k"], 100 * part["explained_variance"], "o-")
    left.set_xlabel("k (dimensions kept)")
    left.set_ylabel("explained variance (%)")
    left.set_title("variance kept")
    right.plot(part["k"], part["score"], "o-", label="compressed")
    if len(original):
        right.axhline(
            float(original["score"].iloc[0]),
            color="#8C8C8C",
            linestyle=":",
            label=f"original ({int(original['k'].iloc[0])} dims)",
        )
    right.set_xlabel("k (dimensions kept)")
    right.set_ylabel(score_label)
    right.set_title("quality")
    right.set_ylim(0, 1.15 * max(float(frame["score"].max()), 0.0) or 1.0)  # from 0: no zoom
    right.legend(loc="lower right")
    return fig
