"""``chapter20 train`` and ``scripts/train.py``: the capstone run's command line (§20.6).

Every option is a field of :class:`~chapter20.capstone.config.RunConfig`, of its
``TrainConfig`` or of its ``LoopConfig``, derived by ``chapter20.core.options``; the one option
that is not (``--baselines``) scores the classic baselines after training, fitted on the same
text as the encoder and on ``lee_background``, on Lee and on the same held-out pairs.
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
        help="score TF-IDF, LSI, Doc2Vec and BM25 at the end, fitted on the encoder's "
        "training text and on lee_background, on Lee and the same held-out pairs",
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
    from chapter20.capstone.baselines import baseline_table

    frame = baseline_table(seeds=(seed,))
    final = summary["final"] or {}
    print("baselines (measured now; LSI's size chosen on the validation pairs):")
    print(f"  {'method':<8} {'fitted on':<15} {'Lee r':>6} {'R@1':>6} {'R@10':>6} {'MRR':>6}")
    rows = [("encoder", "training text", final)] if final else []
    rows += [
        (r["method"] + (f"-{r['settings']['topics']}" if "topics" in r["settings"] else ""),
         r["corpus"], r)
        for r in frame.to_dict("records")
    ]  # fmt: skip
    for method, corpus, r in rows:
        lee = "—" if r["lee_pearson"] != r["lee_pearson"] else f"{r['lee_pearson']:.3f}"
        print(f"  {method:<8} {corpus:<15} {lee:>6} {r['recall@1']:>6.3f} "
              f"{r['recall@10']:>6.3f} {r['mrr']:>6.3f}")  # fmt: skip
    summary["baselines"] = (
        frame.drop(columns="settings")
        .assign(settings=frame["settings"].map(str))
        .to_dict("records")
    )
    path = Path(summary["summary_file"])
    path.write_text(json.dumps(summary, indent=1, default=str))
