"""Predicted memory of training (§20.3): bytes per component, from the configuration alone.

Measurements (``chapter20.core.measure.peak_memory``) are checked against these predictions, so a
reader can trust the predictions for sizes too large to run here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from chapter20.core.checks import (
    check_int,
    check_optional_int,
    check_optional_positive,
    check_positive,
)
from chapter20.techniques.optimizers import OPTIMIZER_KINDS

#: Optimizer state elements per parameter element (Adam/AdamW: two moments; SGD with
#: momentum: one buffer; plain SGD: none).
OPTIMIZER_STATE_ELEMENTS = {"adam": 2, "adamw": 2, "sgd_momentum": 1, "sgd": 0}

#: PyTorch's Adam/AdamW keep their step count as one float32 scalar tensor per parameter tensor.
_STEP_COUNTER_BYTES = {"adam": 4, "adamw": 4, "sgd_momentum": 0, "sgd": 0}


def training_state_bytes(
    num_parameters: int,
    *,
    num_tensors: int = 0,
    dtype: torch.dtype = torch.float32,
    optimizer: str = "adam",
) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state for ``num_parameters`` (§20.3.2).

    Parameters and gradients take ``dtype``'s size each; the optimizer keeps its state in the
    same dtype (PyTorch allocates it like the parameter): ``OPTIMIZER_STATE_ELEMENTS`` per
    element, plus Adam's 4-byte step counter for each of the ``num_tensors`` parameter tensors.
    For Adam in float32 that is 4 + 4 + 8 = 16 bytes per parameter (pass ``num_tensors``, e.g.
    ``len(list(model.parameters()))``, to count the step counters too).
    """
    num_parameters = check_int("num_parameters", num_parameters, 0)
    num_tensors = check_int("num_tensors", num_tensors, 0)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    if optimizer not in OPTIMIZER_STATE_ELEMENTS:
        raise ValueError(
            f"optimizer must be one of {sorted(OPTIMIZER_STATE_ELEMENTS)}, got {optimizer!r}"
        )
    size = torch.empty((), dtype=dtype).element_size()
    state = num_parameters * size * OPTIMIZER_STATE_ELEMENTS[optimizer]
    return {
        "parameters": num_parameters * size,
        "gradients": num_parameters * size,
        "optimizer_state": state + num_tensors * _STEP_COUNTER_BYTES[optimizer],
    }


# --------------------------------------------------------------------------------------------
# The planner: every component of a training step of the shared Transformer encoder
# --------------------------------------------------------------------------------------------

#: Optimizer kinds the planner knows: those of ``chapter20.techniques.optimizers`` and plain SGD.
PLANNER_OPTIMIZERS = (*OPTIMIZER_KINDS, "sgd")
PLANNER_PRECISIONS = ("fp32", "bf16", "fp16")
#: bitsandbytes keeps 8-bit state for tensors of at least this many elements, in blocks.
BNB_MIN_8BIT_SIZE, BNB_BLOCK = 4096, 256


@dataclass(frozen=True)
class EncoderShape:
    """The shape of a ``chapter20.core.models.TransformerEncoder`` (§20.3): enough to count its
    parameters exactly and predict its activations."""

    vocab_size: int
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int | None = None
    max_len: int = 128
    output_dim: int | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_len"):
            check_int(name, getattr(self, name), 1)
        for name in ("d_ff", "output_dim"):
            check_optional_int(name, getattr(self, name), 1)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)

    @classmethod
    def of(cls, model) -> EncoderShape:
        """The shape of an existing ``TransformerEncoder``."""
        first = model.layers[0]
        attention = getattr(first, "attention", None) or first.layers[0].attention
        feed_forward = getattr(first, "feed_forward", None) or first.layers[0].feed_forward
        projection = model.projection
        return cls(
            vocab_size=model.vocab_size,
            d_model=model.token_embedding.embedding_dim,
            n_heads=attention.n_heads,
            n_layers=sum(len(getattr(m, "layers", [m])) for m in model.layers),
            d_ff=feed_forward.up.out_features,
            max_len=model.max_len,
            output_dim=projection.out_features if isinstance(projection, nn.Linear) else None,
        )

    def build(self, *, seed: int | None = None, dropout: float = 0.0):
        """A ``TransformerEncoder`` of this shape (no dropout by default, as the memory and
        speed experiments measure it), its weights drawn after ``set_seed(seed)`` if given."""
        from chapter20.core.device import set_seed
        from chapter20.core.models import TransformerEncoder

        if seed is not None:
            set_seed(seed)
        return TransformerEncoder(
            self.vocab_size,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            d_ff=self.d_ff,
            max_len=self.max_len,
            dropout=dropout,
            output_dim=self.output_dim,
        )

    def parameter_sizes(self) -> list[int]:
        """Element count of every parameter tensor, in ``model.parameters()`` order."""
        d, f = self.d_model, self.d_ff
        sizes = [self.vocab_size * d, self.max_len * d]
        layer = [d, d, 3 * d * d, 3 * d, d * d, d, d, d, f * d, f, d * f, d]
        sizes += layer * self.n_layers + [d, d]
        if self.output_dim:
            sizes += [self.output_dim * d, self.output_dim]
        return sizes

    @property
    def num_parameters(self) -> int:
        return sum(self.parameter_sizes())


@dataclass(frozen=True)
class BagShape:
    """The shape of a ``chapter20.core.models.WeightedBagEncoder`` (§20.3, the capstone encoder): a
    ``vocab_size`` × ``dim`` table and one token weight per row (a parameter when
    ``learn_weights``). Enough to count its parameters and predict a training step's memory."""

    vocab_size: int
    dim: int = 256
    learn_weights: bool = True

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, 1)
        check_int("dim", self.dim, 1)
        if not isinstance(self.learn_weights, bool):
            raise TypeError(f"learn_weights must be True or False, got {self.learn_weights!r}")

    @classmethod
    def of(cls, model) -> BagShape:
        """The shape of an existing ``WeightedBagEncoder``."""
        return cls(model.vocab_size, model.embedding_dim, model.log_weight.requires_grad)

    def parameter_sizes(self) -> list[int]:
        """Element count of every trained parameter tensor, the table first."""
        return [self.vocab_size * self.dim] + ([self.vocab_size] if self.learn_weights else [])

    @property
    def num_parameters(self) -> int:
        return sum(self.parameter_sizes())


def optimizer_state_bytes_predicted(
    parameter_sizes: list[int], optimizer: str, *, state_32bit: int = 0
) -> int:
    """Bytes of optimizer state for parameter tensors of these sizes (§20.3.2): AdamW two fp32
    moments + a 4-byte step per tensor; SGD-Nesterov one buffer; bitsandbytes 8-bit: two uint8
    moments + one fp32 absmax per block of 256 + two 256-entry fp32 maps, for tensors of at least
    4096 elements, and two fp32 moments below that. Under the 8-bit kinds the first
    ``state_32bit`` tensors (embedding tables kept in 32 bits) hold two fp32 moments."""
    if optimizer not in PLANNER_OPTIMIZERS:
        raise ValueError(
            f"optimizer must be one of {', '.join(PLANNER_OPTIMIZERS)}, got {optimizer!r}"
        )
    check_int("state_32bit", state_32bit, 0)
    total = 0
    sizes = [check_int("parameter_sizes", n, 0) for n in parameter_sizes]
    for index, n in enumerate(sizes):
        if "8bit" in optimizer and index < state_32bit:
            total += 8 * n
        elif optimizer in ("adamw", "adamw_fused"):
            total += 8 * n + 4
        elif optimizer == "sgd_nesterov":
            total += 4 * n
        elif optimizer == "sgd":
            total += 0
        elif n >= BNB_MIN_8BIT_SIZE:
            total += 2 * n + 2 * 4 * math.ceil(n / BNB_BLOCK) + 2 * 256 * 4
        else:
            total += 8 * n
    return total


def _layer_activation_bytes(shape: EncoderShape, precision: str, selective: bool) -> int:
    """Bytes one encoder layer saves for backward per token (calibrated on the live-tensor
    tracker: layer norms and the residual stream stay fp32 under autocast, matmul outputs
    follow the autocast dtype)."""
    d, f, h = shape.d_model, shape.d_ff, shape.n_heads
    if selective:  # the matmul and attention outputs, and the layer's input
        return 4 * (7 * d + f + h) if precision == "fp32" else 2 * (6 * d + f) + 4 * h + 4 * d
    if precision == "fp32":
        return 32 * d + 8 * f + 4 * h + 20
    return 20 * d + 4 * f + 4 * h + 18


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
    *,
    batch: int,
    seq_len: int,
    precision: str = "fp32",
    optimizer: str = "adamw",
    checkpointing: str = "none",
    k: int | None = None,
    micro_batches: int = 1,
    chunk_size: int | None = None,
    table_state_32bit: bool = False,
    world_size: int = 1,
    zero_stage: int = 0,
    towers: int = 2,
    sharded_table: bool = False,
    gpu_bytes: float | None = None,
) -> MemoryPlan:
    """Predict the memory of one contrastive training step of a Transformer encoder (§20.3).

    ``batch`` pairs of ``seq_len`` tokens per rank, in ``micro_batches`` (accumulation: the
    activations of one micro-batch), ``towers`` encodings per pair (2: anchors and positives,
    plus the B×B logits). ``chunk_size`` is gradient caching (§20.2.1): the activations of one
    chunk of one tower at a time, next to the whole batch's cached representations, their
    gradients and the whole batch's logits. ``table_state_32bit``: under an 8-bit optimizer the
    token embedding keeps 32-bit state (as ``chapter20.training.trainer`` does by default).
    Master weights, gradients and optimizer state are fp32 whatever the
    ``precision`` of autocast; under bf16/fp16 autocast also caches 16-bit copies of the
    matmul weights. ZeRO stage 1 shards optimizer state over ``world_size``, stage 2 also the
    gradients, stage 3 also the parameters, each as an even split (``total // world_size``):
    an ideal that only splitting inside tensors reaches. PyTorch's ``ZeroRedundancyOptimizer``
    deals out whole tensors, so the rank that holds the embedding table's state holds more than
    1/W (notebook 12 measures both). The peak is weights + state + the largest of four
    phases (``settings["peak_phase"]``): the end of the forward pass, the first recomputed
    segment of a checkpointed backward, the embedding backward (dense table-sized gradients),
    the optimizer step. Calibrated against ``chapter20.core.measure.peak_memory`` on CPU; the
    forward's transient buffers are not modelled, so narrow batches of wide models come out
    low (notebook 05 shows plan and measurement side by side).

    A :class:`BagShape` (the weighted bag of embeddings) is planned by :func:`_plan_bag`: its
    only large activation is each tower's gathered rows, ``batch × seq_len × dim``; with
    ``sharded_table`` its table's rows (and their gradients and state) are split over
    ``world_size`` ranks (§20.1, ``chapter20.techniques.sharding.ShardedEmbedding``).
    """
    from chapter20.techniques.activation_checkpointing import predicted_activation_bytes

    batch, seq_len = check_int("batch", batch, 1), check_int("seq_len", seq_len, 1)
    gpu_bytes = check_optional_positive("gpu_bytes", gpu_bytes)
    micro_batches = check_int("micro_batches", micro_batches, 1)
    if chunk_size is not None:
        chunk_size = check_int("chunk_size", chunk_size, 1)
        if micro_batches > 1:
            raise ValueError("give micro_batches (accumulation) or chunk_size, not both")
    world_size = check_int("world_size", world_size, 1)
    towers = check_int("towers", towers, 1)
    if precision not in PLANNER_PRECISIONS:
        raise ValueError(
            f"precision must be one of {', '.join(PLANNER_PRECISIONS)}, got {precision!r}"
        )
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    settings = dict(
        batch=batch,
        seq_len=seq_len,
        precision=precision,
        optimizer=optimizer,
        checkpointing=checkpointing,
        k=k,
        micro_batches=micro_batches,
        chunk_size=chunk_size,
        table_state_32bit=table_state_32bit,
        world_size=world_size,
        zero_stage=zero_stage,
        towers=towers,
        sharded_table=bool(sharded_table),
    )
    if isinstance(model, BagShape):
        return _plan_bag(model, settings, gpu_bytes)
    if not isinstance(model, EncoderShape):
        raise TypeError(f"model must be an EncoderShape or BagShape, got {type(model).__name__}")
    if sharded_table:
        raise ValueError("sharded_table is planned for a BagShape only")
    if seq_len > model.max_len:
        raise ValueError(f"seq_len must be <= max_len={model.max_len}, got {seq_len}")
    sizes = model.parameter_sizes()
    params, grads, state = _static_bytes(sizes, settings)
    micro = math.ceil(batch / micro_batches)
    # Gradient caching runs one chunk of one tower with a graph at a time.
    tokens = min(chunk_size, batch) * seq_len if chunk_size else micro * seq_len * towers
    live_towers = 1 if chunk_size else towers
    d = model.d_model
    per_layer = _layer_activation_bytes(model, precision, selective=False)
    unit = {
        "layer_bytes": tokens * per_layer,
        "boundary_bytes": tokens * (4 * d + 1),
        "selective_layer_bytes": tokens * _layer_activation_bytes(model, precision, True),
        "other_bytes": tokens * (4 * d + 16),
    }
    predicted = predicted_activation_bytes(checkpointing, model.n_layers, k=k, **unit)
    activations = predicted["saved"]
    # backward recomputes one segment of one tower at a time
    per_tower = {name: value // live_towers for name, value in unit.items()}
    one_tower = predicted_activation_bytes(checkpointing, model.n_layers, k=k, **per_tower)
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
    recompute = segment_size(settings["checkpointing"], 1, settings["k"]) > 0
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
            "the embedding table alone does not fit: shard its rows across ranks "
            "(model parallelism, §20.1) and keep data parallelism for the encoder"
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
