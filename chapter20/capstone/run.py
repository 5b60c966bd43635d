"""§20.6 The chapter in one run: the capstone encoder trained with every technique switched on.

:class:`RunConfig` holds the run: the encoder of ``chapter20.capstone.recipe`` (the weighted bag of
embeddings with the recipe's training signal, or the Transformer), a switch for every technique
of the composed step (``chapter20.training.trainer.TrainConfig``: precision, gradient caching chunk,
cross-rank negatives, activation checkpointing, optimizer kind with 32-bit table state, a sharded
table, linear LR scaling with warm-up), and the spot loop's settings (checkpoints, chaos kills,
preemption notices: ``chapter20.training.loop.resumable_loop``).

- Before training, :func:`memory_plan` predicts the step's memory
  (``chapter20.techniques.memory_planner.plan``)
  and :func:`cost_projection` the time and cost of the chapter's workload at its stated size
  on the cheapest catalog configuration that fits, on demand and on spot (``chapter20.cost``).
- :func:`run_capstone` trains through ``chapter20.training.trainer.Trainer`` inside
  :func:`~chapter20.training.loop.resumable_loop` under ``deterministic_mode`` (a killed and resumed
  run ends bitwise equal to a clean one), with a progress bar on rank 0 and periodic held-out
  evaluation; afterwards it measures one step's peak memory next to the plan, saves the encoder
  (``chapter20.training.encoder_file.load_encoder`` reads it) and returns a JSON-ready summary.

:func:`main` is the command line (``chapter20/scripts/train.py``, ``chapter20 train``).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from chapter20.capstone.evaluation import heldout_sentence_pairs
from chapter20.capstone.recipe import (
    MODELS,
    EncoderRecipe,
    EncoderSetup,
    build_encoder,
    evaluate_encoder,
)
from chapter20.core.checks import (
    check_int,
    check_optional_int,
    check_optional_positive,
    check_positive,
)
from chapter20.core.device import deterministic_mode, scaled
from chapter20.core.measure import format_bytes
from chapter20.core.models import WeightedBagEncoder
from chapter20.cost.catalog import load_catalog, snapshot_label
from chapter20.cost.estimates import EMBEDDING_WORKLOAD, Preemption, Workload
from chapter20.cost.options import training_options
from chapter20.techniques.activation_checkpointing import POLICIES
from chapter20.techniques.distributed import distributed, group_rank_and_size, scale_lr
from chapter20.techniques.memory_planner import (
    BagShape,
    EncoderShape,
    MemoryPlan,
    parallelism_advice,
    plan,
)
from chapter20.techniques.optimizers import OPTIMIZER_KINDS
from chapter20.techniques.sharding import ShardedEmbedding
from chapter20.training.encoder_file import save_encoder
from chapter20.training.loop import LoopFields, check_loop_settings, resumable_loop
from chapter20.training.state import parameter_fingerprint
from chapter20.training.trainer import TrainConfig, Trainer, planned_step, step_peak_memory

__all__ = [
    "LR_SCALING",
    "PROJECTION_PREEMPTION",
    "RunConfig",
    "config_from_args",
    "cost_projection",
    "main",
    "memory_plan",
    "plan_lines",
    "parse_args",
    "run_capstone",
    "summary_lines",
]

#: How the learning rate follows the global batch: "none", or "linear" (§20.4.1, C14:
#: ``lr × batch / base_batch``, with the warm-up).
LR_SCALING = ("none", "linear")
#: Spot preemptions of the projection, as notebook 08 assumes them: an instance is reclaimed
#: every 8 hours on average, a checkpoint takes 60 s, a restart 300 s.
PROJECTION_PREEMPTION = Preemption(mtbf_hours=8, checkpoint_seconds=60, restart_seconds=300)
ENCODER_FILE = "encoder.pt"
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class RunConfig(LoopFields):
    """The capstone run (§20.6); every field is checked on creation.

    Model: ``model`` ("bag": the recipe's weighted bag; "transformer": 2 blocks, random start),
    ``dim``, ``seed``. Steps: ``steps`` optimizer steps of ``batch`` documents (two views each,
    global over the ranks), ``lr`` at ``base_batch`` documents, ``lr_scaling`` (of
    :data:`LR_SCALING`), ``warmup`` steps, ``temperature``. Techniques (``TrainConfig``'s):
    ``precision``, ``chunk_size`` (gradient caching), ``cross_rank_negatives``,
    ``checkpointing`` (an activation checkpointing policy), ``optimizer`` and
    ``state_32bit_tables``, ``sharded_table`` (the bag's rows split over the ranks).
    Evaluation: every ``eval_every`` steps on ``eval_pairs`` held-out pairs and Lee.
    Spot loop: ``output_dir`` (checkpoints under ``checkpoints/``, the encoder file and the
    summary next to them) and ``chapter20.training.loop.LoopFields``' settings (keyword-only;
    checkpoints every 50 steps here). ``plan_gpu_gb``: the GPU the memory plan is checked against.
    """

    output_dir: str
    model: str = "bag"
    dim: int = 256
    seed: int = 0
    steps: int = 600
    batch: int = 512
    lr: float | None = None
    base_batch: int = 512
    lr_scaling: str = "linear"
    warmup: int = 20
    temperature: float = 0.2
    precision: str = "fp32"
    chunk_size: int | None = None
    cross_rank_negatives: bool = True
    checkpointing: str = "none"
    optimizer: str = "adamw"
    state_32bit_tables: bool = True
    sharded_table: bool = False
    eval_every: int | None = 100
    eval_pairs: int = 1_000
    checkpoint_every: int | None = field(default=50, kw_only=True)  # the others: LoopFields'
    plan_gpu_gb: float = 80.0
    progress: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.output_dir, str) or not self.output_dir:
            raise TypeError(f"output_dir must be a non-empty str, got {self.output_dir!r}")
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.lr_scaling not in LR_SCALING:
            raise ValueError(f"lr_scaling must be one of {LR_SCALING}, got {self.lr_scaling!r}")
        check_loop_settings(self)
        for name in ("dim", "base_batch", "eval_pairs"):
            check_int(name, getattr(self, name), 1)
        check_int("batch", self.batch, 2)
        for name in ("seed", "warmup"):
            check_int(name, getattr(self, name), 0)
        check_optional_positive("lr", self.lr)
        check_positive("temperature", self.temperature)
        check_positive("plan_gpu_gb", self.plan_gpu_gb)
        check_optional_int("eval_every", self.eval_every, 1)
        for name in ("cross_rank_negatives", "state_32bit_tables", "sharded_table", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.sharded_table and self.model != "bag":
            raise ValueError("sharded_table shards the bag's table: use model='bag'")
        self.train_config()  # checks the techniques

    @property
    def checkpoint_dir(self) -> str:
        return str(Path(self.output_dir) / "checkpoints")

    @property
    def base_lr(self) -> float:
        """The rate at ``base_batch``: the recipe's 1e-3 for the bag, 3e-4 for the Transformer."""
        return self.lr if self.lr is not None else (1e-3 if self.model == "bag" else 3e-4)

    @property
    def scaled_lr(self) -> float:
        """The rate of this run's global batch (§20.4.1)."""
        if self.lr_scaling == "none":
            return self.base_lr
        return scale_lr(self.base_lr, self.base_batch, self.batch)

    def recipe(self) -> EncoderRecipe:
        """The training signal (``chapter20.capstone.recipe``): the final recipe for the bag; a
        random
        start without IDF weights for the Transformer."""
        if self.model == "bag":
            return EncoderRecipe(dim=self.dim, seed=self.seed)
        return EncoderRecipe(
            model="transformer", idf=False, init="random", dim=self.dim, seed=self.seed
        )

    def train_config(self) -> TrainConfig:
        """The composed step's settings of this run (one ``TrainConfig``)."""
        policy, k = self.checkpointing, None
        if policy.startswith("every_") and policy[6:].isdigit():  # "every_2" → every_k, k=2
            policy, k = "every_k", int(policy[6:])
        return TrainConfig(
            optimizer=self.optimizer,
            lr=self.scaled_lr,
            weight_decay=0.0,
            warmup_steps=self.warmup,
            precision=self.precision,
            chunk_size=self.chunk_size,
            temperature=self.temperature,
            symmetric=True,
            cross_rank_negatives=self.cross_rank_negatives,
            checkpointing=policy,
            checkpointing_k=k,
            state_32bit_tables=self.state_32bit_tables,
        )


# -- before training: the plan and the cost ----------------------------------------------------


def _shape(model: nn.Module) -> BagShape | EncoderShape:
    if isinstance(model, WeightedBagEncoder):
        return BagShape(model.vocab_size, model.embedding_dim, model.log_weight.requires_grad)
    return EncoderShape.of(model)


def memory_plan(config: RunConfig, model: nn.Module, world_size: int = 1) -> MemoryPlan:
    """``chapter20.techniques.memory_planner.plan`` of one step of this run on each of
    ``world_size`` ranks (§20.3): ``batch / world_size`` documents, views of up to ``max_span``
    tokens, checked
    against a GPU of ``config.plan_gpu_gb`` GB."""
    world_size = check_int("world_size", world_size, 1)
    if config.batch % world_size:
        raise ValueError(f"world_size ({world_size}) must divide the batch ({config.batch})")
    return planned_step(
        _shape(model),
        config.train_config(),
        batch=config.batch // world_size,
        seq_len=config.recipe().max_span,
        world_size=world_size,
        sharded_table=config.sharded_table,
        gpu_bytes=config.plan_gpu_gb * 1e9,
    )


def _workload_shape(workload: Workload) -> EncoderShape:
    return EncoderShape(
        vocab_size=workload.vocab,
        d_model=workload.d_model,
        n_heads=workload.n_heads,
        n_layers=workload.n_layers,
        d_ff=4 * workload.d_model,
        max_len=workload.seq_len,
    )


def cost_projection(
    workload: Workload = EMBEDDING_WORKLOAD,
    *,
    gpus: int = 8,
    preemption: Preemption = PROJECTION_PREEMPTION,
) -> dict[str, Any]:
    """Time and cost of ``workload`` (the chapter's stated size: a MiniLM-sized encoder on 1B
    pairs, ``chapter20.cost.estimates.EMBEDDING_WORKLOAD``) on ``gpus`` GPUs of the cheapest
    catalog configuration whose GPUs hold its planned step (§20.3, §20.5): on demand, and on spot
    at the middle of the spot range with the expected preemption overhead of ``preemption``
    (Young/Daly checkpoint interval). Throughput is the model of ``chapter20.cost.estimates``,
    calibrated on one GPU measurement. Returns the plan's peak, the two options and the snapshot
    label."""
    gpus = check_int("gpus", gpus, 1)
    if not isinstance(preemption, Preemption):
        raise TypeError(
            f"preemption must be a chapter20.cost.estimates.Preemption, got {preemption!r}"
        )
    peak = plan(
        _workload_shape(workload),
        batch=workload.pairs_per_gpu,
        seq_len=workload.seq_len,
        precision=workload.precision,
    ).peak_bytes
    catalog = load_catalog()
    memory = dict(zip(catalog["instance"], catalog["gpu_memory_gb"]))
    options = {}
    for spot in (False, True):
        frame = training_options(
            workload, (gpus,), spot=spot, preemption=preemption if spot else None
        )
        frame = frame[frame["instance"].map(memory) * 1e9 >= peak]
        if frame.empty:
            options["spot" if spot else "on_demand"] = None
            continue
        best = frame.sort_values(["cost", "hours", "instance"], kind="stable").iloc[0]
        options["spot" if spot else "on_demand"] = {
            "instance": best["instance"],
            "provider": best["provider"],
            "gpu_model": best["gpu_model"],
            "gpu_memory_gb": float(memory[best["instance"]]),
            "gpus": int(best["gpus"]),
            "hours": float(best["hours"]),
            "price_per_hour": float(best["price_per_hour"]),
            "cost": float(best["cost"]),
        }
    return {
        "workload": workload.name,
        "pairs": workload.pairs,
        "gpus": gpus,
        "planned_peak_bytes": int(peak),
        "preemption": asdict(preemption),
        "snapshot": snapshot_label(catalog),
        **options,
    }


def plan_lines(memory: MemoryPlan, projection: dict[str, Any], gpu_gb: float) -> list[str]:
    """The plan and the projection as the lines ``scripts/train.py`` prints before training."""
    gpu_gb = check_positive("gpu_gb", gpu_gb)
    lines = ["memory plan of one step (chapter20.techniques.memory_planner.plan), per rank:"]
    for name, value in memory.components.items():
        lines.append(f"  {name:<16} {format_bytes(value):>10}")
    verdict = "fits" if memory.fits else "does NOT fit"
    lines.append(
        f"  peak {format_bytes(memory.peak_bytes)} ({memory.settings['peak_phase']}): "
        f"{verdict} on a {gpu_gb:g} GB GPU"
    )
    lines += [f"  advice: {a}" for a in parallelism_advice(memory, gpu_gb * 1e9)]
    lines.append(
        f"cost projection: {projection['workload']} on {projection['gpus']} GPUs "
        f"(step planned at {format_bytes(projection['planned_peak_bytes'])} per GPU)"
    )
    for key, label in (("on_demand", "on demand"), ("spot", "spot (mid price, preemptions)")):
        option = projection[key]
        if option is None:
            lines.append(f"  {label}: no catalog configuration fits")
            continue
        lines.append(
            f"  {label}: {option['instance']} ({option['provider']}, "
            f"{option['gpu_model']} {option['gpu_memory_gb']:g} GB): "
            f"{option['hours']:,.1f} h, ${option['cost']:,.0f}"
        )
    p = projection["preemption"]
    lines.append(
        f"  spot assumes a preemption every {p['mtbf_hours']:g} h per instance, "
        f"{p['checkpoint_seconds']:g} s per checkpoint, {p['restart_seconds']:g} s "
        f"per restart; {projection['snapshot']}"
    )
    return lines


# -- the run -------------------------------------------------------------------------------------


def _shard_table(model: WeightedBagEncoder) -> None:
    """Replace the bag's table by a ``ShardedEmbedding`` holding the same rows, each rank
    looking up its own ids (``inputs="per_rank"``: row-wise sharding under DDP, §20.1)."""
    model.embedding = ShardedEmbedding.from_full_weight(
        model.embedding.weight.detach(), inputs="per_rank"
    )


def _plain_model(setup: EncoderSetup, model: nn.Module) -> nn.Module:
    """An unwrapped copy of the trained ``model`` of the kind the encoder file holds: the
    table's rows gathered from the ranks, checkpointed segments undone (parameters in the same
    order). A collective when the table is sharded: every rank calls it."""
    plain = type(model)(**setup.model_kwargs)
    source = dict(model.named_parameters())
    with torch.no_grad():
        if isinstance(model, WeightedBagEncoder):
            table = model.embedding
            full = table.full_weight() if isinstance(table, ShardedEmbedding) else table.weight
            plain.embedding.weight.copy_(full)
            plain.log_weight.copy_(model.log_weight)
        else:
            for target, (_, value) in zip(plain.parameters(), source.items(), strict=True):
                target.copy_(value)
            for target, value in zip(plain.buffers(), model.buffers(), strict=True):
                target.copy_(value)
    return plain


class _Progress:
    """Rank 0's progress bar (tqdm: loss, pairs/s), throughput bookkeeping, and the periodic
    held-out evaluation, for :func:`resumable_loop`'s ``after_step``."""

    def __init__(self, config: RunConfig, setup: EncoderSetup, trainer: Trainer, evaluate):
        self.config, self.setup, self.trainer, self.evaluate = config, setup, trainer, evaluate
        self.rank = trainer.rank
        self.evaluations: list[dict] = []
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
        f"{record['lee_pearson']:.3f}, recall@1 {record['recall@1']:.3f} "
        f"(chance {record['chance@1']:.4f})"
    )


def run_capstone(
    config: RunConfig, device: torch.device | str | None = None, *, log=print
) -> dict[str, Any]:
    """Train the capstone encoder of ``config`` from the newest checkpoint in its output
    directory to ``config.steps`` (§20.6); every rank of the current process group calls it.

    Prints (rank 0, through ``log``) the memory plan and the cost projection, trains through
    ``Trainer`` inside ``resumable_loop`` (progress bar, evaluation every ``eval_every``
    steps, checkpoints; SIGTERM saves and exits with 143), then measures one step's peak
    memory next to the plan (one process), saves the encoder file and ``summary.json``.
    Returns the summary (``stopped_at`` only when ``stop_after`` ended the launch)."""
    if not isinstance(config, RunConfig):
        raise TypeError(f"config must be a RunConfig, got {type(config).__name__}")
    rank, world = group_rank_and_size()
    if config.batch % world:
        raise ValueError(f"batch ({config.batch}) must be divisible by the {world} ranks")
    device = torch.device(device or "cpu")
    log = log if rank == 0 else (lambda *_: None)
    out = Path(config.output_dir)
    with deterministic_mode(enabled=config.deterministic):  # the LSA start too: every launch
        setup = build_encoder(config.recipe())  # of a run must start from the same bits
    model = setup.model
    if config.sharded_table:
        _shard_table(model)
    model.to(device)
    trainer = Trainer(model, config.train_config())
    sampler = setup.sampler(config.batch, rank=rank, world_size=world)
    memory = memory_plan(config, model, world)
    projection = cost_projection()
    for line in plan_lines(memory, projection, config.plan_gpu_gb):
        log(line)
    log(
        f"training: {len(setup.documents):,} documents, vocabulary "
        f"{setup.tokenizer.vocab_size:,}, {config.model} dim {config.dim}, {config.steps} steps "
        f"of {config.batch} documents on {world} process(es), lr {config.scaled_lr:.2e} "
        f"(warm-up {config.warmup}), {trainer.precision}"
    )
    retrieval = heldout_sentence_pairs(config.eval_pairs)

    def evaluate() -> dict | None:
        # a sharded table answers only when every rank runs the forward pass with it
        if rank != 0 and not (config.sharded_table and world > 1):
            return None
        scores = evaluate_encoder(setup.text_encoder(trainer.encoder, device).encode, retrieval)
        return scores if rank == 0 else None

    progress = _Progress(config, setup, trainer, evaluate)

    def next_batch():
        anchors, positives = sampler.next_batch()
        return anchors.to(device), positives.to(device)

    start = progress.last = time.perf_counter()
    try:
        run = resumable_loop(
            trainer,
            sampler,
            next_batch,
            config,
            after_step=progress,
            extra_state=progress.state,
            on_restore=progress.restore,
        )
    finally:
        progress.close()
    wall = time.perf_counter() - start
    if run.stopped:
        return {"stopped_at": run.steps, "resumed_from": run.resumed_from}
    plain = _plain_model(setup, trainer.encoder)
    summary = {
        "fingerprint": parameter_fingerprint(trainer.module),
        "resumed_from": run.resumed_from,
        "steps": run.steps,
        "world_size": world,
        "precision": trainer.precision,
        "lr": config.scaled_lr,
        "train_seconds_this_launch": progress.train_seconds,
        "wall_seconds_this_launch": wall,
        "pairs_per_second": config.batch * progress.steps_here / max(progress.train_seconds, 1e-9)
        if progress.steps_here
        else None,
        "checkpoint_seconds": run.save_seconds,
        "planned_peak_bytes": memory.peak_bytes,
        "planned_components": memory.components,
        "plan_fits": memory.fits,
        "plan_gpu_gb": config.plan_gpu_gb,
        "measured_peak_bytes": None,
        "projection": projection,
        "evaluations": progress.evaluations,
        "final": progress.evaluations[-1] if progress.evaluations else None,
        "config": asdict(config),
    }
    if world == 1:
        summary["measured_peak_bytes"] = measured_step_peak(config, setup, device)
    if rank == 0:
        path = save_encoder(
            out / ENCODER_FILE,
            plain,
            setup.tokenizer,
            setup.model_kwargs,
            {
                "recipe": asdict(setup.recipe),
                "fingerprint": summary["fingerprint"],
                "steps": run.steps,
            },
        )
        summary["encoder_file"] = str(path)
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=1, default=str))
        summary["summary_file"] = str(out / SUMMARY_FILE)
    return summary


def measured_step_peak(config: RunConfig, setup: EncoderSetup, device=None) -> int:
    """Peak bytes of one step of ``config``'s model (fresh weights of the same shape) on its
    first batch, measured by ``chapter20.training.trainer.step_peak_memory`` (one process,
    §20.3)."""
    model = type(setup.model)(**setup.model_kwargs)
    if config.sharded_table:
        _shard_table(model)
    trainer = Trainer(model.to(device or "cpu"), config.train_config())
    anchors, positives = setup.sampler(config.batch).batch_at(0)
    batch = (anchors.to(trainer.device), positives.to(trainer.device))
    return int(step_peak_memory(trainer, batch, device=trainer.device).peak_bytes)


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """What ``scripts/train.py`` prints after training."""
    lines = [
        f"done: {summary['steps']} steps on {summary['world_size']} process(es), resumed "
        f"from step {summary['resumed_from']}; fingerprint {summary['fingerprint']}"
    ]
    planned, measured = summary["planned_peak_bytes"], summary["measured_peak_bytes"]
    if measured is None:
        lines.append(
            f"peak memory of a step: planned {format_bytes(planned)} per rank "
            "(measured in one-process runs only)"
        )
    else:
        lines.append(
            f"peak memory of a step: planned {format_bytes(planned)}, measured "
            f"{format_bytes(measured)} (measured / planned {measured / planned:.2f})"
        )
    if summary["pairs_per_second"] is not None:
        lines.append(
            f"throughput: {summary['pairs_per_second']:,.0f} documents (view pairs) "
            f"per second over {summary['train_seconds_this_launch']:.0f} s of steps"
        )
    if summary["final"] is not None:
        final = summary["final"]
        lines.append(
            f"final: Lee Pearson {final['lee_pearson']:.3f}, Spearman "
            f"{final['lee_spearman']:.3f}; held-out recall@1 {final['recall@1']:.3f} "
            f"(chance {final['chance@1']:.4f}), recall@10 {final['recall@10']:.3f} "
            f"(chance {final['chance@10']:.4f})"
        )
    if "encoder_file" in summary:
        lines.append(
            f"encoder: {summary['encoder_file']} (chapter20.training.encoder_file.load_encoder); "
            f"summary: {summary['summary_file']}"
        )
    return lines


# -- the command line ----------------------------------------------------------------------------

CLI_DESCRIPTION = (
    "§20.6 The chapter in one run: train the capstone text encoder with every technique."
)


def _flag(parser, name: str, default: bool, help: str) -> None:
    parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=default,
                        help=help)  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=CLI_DESCRIPTION)
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=Path("runs/capstone"),
        help="checkpoints, encoder.pt and summary.json (default: runs/capstone)",
    )
    parser.add_argument("--model", choices=("bag", "transformer"), default="bag")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--steps", type=int, default=None, help="optimizer steps (default 600 x $CHAPTER20_SCALE)"
    )
    parser.add_argument("--batch-size", type=int, default=512, help="global batch (documents)")
    techniques = parser.add_argument_group(
        "techniques of the composed step (chapter20.training.trainer)"
    )
    techniques.add_argument("--precision", choices=("fp32", "bf16", "fp16", "auto"), default="fp32")
    techniques.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        help="gradient caching: rows per chunk (default: whole batch)",
    )
    _flag(techniques, "cross-rank-negatives", True, "InfoNCE against every rank's keys")
    techniques.add_argument(
        "--checkpointing",
        default="none",
        help=f"activation checkpointing: {', '.join(POLICIES)} or every_K",
    )
    techniques.add_argument("--optimizer", choices=OPTIMIZER_KINDS, default="adamw")
    _flag(techniques, "state-32bit-tables", True, "8-bit optimizers keep 32-bit table state")
    _flag(techniques, "sharded-table", False, "split the bag's table rows over the ranks")
    techniques.add_argument(
        "--lr",
        type=float,
        default=None,
        help="rate at --base-batch (default 1e-3 bag, 3e-4 Transformer)",
    )
    techniques.add_argument("--base-batch", type=int, default=512)
    techniques.add_argument("--lr-scaling", choices=LR_SCALING, default="linear")
    techniques.add_argument("--warmup", type=int, default=20, help="linear warm-up steps")
    techniques.add_argument("--temperature", type=float, default=0.2)
    loop = parser.add_argument_group("evaluation, checkpoints, preemption")
    loop.add_argument("--eval-every", type=int, default=100)
    loop.add_argument("--eval-pairs", type=int, default=1_000, help="held-out retrieval pairs")
    _flag(loop, "baselines", True, "score TF-IDF, LSI, Doc2Vec on Lee at the end")
    loop.add_argument("--checkpoint-every", type=int, default=50)
    loop.add_argument("--checkpoint-seconds", type=float, default=None)
    loop.add_argument("--keep-last", type=int, default=3)
    loop.add_argument("--chaos", type=int, default=0, help="SIGKILLs injected over the run")
    loop.add_argument("--chaos-seed", type=int, default=0)
    loop.add_argument("--step-delay", type=float, default=0.0, help=argparse.SUPPRESS)
    loop.add_argument("--notice-file", type=Path, default=None)
    _flag(loop, "deterministic", True, "deterministic_mode: bitwise resume")
    _flag(loop, "progress", True, "progress bar on rank 0")
    loop.add_argument("--plan-gpu-gb", type=float, default=80.0, help="GPU of the memory plan")
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    return RunConfig(
        output_dir=str(args.output_dir), model=args.model, dim=args.dim, seed=args.seed,
        steps=args.steps if args.steps is not None else scaled(600), batch=args.batch_size,
        lr=args.lr, base_batch=args.base_batch, lr_scaling=args.lr_scaling, warmup=args.warmup,
        temperature=args.temperature, precision=args.precision, chunk_size=args.chunk_size,
        cross_rank_negatives=args.cross_rank_negatives, checkpointing=args.checkpointing,
        optimizer=args.optimizer, state_32bit_tables=args.state_32bit_tables,
        sharded_table=args.sharded_table, eval_every=args.eval_every,
        eval_pairs=args.eval_pairs, checkpoint_every=args.checkpoint_every,
        checkpoint_seconds=args.checkpoint_seconds, keep_last=args.keep_last,
        chaos_kills=args.chaos, chaos_seed=args.chaos_seed, step_delay=args.step_delay,
        notice_file=None if args.notice_file is None else str(args.notice_file),
        deterministic=args.deterministic, plan_gpu_gb=args.plan_gpu_gb, progress=args.progress,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    config = config_from_args(args)
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
        from chapter20.capstone.evaluation import baseline_scores

        scores = baseline_scores((args.seed,))
        print("Lee baselines (fitted on lee_background, this run):")
        for _, row in scores.iterrows():
            print(f"  {row['method']:<28} Pearson {row['pearson']:.3f}  "
                  f"Spearman {row['spearman']:.3f}")  # fmt: skip
        summary["baselines"] = scores.to_dict("records")
        path = Path(summary["summary_file"])
        path.write_text(json.dumps(summary, indent=1, default=str))
    sys.stdout.flush()
    return summary
