"""§20.2.2 Mixed precision, run and measured: the experiments behind notebook 03 and
``python -m chapter20 bench precision``.

The workload is the companion's Transformer encoder trained with InfoNCE: on pairs of random
token sequences for speed, memory and the parity of the three precisions, and on Wikipedia
next-sentence pairs for held-out quality (fp32 against fp16, three seeds, with a deliberately
harmful variant as the positive control, claim C27).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pandas as pd
import torch
from torch import nn

from chapter20.core.checks import check_int
from chapter20.core.corpora import PairData, pair_data
from chapter20.core.device import get_device, set_seed, size_scale
from chapter20.core.findings import compare_times
from chapter20.core.gpu_record import (
    MEASURED_LIVE,
    code_version,
    current_gpu_figure,
    current_gpu_ratio,
    read_gpu_measurements,
)
from chapter20.core.measure import CATEGORIES, format_bytes, time_interleaved, timing_columns
from chapter20.core.models import TransformerEncoder
from chapter20.core.seed_statistics import beyond_noise
from chapter20.core.study_record import run_or_record, study_output, write_study
from chapter20.cost.estimates import H200_MEASUREMENT, THROUGHPUT_CODE, ThroughputRecord
from chapter20.labs.common import UNTRAINED
from chapter20.techniques.contrastive import DEFAULT_TEMPERATURE, info_nce
from chapter20.techniques.optimizers import make_optimizer
from chapter20.techniques.precision import (
    available_precisions,
    matmul_speedup,
    store_weights_in,
)
from chapter20.training.config import TrainConfig
from chapter20.training.pair_training import PairRunConfig, heldout_run
from chapter20.training.trainer import Trainer, step_peak_memory

__all__ = [
    "encoder",
    "pair_loss",
    "parity_run",
    "overflow_steps",
    "step_time_vs_batch",
    "speed_findings",
    "MATMUL_MODULES",
    "matmul_quantity",
    "fp16_matmul_speedup",
    "step_seconds_quantity",
    "mixed_precision_speedup",
    "recorded_gpu_speeds",
    "LIVE_STEPS",
    "LIVE_LOSS",
    "LIVE_ARMS",
    "memory_by_precision",
    "MEMORY_BATCHES",
    "MEMORY_STUDY",
    "memory_study",
    "memory_agreement",
    "gradient_magnitudes",
    "QUALITY",
    "CONTROL",
    "QUALITY_ARMS",
    "quality_runs",
    "QUALITY_STUDY",
    "quality_benchmark",
    "judged_quality",
    "quality_agreement",
    "learned",
    "mixed_precision_notes",
    "fp16_quality_note",
    "benchmark",
]


def encoder(vocab: int = 4_000, d_model: int = 128, layers: int = 2, seed: int = 0, **kwargs):
    """The shared Transformer encoder of this notebook, seeded (dropout off for comparisons)."""
    set_seed(seed)
    options = {"n_heads": 4, "n_layers": layers, "max_len": 64, "dropout": 0.0, **kwargs}
    return TransformerEncoder(vocab, d_model=d_model, **options)


def pair_loss(model: nn.Module, batch) -> torch.Tensor:
    """InfoNCE of the encoded anchors against the encoded positives (computed in fp32)."""
    anchors, positives = batch
    return info_nce(model(anchors), model(positives), DEFAULT_TEMPERATURE)


def _random_pairs(batch: int, seq_len: int, vocab: int, seed: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    anchors = torch.randint(1, vocab, (batch, seq_len), generator=generator)
    positives = anchors.clone()
    noise = torch.rand(anchors.shape, generator=generator) < 0.3  # positives: 30% of ids changed
    positives[noise] = torch.randint(1, vocab, (int(noise.sum()),), generator=generator)
    return anchors, positives


def _adam_trainer(model: nn.Module, precision: str, lr: float, **options) -> Trainer:
    """The composed trainer with Adam's update (AdamW without decay) in ``precision``."""
    config = TrainConfig(precision=precision, lr=lr, weight_decay=0.0)
    return Trainer(model, replace(config, **options))


def parity_run(
    precision: str, steps: int = 30, batch: int = 32, seq_len: int = 16, seed: int = 0
) -> list[float]:
    """Losses of ``steps`` Adam steps on a fixed task (noisy copies of random sequences) in
    ``precision``; the same task and initial weights for every precision (§20.2.2)."""
    trainer = _adam_trainer(encoder(vocab=500, d_model=64, seed=seed), precision, 1e-3)
    batches = [_random_pairs(batch, seq_len, 500, seed + i) for i in range(steps)]
    return [trainer.step(pairs).loss for pairs in batches]


def overflow_steps(precision: str, factors=(1.0, 1e6, float("inf"), 1.0)) -> pd.DataFrame:
    """One step per factor, the loss multiplied by it (§20.2.2, skipped steps): whether the
    trainer skipped the update, the fp16 loss scale before and after, whether the weights
    changed. An overflow must never reach the weights, in any precision."""
    factor = {"value": 1.0}

    def scaled_loss(model: nn.Module, batch) -> torch.Tensor:
        anchors, positives = batch
        losses = info_nce(model(anchors), model(positives), DEFAULT_TEMPERATURE, reduction="none")
        return factor["value"] * losses

    trainer = Trainer(
        encoder(vocab=500, d_model=64), TrainConfig(precision=precision), loss=scaled_loss
    )
    ids = torch.randint(1, 500, (16, 16), generator=torch.Generator().manual_seed(0))
    records = []
    for value in factors:
        factor["value"] = value
        before = [p.detach().clone() for p in trainer.module.parameters()]
        result = trainer.step((ids, ids))
        after = trainer.scaler.get_scale() if trainer.scaler is not None else 1.0
        same = all(torch.equal(a, p) for a, p in zip(before, trainer.module.parameters()))
        records.append(
            {
                "factor": value,
                "skipped": result.skipped,
                "scale": result.scale,
                "scale_after": after,
                "weights": "unchanged" if same else "updated",
            }
        )
    finite = all(bool(torch.isfinite(p).all()) for p in trainer.module.parameters())
    return pd.DataFrame(records).assign(weights_finite=finite)


def step_time_vs_batch(
    batch_sizes: tuple[int, ...] = (16, 64), seq_len: int = 64, precisions=None, repeat: int = 5
) -> pd.DataFrame:
    """Median time of one training step (forward, backward, Adam) per precision and batch size,
    the precisions timed in alternation; ``speedup`` is fp32 time / this time (§20.2.2)."""
    device = get_device()
    precisions = precisions or available_precisions(device)
    records = []
    for batch in batch_sizes:
        pairs = tuple(x.to(device) for x in _random_pairs(batch, seq_len, 4_000, seed=batch))
        steps = {}
        for name in precisions:
            trainer = _adam_trainer(encoder().to(device), name, 1e-4)
            steps[name] = lambda trainer=trainer, pairs=pairs: trainer.step(pairs)
        timing = time_interleaved(steps, warmup=1, repeat=repeat, device=device)
        for name, t in timing.items():
            records.append(
                {
                    "batch": batch,
                    "precision": name,
                    **timing_columns(t),
                    "speedup": timing["fp32"].median / t.median,
                }
            )
    return pd.DataFrame(records)


def speed_findings(frame: pd.DataFrame, reference: str = "fp32") -> list[str]:
    """One computed line per timed variant of :func:`step_time_vs_batch` (or of
    :func:`~chapter20.techniques.precision.matmul_speedup`, one size): its median time against
    ``reference``'s, indistinguishable within the wider of their repeats' ranges."""
    lines = []
    groups = frame.groupby("batch", sort=False) if "batch" in frame else [(None, frame)]
    for batch, part in groups:
        rows = {row.precision: row for row in part.itertuples(index=False)}
        where = "" if batch is None else f", batch {batch}"
        for name, row in rows.items():
            if name != reference:
                lines.append(compare_times(f"{name}{where}", row, reference, rows[reference]))
    return lines


#: The package code whose GPU figures claim C06 reads: the matmul timing and the timer. A row of
#: the GPU record measured by another version of them no longer decides the verdict.
MATMUL_MODULES = ("techniques.precision", "core.measure")


def matmul_quantity(size: int, precision: str) -> str:
    """The GPU record's name of a matmul speed-up, e.g. ``"matmul 4096x4096 speed-up vs fp32
    (no TF32), fp16"`` (what ``bench precision --record`` writes and claim C06 reads)."""
    return f"matmul {size}x{size} speed-up vs fp32 (no TF32), {precision}"


def fp16_matmul_speedup(matmul: pd.DataFrame, size: int) -> tuple[float | None, str, str]:
    """What claim C06 is judged on, as ``(value, device, note)``: this run's fp16 speed-up when
    ``matmul`` (of :func:`~chapter20.techniques.precision.matmul_speedup`) timed the 4096 × 4096
    multiply on CUDA; else the GPU record's row written by the current version of
    :data:`MATMUL_MODULES`; else no value (the verdict is then "needs a GPU")."""
    device = get_device()
    if device.type == "cuda" and size == 4096:
        speedup = float(matmul.set_index("precision").loc["fp16", "speedup"])
        return speedup, str(device), MEASURED_LIVE
    row = current_gpu_figure(matmul_quantity(4096, "fp16"), MATMUL_MODULES)
    if row is not None:
        return row.value, row.device, f"GPU record: {row.provenance}, code {row.code}"
    return None, str(device), "the GPU record holds no 4096 x 4096 figure of the current code"


def step_seconds_quantity(precision: str, batch: int = 1024) -> str:
    """The GPU record's name of one step time of notebook 08's workload, e.g. ``"step seconds,
    bf16, 1024 pairs"`` (what ``bench cost-throughput --record`` writes)."""
    return f"step seconds, {precision}, {batch} pairs"


def mixed_precision_speedup(
    batch: int = 1024, record: ThroughputRecord = H200_MEASUREMENT
) -> tuple[float | None, str, str]:
    """What claim C07 is judged on, as ``(value, device, note)``, by the rule of every GPU claim:
    fp32 over bf16 step time of notebook 08's workload at ``batch`` pairs from GPU-record rows
    measured by the current version of ``THROUGHPUT_CODE`` (the speed-up over fp32 with TF32
    beside it); else no value (the verdict is then "needs a GPU") and the note shows ``record``'s
    rows, which carry no code version, as figures that are not judged."""
    found = current_gpu_ratio(
        step_seconds_quantity("fp32", batch), step_seconds_quantity("bf16", batch), THROUGHPUT_CODE
    )
    if found is None:
        older = (
            f"x{record.speedup('bf16', 'fp32', batch):.2f} over fp32, "
            f"x{record.speedup('bf16', 'tf32', batch):.2f} over fp32 with TF32"
        )
        return (
            None,
            "cpu",
            (
                "the GPU record has no step time of the current code; its rows without a code "
                f"version ({record.gpu}, {record.date}), shown, not judged: {older}"
            ),
        )
    speedup, _, bf16 = found
    tf32 = current_gpu_ratio(
        step_seconds_quantity("tf32", batch), step_seconds_quantity("bf16", batch), THROUGHPUT_CODE
    )
    beside = "" if tf32 is None else f"; over fp32 with TF32 allowed: x{tf32[0]:.2f}"
    return speedup, bf16.device, f"GPU record: {bf16.provenance}, code {bf16.code}{beside}"


def recorded_gpu_speeds(record: ThroughputRecord = H200_MEASUREMENT) -> list[str]:
    """§20.2.2: the GPU figures recorded for notebook 03's two speed claims, one line each in
    plain words with its GPU and date — ``record``'s training step of notebook 08's workload at
    1,024 pairs (bf16 against fp32, and against fp32 with TF32), then every matrix-multiply
    speed-up that ``chapter20 bench precision`` wrote to the GPU record."""
    over = {base: record.speedup("bf16", base, 1024) for base in ("fp32", "tf32")}
    lines = [
        f"{record.gpu}, {record.date}: one training step of notebook 08's workload at 1,024 "
        f"pairs, bf16 {over['fp32']:.2f}x the speed of fp32, {over['tf32']:.2f}x that of fp32 "
        "with TF32"
    ]
    frame = read_gpu_measurements()
    rows = frame[frame["command"].str.contains("bench precision", regex=False)]
    for row in rows.itertuples():
        found = re.fullmatch(r"matmul (\d+)x\d+ speed-up vs fp32.*, (\w+)", row.quantity)
        if found is not None:
            size, precision = found.groups()
            lines.append(
                f"{row.device}, {row.date}: one {size} x {size} matrix multiply, {precision} "
                f"{row.value:.2f}x the speed of fp32"
            )
    return lines


def memory_by_precision(batch: int = 64, seq_len: int = 64, precisions=None) -> pd.DataFrame:
    """Peak memory of one training step per precision, broken down into parameters, gradients,
    optimizer state and activations (§20.2.2, claim C09). Adam's state exists before the step
    (a warm-up step creates it), as in the middle of training."""
    device = get_device()
    precisions = precisions or available_precisions(device)
    pairs = tuple(x.to(device) for x in _random_pairs(batch, seq_len, 4_000, seed=0))
    records = []
    for name in precisions:
        report = step_peak_memory(_adam_trainer(encoder().to(device), name, 1e-4), pairs, device)
        records.append(
            {
                "precision": name,
                "peak_bytes": report.peak_bytes,
                **report.breakdown,
                "measured_by": report.method,
            }
        )
    frame = pd.DataFrame(records)
    frame["vs_fp32"] = frame["peak_bytes"] / frame["peak_bytes"].iloc[0]
    return frame


#: Section 5's batches: the one rerun live and claim C09's, and the committed record of both
#: (byte counts by component: the same on every machine).
MEMORY_BATCHES = (8, 64)
MEMORY_STUDY = "precision_memory.csv"


def memory_study():
    """Section 5 of notebook 03: ``(live, judged, own_run, source)``. The live run measures
    :func:`memory_by_precision` at the first of :data:`MEMORY_BATCHES` (at every one with
    ``CHAPTER20_SCALE`` >= 2, ``own_run``: it is then the judged run); the judged rows are
    otherwise the committed record :data:`MEMORY_STUDY`, which holds both batches."""
    own_run = size_scale() >= 2
    batches = MEMORY_BATCHES if own_run else MEMORY_BATCHES[:1]
    live = pd.concat([memory_by_precision(b).assign(batch=b) for b in batches], ignore_index=True)
    judged, source = run_or_record(live, own_run, MEMORY_STUDY)
    return live, judged[list(live.columns)], own_run, source


def memory_agreement(live: pd.DataFrame, judged: pd.DataFrame) -> tuple[int, int]:
    """``(rows compared, largest |difference| in bytes)`` between the live and the judged rows of
    :func:`memory_study` over the batches and precisions they share."""
    keys, columns = ["batch", "precision"], ["peak_bytes", *CATEGORIES]
    both = live.merge(judged, on=keys, suffixes=("", "_judged"))
    gaps = [(both[c] - both[f"{c}_judged"]).abs().max() for c in columns if c in live]
    return len(both), int(max(gaps))


def gradient_magnitudes(batch: int = 32, seq_len: int = 32, seed: int = 0):
    """One fp32 backward of the encoder: (absolute values of all non-zero gradients, the model)
    — what fp16 would have to hold without loss scaling."""
    model = encoder(seed=seed)
    pair_loss(model, _random_pairs(batch, seq_len, 4_000, seed)).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return grads[grads != 0].abs(), model


#: Claim C27's workload: the Transformer encoder (one layer: attention and feed-forward matrix
#: multiplies in 16 bits under autocast). 200 steps at a learning rate of 1e-2 are the smallest
#: run found here in which fp32 training rises clearly above the untrained encoder and the
#: positive control falls measurably below it (chosen on fp32 and the control only, never on
#: fp16's result).
QUALITY = {"d_model": 64, "layers": 1, "seq_len": 16, "steps": 200, "batch": 128, "lr": 1e-2}
#: The positive control: weights stored in 8-bit floats (e4m3) with no fp32 master copy.
CONTROL = "fp8 weights, no master copy (control)"
QUALITY_ARMS = (UNTRAINED, "fp32", "fp16", CONTROL)
#: The live rerun of the quality study: seed 0 for this many steps, whose loss at its last step
#: (column :data:`LIVE_LOSS`) the committed record holds too, from the same seed and data order.
LIVE_STEPS = 10
#: The live rerun's arms: the start and the two precisions compared (the control: the record).
LIVE_ARMS = (UNTRAINED, "fp32", "fp16")
LIVE_LOSS = f"loss_at_step_{LIVE_STEPS}"


def quality_runs(
    data: PairData,
    arms: tuple[str, ...] = QUALITY_ARMS,
    *,
    seeds: tuple[int, ...] = (0, 1, 2),
    d_model: int = QUALITY["d_model"],
    layers: int = QUALITY["layers"],
    seq_len: int = QUALITY["seq_len"],
    steps: int = QUALITY["steps"],
    batch: int = QUALITY["batch"],
    lr: float = QUALITY["lr"],
) -> pd.DataFrame:
    """Held-out quality of the Transformer encoder trained on real next-sentence pairs, one row
    per arm of ``arms`` (``"fp32"``, ``"fp16"`` with a ``GradScaler``, ``"bf16"``, :data:`CONTROL`,
    ``"untrained"``) and seed (§20.2.2, claim C27): final loss, the loss at :data:`LIVE_STEPS`,
    recall@1 and @10 and MRR scored in float32, skipped steps, the largest loss gap from fp32's
    run of the seed, seconds. Same weights and data order in every arm of a seed."""
    data = data.truncated(seq_len)

    def build(vocab: int, dim: int) -> TransformerEncoder:
        return TransformerEncoder(vocab, d_model=dim, n_heads=2, n_layers=layers,
                                  max_len=seq_len, dropout=0.0)  # fmt: skip

    def fp8_weights(model: nn.Module) -> torch.optim.Optimizer:  # CONTROL's optimizer
        optimizer = make_optimizer(model.parameters(), "adamw", lr, weight_decay=0.0)
        return store_weights_in(model, optimizer, torch.float8_e4m3fn)

    records = []
    for seed in seeds:
        losses = {}
        for arm in arms:
            precision = arm if arm in ("fp32", "bf16", "fp16") else "fp32"
            config = TrainConfig(precision=precision, lr=lr, weight_decay=0.0)
            run = heldout_run(
                PairRunConfig(steps=0 if arm == UNTRAINED else steps, batch=batch, seed=seed,
                              vocab=data.vocab_size, dim=d_model, training=config),
                data, encoder=build, optimizer=fp8_weights if arm == CONTROL else None,
            )  # fmt: skip
            losses[arm] = run.losses
            records.append(
                {
                    "arm": arm,
                    "seed": seed,
                    "final_loss": run.final_loss,
                    "recall@1": run.recall[1],
                    "recall@10": run.recall[10],
                    "mrr": run.mrr,
                    "skipped_steps": run.skipped_steps,
                    "loss_gap_vs_fp32": _largest_gap(run.losses, losses.get("fp32")),
                    LIVE_LOSS: run.losses[LIVE_STEPS - 1]
                    if len(run.losses) >= LIVE_STEPS
                    else None,
                    "seconds": run.seconds,
                }
            )
    return pd.DataFrame(records)


def _largest_gap(losses: list[float], reference: list[float] | None) -> float:
    """The largest absolute difference between two runs' losses, step by step (NaN without a
    reference or a step): how far an arm's training drifted from fp32's of the same seed."""
    if not reference or not losses:
        return float("nan")
    return float(np.max(np.abs(np.asarray(losses) - np.asarray(reference))))


#: The committed record of :func:`quality_benchmark` (claim C27 at a size where the runs learn).
QUALITY_STUDY = "precision_quality.csv"


def judged_quality(data: PairData):
    """Claim C27's runs for notebook 03: ``(live, judged, own_run, source)``. With
    ``CHAPTER20_SCALE`` >= 2 the live run trains :data:`QUALITY`'s full length for all three
    seeds (``own_run``: it is then the judged run); otherwise it trains seed 0 of
    :data:`LIVE_ARMS` for :data:`LIVE_STEPS` steps, and the judged run is the committed record
    :data:`QUALITY_STUDY` (``source`` says where it comes from; :func:`quality_agreement`
    checks the two agree)."""
    own_run = size_scale() >= 2
    steps = QUALITY["steps"] if own_run else LIVE_STEPS
    arms = QUALITY_ARMS if own_run else LIVE_ARMS
    live = quality_runs(data, arms, seeds=(0, 1, 2) if own_run else (0,), steps=steps)
    judged, source = run_or_record(live, own_run, QUALITY_STUDY)
    return live, judged, own_run, f"{QUALITY['steps']} steps, {source}"


def quality_agreement(live: pd.DataFrame, judged: pd.DataFrame) -> tuple[int, float]:
    """``(values compared, largest relative |difference|)`` between the live runs and the judged
    runs of the same arm and seed: the untrained encoder's recall@1, recall@10 and MRR (the same
    weights and evaluation), and, where the judged run holds it, each trained run's loss at step
    :data:`LIVE_STEPS` (:data:`LIVE_LOSS`: the same weights, batches and arithmetic)."""
    both = live.merge(judged, on=["arm", "seed"], suffixes=("", "_judged"))
    start = both[both["arm"] == UNTRAINED]
    pairs = [(start[c], start[f"{c}_judged"]) for c in ("recall@1", "recall@10", "mrr")]
    if f"{LIVE_LOSS}_judged" in both:
        trained = both.dropna(subset=[LIVE_LOSS, f"{LIVE_LOSS}_judged"])
        pairs.append((trained[LIVE_LOSS], trained[f"{LIVE_LOSS}_judged"]))
    gaps = pd.concat([(a - b).abs() / b.abs() for a, b in pairs])
    return len(gaps), float(gaps.max())


def learned(summary: pd.DataFrame, arms=("fp32", "fp16")) -> bool:
    """Whether each of ``arms`` beats the same encoder untrained, under the same evaluation,
    beyond the seeds' noise (``seed_statistics.beyond_noise`` on recall@10 of
    ``versus_reference``'s ``summary``): the condition for judging claim C27."""
    return all(beyond_noise(summary, arm, UNTRAINED, by="arm", column="recall@10") for arm in arms)


def quality_benchmark(steps: int = QUALITY["steps"], out: str = ""):
    """``chapter20 bench precision-quality``: :func:`quality_runs` (3 seeds, every arm) trained
    ``steps`` steps, long enough for the encoder to learn, which on a CPU without fast fp16
    kernels takes minutes; with ``out`` written as ``data/precision_quality.csv`` reads (the
    record claim C27 is judged on when a notebook run is too short to learn)."""
    frame = quality_runs(pair_data(), steps=check_int("steps", steps, 1))
    print(frame.round(4).to_string(index=False))
    if study_output(out):
        command = f"chapter20 bench precision-quality --steps {steps}"
        print("written:", write_study(frame, study_output(out), command))


def mixed_precision_notes(limits: pd.DataFrame, activation_ratio: float) -> dict[str, str]:
    """§20.2.2: the notes of claims C08 and C09 in notebook 03's claims check, by claim id
    (C06's and C07's come with their values from :func:`fp16_matmul_speedup` and
    :func:`mixed_precision_speedup`): fp16's smallest normal from ``limits``
    (``format_limits``) and the bf16 / fp32 ``activation_ratio`` of :func:`memory_by_precision`."""
    normal = limits.set_index("dtype").loc["float16", "smallest_normal"]
    return {
        "C08": "largest value fp16 rounds to 0 (2^-25), found by casting; values up to the "
        f"smallest normal {normal:.2g} survive as subnormals with fewer bits",
        "C09": "bf16, one Adam step, batch 64: only the activations shrink "
        f"(x{activation_ratio:.2f}); fp32 weights and Adam state do not",
    }


def fp16_quality_note(by_arm: pd.DataFrame, judged: pd.DataFrame, own_run: bool) -> str:
    """§20.2.2, claim C27's note in notebook 03's claims check: the run judged (this one, or the
    committed record ``judged`` with its date, as :func:`judged_quality` says in ``own_run``),
    its seeds, and each arm's mean recall@10 (± std for fp16 and fp32) from the summary
    ``by_arm`` (``versus_reference`` indexed by arm)."""
    mean, std = by_arm["recall@10_mean"], by_arm["recall@10_std"]
    run = "this run" if own_run else "recorded " + str(judged["measured_on"].iloc[0])
    return (
        f"{run}, {by_arm.loc['fp16', 'seeds']} seeds; recall@10 fp16 {mean['fp16']:.3f} ± "
        f"{std['fp16']:.3f}, fp32 {mean['fp32']:.3f} ± {std['fp32']:.3f}, "
        f"control {mean[CONTROL]:.3f}, untrained {mean[UNTRAINED]:.3f}"
    )


# --------------------------------------------------------------------------------------------
# Benchmark
# --------------------------------------------------------------------------------------------


def benchmark(
    batches: tuple[int, ...] = (16, 64),
    matmul_sizes: tuple[int, ...] = (4096, 8192),
    out: str = "",
) -> list[dict]:
    """``python -m chapter20 bench precision``: step-time and peak-memory ratios of each half
    precision to fp32 for the shared Transformer encoder at each of ``batches``, and the speed-up
    of one matrix multiply of each of ``matmul_sizes`` over fp32 (no TF32; on CUDA also over
    TF32). Returns the matmul speed-ups as rows for the GPU record (``--record``), each with the
    version of the code that measured them (``code``, :data:`MATMUL_MODULES`): claim C06 reads
    the 4096 × 4096 fp16 row of the current code. On a CPU the matmuls take seconds each, and
    fp16 (no fast CPU kernels) is left out of them. With ``out``, section 5's memory by
    precision at :data:`MEMORY_BATCHES` is first written there (``data/precision_memory.csv``)."""
    if study_output(out):
        frame = pd.concat([memory_by_precision(b).assign(batch=b) for b in MEMORY_BATCHES])
        command = f"chapter20 bench precision --matmul-sizes 512 --out data/{MEMORY_STUDY}"
        print("written:", write_study(frame, study_output(out), command))
    device = get_device()
    speed = step_time_vs_batch(batches)
    print(f"Transformer encoder (d_model 128, 2 layers, 64 tokens), one Adam step on {device}:")
    for row in speed.itertuples():
        print(
            f"  batch {row.batch:>3} {row.precision}: {row.seconds * 1e3:8.1f} ms "
            f"(min {row.seconds_min * 1e3:.1f}, max {row.seconds_max * 1e3:.1f})  "
            f"{1 / row.speedup:5.2f}x the fp32 time"
        )
    for line in speed_findings(speed):
        print(f"  {line}")
    for batch in batches:
        memory = memory_by_precision(batch)
        for row in memory.itertuples():
            print(
                f"  batch {batch:>3} {row.precision}: peak {format_bytes(row.peak_bytes):>10}  "
                f"{row.vs_fp32:5.2f}x fp32 [{row.measured_by}]"
            )
    rows, version = [], code_version(*MATMUL_MODULES)
    for size in matmul_sizes:
        matmul = matmul_speedup(size, available_precisions(device), repeat=5, device=device)
        print(f"  {size}x{size} matmul, median of 5:")
        for line in speed_findings(matmul):
            print(f"    {line}")
        rows += [
            {"quantity": matmul_quantity(size, r.precision), "value": round(float(r.speedup), 3),
             "unit": "×", "notes": f"on {device}; median of 5 after 1 warm-up, precisions "
             f"interleaved; fp32 with TF32 off (PyTorch's default); tf32: fp32 with "
             f"torch.backends.cuda.matmul.fp32_precision='tf32'", "code": version}
            for r in matmul.itertuples() if r.precision != "fp32"
        ]  # fmt: skip
    return rows
