"""``chapter20 train`` and ``scripts/train.py``: the capstone run's command line (§20.6).

Every option is a field of :class:`~chapter20.capstone.run_config.RunConfig`, of its
``TrainConfig`` or of its ``LoopConfig``, derived by ``chapter20.core.options``; the one option
that is not (``--baselines``) scores the classic baselines after training, fitted on the same
text as the encoder and on ``lee_background``, on Lee and on the same held-out pairs.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path

import torch.distributed as dist

from chapter20.capstone.run import FinishedRun, run_capstone
from chapter20.capstone.run_config import RunConfig
from chapter20.core.device import scaled
from chapter20.core.options import add_options, parse_config
from chapter20.techniques.distributed import distributed
from chapter20.training.loop import StoppedLaunch

__all__ = ["DESCRIPTION", "default_config", "main", "parse_args"]

DESCRIPTION = "§20.6 The chapter in one run: train the capstone text encoder with every technique."


def default_config() -> RunConfig:
    """The defaults of the command line: ``runs/capstone``, 600 steps × ``$CHAPTER20_SCALE``."""
    return RunConfig(output_dir="runs/capstone", steps=scaled(600))


def _output_dir_ready(config: RunConfig) -> None:
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


def parse_args(argv: list[str] | None = None) -> tuple[RunConfig, argparse.Namespace]:
    """The run's configuration from ``argv``, and the namespace (for ``--baselines``); the
    output directory is created here, so one that cannot be is one line and exit status 2."""
    parser = argparse.ArgumentParser(prog="chapter20 train", description=DESCRIPTION)
    add_options(parser, RunConfig, default_config())
    parser.add_argument(
        "--baselines",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="score TF-IDF, LSI, Doc2Vec and BM25 at the end, fitted on the encoder's "
        "training text and on lee_background, on Lee and the same held-out pairs",
    )
    return parse_config(parser, RunConfig, argv, check=_output_dir_ready)


def main(argv: list[str] | None = None) -> FinishedRun | StoppedLaunch:
    """Run the capstone as ``argv`` says, on every rank of a ``torchrun`` launch (or alone);
    rank 0 prints what happened: the finished run's summary (and baselines), or, after
    ``--stop-after``, where the launch stopped and how to resume. Returns the result."""
    config, args = parse_args(argv)
    with distributed() as ctx:
        result = run_capstone(config, ctx.device, baselines=args.baselines)
        gc.collect()  # DDP objects go before the process group (gloo threads abort otherwise)
        if ctx.world_size > 1:
            dist.barrier()
    if ctx.is_main:
        for line in result.lines():
            print(line)
        sys.stdout.flush()
    return result
