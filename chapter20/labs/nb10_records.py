"""Notebook 10, sections 3 and 4 (note, topic 3): the BPE table and the autoencoder against PCA
as committed records.

Training four BPE vocabularies, and an autoencoder for 30 epochs plus several article
classifiers per seed, take minutes. ``chapter20 bench bpe-sizes`` writes :data:`BPE_FILE`
(counts and rates: the same on every machine) and ``chapter20 bench autoencoder`` writes
``nb10_vocab.AUTOENCODER_FILE`` (3 seeds: the autoencoder's initialisation and the classifier's
batches; its epoch count chosen on validation rows), read by :func:`autoencoder_grid` and
:func:`autoencoder_summary`. The notebook computes one
row of each again: :func:`bpe_row_check` (one vocabulary size) and ``nb10_vocab.pca_row_check``
(PCA's row of seed 0). ``CHAPTER20_SCALE`` >= 2 measures everything live. The figures of the
sparse-input section (:func:`plot_projection`, :func:`plot_explained_variance`) and
:func:`projection_step_findings` live here too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from chapter20.core.checks import check_int, check_optional_positive
from chapter20.core.findings import compare
from chapter20.core.plotting import new_figure, new_panels
from chapter20.core.study_record import study_output, write_study
from chapter20.vocab.bpe import bpe_table
from chapter20.vocab.pca import PCAResult

__all__ = [
    "BPE_FILE",
    "BPE_SIZES",
    "autoencoder_grid",
    "autoencoder_summary",
    "bpe_benchmark",
    "bpe_row_check",
    "bpe_study",
    "plot_explained_variance",
    "plot_projection",
    "projection_step_findings",
]

#: The committed record of :func:`bpe_benchmark` (``data/``).
BPE_FILE = "bpe_sizes.csv"
#: The vocabulary sizes of the BPE table.
BPE_SIZES = (500, 2_000, 4_000, 8_000)


def _articles():
    from chapter20.core.corpora import train_test_split_articles, wiki_articles

    return train_test_split_articles(wiki_articles(), 0.1, seed=0)


def bpe_study(train, test, sizes: Sequence[int] = BPE_SIZES) -> pd.DataFrame:
    """``chapter20.vocab.bpe.bpe_table`` of ``sizes`` on the notebook's articles (300-dim rows)."""
    return bpe_table(train, test, sizes, dim=300)


def bpe_row_check(record: pd.DataFrame, train, test, size: int = 500):
    """One size of the BPE record trained again now: the record's row and this run's, and the
    largest difference over their numeric columns (counts and rates: 0 when the record is what
    this code computes)."""
    rows = record[record["requested_size"] == check_int("size", size, 257)]
    if len(rows) != 1:
        raise ValueError(f"the record has no single row for a BPE size of {size}")
    row, live = rows.iloc[0], bpe_study(train, test, (size,)).iloc[0]
    columns = [c for c in live.index if isinstance(live[c], (int, float, np.number))]
    return row, live, max(abs(float(live[c]) - float(row[c])) for c in columns)


def bpe_benchmark(sizes: tuple[int, ...] = BPE_SIZES, out: str = ""):
    """``chapter20 bench bpe-sizes``: :func:`bpe_study`, printed; with ``out`` written as
    ``data/bpe_sizes.csv`` reads."""
    frame = bpe_study(*_articles(), sizes)
    print(frame.round(4).to_string(index=False))
    if study_output(out):
        command = f"chapter20 bench bpe-sizes --sizes {','.join(map(str, sizes))}"
        print("written:", write_study(frame, study_output(out), command))


def autoencoder_grid(record: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The autoencoder's epoch counts as the record scored them on the validation rows: per
    count, mean and standard deviation over the seeds of ``validation_error`` and
    ``validation_accuracy`` and whether it was ``chosen`` (the lowest mean validation error),
    and one line naming the choice, where the validation accuracy peaks, and whether the
    choice is the largest count tried."""
    grid = record.dropna(subset=["validation_error"]).astype({"epochs": int})
    groups = grid.groupby("epochs")
    table = groups[["validation_error", "validation_accuracy"]].agg(["mean", "std"])
    table[("chosen", "")] = groups["chosen"].first().astype(str).eq("True")
    chosen = int(table.index[table[("chosen", "")]][0])
    peak = int(table[("validation_accuracy", "mean")].idxmax())
    edge = "the largest count tried" if chosen == table.index.max() else "inside the grid"
    line = (
        f"chosen on validation: {chosen} epochs (lowest mean validation error; {edge}); "
        f"the mean validation accuracy peaks at {peak} epochs"
    )
    return table, line


def autoencoder_summary(record: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The autoencoder record's held-out rows (PCA's and the chosen epoch count's) read per
    method: mean and standard deviation over the seeds of the held-out reconstruction error
    and the held-out accuracy, and one line per figure comparing the autoencoder with PCA
    (``core.findings.compare``; indistinguishable within twice the larger seed standard
    deviation)."""
    figures = ("heldout_error", "heldout_accuracy")
    record = record.dropna(subset=["heldout_error"])
    groups = record.rename(columns={"test_accuracy": "heldout_accuracy"}).groupby(
        "method", sort=False
    )
    table = groups[list(figures)].agg(["mean", "std"])
    means, stds = table.xs("mean", axis=1, level=1), table.xs("std", axis=1, level=1)
    pca, autoencoder = means.index
    lines = [
        compare(f"autoencoder, {column}", means.loc[autoencoder, column], "PCA's",
                means.loc[pca, column], spread=2 * float(stds[column].max()))
        for column in figures
    ]  # fmt: skip
    return table, lines


def projection_step_findings(bench: pd.DataFrame, fit_seconds: float | None = None) -> list[str]:
    """Notebook 10, section 4 (C28): ``pca_precomputed``'s step time next to each raw-input
    variant's in :func:`sparse_projection_benchmark`'s table, indistinguishable within the larger
    of the two min-max ranges: one line each, printed by ``core.findings.compare``. With
    ``fit_seconds`` (the PCA fit's time), a last line says after how many steps the time saved
    against the fastest raw variant pays the fit back, or that it never does."""
    fit_seconds = check_optional_positive("fit_seconds", fit_seconds)
    timed = bench.set_index("variant")
    ranges, pca = timed.step_ms_max - timed.step_ms_min, timed.loc["pca_precomputed"]
    raw = ("dense_linear", "embedding_bag", "embedding_bag_sparse")
    lines = [
        compare("pca_precomputed step", pca.step_ms, name, timed.step_ms[name], quantity="time",
                unit="ms", spread=max(ranges[name], ranges["pca_precomputed"]))
        for name in raw
    ]  # fmt: skip
    if fit_seconds is not None:
        fastest = timed.step_ms[list(raw)].idxmin()
        saved = (timed.step_ms[fastest] - pca.step_ms) / 1e3
        after = f"after {fit_seconds / saved:,.0f} steps" if saved > 0 else "never"
        lines.append(f"the PCA fit ({fit_seconds:.1f} s) is paid back against {fastest} {after}")
    return lines


def plot_projection(table: pd.DataFrame):
    """Training-state bytes and step time per variant of the sparse-input layer (C28)."""
    fig, (left, right) = new_panels(2, "Sparse input: raw vs PCA-projected", figsize=(11, 4))
    labels = list(table["variant"])
    positions = np.arange(len(labels))
    parts = {
        "learned layer": table["layer_bytes"],
        "fixed projection": table["fixed_bytes"],
        "gradients": table["gradient_bytes"],
        "optimizer state": table["optimizer_bytes"],
    }
    bottom = np.zeros(len(labels))
    for name, values in parts.items():
        heights = np.asarray(values, dtype=float) / 2**20
        left.bar(positions, heights, bottom=bottom, label=name, width=0.7)
        bottom += heights
    left.set_xticks(positions, labels, rotation=30, ha="right")
    left.set_xlabel("how the layer reads the input")
    left.set_ylabel("bytes (MiB)")
    left.set_title("training state")
    left.legend(fontsize=8)
    right.bar(positions, table["step_ms"], width=0.7, color="#55A868")
    right.set_xticks(positions, labels, rotation=30, ha="right")
    right.set_xlabel("how the layer reads the input")
    right.set_ylabel("step time (ms, median)")
    right.set_title("forward + backward + Adam")
    return fig


def plot_explained_variance(pca: PCAResult, title: str = "Explained variance"):
    """Cumulative explained variance of a fitted PCA vs k (C28)."""
    fig, ax = new_figure(title, "k (dimensions kept)", "cumulative explained variance (%)")
    cumulative = 100 * pca.explained_variance_ratio.cumsum(0).cpu().numpy()
    ax.plot(np.arange(1, pca.k + 1), cumulative)
    return fig
