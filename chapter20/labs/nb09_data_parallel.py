"""Notebook 09, section 5: word2vec data-parallel across processes (the note, topic 2), run and
measured: two gloo ranks, each training its copy on half the sentences
(``chapter20.word2vec.data_parallel``), their quality against one process with two Hogwild
workers over seeds, their words per second per rank, and the time spent combining the copies.

The runs of every seed and variant happen in one local process group
(``techniques.distributed.run_local_group``), so the ranks start once.
"""

from __future__ import annotations

import pandas as pd
import torch
import torch.distributed as dist

from chapter20.core.findings import compare, share
from chapter20.techniques.distributed import run_local_group
from chapter20.word2vec.corpus import corpus_sentences
from chapter20.word2vec.data_parallel import train_word2vec_data_parallel
from chapter20.word2vec.skipgram_config import Word2VecConfig

__all__ = [
    "DP_VARIANTS",
    "DP_CONTROL",
    "data_parallel_runs",
    "data_parallel_summary",
    "data_parallel_speed_findings",
]

#: The variants the notebook runs at its default scale: ``name -> (syncs_per_epoch, combine,
#: alpha)``. The control, chosen before the run, combines copies that trained apart for the
#: whole run: the metric must see the harm.
DP_VARIANTS = {
    "2 ranks, changes summed 8× per epoch": (8, "sum", Word2VecConfig().alpha),
    "2 ranks, combined once at the end (control)": (0, "sum", Word2VecConfig().alpha),
}
DP_CONTROL = "2 ranks, combined once at the end (control)"
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


def data_parallel_summary(frame: pd.DataFrame, single: pd.DataFrame) -> pd.DataFrame:
    """Per variant of :func:`data_parallel_runs` (rank 0's vectors, the same on every rank):
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
