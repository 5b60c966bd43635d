"""§20.6 The chapter in one run: the capstone encoder trained with every technique switched on.

:class:`~chapter20.capstone.capstone_config.CapstoneConfig`, a preset of the one run
specification, holds the run: the encoder of ``chapter20.capstone.recipe`` (the weighted bag of
embeddings with the recipe's training signal, or the Transformer), the composed step's
``TrainConfig`` (precision, gradient caching, cross-rank negatives, activation checkpointing, a
sharded table, optimizer kind with 32-bit table state, the rate scaled to the batch) and the
resumable loop's ``LoopConfig`` (checkpoints, chaos kills, preemption notices).
:func:`run_capstone` hands its factories and hooks to the one run driver
(``chapter20.training.driver``), which trains under ``deterministic_mode`` (a killed and resumed
run ends bitwise equal to a clean one) with a progress bar on rank 0 and periodic held-out
evaluation. Before training ``chapter20.capstone.report`` predicts the step's memory and the time
and cost of the chapter's workload at its stated size, on demand and on spot; afterwards this
module measures one step's peak memory next to the plan, saves the encoder
(``chapter20.training.load_encoder`` reads it) and scores the classic baselines if asked, all in
the ``summary.json`` the driver writes once.

:func:`main` is its command line (``chapter20 train``, ``chapter20/scripts/train.py``): every
option is a field of ``CapstoneConfig``, of its ``TrainConfig`` or of its ``LoopConfig``; the one
option that is not (``--baselines``) scores the classic baselines after training, fitted on the
same text as the encoder and on ``lee_background``, on Lee and on the same held-out pairs.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from chapter20.capstone.capstone_config import CapstoneConfig
from chapter20.capstone.evaluation import heldout_sentence_pairs
from chapter20.capstone.recipe import EncoderSetup, build_encoder, evaluate_encoder
from chapter20.capstone.report import (
    baseline_lines,
    cost_projection,
    memory_plan,
    plan_lines,
    summary_lines,
)
from chapter20.capstone.scaling import SCALING_STEPS
from chapter20.core.device import scaled
from chapter20.core.options import add_options, parse_config
from chapter20.techniques.distributed import group_rank_and_size
from chapter20.training.driver import (
    Batches,
    FinishedRun,
    RunProgress,
    run_on_this_rank,
    run_training,
)
from chapter20.training.encoder_file import save_encoder
from chapter20.training.loop import StoppedLaunch
from chapter20.training.trainer import Trainer, step_peak_memory

__all__ = [
    "DESCRIPTION",
    "ENCODER_FILE",
    "default_config",
    "finished_lines",
    "main",
    "parse_args",
    "run_capstone",
]

ENCODER_FILE = "encoder.pt"
DESCRIPTION = "§20.6 The chapter in one run: train the capstone text encoder with every technique."


def run_capstone(
    config: CapstoneConfig, device: torch.device | str | None = None, *, log=print,
    baselines: bool = False,
) -> FinishedRun | StoppedLaunch:  # fmt: skip
    """Train the capstone encoder of ``config`` from the newest checkpoint in its output
    directory to ``config.steps`` (§20.6); every rank of the current process group calls it.

    The one run driver (``chapter20.training.driver``) does the training: the composed step
    inside ``resumable_loop`` (progress bar, evaluation every ``eval_every`` steps, checkpoints;
    SIGTERM saves and exits with 143). This preset adds: before training, the memory plan and
    the cost projection (printed by rank 0 through ``log``); afterwards, one step's measured peak
    memory next to the plan (one process), the encoder file, and the classic baselines when
    ``baselines`` (``chapter20.capstone.baselines.baseline_table``, rank 0), all in the summary
    that rank 0 writes once. Returns the driver's ``FinishedRun``, or the
    :class:`~chapter20.training.loop.StoppedLaunch` when ``config.loop.stop_after`` ended this
    launch (nothing more is measured or written then)."""
    if not isinstance(config, CapstoneConfig):
        raise TypeError(f"config must be a CapstoneConfig, got {type(config).__name__}")
    if not isinstance(baselines, bool):
        raise TypeError(f"baselines must be True or False, got {baselines!r}")
    rank, world = group_rank_and_size()
    run = _CapstoneParts(config, torch.device(device or "cpu"), log if rank == 0 else None)
    return run_training(
        config, run.build, run.batches, device=run.device, announce=run.announce,
        evaluate=run.evaluate, eval_every=config.eval_every,
        summarize=lambda finished: run.summarize(finished, baselines),
    )  # fmt: skip


class _CapstoneParts:
    """The capstone's factories and hooks for the one run driver, sharing the built recipe
    (model, tokeniser, documents), the held-out pairs and the plan."""

    def __init__(self, config: CapstoneConfig, device: torch.device, log):
        self.config, self.device, self.log = config, device, log
        self.retrieval = heldout_sentence_pairs(config.eval_pairs)
        self.validation = heldout_sentence_pairs(config.eval_pairs, split="validation")
        self.setup: EncoderSetup | None = None
        self.memory = self.projection = None

    def build(self) -> torch.nn.Module:
        self.setup = build_encoder(self.config.recipe())
        return self.setup.model

    def batches(self, trainer: Trainer) -> Batches:
        sampler = self.setup.sampler(
            self.config.batch, rank=trainer.rank, world_size=trainer.world_size
        )

        def next_batch():
            anchors, positives = sampler.next_batch()
            return anchors.to(self.device), positives.to(self.device)

        return Batches(next_batch, sampler)

    def announce(self, trainer: Trainer) -> None:
        """The memory plan, the cost projection and what will train (rank 0 prints them)."""
        config, setup, world = self.config, self.setup, trainer.world_size
        self.memory, self.projection = memory_plan(config, setup.model, world), cost_projection()
        if self.log is None:
            return
        for line in plan_lines(self.memory, self.projection, config.plan_gpu_gb):
            self.log(line)
        self.log(
            f"training: {len(setup.documents):,} documents, vocabulary "
            f"{setup.tokenizer.vocab_size:,}, {config.model} dim {config.dim}, {config.steps} "
            f"steps of {config.batch} documents on {world} process(es), lr "
            f"{trainer.config.peak_lr:.2e} (warm-up {config.training.warmup_steps}), "
            f"{trainer.precision}"
        )

    def evaluate(self, trainer: Trainer, progress: RunProgress) -> dict | None:
        """Every §20.7 figure on rank 0 (with the step's loss after the start); a sharded table
        answers only when every rank runs the forward pass with it."""
        sharded = self.config.training.sharded_table and trainer.world_size > 1
        if trainer.rank != 0 and not sharded:
            return None
        encode = self.setup.text_encoder(trainer.encoder, self.device).encode
        scores = evaluate_encoder(encode, self.retrieval, self.validation)
        if trainer.rank != 0:
            return None
        return {"loss": progress.losses[-1], **scores} if progress.step else scores

    def summarize(self, finished: FinishedRun, baselines: bool) -> None:
        """The plan beside the measured peak, the encoder file and the baselines."""
        summary, trainer = finished.summary, finished.trainer
        summary.update(
            planned_peak_bytes=self.memory.peak_bytes, planned_components=self.memory.components,
            plan_fits=self.memory.fits, plan_gpu_gb=self.config.plan_gpu_gb,
            measured_peak_bytes=None, projection=self.projection,
        )  # fmt: skip
        plain = trainer.plain_model()  # a collective when the table is sharded
        if trainer.world_size == 1:  # after the fingerprint and the copy: it steps twice more
            summary["measured_peak_bytes"] = _measured_step_peak(trainer, self.setup, self.config)
        if trainer.rank != 0:
            return
        _save_encoder(self.config, self.setup, plain, summary)
        if baselines:
            summary["baselines"] = _baselines(self.config.seed)


def _save_encoder(config: CapstoneConfig, setup: EncoderSetup, plain: nn.Module, summary: dict):
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


def _measured_step_peak(trainer: Trainer, setup: EncoderSetup, config: CapstoneConfig) -> int:
    """Peak bytes of one step of the run's own ``trainer`` on the first batch of the run's
    documents, by ``chapter20.training.trainer.step_peak_memory`` (one process, §20.3). It takes
    two more steps, so it comes after the fingerprint and the plain model were taken."""
    anchors, positives = setup.sampler(config.batch).batch_at(0)
    first = (anchors.to(trainer.device), positives.to(trainer.device))
    return int(step_peak_memory(trainer, first, device=trainer.device).peak_bytes)


def finished_lines(finished: FinishedRun) -> list[str]:
    """What ``chapter20 train`` prints after the run (rank 0): the summary
    (``chapter20.capstone.report.summary_lines``) and the baselines beside the encoder."""
    return summary_lines(finished.summary, finished.summary_file) + baseline_lines(finished.summary)


def default_config() -> CapstoneConfig:
    """The defaults of the command line: ``runs/capstone``, at most 400 steps ×
    ``$CHAPTER20_SCALE``."""
    return CapstoneConfig(output_dir="runs/capstone", steps=scaled(SCALING_STEPS))


def _output_dir_ready(config: CapstoneConfig) -> None:
    """Create ``--output-dir`` before anything trains; ValueError naming the option if it
    cannot be created or written."""
    path = Path(config.output_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
        raise ValueError(f"--output-dir {path}: cannot be created: {reason}{where}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"--output-dir {path}: cannot be written")


def parse_args(argv: list[str] | None = None) -> tuple[CapstoneConfig, argparse.Namespace]:
    """The run's configuration from ``argv``, and the namespace (for ``--baselines``); the
    output directory is created here, so one that cannot be is one line and exit status 2."""
    parser = argparse.ArgumentParser(prog="chapter20 train", description=DESCRIPTION)
    add_options(parser, CapstoneConfig, default_config())
    parser.add_argument(
        "--baselines",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="score TF-IDF, LSI, Doc2Vec and BM25 at the end, fitted on the encoder's "
        "training text and on lee_background, on Lee and the same held-out pairs",
    )
    return parse_config(parser, CapstoneConfig, argv, check=_output_dir_ready)


def main(argv: list[str] | None = None) -> FinishedRun | StoppedLaunch:
    """Run the capstone as ``argv`` says, on every rank of a ``torchrun`` launch (or alone);
    rank 0 prints what happened: the finished run's summary (and baselines), or, after
    ``--stop-after``, where the launch stopped and how to resume. A value the run refuses
    (before any collective) is one line on stderr and exit status 2. Returns the result."""
    config, args = parse_args(argv)
    return run_on_this_rank(
        "chapter20 train",
        lambda device: run_capstone(config, device, baselines=args.baselines),
        finished_lines,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
