"""§20.2.1 Contrastive training at scale on real text: notebook 02, section 6. Does the number of
negatives matter? Four ways to train the bag-of-embeddings encoder on next-sentence pairs of the
Wikipedia sample (a small batch, naive accumulation, gradient caching, a large batch), the same
encoder untrained, and a positive control (the large batch at τ = 1), scored by held-out recall.

The three-seed study is the committed record ``data/batch_strategies.csv``
(:func:`strategy_benchmark`, ``chapter20 bench batch-strategies``); the notebook reruns seed 0
live (the record also holds its runs on 20 large batches' worth of pairs, which the notebook
repeats) and checks it against its rows (:func:`live_strategies`). Every strategy sees the same
training pairs: the small batch takes ``batch / micro`` times the steps of the others.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd
import torch

from chapter20.core.checks import check_int
from chapter20.core.corpora import PairData, pair_data
from chapter20.core.device import size_scale
from chapter20.core.plotting import new_figure
from chapter20.core.seed_statistics import beyond_noise
from chapter20.core.study_record import provenance_line, read_study, study_output, write_study
from chapter20.labs.common import UNTRAINED
from chapter20.techniques.contrastive import DEFAULT_TEMPERATURE, micro_batch_info_nce
from chapter20.training.config import TrainConfig
from chapter20.training.pair_training import PairRunConfig, heldout_run

__all__ = [
    "TrainingRun",
    "STRATEGIES",
    "CONTROL",
    "CONTROL_TEMPERATURE",
    "BATCH",
    "MICRO",
    "train_pairs",
    "compare_batch_strategies",
    "run_table",
    "STRATEGY_STUDY",
    "strategy_benchmark",
    "live_strategies",
    "live_agreement",
    "seed_table",
    "beyond_seed_noise",
    "plot_recalls",
]


# --------------------------------------------------------------------------------------------
# Real text: next-sentence pairs from the Wikipedia sample
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingRun:
    """One training strategy: effective batch (pairs per step, in micro-batches or chunks of
    ``micro``), negatives per query, steps, seed, seconds, held-out recalls, loss per step,
    final weights."""

    method: str
    effective_batch: int
    micro: int
    negatives: int
    steps: int
    seed: int
    seconds: float
    recall: dict[int, float]
    losses: list[float]
    state: dict[str, torch.Tensor]


STRATEGIES = ("small batch", "naive accumulation", "gradient caching", "large batch")
#: The positive control of the comparison, chosen before the run: the large batch at a
#: temperature so high (τ = 1 over cosine similarities in [-1, 1]) that its softmax is nearly
#: uniform and the negatives barely push — a change held-out recall must be able to detect.
CONTROL = "large batch, τ = 1 (control)"
CONTROL_TEMPERATURE = 1.0
#: Pairs per step of the large batch (and of naive accumulation and gradient caching), and of
#: the small batch, which is also their micro-batch or chunk.
BATCH, MICRO = 256, 32


def train_pairs(
    data: PairData,
    method: str,
    *,
    batch: int = BATCH,
    micro: int = MICRO,
    steps: int = 150,
    lr: float = 3e-3,
    dim: int = 128,
    temperature: float = DEFAULT_TEMPERATURE,
    seed: int = 0,
) -> TrainingRun:
    """Train the bag-of-embeddings encoder on ``data`` with one of ``STRATEGIES`` or the
    ``CONTROL`` (the large batch at ``CONTROL_TEMPERATURE``), or ``UNTRAINED`` (no step) (§20.2.1):
    ``small batch`` (``micro`` pairs per step), ``naive accumulation`` (``batch`` pairs per step
    in micro-batches of ``micro``, each with its own negatives), ``gradient caching`` (``batch``
    pairs, chunks of ``micro``), ``large batch`` (``batch`` pairs at once). Same seed, data
    order and Adam learning rate for all, and the same ``steps * batch`` training examples:
    ``steps`` steps of ``batch`` pairs, the small batch ``steps * batch // micro`` steps of
    ``micro`` (more, smaller updates); gradient caching takes the same steps as the large
    batch. Returns the held-out recalls."""
    if method not in (UNTRAINED, *STRATEGIES, CONTROL):
        allowed = (UNTRAINED, *STRATEGIES, CONTROL)
        raise ValueError(f"method must be one of {allowed}, got {method!r}")
    if method == CONTROL:
        temperature = CONTROL_TEMPERATURE
    config = TrainConfig(optimizer="adamw", lr=lr, weight_decay=0.0, temperature=temperature)
    loss = None
    if method == "naive accumulation":
        config, loss = replace(config, micro_batches=batch // micro), micro_batch_info_nce
    elif method == "gradient caching":
        config = replace(config, chunk_size=micro)
    step_size = micro if method == "small batch" else batch
    steps = steps * batch // step_size  # every strategy sees the same steps * batch pairs
    steps = 0 if method == UNTRAINED else steps  # the same encoder before its first step
    run = heldout_run(
        PairRunConfig(steps=steps, batch=step_size, seed=seed, vocab=data.vocab_size, dim=dim,
                      training=config),
        data, loss=loss,
    )  # fmt: skip
    negatives = (micro if method in ("small batch", "naive accumulation") else batch) - 1
    if method == UNTRAINED:
        negatives = 0
    return TrainingRun(
        method,
        step_size,
        micro,
        negatives,
        len(run.losses),
        seed,
        run.seconds,
        run.recall,
        run.losses,
        run.state,
    )


def compare_batch_strategies(
    data: PairData,
    *,
    seeds: tuple[int, ...] = (0, 1, 2),
    caching_seeds: tuple[int, ...] = (0,),
    control: bool = True,
    untrained: bool = False,
    **kwargs,
) -> tuple[pd.DataFrame, list[TrainingRun]]:
    """Train the ``STRATEGIES`` (same settings) once per seed, and the ``CONTROL`` if
    ``control``, and tabulate recall@1 and recall@10, a row per run. Gradient caching computes
    the large batch's loss and gradients (proved in notebook 02), so it is trained only for
    ``caching_seeds``, where its weights are compared with the large batch's; the other
    strategies and the control run every seed, and with ``untrained`` the encoder of each seed
    before its first step (:data:`~chapter20.labs.common.UNTRAINED`)."""
    methods = (*STRATEGIES, CONTROL) if control else STRATEGIES
    methods = (UNTRAINED, *methods) if untrained else methods
    runs = [
        train_pairs(data, method, seed=seed, **kwargs)
        for seed in seeds
        for method in methods
        if method != "gradient caching" or seed in caching_seeds
    ]
    return run_table(runs), runs


def run_table(runs: list[TrainingRun]) -> pd.DataFrame:
    """A row per run of :func:`train_pairs`: method, seed, effective batch, negatives per
    query, steps, training pairs seen (steps × pairs per step), held-out recall@1 and @10,
    seconds."""
    return pd.DataFrame(
        [
            {
                "method": r.method,
                "seed": r.seed,
                "effective batch": str(r.effective_batch)
                if r.method != "naive accumulation"
                else f"{r.effective_batch} (micro {r.micro})",
                "negatives / query": r.negatives,
                "steps": r.steps,
                "pairs seen": r.steps * r.effective_batch,
                "recall@1": r.recall[1],
                "recall@10": r.recall[10],
                "seconds": r.seconds,
            }
            for r in runs
        ]
    )


#: The committed record of :func:`strategy_benchmark`: the four strategies, the untrained
#: encoder and the positive control, three seeds each (gradient caching: seed 0).
STRATEGY_STUDY = "batch_strategies.csv"


def strategy_benchmark(steps: int = 150, short_steps: int = 20, out: str = "") -> None:
    """``chapter20 bench batch-strategies``: :func:`compare_batch_strategies` with the untrained
    encoder and the control, seeds 0–2, on ``steps`` large batches' worth of pairs each (the
    small batch takes 8× the steps; §20.2.1), and seed 0 of every strategy on ``short_steps``
    large batches' worth (the rows notebook 02 reruns live and checks); with ``out`` written as
    the record ``data/batch_strategies.csv`` (quality only: no times)."""
    steps, short_steps = check_int("steps", steps, 1), check_int("short_steps", short_steps, 1)
    data = pair_data()
    frame, _ = compare_batch_strategies(data, steps=steps, untrained=True)
    short = run_table([train_pairs(data, method, steps=short_steps) for method in STRATEGIES])
    frame = pd.concat([frame, short], ignore_index=True).drop(columns="seconds")
    print(frame.round(4).to_string(index=False))
    if study_output(out):
        command = f"chapter20 bench batch-strategies --steps {steps} --short-steps {short_steps}"
        print("written:", write_study(frame, study_output(out), command))


def live_strategies(data: PairData, steps: int = 150, short_steps: int = 20):
    """Notebook 02's live part of the strategy study (§20.2.1): ``(live, judged, source,
    short)``. ``short``: seed 0 of every strategy trained on ``short_steps`` large batches'
    worth of pairs (weights compared; the small batch takes 8× the steps); ``live``: their
    table with seed 0 of the untrained encoder, the rows checked against the record's rows of
    the same method, seed and steps; ``judged``: the study on ``steps`` large batches' worth
    (every strategy, the untrained encoder and the control, 3 seeds) from the committed record
    :data:`STRATEGY_STUDY`, or, with ``CHAPTER20_SCALE`` >= 2, run here; ``source`` says
    which. ``live`` has the columns of the record (times dropped)."""
    short = [train_pairs(data, method, steps=short_steps) for method in STRATEGIES]
    live = run_table([train_pairs(data, UNTRAINED), *short]).drop(columns="seconds")
    if size_scale() >= 2:
        judged, _ = compare_batch_strategies(data, steps=steps, untrained=True)
        return live, judged.drop(columns="seconds"), "this run", short
    record = read_study(STRATEGY_STUDY)
    judged = record[record["pairs seen"].isin((0, steps * BATCH))].reset_index(drop=True)
    return live, judged, provenance_line(record), short


def live_agreement(live: pd.DataFrame, tolerance: float) -> tuple[list[str], bool]:
    """One line per row of ``live`` (method, seed, steps) with its held-out recalls and the
    record's row of the same method, seed and steps, the last line the largest |Δ| beside
    ``tolerance``; and whether every recall is within it (§20.2.1). The lines' last
    digits depend on the CPU's kernels (which order their sums); whether they agree does not."""
    record = read_study(STRATEGY_STUDY)
    rows = live.merge(record, on=["method", "seed", "steps"], suffixes=(" live", " record"))
    if len(rows) != len(live):
        raise ValueError("the record must hold a row for every live (method, seed, steps)")
    lines = []
    for row in rows.to_dict("records"):
        here = ", ".join(f"recall@{k} {row[f'recall@{k} live']:.4f}" for k in (1, 10))
        there = ", ".join(f"{row[f'recall@{k} record']:.4f}" for k in (1, 10))
        lines.append(
            f"seed 0, {row['method']:>18}, {row['steps']:>3} steps: {here}; record {there}"
        )
    off = max((rows[f"recall@{k} live"] - rows[f"recall@{k} record"]).abs().max() for k in (1, 10))
    lines.append(f"largest |Δ recall| {off:.4f} (tolerance {tolerance:.4f})")
    return lines, bool(off <= tolerance)


def seed_table(summary: pd.DataFrame, column: str = "recall@10") -> pd.DataFrame:
    """``summary`` (``seed_statistics.versus_reference`` by method) as notebook 02 prints it:
    method, seeds, mean, standard deviation and ``gap`` to 4 places, the last two as text, and
    "—" for a method run with fewer than two seeds: one run has no spread, and its gap is that
    seed's draw, not a difference between methods (§20.2.1)."""
    spread, mean = f"{column}_std", f"{column}_mean"
    out = summary[["method", "seeds", mean, spread, "gap"]].copy()
    out[mean] = out[mean].round(4)
    single = out["seeds"] < 2
    for name in (spread, "gap"):
        out[name] = ["—" if one else f"{v:.4f}" for v, one in zip(out[name], single, strict=True)]
    return out


def beyond_seed_noise(
    summary: pd.DataFrame, better: str, worse: str, column: str = "recall@10"
) -> bool | None:
    """``seed_statistics.beyond_noise`` of two methods of ``summary`` (by method), or None
    where either was run with fewer than two seeds: without a spread there is no noise to be
    beyond, so no judgement (§20.2.1)."""
    seeds = summary.set_index("method")["seeds"]
    for name, value in (("better", better), ("worse", worse)):
        if value not in seeds.index:
            raise ValueError(f"{name} must be one of {list(seeds.index)}, got {value!r}")
    if min(seeds[better], seeds[worse]) < 2:
        return None
    return beyond_noise(summary, better, worse, by="method", column=column)


def plot_recalls(frame: pd.DataFrame):
    """Held-out recall@1 and @10 per method of a strategy study (``frame``: a row per run, as
    :func:`run_table` or the record), mean over the seeds with ± one standard deviation; the
    untrained encoder is the level every run starts from (§20.2.1)."""
    methods = list(dict.fromkeys(frame["method"]))
    fig, ax = new_figure(
        "Next-sentence retrieval on held-out Wikipedia articles", "",
        "share of test anchors (mean ± SD over seeds)",
        figsize=(9, 4),
        alt="Bar chart of held-out recall@1 and recall@10 per training strategy, mean and "
        "standard deviation over its seeds (a strategy run with one seed is labelled with it), "
        "with the untrained encoder and the control.",
    )  # fmt: skip
    for offset, k in zip((-0.2, 0.2), (1, 10)):
        stats = frame.groupby("method", sort=False)[f"recall@{k}"].agg(["mean", "std"])
        stats = stats.loc[methods].fillna(0.0)
        positions = [i + offset for i in range(len(methods))]
        ax.bar(positions, stats["mean"], yerr=stats["std"], capsize=3, width=0.4,
               label=f"recall@{k}")  # fmt: skip
    seeds = frame.groupby("method", sort=False)["seed"].unique()
    labels = [f"{m} (seed {seeds[m][0]})" if len(seeds[m]) == 1 else m for m in methods]
    ax.set_xticks(range(len(methods)), labels=labels, fontsize=9, rotation=20, ha="right",
                  rotation_mode="anchor")  # fmt: skip
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig
