"""Notebook 09, section 5: word2vec data-parallel across processes (the note, topic 2), read:
the runs of two gloo ranks (``nb09_study.data_parallel_runs``), each training its copy on half
the sentences (``chapter20.word2vec.data_parallel``), summarised against one process with two
Hogwild workers over seeds: quality, words per second, and the time spent combining the copies.
"""

from __future__ import annotations

import pandas as pd

from chapter20.core.findings import compare, share

__all__ = [
    "DP_CONTROL",
    "data_parallel_summary",
    "data_parallel_speed_findings",
    "sync_counts",
]

#: The control of the data-parallel study, chosen before the run (``nb09_study.DP_VARIANTS``).
DP_CONTROL = "2 ranks, combined once at the end (control)"


def data_parallel_summary(frame: pd.DataFrame, single: pd.DataFrame) -> pd.DataFrame:
    """Per variant of ``nb09_study.data_parallel_runs`` (rank 0's vectors, the same on every rank):
    ρ on both sets as mean ± standard deviation over seeds, the gap of the WordSim-353 mean to
    one process's (``single``: rows of ``compare_trainers`` for ``"ours negative"``, two
    Hogwild workers), words/s per rank (median over seeds and ranks), words/s of the ranks
    together (every rank's raw words over the slowest rank's seconds, median over seeds: what
    one process's figure counts) and the share of the training time spent in the syncs
    (waiting for the other rank included; the control's one sync comes after training)."""
    reference = single[single.trainer == "ours negative"]
    rows = [
        {
            "variant": "1 process, 2 Hogwild workers",
            "wordsim353": f"{reference.wordsim353.mean():.3f} ± {reference.wordsim353.std():.3f}",
            "simlex999": f"{reference.simlex999.mean():.3f} ± {reference.simlex999.std():.3f}",
            "wordsim_gap": 0.0,
            "words_per_second": float(reference.words_per_second.median()),
            "together_words_per_second": float(reference.words_per_second.median()),
            "sync_share": 0.0,
        }
    ]
    for name, group in frame.groupby("variant", sort=False):
        first = group[group["rank"] == 0]
        raw = group.words_per_second * group.seconds
        together = (
            raw.groupby(group.seed).sum() / group.seconds.groupby(group.seed).max()
        ).median()
        rows.append({
            "variant": name,
            "wordsim353": f"{first.wordsim353.mean():.3f} ± {first.wordsim353.std():.3f}",
            "simlex999": f"{first.simlex999.mean():.3f} ± {first.simlex999.std():.3f}",
            "wordsim_gap": first.wordsim353.mean() - reference.wordsim353.mean(),
            "words_per_second": float(group.words_per_second.median()),
            "together_words_per_second": float(together),
            "sync_share": float(group.sync_seconds.sum() / group.seconds.sum()),
        })  # fmt: skip
    return pd.DataFrame(rows).set_index("variant")


def data_parallel_speed_findings(summary: pd.DataFrame, variant: str) -> list[str]:
    """Notebook 09, section 5: for ``variant`` of :func:`data_parallel_summary`, the words per
    second of the ranks together next to one process with two Hogwild workers (the same two
    cores), and the share of the training time spent in the syncs (waiting for the other rank
    included): two lines printed by ``core.findings.compare`` and ``core.findings.share``."""
    return [
        compare("two ranks together (1 thread each)", summary.together_words_per_second[variant],
                "one process (2 threads)", summary.words_per_second["1 process, 2 Hogwild workers"],
                quantity="rate", unit="words/s"),
        share("time in the syncs (waiting for the other rank included)",
              summary.sync_share[variant], 1.0, of="the training time"),
    ]  # fmt: skip


def sync_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant of ``nb09_study.data_parallel_runs``, the syncs each rank made under one
    definition: a **sync** combines the ranks' copies once, with one all-reduce per table it
    combines. A variant that syncs during training combines both tables (input and output
    vectors) each time; a variant combined only at the end makes one sync of the input vectors,
    the ones scored. Columns: syncs per rank, tables per sync, all-reduce calls per rank (what
    the ranks counted) and MB all-reduced per rank per sync."""
    rows = []
    for name, group in frame.groupby("variant", sort=False):
        calls = int(group.syncs.max())
        tables = 1 if calls == 1 else 2
        rows.append({
            "variant": name, "syncs per rank": calls // tables, "tables per sync": tables,
            "all-reduce calls per rank": calls,
            "MB per rank per sync": tables * float(group.sync_bytes.iloc[0]) / 2 / 1e6,
        })  # fmt: skip
    return pd.DataFrame(rows).set_index("variant")
