"""§20.6 The composed step, measured: ``python -m chapter20 bench training``.

Every technique switched on at once (bf16, gradient caching, activation checkpointing, 8-bit
state with a 32-bit embedding table) against the plain fp32 AdamW step, on the same model and
batch: step time, peak memory by component, and the memory planner's prediction for both. Then
gradient caching alone against the direct batch, with where its extra time goes.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import replace

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile

from chapter20.core.device import get_device
from chapter20.core.measure import format_bytes, time_interleaved
from chapter20.techniques.memory_model import EncoderShape
from chapter20.training.config import TrainConfig
from chapter20.training.memory_plan import plan
from chapter20.training.trainer import Trainer, step_peak_memory

__all__ = [
    "BENCH_SHAPE",
    "PLAIN",
    "COMPOSED",
    "TECHNIQUES",
    "composed_vs_plain",
    "grad_cache_overhead",
    "benchmark",
]

#: The encoder of the benchmark: large enough that activations dominate a step.
BENCH_SHAPE = EncoderShape(8_000, d_model=128, n_heads=4, n_layers=4, max_len=64)
PLAIN = TrainConfig(optimizer="adamw", lr=1e-4)
COMPOSED = TrainConfig(
    optimizer="adamw8bit",
    lr=1e-4,
    precision="bf16",
    chunk_size=16,
    activation_checkpointing="every_layer",
    state_32bit_tables=True,
)


def _trainer(shape: EncoderShape, config: TrainConfig, device: torch.device) -> Trainer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bitsandbytes' notices about optional kernels
        return Trainer(shape.build(seed=0).to(device), config)


def _pairs(shape: EncoderShape, batch: int, seq_len: int, device: torch.device):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, shape.vocab_size, (2, batch, seq_len), generator=generator)
    return tuple(ids.to(device))


def _timed_steps(trainers: dict[str, Trainer], pairs, repeat: int, device: torch.device):
    """One step of each trainer on ``pairs``, timed in alternation after one warm-up step."""
    return time_interleaved({name: (lambda t=t: t.step(pairs)) for name, t in trainers.items()},
                            warmup=1, repeat=repeat, device=device)  # fmt: skip


#: Each technique alone, then all of them: what ``composed_vs_plain`` measures.
TECHNIQUES = {
    "plain fp32 AdamW": {},
    "bf16 alone": {"precision": "bf16"},
    "gradient caching alone": {"chunk_size": COMPOSED.chunk_size},
    "checkpointing alone": {"activation_checkpointing": COMPOSED.activation_checkpointing},
    "8-bit (32-bit table) alone": {"optimizer": COMPOSED.optimizer},
    "composed": COMPOSED.__dict__,
}


def composed_vs_plain(
    shape: EncoderShape = BENCH_SHAPE, *, batch: int = 64, seq_len: int = 64, repeat: int = 3
) -> pd.DataFrame:
    """The plain step, each technique alone and all of them (§20.6), on the same model and batch:
    measured peak memory by component, the planner's prediction, and the median step time (the
    configurations timed in alternation)."""
    device = get_device()
    configs = {name: replace(PLAIN, **options) for name, options in TECHNIQUES.items()}
    pairs = _pairs(shape, batch, seq_len, device)
    trainers = {name: _trainer(shape, config, device) for name, config in configs.items()}
    timing = _timed_steps(trainers, pairs, repeat, device)
    records = []
    for name, config in configs.items():
        report = step_peak_memory(_trainer(shape, config, device), pairs, device)
        planned = plan(shape, config, batch=batch, seq_len=seq_len, device=device)
        records.append(
            {
                "step": name,
                "seconds": timing[name].median,
                "peak_bytes": report.peak_bytes,
                **report.breakdown,
                "planned_bytes": planned.peak_bytes,
                "planned_vs_measured": planned.peak_bytes / report.peak_bytes,
                "measured_by": report.method,
            }
        )
    frame = pd.DataFrame(records)
    frame["time_vs_plain"] = frame["seconds"] / frame["seconds"].iloc[0]
    frame["memory_vs_plain"] = frame["peak_bytes"] / frame["peak_bytes"].iloc[0]
    return frame


def grad_cache_overhead(
    shape: EncoderShape = BENCH_SHAPE,
    *,
    batch: int = 64,
    seq_len: int = 64,
    chunk_size: int = 16,
    repeat: int = 3,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Gradient caching alone (fp32, no checkpointing) against the same batch at once: median
    step times, and the operators whose self time grew most (one profiled step of each)."""
    device = get_device()
    pairs = _pairs(shape, batch, seq_len, device)
    trainers = {
        "direct": _trainer(shape, PLAIN, device),
        "gradient caching": _trainer(shape, replace(PLAIN, chunk_size=chunk_size), device),
    }
    timing = _timed_steps(trainers, pairs, repeat, device)
    times = pd.DataFrame(
        [{"step": name, "seconds": t.median} for name, t in timing.items()]
    ).assign(vs_direct=lambda f: f["seconds"] / f["seconds"].iloc[0])
    self_times = {}
    for name, trainer in trainers.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            trainer.step(pairs)
        self_times[name] = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    ops = pd.DataFrame(self_times).fillna(0.0)
    ops["extra_seconds"] = ops["gradient caching"] - ops["direct"]
    return times, ops.sort_values("extra_seconds", ascending=False)


def benchmark() -> None:
    """``python -m chapter20 bench training``: the composed step vs the plain step, and each
    technique alone (time and peak-memory ratios; the planner within 15% of every measured
    peak), then gradient caching's time overhead alone (target <= 1.40x the direct batch; the
    extra forward costs 4/3)."""
    start = time.perf_counter()
    frame = composed_vs_plain()
    shape = BENCH_SHAPE
    print(
        f"Transformer encoder ({shape.vocab_size:,} x {shape.d_model}, {shape.n_layers} layers), "
        f"64 pairs x 64 tokens, on {get_device()} "
        f"(CPU capability {torch.backends.cpu.get_cpu_capability()})"
    )
    print(
        f"composed = {COMPOSED.precision} + gradient caching (chunks of {COMPOSED.chunk_size}) + "
        f"{COMPOSED.activation_checkpointing} checkpointing + {COMPOSED.optimizer} "
        "with a 32-bit table"
    )
    print(f"memory: {frame['measured_by'].iloc[0]}")
    for row in frame.itertuples():
        within = "within" if abs(row.planned_vs_measured - 1) <= 0.15 else "OUTSIDE"
        print(
            f"  {row.step:<27} step {row.seconds * 1e3:8.1f} ms ({row.time_vs_plain:5.2f}x)  "
            f"peak {format_bytes(row.peak_bytes):>10} ({row.memory_vs_plain:4.2f}x)  planned "
            f"{format_bytes(row.planned_bytes):>10} ({row.planned_vs_measured:.2f}x, {within} 15%)"
        )
    times, ops = grad_cache_overhead()
    ratio = times["vs_direct"].iloc[1]
    verdict = "meets" if ratio <= 1.40 else "misses"
    print(
        f"gradient caching alone (fp32, chunks of {COMPOSED.chunk_size}): {ratio:.2f}x the "
        f"direct step (target <= 1.40x: {verdict}; the extra forward alone costs 4/3)"
    )
    print("  where the extra time goes (profiled self time of one step, seconds):")
    print(ops.head(8).round(4).to_string())
    print(f"({time.perf_counter() - start:.0f} s)")
