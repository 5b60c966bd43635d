"""What several labs share (ARCHITECTURE.md): the quality run of notebooks 02, 03 and 05, and
the reading of a timing table (medians with their quartiles), the committed records of heavy
studies.

:func:`heldout_run` trains an encoder (the bag of embeddings unless told otherwise) through the
composed trainer on the next-sentence pairs and scores held-out recall; the batch-strategy
(§20.2.1), precision (§20.2.2) and optimizer (§20.3.2) comparisons are this run with one option
changed. :func:`timing_columns` and :func:`compare_times` put a timed variant's median with its
repeats' spread in a table and print how it compares with a reference, from that run's numbers
(``chapter20.core.findings``).

A study too heavy for a notebook's minute runs behind ``chapter20 bench``; with ``--out`` (or
``CHAPTER20_STUDY_OUT``) it is written by :func:`write_study` as a CSV under ``data/`` with when,
where and by which command it ran, and the notebook reads it back with :func:`read_study`.
"""

from __future__ import annotations

import datetime
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from chapter20.core.checks import check_int
from chapter20.core.corpora import PairData, shuffled_batches
from chapter20.core.device import set_seed
from chapter20.core.findings import compare
from chapter20.core.measure import Timing
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.core.paths import data_file
from chapter20.techniques.contrastive import recall_at_k, retrieval_scores
from chapter20.training.config import TrainConfig
from chapter20.training.trainer import StepResult, Trainer

__all__ = [
    "compare_times",
    "gain_over_untrained",
    "heldout_run",
    "HeldoutRun",
    "LOCAL_GROUP_TIMEOUT_S",
    "min_max_ms",
    "PROVENANCE",
    "provenance_line",
    "quartiles_ms",
    "read_study",
    "run_or_record",
    "study_output",
    "timing_columns",
    "train_on_pairs",
    "UNTRAINED",
    "write_study",
]


def train_on_pairs(
    trainer: Trainer,
    anchors: torch.Tensor,
    positives: torch.Tensor,
    *,
    steps: int,
    batch: int,
    seed: int = 0,
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> list[StepResult]:
    """``steps`` contrastive steps of ``trainer`` on batches of (``anchors``, ``positives``)
    drawn by a seeded epoch sampler (``chapter20.core.corpora.shuffled_batches``); ``transform`` is
    applied to each batch of anchors (e.g. token dropout). Returns every step's result."""
    steps = check_int("steps", steps, 1)
    seed = check_int("seed", seed, 0)
    batches = shuffled_batches(len(anchors), batch, torch.Generator().manual_seed(seed))
    results = []
    for _ in range(steps):
        ids = next(batches)
        chosen = anchors[ids] if transform is None else transform(anchors[ids])
        results.append(trainer.step((chosen.to(trainer.device), positives[ids].to(trainer.device))))
    return results


@dataclass(frozen=True)
class HeldoutRun:
    """One :func:`heldout_run`: the loss of every step, held-out recall@k (k = 1, 10), the
    steps skipped for non-finite gradients, the training seconds, the final weights and the
    held-out mean reciprocal rank (``mrr``: every query's rank counts, not only the top 10)."""

    losses: list[float]
    recall: dict[int, float]
    skipped_steps: int
    seconds: float
    state: dict[str, torch.Tensor]
    mrr: float = float("nan")

    @property
    def final_loss(self) -> float:
        """Mean loss of the last 10 steps (fewer if the run was shorter; NaN for no step)."""
        last = self.losses[-10:]
        return float(sum(last) / len(last)) if last else float("nan")


def heldout_run(
    data: PairData,
    config: TrainConfig,
    *,
    steps: int,
    batch: int,
    seed: int = 0,
    dim: int = 128,
    loss: Callable | None = None,
    encoder: Callable[[int, int], torch.nn.Module] | None = None,
    optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer] | None = None,
) -> HeldoutRun:
    """Train the bag-of-embeddings encoder (``dim`` wide, seeded with ``seed``; or
    ``encoder(vocab_size, dim)``, built right after the seed) on ``data``'s
    training pairs for ``steps`` steps of ``batch`` pairs through the composed trainer with
    ``config`` (and a per-example ``loss`` where the config accumulates; ``steps=0``: the
    untrained encoder, the level that training must rise above), then score recall@1
    and @10 on the held-out pairs (chance: k / number of held-out pairs). The quality runs of
    §20.2.1 (batch strategies), §20.2.2 (precisions) and §20.3.2 (optimizers) are this run with
    one option changed. ``optimizer(model)``, if given, builds the optimizer instead of the
    config's (a deliberately harmful variant, for a positive control).

    Recall is scored in float32 whatever precision trained the weights (weights kept in 16 bits
    are cast to float32 first): the question is what training did to the model; a model whose
    weights are not finite scores 0. (Scored under 16-bit autocast, the coarser similarities tie
    more often, and a tie with the true positive counts as a hit.)"""
    steps, batch = check_int("steps", steps, 0), check_int("batch", batch, 1)
    set_seed(check_int("seed", seed, 0))
    build = BagOfEmbeddingsEncoder if encoder is None else encoder
    model = build(data.vocab_size, check_int("dim", dim, 1))
    given = optimizer(model) if optimizer is not None else None
    trainer = Trainer(model, config, loss=loss, optimizer=given)
    start = time.perf_counter()
    results = (
        train_on_pairs(
            trainer, data.train_anchors, data.train_positives, steps=steps, batch=batch, seed=seed
        )
        if steps
        else []
    )
    seconds = time.perf_counter() - start
    model.float()  # weights trained in 16 bits (no fp32 master copy) are scored in float32 too
    # A NaN similarity beats no candidate, so recall_at_k would count every anchor of a model
    # whose weights are not finite as a hit: such a model retrieves nothing.
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    recall = recall_at_k(model, data.test_anchors, data.test_positives) if finite else None
    return HeldoutRun(
        [r.loss for r in results],
        recall or {1: 0.0, 10: 0.0},
        trainer.skipped_steps,
        seconds,
        {k: v.detach().clone() for k, v in model.state_dict().items()},
        _heldout_mrr(model, data) if finite else 0.0,
    )


def _heldout_mrr(model: torch.nn.Module, data: PairData) -> float:
    """Mean reciprocal rank of each held-out anchor's own positive among all held-out
    positives (cosine similarity, float32; ``capstone.metrics.retrieval_metrics``)."""
    from chapter20.capstone.metrics import retrieval_metrics

    with torch.no_grad():
        scores = retrieval_scores(model, data.test_anchors, data.test_positives)
    return retrieval_metrics(scores.numpy())["mrr"]


#: The name of the untrained encoder's rows in a quality comparison (``heldout_run(steps=0)``).
UNTRAINED = "untrained"


def gain_over_untrained(frame, *, by: str, column: str):
    """For each group of ``by`` but :data:`UNTRAINED`, its weakest ``column`` over the seeds as a
    multiple of the untrained encoder's of the same seed: how much training added. Random
    embeddings already retrieve a next sentence that shares words with its anchor, so "above
    chance" alone does not show that a run learned."""
    base = frame[frame[by] == UNTRAINED].set_index("seed")[column]
    trained = frame[frame[by] != UNTRAINED]
    ratio = trained[column].values / base.loc[trained["seed"]].values
    return trained.assign(gain=ratio).groupby(by, sort=False)["gain"].min()


def timing_columns(timing: Timing) -> dict[str, float]:
    """A :class:`~chapter20.core.measure.Timing` as table columns: ``seconds`` (the median, the
    figure to read), ``seconds_min`` and ``seconds_max`` (its repeats' spread)."""
    return {"seconds": timing.median, "seconds_min": timing.min, "seconds_max": timing.max}


def min_max_ms(frame: pd.DataFrame, decimals: int = 1) -> list[str]:
    """The repeats' spread of each row with :func:`timing_columns`' fields, as "low–high" in ms
    with ``decimals`` places: the column a timing table prints next to its median."""
    return [
        f"{low * 1e3:.{decimals}f}–{high * 1e3:.{decimals}f}"
        for low, high in zip(frame["seconds_min"], frame["seconds_max"])
    ]


def compare_times(name: str, row, reference_name: str, reference) -> str:
    """The reading of two timed variants (rows with :func:`timing_columns`' fields), printed by
    ``chapter20.core.findings.compare`` from the medians in ms: "indistinguishable" when they
    differ by no more than the wider of the two repeats' min–max ranges, else how many times
    faster or slower. So the sentence follows the run, whichever way it went."""
    spread = max(row.seconds_max - row.seconds_min, reference.seconds_max - reference.seconds_min)
    return compare(
        name, row.seconds * 1e3, reference_name, reference.seconds * 1e3,
        quantity="time", unit="ms", spread=spread * 1e3,
    )  # fmt: skip


#: Seconds a local gloo group of a lab may take: generous, because a machine shared with other
#: jobs starts processes slowly (on an idle 2-core machine each group takes a few seconds).
LOCAL_GROUP_TIMEOUT_S = 600.0


#: The columns :func:`write_study` adds to every row: when, where and how a study ran.
PROVENANCE = ("measured_on", "machine", "torch_threads", "load_average", "command")


def study_output(out: str = "") -> str:
    """Where a bench writes its study: ``out``, else ``$CHAPTER20_STUDY_OUT``, else nowhere
    (``""``: print only)."""
    return out or os.environ.get("CHAPTER20_STUDY_OUT", "")


def write_study(frame: pd.DataFrame, path: str, command: str) -> str:
    """Write a study's rows to ``path`` (CSV) with the :data:`PROVENANCE` columns: the date,
    the machine (CPU count and model, or the GPU), torch's threads, the load average at the end
    and the ``command`` that reproduces it. Returns the path."""
    if not isinstance(frame, pd.DataFrame) or frame.empty:
        raise ValueError("frame must be a non-empty DataFrame")
    device = (
        torch.cuda.get_device_name() if torch.cuda.is_available()
        else f"{os.cpu_count()}-core {platform.machine()} CPU"
    )  # fmt: skip
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    stamped = frame.assign(
        measured_on=datetime.date.today().isoformat(), machine=device,
        torch_threads=torch.get_num_threads(), load_average=round(load, 1), command=command,
    )  # fmt: skip
    stamped.to_csv(path, index=False)
    return path


def read_study(name: str) -> pd.DataFrame:
    """A committed study, ``data/<name>`` (written by :func:`write_study`)."""
    frame = pd.read_csv(data_file(name))
    missing = [c for c in PROVENANCE if c not in frame.columns]
    if missing:
        raise ValueError(f"data/{name} lacks the provenance columns {missing}")
    return frame


def run_or_record(frame: pd.DataFrame, own_run: bool, name: str) -> tuple[pd.DataFrame, str]:
    """The rows a study is judged on and where they come from: ``frame`` when this run trained
    the whole study (``own_run``), else the committed record ``data/<name>``
    (:func:`read_study`), with a line that says which."""
    if own_run:
        return frame, "this run"
    record = read_study(name)
    return record, f"the committed record, {provenance_line(record)}"


def provenance_line(frame: pd.DataFrame) -> str:
    """Where a committed study comes from, as one line: the dates, machines and loads of its
    rows and the command that reproduces it."""
    dates = sorted(set(frame["measured_on"].astype(str)))
    machines = sorted(set(frame["machine"].astype(str)))
    loads = frame["load_average"]
    return (
        f"measured {' to '.join(dict.fromkeys([dates[0], dates[-1]]))} on {', '.join(machines)} "
        f"(load average {loads.min():g}–{loads.max():g}, {frame['torch_threads'].iloc[0]} torch "
        f"threads) by: {'; '.join(dict.fromkeys(frame['command'].astype(str)))}"
    )


def quartiles_ms(seconds: Sequence[float]) -> dict[str, float]:
    """The median and the interquartile range (25th–75th percentile) of repeated timings, in
    milliseconds: ``{"ms", "q25_ms", "q75_ms", "iqr_ms"}``. The median is the figure a table
    reports; the IQR is its spread, and the threshold under which two medians are reported as
    indistinguishable (``chapter20.core.findings.compare(spread=...)``)."""
    values = 1e3 * np.asarray(list(seconds), dtype=float)
    if values.size == 0:
        raise ValueError("seconds must hold at least one timing")
    q25, median, q75 = np.percentile(values, [25, 50, 75])
    return {"ms": float(median), "q25_ms": float(q25), "q75_ms": float(q75),
            "iqr_ms": float(q75 - q25)}  # fmt: skip
