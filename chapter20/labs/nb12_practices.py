"""§20.3.2, §20.4 practices of notebook 12, run and measured: listing L2 corrected by the composed
``Trainer``, AdamW's implementations timed, the input pipeline (DataLoader workers, pinned memory)
and a two-node ``torchrun`` on localhost (launched by ``chapter20.demos.node_launch``);
``python -m chapter20 bench practices``.
"""

from __future__ import annotations

import time
import warnings
from functools import partial

import numpy as np
import pandas as pd
import torch
from torch import nn

from chapter20.core.corpora import next_sentence_pairs, wiki_sentences, word_vocabulary
from chapter20.core.device import set_seed, size_scale
from chapter20.core.id_streams import uniform_ids
from chapter20.core.measure import time_interleaved
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.core.seed_statistics import median_and_range, timing_spread_ms
from chapter20.core.study_record import provenance_line, read_study, study_output, write_study
from chapter20.demos.ddp_run import DemoConfig
from chapter20.demos.node_launch import two_node_torchrun
from chapter20.labs.common import LOCAL_GROUP_TIMEOUT_S as TIMEOUT_S
from chapter20.techniques.distributed import (
    group_rank_and_size,
    run_local_group,
)
from chapter20.techniques.optimizer_proofs import reference_gap
from chapter20.techniques.optimizers import (
    adamw_reference_step,
    make_optimizer,
    optimizer_state_bytes,
)
from chapter20.techniques.parallelism import (
    TokenizingPairs,
)
from chapter20.training.config import TrainConfig
from chapter20.training.trainer import Trainer

__all__ = [
    "benchmark",
    "l2_on_rank",
    "corrected_l2",
    "ADAMW_VARIANTS",
    "adamw_reference_gap",
    "optimizer_step_times",
    "loader_throughput",
    "demo_step_throughput",
    "TWO_NODE_RECORD",
    "two_node_row",
    "two_node_launch",
]


# --------------------------------------------------------------------------------------------
# Listing L2 corrected: the composed Trainer, cross-rank negatives, learned temperature
# --------------------------------------------------------------------------------------------


def l2_on_rank(steps: int, global_batch: int, vocab: int = 2_000, dim: int = 32) -> dict:
    """Listing L2's model (embedding + linear projection) trained by the composed Trainer on
    this rank's share of each global batch: InfoNCE with the keys of every rank as negatives and
    a learned temperature inside the DDP-wrapped module. Returns the losses, the temperature,
    every weight of the trained module as one flat float64 array (``weights``) and a checksum
    of them (the sum of their absolute values)."""
    rank, world = group_rank_and_size()
    set_seed(0)
    encoder = BagOfEmbeddingsEncoder(vocab, dim)
    config = TrainConfig(lr=1e-2, learn_temperature=True, temperature=0.1)
    trainer = Trainer(encoder, config)
    ids = uniform_ids((steps, 2, global_batch, 12), vocab, seed=1)
    mine = slice(rank * global_batch // world, (rank + 1) * global_batch // world)
    losses = [trainer.step((ids[s, 0, mine], ids[s, 1, mine])).loss for s in range(steps)]
    weights = torch.cat([p.detach().double().flatten() for p in trainer.module.parameters()])
    wrapped = type(trainer.model).__name__
    return {"rank": rank, "world": world, "losses": losses, "temperature": trainer.temperature,
            "weights": weights.numpy(), "checksum": float(weights.abs().sum()),
            "wrapped": wrapped}  # fmt: skip


def corrected_l2(steps: int = 5, global_batch: int = 32, ranks: list | None = None) -> pd.DataFrame:
    """:func:`l2_on_rank` on one process and on 2 gloo ranks, one row per rank; ``ranks``: the
    ranks' results when a group has already run them (the same ``steps`` and batch)."""
    rows = [l2_on_rank(steps, global_batch)]
    if ranks is None:
        ranks = run_local_group(l2_on_rank, 2, (steps, global_batch), timeout_s=TIMEOUT_S)
    return pd.DataFrame(rows + list(ranks))


def l2_gaps(frame: pd.DataFrame) -> dict[str, float]:
    """The largest |Δ| between each rank of :func:`corrected_l2` (every row after the first)
    and the one process (the first row): of the learned temperature, and of every weight of
    the trained module (``weights``: how many there are)."""
    one, ranks = frame.iloc[0], frame.iloc[1:]
    return {
        "temperature": float(max(abs(t - one.temperature) for t in ranks.temperature)),
        "weights": float(max(np.abs(w - one.weights).max() for w in ranks.weights)),
        "count": int(one.weights.size),
    }


# --------------------------------------------------------------------------------------------
# Fused optimizers; the input pipeline; two nodes on localhost
# --------------------------------------------------------------------------------------------

#: AdamW implementations timed by :func:`optimizer_step_times`: (label, make_optimizer kind,
#: extra keyword arguments).
ADAMW_VARIANTS = (
    ("for-loop", "adamw", {"foreach": False}),
    ("foreach", "adamw", {"foreach": True}),
    ("fused", "adamw_fused", {}),
    ("8-bit", "adamw8bit", {}),
)


def adamw_reference_gap(steps: int = 5, lr: float = 1e-2, seed: int = 0) -> dict[str, float]:
    """The largest |Δ| between AdamW written out
    (``chapter20.techniques.optimizers.adamw_reference_step``) and PyTorch's AdamW (for-loop,
    foreach, fused) on the same 4 tensors and the same random gradients, after ``steps``."""
    gen = torch.Generator().manual_seed(seed)
    start = [torch.randn(n, 8, generator=gen) for n in (3, 16, 64, 5)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(steps)]
    return {
        label: reference_gap(
            adamw_reference_step, partial(make_optimizer, kind=kind, **extra), start, grads, lr
        )[0]
        for label, kind, extra in ADAMW_VARIANTS[:3]
    }


def optimizer_step_times(
    sizes: tuple[int, ...] = (100_000, 1_000_000),
    tensors: int = 16,
    repeat: int = 5,
    variants: tuple[str, ...] = tuple(label for label, _, _ in ADAMW_VARIANTS),
) -> pd.DataFrame:
    """Step time of AdamW as a for-loop, foreach (one kernel per operation over all tensors),
    fused (one kernel per step) and 8-bit, each built by ``make_optimizer``, on ``tensors``
    parameter tensors of ``size`` elements in all, timed in alternation (median and min–max,
    ``step_ms``, ``step_min_ms``, ...); the state bytes per parameter beside it, and how far each
    is from the for-loop after the timed steps."""
    records = []
    for size in sizes:
        optimizers, params = {}, {}
        for label, kind, extra in (v for v in ADAMW_VARIANTS if v[0] in variants):
            generator = torch.Generator().manual_seed(0)
            params[label] = [nn.Parameter(torch.randn(size // tensors, generator=generator))
                             for _ in range(tensors)]  # fmt: skip
            for p in params[label]:
                p.grad = torch.randn(p.shape, generator=generator)
            optimizers[label] = make_optimizer(
                params[label], kind, 1e-3, **extra
            )  # warns on fallback
        timing = time_interleaved({k: o.step for k, o in optimizers.items()}, warmup=1,
                                  repeat=repeat, device="cpu")  # fmt: skip
        for label, optimizer in optimizers.items():
            state = int(optimizer_state_bytes(optimizer)["bytes"].sum())
            gap = max(
                float((a - b).detach().abs().max())
                for a, b in zip(params[label], params["for-loop"])
            )
            records.append(
                {
                    "parameters": size,
                    "variant": label,
                    "class": type(optimizer).__name__ + (" (fused)" if getattr(
                        optimizer, "defaults", {}).get("fused") else ""),
                    **{f"step_{k}": v for k, v in timing_spread_ms(timing[label].times).items()},
                    "state_bytes_per_param": state / size,
                    "max_diff_vs_loop": gap,
                }
            )  # fmt: skip
    frame = pd.DataFrame(records)
    loop = frame[frame.variant == "for-loop"].set_index("parameters")["step_ms"]
    frame["speedup_vs_loop"] = frame["parameters"].map(loop) / frame["step_ms"]
    return frame


def _text_pairs(count: int, vocab: int = 10_000):
    pairs = next_sentence_pairs(wiki_sentences())[:count]
    vocabulary = word_vocabulary([s for pair in pairs for s in pair], vocab)
    return pairs, vocabulary


def loader_throughput(
    workers: tuple[int, ...] = (0, 1, 2),
    pin: tuple[bool, ...] = (False, True),
    pairs: int = 4_000,
    batch: int = 64,
    max_len: int = 32,
    prefetch_factor: int = 2,
    repeats: int = 3,
) -> pd.DataFrame:
    """Pairs per second of a ``DataLoader`` over real Wikipedia sentence pairs encoded as they
    are read (:class:`chapter20.techniques.parallelism.TokenizingPairs`), for each ``num_workers``
    and ``pin_memory``, ``repeats`` passes each, in alternation: the start (until the first
    batch, median) and the steady rate after it (pairs after the first batch / their seconds),
    the median over the passes and their min–max (``low``, ``high``). Pinned memory only helps
    copies to a GPU; without one PyTorch ignores it (warning silenced here)."""
    text, vocabulary = _text_pairs(pairs)
    dataset = TokenizingPairs(text, vocabulary, max_len)
    configs = [(count, pinned) for count in workers for pinned in pin]
    starts, rates = {c: [] for c in configs}, {c: [] for c in configs}
    for _ in range(repeats):
        for count, pinned in configs:
            options = {"prefetch_factor": prefetch_factor} if count else {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "pin_memory ... no accelerator is found"
                loader = torch.utils.data.DataLoader(
                    dataset, batch_size=batch, num_workers=count, pin_memory=pinned, **options
                )
                start = time.perf_counter()
                iterator = iter(loader)
                next(iterator)
                first = time.perf_counter()
                rest = sum(len(b[0]) for b in iterator)
            starts[count, pinned].append(first - start)
            rates[count, pinned].append(rest / (time.perf_counter() - first))
    records = []
    for count, pinned in configs:
        median, low, high = median_and_range(rates[count, pinned])
        records.append({"num_workers": count, "pin_memory": pinned,
                        "start_ms": 1e3 * float(np.median(starts[count, pinned])),
                        "pairs_per_s": median, "low": low, "high": high})  # fmt: skip
    return pd.DataFrame(records)


def demo_step_throughput(batch: int = 96, repeat: int = 5):
    """Pairs per second of the DDP demo's training step on one process (its encoder and
    composed step, ``chapter20.demos.ddp_run.DemoConfig``, at ``batch`` pairs) on random ids:
    what the input pipeline must keep up with. Returns the median and the rates of the slowest
    and fastest step (``low``, ``high``)."""
    config = DemoConfig(batch=batch)
    set_seed(config.seed)
    trainer = Trainer(config.encoder(), config.train_config())
    ids = uniform_ids((2, batch, 32), config.vocab, seed=0)
    timing = time_interleaved({"step": lambda: trainer.step((ids[0], ids[1]))}, warmup=1,
                              repeat=repeat, device="cpu")  # fmt: skip
    spread = timing_spread_ms(timing["step"].times)
    return {
        "pairs_per_s": 1e3 * batch / spread["ms"],
        "low": 1e3 * batch / spread["max_ms"],
        "high": 1e3 * batch / spread["min_ms"],
    }


#: The committed record of the two-node launch under ``data/``.
TWO_NODE_RECORD = "two_node_launch.csv"


def two_node_row(nodes: dict) -> pd.DataFrame:
    """``demos.node_launch.two_node_torchrun``'s result as one row: node 0's command and summary
    line, the world size, the backend and the first and final loss of the run."""
    summary = nodes["summary"]
    return pd.DataFrame(
        [{"command_shown": nodes["command"], "line": nodes["line"],
          **{k: summary[k] for k in ("world_size", "backend", "first_loss", "final_loss")}}]
    )  # fmt: skip


def two_node_launch() -> tuple[pd.Series, str]:
    """§20.4 the two-node launch of notebook 12: run now when ``CHAPTER20_SCALE`` >= 2, else
    the committed record ``data/two_node_launch.csv`` (starting two torchrun agents and their
    workers takes the longest of the notebook). Returns the row and where it comes from ("this
    run", or ``provenance_line``'s when, where and how to reproduce it)."""
    if size_scale() >= 2:
        return two_node_row(two_node_torchrun()).iloc[0], "this run"
    record = read_study(TWO_NODE_RECORD)
    return record.iloc[0], provenance_line(record)


def benchmark(
    optimizer_sizes: tuple[int, ...] = (100_000, 1_000_000, 10_000_000), out: str = ""
) -> None:
    """``python -m chapter20 bench practices``: AdamW step time by implementation, the
    DataLoader by worker count, and a two-node torchrun launch on localhost (§20.3.2, §20.4);
    with ``out`` (or ``CHAPTER20_STUDY_OUT``) the launch is written as notebook 12's record."""
    pd.set_option("display.width", 160)
    print("AdamW step:\n" + optimizer_step_times(optimizer_sizes).round(3).to_string(index=False))
    print("\nDataLoader:\n" + loader_throughput().round(1).to_string(index=False))
    nodes = two_node_torchrun()
    print(f"\ntwo nodes on localhost: {nodes['command']}\n  {nodes['line']}")
    if study_output(out):
        print(
            "written:",
            write_study(two_node_row(nodes), study_output(out), "chapter20 bench practices"),
        )
