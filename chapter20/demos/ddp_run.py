"""§20.4 The DDP demo: the shared contrastive embedding model trained on real text, on any number
of processes, CPUs or GPUs, one node or several.

    torchrun chapter20/scripts/ddp_demo.py                       # one process
    torchrun --nproc_per_node=2 chapter20/scripts/ddp_demo.py    # two processes, one node
    torchrun --nproc_per_node=2 -m chapter20.demos.ddp_run       # the same, as a module
    # two nodes (here both on localhost; on a cluster use node 0's address):
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=1 \\
        --master_addr=127.0.0.1 --master_port=29511 chapter20/scripts/ddp_demo.py
    torchrun --nnodes=2 --node_rank=1 --nproc_per_node=1 \\
        --master_addr=127.0.0.1 --master_port=29511 chapter20/scripts/ddp_demo.py

The run is a preset of the shared contrastive model's run
(``chapter20.training.pair_training.PairRunConfig``), trained by the one run driver
(``chapter20.training.driver``): the bag-of-embeddings encoder (listing L2's model) with InfoNCE
whose negatives are the keys of every rank, under DistributedDataParallel (gloo on CPU, nccl on
CUDA), through the composed step. The global batch is dealt to the ranks as a
``DistributedSampler`` deals it (``ResumableBatchSampler(deal="round_robin")``, which also
resumes), so the run equals one process with the same global batch and seed. The options are
the fields of :class:`DemoConfig` and of its ``TrainConfig`` and ``LoopConfig`` (``--help``
lists them): ``--batch`` is global, the rate ``--lr`` at ``--base-batch`` is scaled linearly with
``--warmup-steps``, ``--chunk-size`` splits each rank's batch by gradient caching (the full
batch's negatives; plain accumulation would not keep them), ``--precision bf16`` autocasts,
``--gradient-compression fp16`` compresses the gradient all-reduce, ``--output-dir`` keeps
checkpoints and the summary. Rank 0 shows a progress bar and prints a summary: the final loss
next to ln(batch), the loss of a uniform guess over the batch's candidates, and held-out
recall@1/@10 next to chance (k / held-out pairs).

The defaults learn within seconds on two CPU cores: AdamW at 1e-2 for 256 pairs (a bag of
embeddings tolerates a high rate; at 1e-3 forty steps barely leave the uniform guess),
temperature 0.1, 60 steps (about 1.5 epochs of the 9,953 training pairs).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from chapter20.core.checks import check_int
from chapter20.core.corpora import pair_data
from chapter20.core.options import add_options, option, parse_config, preset_option
from chapter20.techniques.contrastive import recall_at_k
from chapter20.training.config import TrainConfig
from chapter20.training.driver import Batches, FinishedRun, run_on_this_rank, run_training
from chapter20.training.pair_training import PairRunConfig
from chapter20.training.run_config import RunConfig
from chapter20.training.sampler import ResumableBatchSampler
from chapter20.training.trainer import Trainer

__all__ = ["DEMO_TRAINING", "PROG", "DemoConfig", "main", "parse_args", "report_line",
           "run_ddp_demo"]  # fmt: skip

#: The name in usage and error lines (``python -m`` or torchrun would show another).
PROG = "ddp_demo.py"

#: The demo's composed step: AdamW at 1e-2 for 256 pairs (scaled linearly to the run's batch),
#: 10 warm-up steps, InfoNCE at 0.1.
DEMO_TRAINING = TrainConfig(
    lr=1e-2, base_batch=256, weight_decay=0.0, warmup_steps=10, temperature=0.1
)


@dataclass(frozen=True)
class DemoConfig(PairRunConfig):
    """The DDP demo (§20.4): a preset of
    :class:`~chapter20.training.pair_training.PairRunConfig` — 60 steps of 256 pairs (global,
    split evenly over the ranks) of the 10,000-row, 128-wide encoder, the step of
    :data:`DEMO_TRAINING`, a progress bar; ``report`` prints rank 0's summary line."""

    steps: int = preset_option(RunConfig, "steps", 60)
    batch: int = preset_option(RunConfig, "batch", 256)
    progress: bool = preset_option(RunConfig, "progress", True)
    training: TrainConfig = preset_option(
        RunConfig, "training", default_factory=lambda: DEMO_TRAINING
    )
    report: bool = option(True, "print the summary line on rank 0")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("steps", self.steps, 1)
        if not isinstance(self.report, bool):
            raise TypeError(f"report must be True or False, got {self.report!r}")


def _demo_batches(config: DemoConfig, trainer: Trainer) -> Batches:
    """This rank's share of every global batch of training pairs, dealt round-robin as a
    ``DistributedSampler`` deals them."""
    data = pair_data(vocab_size=config.vocab)
    anchors, positives = data.train_anchors, data.train_positives
    sampler = ResumableBatchSampler(
        len(anchors), config.batch, seed=config.seed, deal="round_robin"
    )

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        idx = sampler.next_batch()
        device = trainer.device
        return anchors[idx].to(device, non_blocking=True), positives[idx].to(
            device, non_blocking=True
        )

    return Batches(next_batch, sampler)


def run_ddp_demo(config: DemoConfig, device: torch.device | str | None = None):
    """The training run of one rank of the DDP demo (§20.4); every rank of the current process
    group (or one process) calls it. Returns the finished run (its summary the same on every
    rank, but the seconds and rates; rank 0 writes it to the output directory, if any) or the
    :class:`~chapter20.training.loop.StoppedLaunch` of a ``--stop-after`` launch. A batch that
    does not split evenly over the ranks raises ValueError on every rank before any collective."""
    if not isinstance(config, DemoConfig):
        raise TypeError(f"config must be a DemoConfig, got {type(config).__name__}")
    return run_training(
        config,
        config.encoder,
        lambda trainer: _demo_batches(config, trainer),
        device=device,
        summarize=lambda finished: finished.summary.update(_figures(config, finished)),
    )


def _figures(config: DemoConfig, finished: FinishedRun) -> dict:
    """What the demo adds to the driver's summary: the losses against a uniform guess over the
    batch's candidates (ln batch), held-out recall against chance (the same on every rank:
    the replicas agree), the all-reduce's bytes, and a checksum of the weights."""
    trainer, losses = finished.trainer, finished.losses
    data = pair_data(vocab_size=config.vocab)
    held_out = (data.test_anchors.to(trainer.device), data.test_positives.to(trainer.device))
    recall = recall_at_k(trainer.encoder, *held_out)
    stats, heldout = trainer.communication, len(data.test_anchors)
    last = losses[-5:]
    return {
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "device": str(trainer.device),
        "epochs_started": _epochs_started(config, trainer),
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "final_loss_mean5": sum(last) / len(last),
        "uniform_guess_loss": math.log(config.batch),
        "parameter_abs_sum": sum(
            float(p.detach().double().abs().sum()) for p in trainer.encoder.parameters()
        ),
        "compression_ratio": stats.ratio if stats else None,
        # what this rank handed to gradient all-reduces per step, as counted by the DDP
        # communication hook (claim C02); the ring moves 2(W-1)/W of it over each link
        "allreduce_bytes_per_step": stats.sent_bytes / len(losses) if stats else None,
        "recall_at_1": recall[1],
        "recall_at_10": recall[10],
        "heldout_pairs": heldout,
        "chance_at_1": 1 / heldout,
        "chance_at_10": min(1.0, 10 / heldout),
    }


def _epochs_started(config: DemoConfig, trainer: Trainer) -> int:
    """The epochs the run has started (the first counts): its steps over the batches per
    epoch, rounded up."""
    per_epoch = len(pair_data(vocab_size=config.vocab).train_anchors) // config.batch
    return math.ceil(trainer.steps / per_epoch)


def report_line(config: DemoConfig, summary: dict) -> str:
    """Rank 0's summary: loss against the uniform guess, recall against chance, throughput."""
    compression = (
        f", all-reduce bytes x{summary['compression_ratio']:.2f} "
        f"({config.training.gradient_compression})"
        if summary["compression_ratio"] is not None
        else ""
    )
    return (
        f"done: {config.steps} steps x {config.batch} pairs on {summary['world_size']} "
        f"process(es) [{summary['backend'] or 'no process group'}, {summary['device']}], "
        f"lr {summary['lr']:.2e}: loss {summary['first_loss']:.2f} -> "
        f"{summary['final_loss_mean5']:.2f} (mean of the last {min(5, config.steps)} steps; "
        f"a uniform guess: ln {config.batch} = {summary['uniform_guess_loss']:.2f}); held-out "
        f"recall@1 {summary['recall_at_1']:.3f}, @10 {summary['recall_at_10']:.3f} "
        f"(chance {summary['chance_at_1']:.4f}, {summary['chance_at_10']:.4f}; "
        f"{summary['heldout_pairs']:,} pairs); {summary['pairs_per_second']:,.0f} pairs/s"
        + compression
    )


def parse_args(argv: list[str] | None = None) -> DemoConfig:
    """§20.4 :class:`DemoConfig` from the command line (options derived from its fields); a
    refused value exits with status 2."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    add_options(parser, DemoConfig)
    return parse_config(parser, DemoConfig, argv)[0]


def main(argv: list[str] | None = None):
    """§20.4 The DDP demo on this process (every rank of a torchrun group runs it); returns the
    finished run (or the stopped launch). A global batch the ranks cannot share exits with
    status 2 and one line on stderr."""
    config = parse_args(argv)
    report = (lambda finished: [report_line(config, finished.summary)]) if config.report else None
    return run_on_this_rank(
        PROG, lambda device: run_ddp_demo(config, device), report or (lambda finished: [])
    )


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main(sys.argv[1:])
