"""The note on efficient embedding training, topic 1, run and measured: our skip-gram trainers
against gensim's, sections 4 to 6 of notebook 09, and ``python -m chapter20 bench word2vec``
and ``bench word2vec-gpu``.

Our three trainers (``chapter20.word2vec.skipgram_training``) next to gensim's C implementation
(``chapter20.word2vec.gensim_reference``, the reference only) on the same corpus with the same
hyper-parameters: WordSim-353 and SimLex-999 ρ over seeds against stated thresholds, the full
softmax given the same time, the GPU's speed-up, and the evidence for claims C24 to C26.

Words per second, everywhere: raw corpus words (every token, out-of-vocabulary ones included,
times the epochs; gensim's ``raw_words``) divided by the seconds of training (vocabulary
building excluded for both; our pair generation included).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from chapter20.core.findings import compare
from chapter20.core.gpu_record import code_version, current_gpu_figure, read_gpu_measurements
from chapter20.core.seed_statistics import summarize_seeds
from chapter20.word2vec.corpus import corpus_sentences
from chapter20.word2vec.fused import load_kernels
from chapter20.word2vec.skipgram_config import Word2VecConfig
from chapter20.word2vec.trainers import (
    COMPARISON,
    TRAINERS,
    score_run,
    softmax_at_equal_time,
    train,
)

__all__ = [
    "compare_trainers",
    "summarize",
    "CHANCE_SDS",
    "MATCH_TOLERANCE",
    "quality_verdicts",
    "speed_findings",
    "softmax_results",
    "scaling_summary",
    "claim_evidence",
    "GPU_SPEEDUP_QUANTITY",
    "GPU_CODE",
    "gpu_speedup",
    "gpu_record_rows",
    "gpu_record_text",
    "BENCH_PAIRS",
    "BENCH_TARGETS",
    "RHO_TOLERANCE",
    "warm_up_kernels",
    "benchmark",
    "gpu_benchmark",
]


# --- real corpus: ours vs gensim ------------------------------------------------------------


def compare_trainers(
    corpus: str = "wiki+lee",
    trainers: tuple[str, ...] = TRAINERS,
    seeds: tuple[int, ...] = (1, 2, 3),
    config: Word2VecConfig = COMPARISON,
    *,
    epochs: dict[str, int] | None = None,
) -> pd.DataFrame:
    """Train each trainer on ``corpus`` once per seed with the same settings (``config``, its
    seed replaced; ``epochs`` per trainer if given) and score it: WordSim-353 and SimLex-999
    Spearman ρ (gensim's evaluation), their OOV shares, and raw words per second.
    ``config.workers`` CPU threads for every CPU trainer (ours: Hogwild workers);
    ``config.device``: where ours train (gensim always runs on the CPU)."""
    sentences = corpus_sentences(corpus)
    records = []
    for seed in seeds:
        for trainer in trainers:
            run = replace(config, seed=seed)
            if epochs and trainer in epochs:
                run = replace(run, epochs=epochs[trainer])
            wv = train(trainer, sentences, run)
            records.append(score_run(trainer, wv, seed, wv.stats.epochs))
    return pd.DataFrame(records)


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per trainer: mean and standard deviation over seeds of ρ on both sets, mean words/s,
    the OOV shares, and chance: the standard deviation of ρ for vectors unrelated to the
    ratings, ``1 / sqrt(scored pairs - 1)`` (Spearman's null distribution, mean 0)."""
    grouped = frame.groupby("trainer", sort=False)
    stats = summarize_seeds(frame, by="trainer", columns=("wordsim353", "simlex999"))
    out = stats.set_index("trainer").rename(columns={
        "wordsim353_mean": "wordsim353", "wordsim353_std": "wordsim_std",
        "simlex999_mean": "simlex999", "simlex999_std": "simlex_std",
    })  # fmt: skip
    out.insert(0, "epochs", grouped["epochs"].mean())
    out.insert(0, "device", grouped["device"].first())
    out["words_per_second"] = grouped["words_per_second"].mean()
    out["wordsim_oov_%"] = grouped["wordsim_oov_%"].first()
    out["simlex_oov_%"] = grouped["simlex_oov_%"].first()
    for name in ("wordsim", "simlex"):
        out[f"{name}_chance_sd"] = 1.0 / np.sqrt(grouped[f"{name}_scored"].first() - 1.0)
    return out


#: The notebook's quality thresholds, stated before the run: a trainer is well above chance
#: when its mean ρ is at least this many chance standard deviations; ours matches gensim when
#: the mean ρ of both sets are within ``MATCH_TOLERANCE`` (claim C24's condition).
CHANCE_SDS = 3.0
MATCH_TOLERANCE = 0.05


def quality_verdicts(summary: pd.DataFrame) -> pd.DataFrame:
    """For every trainer of a :func:`summarize` table: ρ (mean ± std over seeds) on both sets,
    whether each is at least :data:`CHANCE_SDS` chance standard deviations above 0, and for
    each of ours with a gensim trainer of the same objective, the largest |Δρ| of the means
    and whether it is within :data:`MATCH_TOLERANCE`."""
    rows = []
    for trainer, row in summary.iterrows():
        record = {"trainer": trainer}
        for name, column in (("wordsim", "wordsim353"), ("simlex", "simlex999")):
            record[name] = f"{row[column]:.3f} ± {row[f'{name}_std']:.3f}"
            record[f"{name}_above_chance"] = bool(
                row[column] >= CHANCE_SDS * row[f"{name}_chance_sd"]
            )
        source, _, objective = trainer.partition(" ")
        reference = f"gensim {objective.partition('-')[0]}"
        if source == "ours" and reference in summary.index:
            gap = max(abs(row[c] - summary.at[reference, c]) for c in ("wordsim353", "simlex999"))
            record["largest_gap_to_gensim"] = round(gap, 3)
            record["matches_gensim"] = bool(gap <= MATCH_TOLERANCE)
        rows.append(record)
    return pd.DataFrame(rows).set_index("trainer")


def speed_findings(frame: pd.DataFrame) -> list[str]:
    """For each of ours in a :func:`compare_trainers` frame with a gensim trainer of the same
    objective, one line comparing their words per second (medians over the seeds; the larger
    of the two seeds' ranges as the spread within which they are indistinguishable), printed
    by ``core.findings.compare`` from the run's numbers."""
    speed = frame.groupby("trainer", sort=False).words_per_second
    median, spread = speed.median(), speed.max() - speed.min()
    lines = []
    for trainer in median.index:
        source, _, objective = trainer.partition(" ")
        reference = f"gensim {objective.partition('-')[0]}"
        if source == "ours" and reference in median.index:
            lines.append(compare(
                trainer, median[trainer], reference, median[reference], quantity="rate",
                unit="words/s", spread=max(spread[trainer], spread[reference]),
            ))  # fmt: skip
    return lines


def softmax_results(
    corpus: str = "wiki+lee",
    seconds: float | None = None,
    config: Word2VecConfig = COMPARISON,
) -> pd.DataFrame:
    """One row like :func:`compare_trainers`' for our full softmax (``config``'s seed and
    settings): trained on the whole corpus (``seconds=None``), or for ``seconds``
    (:func:`softmax_at_equal_time`); then ``epochs`` is the share of one epoch it saw."""
    if seconds is None:
        return compare_trainers(corpus, ("ours softmax",), (config.seed,), config)
    wv, share = softmax_at_equal_time(corpus, seconds, config)
    # It saw a random share of the corpus: ``epochs`` is that share, words/s count what it saw.
    record = score_run("ours softmax", wv, config.seed, share)
    return pd.DataFrame([record])


# --- the claims: C24, C25 (from the step times of nb09_step_cost) and C26 -------------------


def _slope(x, y) -> float:
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def scaling_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per objective: the time per pair at the smallest and largest vocabulary, their ratio,
    the log-log slope over the two largest sizes (1 = linear in n, 0 = constant), and what
    O(n) and O(log n) would predict for the ratio (C24, C25)."""
    rows = []
    for objective, group in frame.groupby("objective", sort=False):
        group = group.sort_values("vocab")
        small, large = group.iloc[0], group.iloc[-1]
        top = group.iloc[-2:]
        rows.append(
            {
                "objective": objective,
                "us_per_pair_smallest": small.us_per_pair,
                "us_per_pair_largest": large.us_per_pair,
                "growth": large.us_per_pair / small.us_per_pair,
                "top_slope": _slope(top.vocab, top.us_per_pair),
                "linear_growth": large.vocab / small.vocab,
                "log_growth": math.log2(large.vocab) / math.log2(small.vocab),
            }
        )
    return pd.DataFrame(rows)


def _us_per_pair(frame: pd.DataFrame, objective: str, vocab: int) -> float:
    row = frame[(frame.objective == objective) & (frame.vocab == vocab)]
    return float(row.us_per_pair.iloc[0])


def claim_evidence(
    steps: pd.DataFrame,
    steps_k10: pd.DataFrame,
    paths: pd.DataFrame,
    table: pd.DataFrame,
    gpu: dict | None,
    cpu_ratio: float | None = None,
) -> dict[str, dict]:
    """The keyword arguments of ``ClaimsLog.check`` for C24, C25 and C26, from this
    notebook's measurements; the criteria are those of ``data/claims.csv``, which
    ``claims.check`` applies.

    - C24: the smaller of the full softmax's time per pair over negative sampling's with
      k = 5 and k = 10 at n = 100,000 (at least 100×), with two conditions: our negative
      sampling within 0.05 of gensim's ρ on both sets, and on the real corpus a WordSim ρ above
      the full softmax trained for the same time (within 0.05 when both saw the same data).
    - C25: the nodes the hierarchical softmax evaluates per pair (``paths``, from
      :func:`~chapter20.labs.nb09_step_cost.path_length_vs_vocab`) over log₂ n, the largest
      over the vocabularies, and whether it grows with n: shown, since the claim is a
      definition (a Huffman path's length is bounded by construction); the times per pair
      (``steps``) are in the note: they also grow with cache misses, negative sampling's too.
    - C26: our trainer's words/s on CUDA over gensim's on every core of the same host: measured
      now when ``gpu`` is given, else the newest figure of the GPU record that the current
      code measured (:data:`GPU_CODE`); without one, "needs a GPU". ``cpu_ratio``: this
      CPU's words/s of ours over gensim's, shown in the note (default: from ``table``).
    """
    n = 10**5
    softmax = _us_per_pair(steps, "softmax", n)
    ratio5 = softmax / _us_per_pair(steps, "negative", n)
    ratio10 = softmax / _us_per_pair(steps_k10, "negative", n)
    ns, gns, sm = (table.loc[t] for t in ("ours negative", "gensim negative", "ours softmax"))
    gap = max(abs(ns.wordsim353 - gns.wordsim353), abs(ns.simlex999 - gns.simlex999))
    faithful = gap <= MATCH_TOLERANCE
    same_data = sm.epochs >= ns.epochs
    better = ns.wordsim353 >= sm.wordsim353 - 0.05 if same_data else ns.wordsim353 > sm.wordsim353
    seen = "the same data" if same_data else f"the same time ({sm.epochs:.1%} of one epoch)"
    softmax_cost = {
        "measured": min(ratio5, ratio10),
        "unit": "× less time per pair",
        "conditions": {
            "ours ≈ gensim (ρ within 0.05)": bool(faithful),
            "beats the full softmax": bool(better),
        },  # fmt: skip
        "note": f"k=5: x{ratio5:,.0f}, k=10: x{ratio10:,.0f}; WordSim ρ on the real corpus: ours "
        f"{ns.wordsim353:.3f}, gensim {gns.wordsim353:.3f}, full softmax given {seen} "
        f"{sm.wordsim353:.3f}",
    }
    paths = paths.sort_values("vocab")
    first, last = paths.iloc[0], paths.iloc[-1]
    growth = scaling_summary(steps).set_index("objective").growth
    sizes = f"n = {steps.vocab.min():,} to {steps.vocab.max():,}"
    path_length = {
        "measured": float(paths.per_log2_n.max()),
        "unit": "× log₂ n",
        "conditions": {"not growing with n": bool(last.per_log2_n <= first.per_log2_n)},
        "note": f"nodes per pair {first.mean_path:.1f} at n = {int(first.vocab):,} "
        f"(log₂ n {first.log2_n:.1f}) -> {last.mean_path:.1f} at n = {int(last.vocab):,} "
        f"(log₂ n {last.log2_n:.1f}); the full softmax evaluates all n; time per pair, "
        f"{sizes}, shown not judged: hierarchical x{growth['hierarchical']:.2f}, negative "
        f"sampling x{growth['negative']:.2f}, full softmax x{growth['softmax']:,.0f}",
    }
    if cpu_ratio is None:
        cpu_ratio = ns.words_per_second / gns.words_per_second
    return {"C24": softmax_cost, "C25": path_length, "C26": _gpu_speedup_evidence(gpu, cpu_ratio)}


def _gpu_speedup_evidence(gpu: dict | None, cpu_ratio: float) -> dict:
    """C26's keyword arguments, the GPU's speed-up over gensim on every core: measured on CUDA
    now, else the GPU record's newest row of the current code (:data:`GPU_CODE`), else no value
    (the verdict reads "needs a GPU")."""
    if gpu is not None:
        return {
            "measured": gpu["speedup"],
            "unit": "× speed-up",
            "device": "cuda",
            "note": f"ours on CUDA {gpu['gpu_words_per_second']:,.0f} words/s vs gensim on "
            f"{gpu['cpu_workers']} CPU cores {gpu['cpu_words_per_second']:,.0f}",
        }
    figure = current_gpu_figure(GPU_SPEEDUP_QUANTITY, GPU_CODE)
    if figure is not None:
        return {
            "measured": figure.value,
            "unit": "× speed-up",
            "device": figure.device,
            "note": f"from the GPU record ({figure.provenance}, code {figure.code}); this CPU, "
            f"ours vs gensim on 2 threads: x{cpu_ratio:.2f}",
        }
    return {
        "measured": None,
        "unit": "× speed-up",
        "device": "cpu",
        "note": "no CUDA GPU here, and no row of the GPU record was measured by the current "
        f"code ({', '.join(GPU_CODE)}); this CPU, ours vs gensim on 2 threads: x{cpu_ratio:.2f}",
    }


#: The GPU record's quantity for claim C26 (what ``bench word2vec-gpu --record`` appends).
GPU_SPEEDUP_QUANTITY = "speed-up ours negative (CUDA) / gensim (all cores)"
#: The code that ``bench word2vec-gpu`` measures (``gpu_record.code_version``): a GPU row
#: recorded before its last change describes a trainer that no longer exists.
GPU_CODE = ("word2vec", "vocab.vocabulary")


#: One name per quantity of the GPU record's word2vec rows, as section 6 prints them (the
#: record keeps the names each run wrote). Ours was timed on CUDA twice, told apart by the
#: gensim baseline beside it; only the first run recorded its batch size.
GPU_ROW_NAMES = {
    "ours words per second on CUDA, batch 16384": "words/s, ours on CUDA, batch 16,384 "
    "(timed beside gensim on 2 threads)",
    "speed-up vs gensim on 2 threads": "speed-up, ours (batch 16,384) over gensim on 2 threads",
    "words/s ours negative (CUDA)": "words/s, ours on CUDA, batch not recorded "
    "(timed beside gensim on every core)",
    "words/s gensim negative (16 CPU workers)": "words/s, gensim on every core (16 workers)",
    GPU_SPEEDUP_QUANTITY: "speed-up, ours (batch not recorded) over gensim on every core",
    "WordSim-353 rho, ours on CUDA": "WordSim-353 ρ, ours on CUDA, batch 16,384",
}


def gpu_record_rows() -> pd.DataFrame:
    """Notebook 09, section 6: the GPU record's word2vec rows for display, each quantity under
    its one name (:data:`GPU_ROW_NAMES`, negative sampling throughout), values with thousands
    separators and no spurious decimals; column ``current``: whether the row was measured by
    the trainer as it is now (:data:`GPU_CODE`), the only rows C26's verdict may read."""
    record = read_gpu_measurements()
    rows = record[record.command.str.contains("word2vec-gpu", regex=False)].copy()
    rows["current"] = rows.code == code_version(*GPU_CODE)
    rows["quantity"] = rows.quantity.map(lambda q: GPU_ROW_NAMES.get(q, q))
    rows["value"] = rows.value.map(lambda v: f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}")
    columns = ["date", "device", "quantity", "value", "unit", "current"]
    return rows[columns].reset_index(drop=True)


def gpu_record_text(rows: pd.DataFrame | None = None) -> str:
    """Section 6's GPU rows (``rows``: :func:`gpu_record_rows`'s), grouped by whether the
    trainer section 2 proves measured them: rows of another version are shown, not judged;
    rows of this one are what the claims check reads. Each group is headed by when and on
    what it was recorded."""
    rows = gpu_record_rows() if rows is None else rows
    blocks = []
    for current, group in rows.groupby("current", sort=True):
        when = ", ".join(sorted(set(group.date)))
        where = ", ".join(sorted(set(group.device)))
        judged = "with the trainer section 2 proves: judged in the claims check"
        other = "by another version of the trainer than the one section 2 proves: shown, not judged"
        lines = [f"recorded {when} on {where} {judged if current else other}"]
        width = group.quantity.str.len().max(), group.value.str.len().max()
        lines += [
            f"  {row.quantity:<{width[0]}}  {row.value:>{width[1]}} {row.unit}"
            for row in group.itertuples()
        ]  # names read from the left, values line up on the right
        blocks.append("\n".join(lines))
    return "\n".join(blocks) if blocks else "no GPU rows recorded"


def gpu_speedup(
    corpus: str = "wiki+lee", config: Word2VecConfig | None = None
) -> dict[str, float] | None:
    """Words per second of our negative-sampling trainer on CUDA against gensim on every CPU
    core of this machine (claim C26), same corpus and settings (``config``'s; None:
    ``Word2VecConfig(epochs=1)``); None without CUDA."""
    if not torch.cuda.is_available():
        return None
    config = Word2VecConfig(epochs=1) if config is None else config
    sentences = corpus_sentences(corpus)
    workers = os.cpu_count() or 1
    on_gpu = replace(config, device="cuda")
    train("ours negative", sentences, replace(on_gpu, epochs=1))  # warm-up
    gpu = train("ours negative", sentences, on_gpu)
    cpu = train("gensim negative", sentences, replace(config, workers=workers))
    return {
        "gpu_words_per_second": gpu.stats.words_per_second,
        "cpu_words_per_second": cpu.stats.words_per_second,
        "cpu_workers": workers,
        "speedup": gpu.stats.words_per_second / cpu.stats.words_per_second,
        "gpu_wordsim353": gpu.evaluate_word_pairs("wordsim353").spearman,
        "cpu_wordsim353": cpu.evaluate_word_pairs("wordsim353").spearman,
    }


# --- benchmark ------------------------------------------------------------------------------

#: ``bench word2vec``'s runs, interleaved: each of ours next to gensim's with the same objective.
BENCH_PAIRS = (
    ("ours negative", "gensim negative"),
    ("ours negative-plain", "gensim negative"),
    ("ours hierarchical", "gensim hierarchical"),
    ("ours hierarchical-gensim_tree", "gensim hierarchical"),
    ("ours hierarchical-plain", "gensim hierarchical"),
)
#: The issue's targets on a 2-core CPU: words/s ours / gensim (fused paths), and |Δρ|. The
#: hierarchical softmax's is judged on either tree; on gensim's the trainers alone are compared.
BENCH_TARGETS = {
    "ours negative": 1.0,
    "ours hierarchical": 0.8,
    "ours hierarchical-gensim_tree": 0.8,
}
RHO_TOLERANCE = 0.02


def _load() -> str:
    """The 1-minute load average, next to every speed figure (other programs share the CPU)."""
    return f"load {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "load n/a"


def warm_up_kernels() -> float:
    """Compile the fused kernels (once per process); returns the seconds it took. Training
    excludes this time, as it excludes gensim's vocabulary building; the benchmark prints it."""
    start = time.perf_counter()
    load_kernels()
    return time.perf_counter() - start


def benchmark(
    corpus: str = "wiki+lee",
    seeds: tuple[int, ...] = (1, 2, 3, 4, 5),
    ours: tuple[str, ...] = tuple(name for name, _ in BENCH_PAIRS),
    config: Word2VecConfig = COMPARISON,
) -> list[dict]:
    """``python -m chapter20 bench word2vec``: ours vs gensim on the same corpus with the same
    settings (``config``, its seed replaced by each round's; default :data:`COMPARISON`:
    gensim's defaults on 2 threads, gensim's 2 workers and our 2 Hogwild workers), in rounds:
    each round trains every trainer once (seed = the round's), interleaved, so that other load
    on the machine hits all alike. ``ours``: which of our trainers (:data:`BENCH_PAIRS`) run,
    each beside gensim's with the same objective.

    Prints words/s (median and range over the rounds) with the load average, ρ on WordSim-353
    and SimLex-999 (mean over the rounds), and for each of ours the ratio of its words/s to
    gensim's in the same round — median and range over the rounds — and the largest |Δρ|,
    against the targets: negative sampling (noise per pair) >= 1.0x, hierarchical softmax
    >= 0.8x, |Δρ| <= 0.02. The plain (batched) paths are the fallback without a C compiler and
    the GPU's path. The hierarchical softmax also trains on gensim's own Huffman tree (the
    trainers apart from the trees' tie-breaking). Returns the rows for ``--record``."""
    pairs = [pair for pair in BENCH_PAIRS if pair[0] in ours]
    if not pairs or len(pairs) != len(set(ours)):
        raise ValueError(f"ours must name trainers of {[o for o, _ in BENCH_PAIRS]}, got {ours}")
    sentences = corpus_sentences(corpus)
    threads = config.workers
    print(
        f"corpus {corpus}: {len(sentences):,} sentences, {sum(map(len, sentences)):,} tokens; "
        f"skip-gram, {threads} threads (ours: {threads} Hogwild workers), {len(seeds)} rounds "
        f"(seeds {list(seeds)})"
    )
    print(
        "words/s = raw corpus words (every token x epochs, gensim's raw_words) / training "
        "seconds; vocabulary building (and compiling our kernels) excluded for both"
    )
    print(f"fused kernels compiled in {warm_up_kernels():.1f} s ({_load()})")
    names = list(dict.fromkeys(name for pair in pairs for name in pair))
    records = []
    for seed in seeds:
        for name in names:
            wv = train(name, sentences, replace(config, seed=seed))
            row = score_run(name, wv, seed, wv.stats.epochs)
            records.append({**row, "load": os.getloadavg()[0], "fused": wv.stats.fused})
    frame = pd.DataFrame(records)
    speed = frame.pivot(index="seed", columns="trainer", values="words_per_second")
    table = frame.groupby("trainer", sort=False)[["wordsim353", "simlex999", "load"]].mean()
    fused = frame.groupby("trainer", sort=False)["fused"].all()
    for name, row in table.iterrows():
        path = " (fused)" if fused[name] else (" (plain)" if name.startswith("ours") else "")
        print(
            f"  {name + path:<34} {speed[name].median():>10,.0f} words/s "
            f"({speed[name].min():,.0f}-{speed[name].max():,.0f})   wordsim353 ρ "
            f"{row.wordsim353:.3f}   simlex999 ρ {row.simlex999:.3f}   (mean load {row.load:.1f})"
        )
    rows = []
    for name, gensim in pairs:
        ratios = speed[name] / speed[gensim]  # each round against its own gensim run
        ratio = float(ratios.median())
        gap = max(abs(table.at[name, s] - table.at[gensim, s]) for s in ("wordsim353", "simlex999"))
        target = BENCH_TARGETS.get(name)
        verdict = "" if target is None else (
            f" (target >= {target}x: {'meets' if ratio >= target else 'MISSES'})"
        )  # fmt: skip
        rho = "meets" if gap <= RHO_TOLERANCE else "MISSES"
        print(
            f"{name} / {gensim}: words/s median {ratio:.2f}x over {len(seeds)} rounds (range "
            f"{ratios.min():.2f}-{ratios.max():.2f}){verdict}; largest |Δρ| (means) {gap:.3f} "
            f"(target <= {RHO_TOLERANCE}: {rho})"
        )
        notes = (
            f"{corpus}, {threads} CPU threads each, median of {len(seeds)} interleaved rounds "
            f"(range {ratios.min():.2f}-{ratios.max():.2f}); |Δρ| {gap:.3f}"
        )
        rows.append({"quantity": f"words/s {name} / {gensim}", "value": round(ratio, 3),
                     "unit": "x", "notes": notes})  # fmt: skip
    return rows


def gpu_benchmark(
    corpus: str = "wiki+lee",
    seeds: tuple[int, ...] = (1, 2, 3),
    config: Word2VecConfig = COMPARISON,
) -> list[dict]:
    """``python -m chapter20 bench word2vec-gpu`` (claim C26; the issue's GPU goal: >= 10x at
    |Δρ| <= 0.02): our negative sampling and hierarchical softmax on CUDA against gensim with
    a worker per CPU core of the host, same corpus and settings (``config``'s, its seed
    replaced by each of ``seeds``), per seed. Without CUDA it says so and returns no rows."""
    if not torch.cuda.is_available():
        print("no CUDA GPU here: bench word2vec-gpu needs one")
        return []
    sentences = corpus_sentences(corpus)
    workers = os.cpu_count() or 1
    name = torch.cuda.get_device_name()
    on_gpu = replace(config, device="cuda")
    train("ours negative", sentences, replace(on_gpu, epochs=1))  # warm-up (CUDA context, caches)
    rows = []
    for objective in ("negative", "hierarchical"):
        runs = {"gpu": [], "cpu": []}
        for seed in seeds:
            gpu, cpu = replace(on_gpu, seed=seed), replace(config, seed=seed, workers=workers)
            runs["gpu"].append(train(f"ours {objective}", sentences, gpu))
            runs["cpu"].append(train(f"gensim {objective}", sentences, cpu))
        speed = {k: statistics.median(r.stats.words_per_second for r in v) for k, v in runs.items()}
        rho = {
            k: [statistics.mean(r.evaluate_word_pairs(s).spearman for r in v)
                for s in ("wordsim353", "simlex999")]
            for k, v in runs.items()
        }  # fmt: skip
        ratio = speed["gpu"] / speed["cpu"]
        gap = max(abs(a - b) for a, b in zip(rho["gpu"], rho["cpu"]))
        print(
            f"{objective}: ours on {name} {speed['gpu']:,.0f} words/s, gensim on {workers} CPU "
            f"workers {speed['cpu']:,.0f} words/s: {ratio:.1f}x (goal >= 10x: "
            f"{'meets' if ratio >= 10 else 'MISSES'}); largest |Δρ| {gap:.3f} (goal <= "
            f"{RHO_TOLERANCE}); WordSim ρ {rho['gpu'][0]:.3f} vs {rho['cpu'][0]:.3f} ({_load()})"
        )
        notes = f"{corpus}; gensim with {workers} workers; |Δρ| {gap:.3f}; {len(seeds)} seeds"
        code = code_version(*GPU_CODE)
        rows += [
            {"quantity": f"words/s ours {objective} (CUDA)", "value": round(speed["gpu"]),
             "unit": "words/s", "notes": notes, "code": code},
            {"quantity": f"words/s gensim {objective} ({workers} CPU workers)",
             "value": round(speed["cpu"]), "unit": "words/s", "notes": notes, "code": code},
            {"quantity": f"speed-up ours {objective} (CUDA) / gensim (all cores)",
             "value": round(ratio, 2), "unit": "x", "notes": notes, "code": code},
        ]  # fmt: skip
    return rows
