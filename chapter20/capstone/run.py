"""§20.6 The chapter in one run: the capstone encoder trained with every technique switched on.

:class:`~chapter20.capstone.run_config.RunConfig` holds the run: the encoder of
``chapter20.capstone.recipe`` (the weighted bag of embeddings with the recipe's training signal,
or the Transformer), the composed step's ``TrainConfig`` (precision, gradient caching,
cross-rank negatives, activation checkpointing, a sharded table, optimizer kind with 32-bit table
state) with linear LR scaling, and the resumable loop's ``LoopConfig`` (checkpoints, chaos kills,
preemption notices).

- Before training, ``chapter20.capstone.report`` predicts the step's memory and the time and
  cost of the chapter's workload at its stated size, on demand and on spot.
- :func:`run_capstone` trains through ``chapter20.training.trainer.Trainer`` inside
  :func:`~chapter20.training.loop.resumable_loop` under ``deterministic_mode`` (a killed and
  resumed run ends bitwise equal to a clean one), with a progress bar on rank 0 and periodic
  held-out evaluation; afterwards it measures one step's peak memory next to the plan, saves
  the encoder (``chapter20.training.load_encoder`` reads it), scores the classic baselines if
  asked, writes ``summary.json`` once, and returns a :class:`FinishedRun` — or, when the loop's
  ``stop_after`` ended the launch first, a :class:`~chapter20.training.loop.StoppedLaunch`.

``chapter20.cli.train`` is its command line (``chapter20/scripts/train.py``, ``chapter20 train``).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from chapter20.capstone.evaluation import heldout_sentence_pairs
from chapter20.capstone.recipe import EncoderSetup, build_encoder, evaluate_encoder
from chapter20.capstone.report import (
    baseline_lines,
    cost_projection,
    memory_plan,
    plan_lines,
    summary_lines,
)
from chapter20.capstone.run_config import RunConfig
from chapter20.core.device import deterministic_mode
from chapter20.techniques.distributed import group_rank_and_size
from chapter20.training.encoder_file import save_encoder
from chapter20.training.loop import StoppedLaunch, resumable_loop
from chapter20.training.state import parameter_fingerprint
from chapter20.training.trainer import Trainer, step_peak_memory

__all__ = ["ENCODER_FILE", "SUMMARY_FILE", "FinishedRun", "run_capstone"]

ENCODER_FILE = "encoder.pt"
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class FinishedRun:
    """A capstone launch that reached ``config.steps`` (§20.6), as :func:`run_capstone` returns
    it (a launch that ``stop_after`` ended first is a
    :class:`~chapter20.training.loop.StoppedLaunch` instead).

    ``summary`` is the JSON-ready record of the run, the same on every rank: the parameter
    ``fingerprint`` (equal to an uninterrupted run's with the same arguments and process count),
    ``steps``, ``resumed_from``, the plan and the measured peak, throughput, the evaluations,
    the cost projection, the configuration; on rank 0 also ``encoder_file`` and, when scored,
    ``baselines``. Rank 0 wrote exactly this record to ``summary_file`` once (None on the other
    ranks)."""

    summary: dict[str, Any]
    summary_file: str | None

    def lines(self) -> list[str]:
        """What ``chapter20 train`` prints after the run (rank 0): the summary
        (``chapter20.capstone.report.summary_lines``) and the baselines beside the encoder."""
        return summary_lines(self.summary, self.summary_file) + baseline_lines(self.summary)


class _Progress:
    """Rank 0's progress bar (tqdm: loss, pairs/s), throughput bookkeeping, and the periodic
    held-out evaluation, for :func:`resumable_loop`'s ``after_step``."""

    def __init__(self, config: RunConfig, setup: EncoderSetup, trainer: Trainer, evaluate):
        self.config, self.setup, self.trainer, self.evaluate = config, setup, trainer, evaluate
        self.rank = trainer.rank
        self.evaluations: list[dict] = []
        self.start: dict | None = None
        self.bar = None
        self.last = time.perf_counter()
        self.train_seconds = 0.0
        self.steps_here = 0

    def restore(self, extra: dict) -> None:
        self.evaluations = json.loads(extra.get("evaluations", "[]"))

    def state(self) -> dict:
        return {"evaluations": json.dumps(self.evaluations)}

    def __call__(self, step: int, result) -> None:
        now = time.perf_counter()
        self.train_seconds += now - self.last
        self.steps_here += 1
        if self.rank == 0 and self.config.progress:
            if self.bar is None:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=self.config.steps,
                    initial=step - 1,
                    desc="train",
                    file=sys.stderr,
                    dynamic_ncols=True,
                )
            rate = self.config.batch * self.steps_here / max(self.train_seconds, 1e-9)
            self.bar.set_postfix(loss=f"{result.loss:.3f}", pairs_s=f"{rate:,.0f}", refresh=False)
            self.bar.update(1)
        every = self.config.eval_every
        if (every and step % every == 0) or step == self.config.steps:
            record = self.evaluate()
            if record is not None:
                self.evaluations.append({"step": step, "loss": result.loss, **record})
                if self.bar is not None:
                    self.bar.write(_evaluation_line(self.evaluations[-1]))
        self.last = time.perf_counter()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _evaluation_line(record: dict) -> str:
    return (
        f"step {record['step']}: loss {record['loss']:.3f}, Lee Pearson "
        f"{record['lee_pearson']:.3f}, held-out recall@1 {record['recall@1']:.3f} "
        f"(chance {record['chance@1']:.4f}), MRR {record['mrr']:.3f}, validation MRR "
        f"{record['val_mrr']:.3f}"
    )


def run_capstone(
    config: RunConfig, device: torch.device | str | None = None, *, log=print,
    baselines: bool = False,
) -> FinishedRun | StoppedLaunch:  # fmt: skip
    """Train the capstone encoder of ``config`` from the newest checkpoint in its output
    directory to ``config.steps`` (§20.6); every rank of the current process group calls it.

    Prints (rank 0, through ``log``) the memory plan and the cost projection, trains through
    ``Trainer`` inside ``resumable_loop`` (progress bar, evaluation every ``eval_every``
    steps, checkpoints; SIGTERM saves and exits with 143), then measures one step's peak
    memory next to the plan (one process) and saves the encoder file; rank 0 scores the
    classic baselines when ``baselines`` (``chapter20.capstone.baselines.baseline_table``) and
    then writes ``summary.json``, once. Returns the :class:`FinishedRun`, or the
    :class:`~chapter20.training.loop.StoppedLaunch` when ``config.loop.stop_after`` ended this
    launch (nothing more is measured or written then)."""
    if not isinstance(config, RunConfig):
        raise TypeError(f"config must be a RunConfig, got {type(config).__name__}")
    if not isinstance(baselines, bool):
        raise TypeError(f"baselines must be True or False, got {baselines!r}")
    rank, world = group_rank_and_size()
    if config.batch % world:
        raise ValueError(f"batch ({config.batch}) must be divisible by the {world} ranks")
    device = torch.device(device or "cpu")
    log = log if rank == 0 else (lambda *_: None)
    with deterministic_mode(enabled=config.loop.deterministic):  # the LSA start too: every
        setup = build_encoder(config.recipe())  # launch of a run must start from the same bits
    trainer = Trainer(setup.model.to(device), config.train_config())  # shards the table
    memory, projection = memory_plan(config, setup.model, world), cost_projection()
    for line in plan_lines(memory, projection, config.plan_gpu_gb):
        log(line)
    log(
        f"training: {len(setup.documents):,} documents, vocabulary "
        f"{setup.tokenizer.vocab_size:,}, {config.model} dim {config.dim}, {config.steps} steps "
        f"of {config.batch} documents on {world} process(es), lr {config.scaled_lr:.2e} "
        f"(warm-up {config.training.warmup_steps}), {trainer.precision}"
    )
    run, progress, wall = _train(config, setup, trainer, device)
    if run.stopped:
        return StoppedLaunch.from_loop(run, config.checkpoint_dir)
    summary = _summary(config, trainer, run, progress, wall, memory, projection)
    plain = trainer.plain_model()  # a collective when the table is sharded
    if world == 1:  # after the fingerprint and the copy: it steps the trainer twice more
        summary["measured_peak_bytes"] = _measured_step_peak(trainer, setup, config.batch)
    if rank != 0:
        return FinishedRun(summary, None)
    _save_encoder(config, setup, plain, summary)
    if baselines:
        summary["baselines"] = _baselines(config.seed)
    path = Path(config.output_dir) / SUMMARY_FILE
    path.write_text(json.dumps(summary, indent=1, default=str))
    return FinishedRun(summary, str(path))


def _train(config: RunConfig, setup: EncoderSetup, trainer: Trainer, device: torch.device):
    """The resumable loop of the run, with its progress bar and periodic evaluation: the loop's
    result, the progress record and the wall seconds of this launch."""
    rank, world = trainer.rank, trainer.world_size
    sampler = setup.sampler(config.batch, rank=rank, world_size=world)
    retrieval = heldout_sentence_pairs(config.eval_pairs)
    validation = heldout_sentence_pairs(config.eval_pairs, split="validation")

    def evaluate() -> dict | None:
        # a sharded table answers only when every rank runs the forward pass with it
        if rank != 0 and not (config.training.sharded_table and world > 1):
            return None
        encode = setup.text_encoder(trainer.encoder, device).encode
        scores = evaluate_encoder(encode, retrieval, validation)
        return scores if rank == 0 else None

    def next_batch():
        anchors, positives = sampler.next_batch()
        return anchors.to(device), positives.to(device)

    progress = _Progress(config, setup, trainer, evaluate)
    progress.start = evaluate()  # the untrained start (the same in every launch: seeded build)
    start = progress.last = time.perf_counter()
    try:
        run = resumable_loop(
            trainer, sampler, next_batch, config.loop, steps=config.steps,
            directory=config.checkpoint_dir, after_step=progress,
            extra_state=progress.state, on_restore=progress.restore,
        )  # fmt: skip
    finally:
        progress.close()
    return run, progress, time.perf_counter() - start


def _summary(config, trainer, run, progress, wall, memory, projection) -> dict[str, Any]:
    """The JSON-ready record of a finished launch."""
    train_seconds = max(progress.train_seconds, 1e-9)
    return {
        "fingerprint": parameter_fingerprint(trainer.module),
        "resumed_from": run.resumed_from,
        "steps": run.steps,
        "world_size": trainer.world_size,
        "precision": trainer.precision,
        "lr": config.scaled_lr,
        "train_seconds_this_launch": progress.train_seconds,
        "wall_seconds_this_launch": wall,
        "pairs_per_second": config.batch * progress.steps_here / train_seconds
        if progress.steps_here
        else None,
        "checkpoint_seconds": run.save_seconds,
        "planned_peak_bytes": memory.peak_bytes,
        "planned_components": memory.components,
        "plan_fits": memory.fits,
        "plan_gpu_gb": config.plan_gpu_gb,
        "measured_peak_bytes": None,
        "projection": projection,
        "start": progress.start,
        "evaluations": progress.evaluations,
        "final": progress.evaluations[-1] if progress.evaluations else None,
        "config": asdict(config),
    }


def _save_encoder(config: RunConfig, setup: EncoderSetup, plain: nn.Module, summary: dict):
    """Write the encoder file into the output directory (rank 0) and name it in ``summary``."""
    metadata = {
        "recipe": asdict(setup.recipe),
        "fingerprint": summary["fingerprint"],
        "steps": summary["steps"],
    }
    path = save_encoder(
        Path(config.output_dir) / ENCODER_FILE, plain, setup.tokenizer, setup.model_kwargs,
        metadata,
    )  # fmt: skip
    summary["encoder_file"] = str(path)


def _baselines(seed: int) -> list[dict[str, Any]]:
    """TF-IDF, LSI, Doc2Vec and BM25 scored now (``baseline_table``: fitted on the encoder's
    training text and on lee_background, on Lee and the same held-out pairs), as JSON records."""
    from chapter20.capstone.baselines import baseline_table  # gensim: only when asked

    frame = baseline_table(seeds=(seed,))
    return frame.drop(columns="settings").assign(settings=frame["settings"]).to_dict("records")


def _measured_step_peak(trainer: Trainer, setup: EncoderSetup, batch: int) -> int:
    """Peak bytes of one step of the run's own ``trainer`` on the first batch of ``batch``
    documents, by ``chapter20.training.trainer.step_peak_memory`` (one process, §20.3). It takes
    two more steps, so it comes after the fingerprint and the plain model were taken."""
    anchors, positives = setup.sampler(batch).batch_at(0)
    first = (anchors.to(trainer.device), positives.to(trainer.device))
    return int(step_peak_memory(trainer, first, device=trainer.device).peak_bytes)
