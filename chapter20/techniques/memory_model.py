"""§20.3 What training holds in memory, by component, from shapes alone.

The byte counts the memory planner (``chapter20.training.memory_plan``) adds up: parameters,
gradients and optimizer state for any optimizer kind (:func:`training_state_bytes`,
:func:`optimizer_state_bytes_predicted`), the shapes of the two encoders the chapter trains
(:class:`EncoderShape`, :class:`BagShape`: parameter counts exact), and the activations one
Transformer layer saves per token (:func:`layer_activation_bytes`, calibrated on the
live-tensor tracker of ``chapter20.core.measure``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from chapter20.core.checks import (
    check_int,
    check_optional_int,
)
from chapter20.techniques.optimizers import OPTIMIZER_KINDS

__all__ = [
    "layer_activation_bytes",
    "OPTIMIZER_STATE_ELEMENTS",
    "training_state_bytes",
    "PLANNER_OPTIMIZERS",
    "EncoderShape",
    "BagShape",
    "optimizer_state_bytes_predicted",
]


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


def layer_activation_bytes(shape: EncoderShape, precision: str, selective: bool) -> int:
    """Bytes one encoder layer saves for backward per token (§20.3.1) (calibrated on the live-tensor
    tracker: layer norms and the residual stream stay fp32 under autocast, matmul outputs
    follow the autocast dtype)."""
    d, f, h = shape.d_model, shape.d_ff, shape.n_heads
    if selective:  # the matmul and attention outputs, and the layer's input
        return 4 * (7 * d + f + h) if precision == "fp32" else 2 * (6 * d + f) + 4 * h + 4 * d
    if precision == "fp32":
        return 32 * d + 8 * f + 4 * h + 20
    return 20 * d + 4 * f + 4 * h + 18
