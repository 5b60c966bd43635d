"""``chapter20 train`` and ``scripts/train.py``: the capstone run's command line (§20.6).

Every option is a field of :class:`~chapter20.capstone.config.RunConfig`, of its
``TrainConfig`` or of its ``LoopConfig``, derived by ``chapter20.core.options``; the one option
that is not (``--baselines``) scores the Lee baselines after training.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

import torch.distributed as dist

from chapter20.capstone.config import RunConfig
from chapter20.capstone.report import summary_lines
from chapter20.capstone.run import run_capstone
from chapter20.core.device import scaled
from chapter20.core.options import add_options, parse_config
from chapter20.techniques.distributed import distributed

__all__ = ["DESCRIPTION", "default_config", "main", "parse_args"]

DESCRIPTION = "§20.6 The chapter in one run: train the capstone text encoder with every technique."


def default_config() -> RunConfig:
    """The defaults of the command line: ``runs/capstone``, 600 steps × ``$CHAPTER20_SCALE``."""
    return RunConfig(output_dir="runs/capstone", steps=scaled(600))


def parse_args(argv: list[str] | None = None) -> tuple[RunConfig, argparse.Namespace]:
    """The run's configuration from ``argv``, and the namespace (for ``--baselines``)."""
    parser = argparse.ArgumentParser(prog="chapter20 train", description=DESCRIPTION)
    add_options(parser, RunConfig, default_config())
    parser.add_argument(
        "--baselines",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="score TF-IDF, LSI, Doc2Vec on Lee at the end",
    )
    return parse_config(parser, RunConfig, argv)


def main(argv: list[str] | None = None) -> dict:
    """Run the capstone as ``argv`` says, on every rank of a ``torchrun`` launch (or alone);
    rank 0 prints the summary. Returns the summary."""
    config, args = parse_args(argv)
    with distributed() as ctx:
        summary = run_capstone(config, ctx.device)
        gc.collect()  # DDP objects go before the process group (gloo threads abort otherwise)
        if ctx.world_size > 1:
            dist.barrier()
    if not ctx.is_main:
        return summary
    for line in summary_lines(summary):
        print(line)
    if args.baselines:
        _print_baselines(summary, config.seed)
    sys.stdout.flush()
    return summary


def _print_baselines(summary: dict, seed: int) -> None:
    from chapter20.capstone.evaluation import baseline_scores

    scores = baseline_scores((seed,))
    print("Lee baselines (fitted on lee_background, this run):")
    for _, row in scores.iterrows():
        print(f"  {row['method']:<28} Pearson {row['pearson']:.3f}  "
              f"Spearman {row['spearman']:.3f}")  # fmt: skip
    summary["baselines"] = scores.to_dict("records")
    path = Path(summary["summary_file"])
    path.write_text(json.dumps(summary, indent=1, default=str))
