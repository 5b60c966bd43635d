"""§20.3 The memory planner: predicted bytes of one training step of a ``TrainConfig``.

:func:`plan` takes the model's shape (``chapter20.techniques.memory_model``) and the composed
step's configuration (``chapter20.training.config.TrainConfig``: precision, optimizer,
accumulation or gradient caching, activation checkpointing, 32-bit table state) and predicts
every component of one step's memory and its peak; :func:`parallelism_advice` applies the
chapter's rules to a plan that does not fit. Measurements (``chapter20.core.measure.peak_memory``
of a real step, :func:`measure_step_memory`) are checked against these predictions
(:func:`plan_vs_measured`), so a reader can trust them for sizes too large to run here;
:func:`plan_grid` plans every model of a list under every setting.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from chapter20.core.checks import check_int, check_optional_positive, check_positive
from chapter20.core.measure import format_bytes
from chapter20.techniques.memory_model import (
    BagShape,
    EncoderShape,
    layer_activation_bytes,
    optimizer_state_bytes_predicted,
)
from chapter20.techniques.precision import PRECISIONS, resolve_precision
from chapter20.training.config import TrainConfig
from chapter20.training.trainer import Trainer, step_peak_memory

# pandas costs every torchrun worker half a second to import; only the tables need it.
if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "MemoryPlan",
    "plan",
    "parallelism_advice",
    "measure_step_memory",
    "plan_vs_measured",
    "plan_grid",
]


@dataclass(frozen=True)
class MemoryPlan:
    """Predicted bytes of one training step (§20.3): ``components`` (parameters, gradients,
    optimizer_state, activations, logits, representations), ``peak_bytes`` and whether it fits
    ``gpu_bytes``."""

    components: dict[str, int]
    peak_bytes: int
    gpu_bytes: float | None
    embedding_bytes: int
    settings: dict

    @property
    def fits(self) -> bool | None:
        return None if self.gpu_bytes is None else self.peak_bytes <= self.gpu_bytes


def plan(
    model: EncoderShape | BagShape,
    config: TrainConfig,
    *,
    batch: int,
    seq_len: int,
    world_size: int = 1,
    zero_stage: int = 0,
    towers: int = 2,
    gpu_bytes: float | None = None,
    device: torch.device | str | None = None,
) -> MemoryPlan:
    """Predict the memory of one contrastive training step of ``config`` (§20.3), per rank.

    ``batch`` pairs of ``seq_len`` tokens per rank, in ``config.micro_batches`` (accumulation:
    the activations of one micro-batch), ``towers`` encodings per pair (2: anchors and
    positives, plus the B×B logits). ``config.chunk_size`` is gradient caching (§20.2.1): the
    activations of one chunk of one tower at a time, next to the whole batch's cached
    representations, their gradients and the whole batch's logits. Under an 8-bit optimizer
    with ``config.state_32bit_tables`` the token embedding keeps 32-bit state, as the trainer
    does. ``config.precision`` "auto" is resolved for ``device``. Master weights, gradients and
    optimizer state are fp32 whatever the precision of autocast; under bf16/fp16 autocast also
    caches 16-bit copies of the matmul weights. ZeRO stage 1 shards optimizer state over
    ``world_size``, stage 2 also the gradients, stage 3 also the parameters, each as an even
    split (``total // world_size``): an ideal that only splitting inside tensors reaches.
    PyTorch's ``ZeroRedundancyOptimizer`` deals out whole tensors, so the rank that holds the
    embedding table's state holds more than 1/W (notebook 12 measures both). The peak is
    weights + state + the largest of four phases (``settings["peak_phase"]``): the end of the
    forward pass, the first recomputed segment of a checkpointed backward, the embedding
    backward (dense table-sized gradients), the optimizer step. Calibrated against
    ``chapter20.core.measure.peak_memory`` on CPU; the forward's transient buffers are not
    modelled, so narrow batches of wide models come out low (notebook 05 shows plan and
    measurement side by side).

    A :class:`~chapter20.techniques.memory_model.BagShape` (the weighted bag of embeddings) is
    planned by :func:`_plan_bag`: its only large activation is each tower's gathered rows,
    ``batch × seq_len × dim``; with ``config.sharded_table`` its table's rows (and their
    gradients and state) are split over ``world_size`` ranks (§20.1,
    ``chapter20.techniques.sharding.ShardedEmbedding``), as the trainer shards them.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    gpu_bytes = check_optional_positive("gpu_bytes", gpu_bytes)
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    dtype = resolve_precision(config.precision, device)
    settings = dict(
        batch=check_int("batch", batch, 1),
        seq_len=check_int("seq_len", seq_len, 1),
        precision=next(name for name, d in PRECISIONS.items() if d == dtype),
        optimizer=config.optimizer,
        activation_checkpointing=config.activation_checkpointing,
        activation_checkpointing_k=config.activation_checkpointing_k,
        micro_batches=config.micro_batches,
        chunk_size=config.chunk_size,
        table_state_32bit=config.state_32bit_tables and "8bit" in config.optimizer,
        world_size=check_int("world_size", world_size, 1),
        zero_stage=zero_stage,
        towers=check_int("towers", towers, 1),
        sharded_table=config.sharded_table,
    )
    if isinstance(model, BagShape):
        return _plan_bag(model, settings, gpu_bytes)
    if not isinstance(model, EncoderShape):
        raise TypeError(f"model must be an EncoderShape or BagShape, got {type(model).__name__}")
    if config.sharded_table:
        raise ValueError("config.sharded_table is planned for a BagShape only")
    if seq_len > model.max_len:
        raise ValueError(f"seq_len must be <= max_len={model.max_len}, got {seq_len}")
    return _plan_encoder(model, settings, gpu_bytes)


def _plan_encoder(model: EncoderShape, settings: dict, gpu_bytes: float | None) -> MemoryPlan:
    """:func:`plan` for the Transformer encoder (§20.3)."""
    from chapter20.techniques.activation_checkpointing import predicted_activation_bytes

    batch, seq_len, towers = settings["batch"], settings["seq_len"], settings["towers"]
    chunk_size, precision = settings["chunk_size"], settings["precision"]
    policy, k = settings["activation_checkpointing"], settings["activation_checkpointing_k"]
    micro_batches, world_size = settings["micro_batches"], settings["world_size"]
    optimizer = settings["optimizer"]
    sizes = model.parameter_sizes()
    params, grads, state = _static_bytes(sizes, settings)
    micro = math.ceil(batch / micro_batches)
    # Gradient caching runs one chunk of one tower with a graph at a time.
    tokens = min(chunk_size, batch) * seq_len if chunk_size else micro * seq_len * towers
    live_towers = 1 if chunk_size else towers
    d = model.d_model
    per_layer = layer_activation_bytes(model, precision, selective=False)
    unit = {
        "layer_bytes": tokens * per_layer,
        "boundary_bytes": tokens * (4 * d + 1),
        "selective_layer_bytes": tokens * layer_activation_bytes(model, precision, True),
        "other_bytes": tokens * (4 * d + 16),
    }
    predicted = predicted_activation_bytes(policy, model.n_layers, k=k, **unit)
    activations = predicted["saved"]
    # backward recomputes one segment of one tower at a time
    per_tower = {name: value // live_towers for name, value in unit.items()}
    one_tower = predicted_activation_bytes(policy, model.n_layers, k=k, **per_tower)
    recompute = one_tower["backward_peak"] - one_tower["saved"]
    if precision != "fp32":  # autocast's cache of 16-bit weight copies, one per matmul weight
        activations += 2 * model.n_layers * (4 * d * d + 2 * d * model.d_ff)
    rows = batch if chunk_size else micro  # the loss sees the whole batch under caching
    logits = 2 * 4 * rows * rows * world_size if towers == 2 else 0
    out = model.output_dim or d
    # cached fp32 outputs of the whole batch, and their gradients
    representations = 2 * 4 * towers * batch * out if chunk_size else 0
    components = {
        "parameters": params,
        "gradients": grads,
        "optimizer_state": state,
        "activations": activations,
        "logits": logits,
        "representations": representations,
    }
    largest = 4 * max(sizes)
    table = 4 * model.vocab_size * d
    phases = {
        # the end of the forward pass: every saved activation, no gradient yet
        "forward": activations + logits + representations,
        # backward with checkpointing: the first segment recomputed, few gradients yet
        "backward": activations + recompute + logits + representations,
        # the embedding backward: a dense table-sized gradient per tower, their sum and .grad,
        # next to the other gradients (measured: 3 tables for 2 towers)
        "embedding backward": grads - table + (live_towers + 1) * table + representations,
        # the optimizer step: temporaries of the size of the largest tensor
        "optimizer step": grads + (1 if optimizer.startswith("sgd") else 2) * largest,
    }
    phase = max(phases, key=phases.get)
    peak = params + state + phases[phase]
    return MemoryPlan(components, peak, gpu_bytes, table, {**settings, "peak_phase": phase})


def _static_bytes(sizes: list[int], settings: dict) -> tuple[int, int, int]:
    """fp32 parameters, gradients and optimizer state of tensors of ``sizes`` (the embedding
    table first), sharded as ``settings["zero_stage"]`` says."""
    world, stage = settings["world_size"], settings["zero_stage"]
    params, grads = 4 * sum(sizes), 4 * sum(sizes)
    state = optimizer_state_bytes_predicted(
        sizes, settings["optimizer"], state_32bit=int(settings["table_state_32bit"])
    )
    params //= world if stage >= 3 else 1
    grads //= world if stage >= 2 else 1
    state //= world if stage >= 1 else 1
    return params, grads, state


#: Bytes per token and tower a weighted bag keeps besides its gathered rows (ids, padding
#: mask, token weights and their normalised copy), calibrated on the live-tensor tracker.
_BAG_TOKEN_BYTES = 52
#: ... and what it keeps per token when its pooling is recomputed (ids and padding mask).
_BAG_RECOMPUTED_TOKEN_BYTES = 9


def _plan_bag(model: BagShape, settings: dict, gpu_bytes: float | None) -> MemoryPlan:
    """:func:`plan` for a weighted bag of embeddings (§20.3), calibrated on the live-tensor
    tracker (CPU). ``rows`` = one tower's gathered rows, ``batch × seq_len × dim`` fp32.

    - forward: every earlier tower's saved rows, and the current tower's rows, their weighted
      copy and the reduction's buffer (3 × rows);
    - backward: the saved rows and 2 × rows of gradient buffers; with checkpointing nothing is
      saved, but the tower being recomputed holds 3 × rows next to the dense table gradient of
      the tower before it;
    - embedding backward: a dense table-sized gradient per tower, their sum and ``.grad``;
    - optimizer step: AdamW's temporaries of the table's size.

    Gradient caching (``chunk_size``) runs one chunk of one tower with a graph at a time, next
    to every row's cached output and its gradient; accumulation one micro-batch. Autocast
    lowers no operation of the bag (a gather and a weighted sum), so ``precision`` changes
    nothing. Cross-rank negatives: each rank's logits span every rank's keys.
    """
    from chapter20.techniques.activation_checkpointing import segment_size

    batch, seq_len, towers = settings["batch"], settings["seq_len"], settings["towers"]
    chunk = settings["chunk_size"]
    policy, k = settings["activation_checkpointing"], settings["activation_checkpointing_k"]
    recompute = segment_size(policy, 1, k) > 0
    sizes = model.parameter_sizes()
    if settings["sharded_table"]:  # this rank's rows of the table
        sizes[0] = math.ceil(model.vocab_size / settings["world_size"]) * model.dim
    params, grads, state = _static_bytes(sizes, settings)
    rows_per_pass = min(chunk, batch) if chunk else math.ceil(batch / settings["micro_batches"])
    live_towers = 1 if chunk else towers
    tokens = rows_per_pass * seq_len
    rows = 4 * tokens * model.dim
    # what a tower keeps for backward: its rows and token weights, or (recomputed) its ids
    kept = _BAG_RECOMPUTED_TOKEN_BYTES * tokens if recompute else rows + _BAG_TOKEN_BYTES * tokens
    loss_rows = batch if chunk else rows_per_pass
    logits = 2 * 4 * loss_rows * loss_rows * settings["world_size"] if towers == 2 else 0
    representations = 2 * 4 * towers * batch * model.dim if chunk else 0
    components = {
        "parameters": params,
        "gradients": grads,
        "optimizer_state": state,
        "activations": live_towers * kept,
        "logits": logits,
        "representations": representations,
    }
    table = 4 * sizes[0]
    earlier = (live_towers - 1) * kept
    one_tower = 3 * rows + _BAG_TOKEN_BYTES * tokens  # a tower's pass: rows, products, buffers
    if recompute:  # the tower recomputed, next to the dense table gradient of the one after it
        backward = earlier + one_tower + (live_towers - 1) * table
    else:
        backward = live_towers * kept + 2 * rows
    phases = {
        "forward": earlier + one_tower + representations,
        "loss": live_towers * kept + logits + representations,
        "backward": backward + representations,
        "embedding backward": grads - table + (live_towers + 1) * table + representations,
        "optimizer step": grads + (1 if settings["optimizer"].startswith("sgd") else 2) * table,
    }
    phase = max(phases, key=phases.get)
    peak = params + state + phases[phase]
    return MemoryPlan(components, peak, gpu_bytes, table, {**settings, "peak_phase": phase})


def parallelism_advice(memory_plan: MemoryPlan, gpu_bytes: float) -> list[str]:
    """The chapter's rules (§20.1.1, §20.3 checklist) applied to a plan: what to do so that a
    step fits ``gpu_bytes``, most important first."""
    gpu_bytes = check_positive("gpu_bytes", gpu_bytes)
    c = memory_plan.components
    advice = []
    static = c["parameters"] + c["optimizer_state"]
    table_state = memory_plan.embedding_bytes * 4  # weights + gradient + two Adam moments
    if memory_plan.peak_bytes <= gpu_bytes:
        advice.append("fits on one device: use data parallelism (DDP) only to go faster")
        return advice
    if table_state > gpu_bytes:
        advice.append(
            "the embedding table with its gradient and Adam state does not fit: shard its rows "
            "across ranks (model parallelism, §20.1) and keep data parallelism for the encoder"
        )
    if static > gpu_bytes and table_state <= gpu_bytes:
        advice.append(
            "weights + optimizer state do not fit: shard them (ZeRO/FSDP) or split "
            "the deep encoder into pipeline stages"
        )
    if c["optimizer_state"] > c["parameters"] and memory_plan.settings["optimizer"] in (
        "adamw",
        "adamw_fused",
    ):
        advice.append("8-bit optimizer state (adamw8bit) cuts the state 4x")
    if c["activations"] + c["logits"] > gpu_bytes - static:
        advice.append(
            "activations do not fit: mixed precision, then accumulation or gradient "
            "caching (smaller micro-batches), then activation checkpointing"
        )
    return advice


def measure_step_memory(
    shape: EncoderShape,
    config: TrainConfig,
    *,
    batch: int,
    seq_len: int,
    device: torch.device | str | None = None,
):
    """Peak memory (``chapter20.core.measure.MemoryReport``, by component) of one training step
    of ``config`` on ``shape``'s encoder (seed 0) and ``batch`` pairs of ``seq_len`` random ids
    (seed 0) in ``config.micro_batches`` (accumulation: the activations of one micro-batch are
    measured; naive for InfoNCE, see notebook 02), on ``device`` (default: the CPU): what
    :func:`plan` predicts (§20.3)."""
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    batch, seq_len = check_int("batch", batch, 1), check_int("seq_len", seq_len, 1)
    device = torch.device("cpu") if device is None else torch.device(device)
    micro = config.micro_batches
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bitsandbytes' notices about optional kernels
        trainer = Trainer(shape.build(seed=0).to(device), replace(config, micro_batches=1))
    ids = torch.randint(
        1,
        shape.vocab_size,
        (2, batch // micro, seq_len),
        generator=torch.Generator().manual_seed(0),
    )
    return step_peak_memory(trainer, tuple(ids.to(device)), device)


def plan_vs_measured(cases: list[tuple[EncoderShape, TrainConfig, int, int]]) -> pd.DataFrame:
    """:func:`plan` next to the measured peak (:func:`measure_step_memory`) for each case
    ``(shape, config, batch, seq_len)`` (§20.3): a row per case with its sizes, precision,
    optimizer and checkpointing policy, the two peaks, the phase of the planned peak and
    planned / measured."""
    import pandas as pd

    records = []
    for case in cases:
        if not isinstance(case, tuple) or len(case) != 4:
            raise TypeError(f"cases must hold (shape, config, batch, seq_len) tuples, got {case!r}")
        shape, config, batch, seq_len = case
        sizes = {"batch": batch, "seq_len": seq_len}
        report = measure_step_memory(shape, config, **sizes)
        planned = plan(shape, config, **sizes)
        records.append(
            {
                **sizes,
                "precision": config.precision,
                "optimizer": config.optimizer,
                "activation_checkpointing": config.activation_checkpointing,
                "vocab": shape.vocab_size,
                "layers": shape.n_layers,
                "measured": report.peak_bytes,
                "planned": planned.peak_bytes,
                "phase": planned.settings["peak_phase"],
                "planned / measured": planned.peak_bytes / report.peak_bytes,
            }
        )
    return pd.DataFrame(records)


def plan_grid(
    shapes: dict[str, tuple[EncoderShape, int, int]],
    settings: dict[str, TrainConfig],
    *,
    gpu_bytes: float = 80e9,
) -> tuple[dict, pd.DataFrame]:
    """:func:`plan` for every model of ``shapes`` (name -> (shape, batch, seq_len)) under every
    setting of ``settings`` (name -> config), against one GPU of ``gpu_bytes`` (§20.3). Returns
    the plans by (model, setting) and one table row per plan (size, components, peak, the phase
    of the peak, whether it fits)."""
    import pandas as pd

    gpu_bytes = check_positive("gpu_bytes", gpu_bytes)
    plans, rows = {}, []
    for name, (shape, batch, seq_len) in shapes.items():
        for setting, config in settings.items():
            plans[name, setting] = p = plan(
                shape, config, batch=batch, seq_len=seq_len, gpu_bytes=gpu_bytes
            )
            rows.append(
                {
                    "model": name,
                    "size": f"{shape.num_parameters / 1e6:,.0f}M",
                    "batch x tokens": f"{batch} x {seq_len}",
                    "setting": setting,
                    **{k: format_bytes(v) for k, v in p.components.items() if k != "logits"},
                    "peak": format_bytes(p.peak_bytes),
                    "phase": p.settings["peak_phase"],
                    f"fits {gpu_bytes / 1e9:.0f} GB": p.fits,
                }
            )
    return plans, pd.DataFrame(rows)
