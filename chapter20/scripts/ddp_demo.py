"""§20.4 DDP demo: train the shared contrastive embedding model on real text, on any number of
processes, CPUs or GPUs, one node or several.

    torchrun chapter20/scripts/ddp_demo.py                       # one process
    torchrun --nproc_per_node=2 chapter20/scripts/ddp_demo.py    # two processes, one node
    # two nodes (here both on localhost; on a cluster use node 0's address):
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=1 \\
        --master_addr=127.0.0.1 --master_port=29511 chapter20/scripts/ddp_demo.py
    torchrun --nnodes=2 --node_rank=1 --nproc_per_node=1 \\
        --master_addr=127.0.0.1 --master_port=29511 chapter20/scripts/ddp_demo.py

The bag-of-embeddings encoder (listing L2's model) is trained with InfoNCE whose negatives are
the keys of every rank, under DistributedDataParallel (gloo on CPU, nccl on CUDA). The global
batch is split over the ranks by a DistributedSampler, so the run equals one process with the
same global batch and seed. ``--batch-size`` is global; the learning rate is scaled linearly
from ``--lr`` at ``--base-batch`` with a warm-up. ``--accumulation k`` splits each rank's batch
in k chunks by gradient caching (the full batch's negatives; plain accumulation would not keep
them). Rank 0 shows a progress bar and prints a summary; ``--summary-json`` writes it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

from chapter20.core.corpora import pair_data
from chapter20.core.device import set_seed
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.techniques.distributed import (
    compress_gradients,
    distributed,
    distributed_loader,
    main_print,
    scale_lr,
    set_epoch,
)
from chapter20.training.checkpoints import CheckpointManager
from chapter20.training.trainer import TrainConfig, Trainer


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=_positive_int, default=40, help="optimizer steps")
    parser.add_argument("--batch-size", type=_positive_int, default=256, help="global batch")
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate at --base-batch")
    parser.add_argument("--base-batch", type=_positive_int, default=256)
    parser.add_argument("--warmup", type=_positive_int, default=10, help="warm-up steps")
    parser.add_argument(
        "--accumulation",
        type=_positive_int,
        default=1,
        help="chunks per rank batch (gradient caching)",
    )
    parser.add_argument("--amp", action="store_true", help="bf16 autocast for the encoder")
    parser.add_argument(
        "--compress",
        choices=("none", "fp16", "bf16"),
        default="none",
        help="gradient all-reduce compression (DDP communication hook)",
    )
    parser.add_argument("--vocab", type=_positive_int, default=10_000)
    parser.add_argument("--dim", type=_positive_int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-dir", type=Path, default=None)
    parser.add_argument("--summary-json", type=Path, default=None)
    parser.add_argument("--no-progress", action="store_true")
    return parser.parse_args(argv)


def _batches(loader, epochs_seen: list[int]):
    while True:
        set_epoch(loader, epochs_seen[0])
        yield from loader
        epochs_seen[0] += 1


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    with distributed() as ctx:
        summary = train(args, ctx)
        # Every DDP object is gone before the group is: gloo threads that outlive the
        # interpreter's tensors abort the process at exit.
        gc.collect()
        if ctx.world_size > 1:
            dist.barrier()
    return summary


def train(args: argparse.Namespace, ctx) -> dict:
    """The training run of one rank; returns the summary (the same on every rank)."""
    if args.batch_size % ctx.world_size:
        raise SystemExit(
            f"--batch-size {args.batch_size} must be a multiple of the world size "
            f"{ctx.world_size}, so that every rank holds the same number of pairs"
        )
    per_rank = args.batch_size // ctx.world_size
    if per_rank % args.accumulation:
        raise SystemExit(f"the per-rank batch {per_rank} must divide by --accumulation")
    data = pair_data(vocab_size=args.vocab)
    dataset = torch.utils.data.TensorDataset(data.train_anchors, data.train_positives)
    loader = distributed_loader(dataset, per_rank, seed=args.seed)
    set_seed(args.seed)
    model = BagOfEmbeddingsEncoder(args.vocab, args.dim).to(ctx.device)
    lr = scale_lr(args.lr, args.base_batch, args.batch_size)
    config = TrainConfig(
        lr=lr,
        weight_decay=0.0,
        warmup_steps=args.warmup,
        temperature=0.05,
        chunk_size=per_rank // args.accumulation if args.accumulation > 1 else None,
        precision="bf16" if args.amp else "fp32",
    )
    trainer = Trainer(model, config)
    stats = None
    if ctx.world_size > 1:
        stats = compress_gradients(trainer.model, args.compress)
    epochs = [0]
    batches = _batches(loader, epochs)
    progress = tqdm(
        total=args.steps,
        disable=not ctx.is_main or args.no_progress,
        desc=f"DDP x{ctx.world_size} ({ctx.backend or 'one process'})",
    )
    losses, start = [], time.perf_counter()
    for _ in range(args.steps):
        batch = tuple(t.to(ctx.device, non_blocking=True) for t in next(batches))
        losses.append(trainer.step(batch).loss)  # the loss of the global batch, on every rank
        progress.update()
        progress.set_postfix(loss=f"{losses[-1]:.3f}")
    progress.close()
    seconds = time.perf_counter() - start
    if args.checkpoint_dir is not None:  # the whole state, written by rank 0, atomically
        CheckpointManager(args.checkpoint_dir, keep_last=1).save(trainer.capture_state())
    checksum = torch.tensor(
        [sum(float(p.detach().double().abs().sum()) for p in model.parameters())]
    )
    summary = {
        "world_size": ctx.world_size,
        "backend": ctx.backend,
        "device": str(ctx.device),
        "steps": args.steps,
        "global_batch": args.batch_size,
        "lr": lr,
        "epochs_started": epochs[0] + 1,
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "pairs_per_second": args.steps * args.batch_size / seconds,
        "seconds": seconds,
        "parameter_abs_sum": float(checksum),
        "compression_ratio": stats.ratio if stats else None,
        # what this rank handed to gradient all-reduces per step, as counted by the DDP
        # communication hook (claim C02); the ring moves 2(W-1)/W of it over each link
        "allreduce_bytes_per_step": stats.sent_bytes / args.steps if stats else None,
    }
    main_print(
        f"done: {args.steps} steps x {args.batch_size} pairs on {ctx.world_size} process(es) "
        f"[{ctx.backend or 'no process group'}, {ctx.device}]: loss {losses[0]:.3f} -> "
        f"{losses[-1]:.3f}, {summary['pairs_per_second']:,.0f} pairs/s, lr {lr:.2e}"
        + (f", all-reduce bytes x{stats.ratio:.2f} ({args.compress})" if stats else "")
    )
    if ctx.is_main and args.summary_json is not None:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main(sys.argv[1:])
