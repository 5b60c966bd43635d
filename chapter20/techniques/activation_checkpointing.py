"""§20.3.1 Activation (gradient) checkpointing with policies.

Backward needs the activations the forward pass computed. Checkpointing keeps only some of them
and recomputes the rest during backward: memory for time. The chapter's layer (listing L7)
checkpoints the attention and feed-forward blocks of every layer with the reentrant default
and no choice of where; here, for the companion's ``TransformerEncoder``:

- :func:`apply_checkpointing` with a policy:
  ``"none"``; ``"every_layer"`` (each layer recomputed from its input); ``"every_k"`` (segments
  of ``k`` consecutive layers, each recomputed from the segment's input); ``"sqrt"`` (segments of
  ⌈√L⌉ layers: √L saved inputs plus one segment recomputed at a time, Chen et al.'s sublinear
  memory); ``"selective"`` (every layer, but the outputs of matrix multiplies and attention are
  saved and only cheap pointwise ops are recomputed, through
  ``torch.utils.checkpoint.create_selective_checkpoint_contexts``).
- :class:`CheckpointedTransformerLayer`: listing L7 on the current API.
- :func:`predicted_activation_bytes`: what each policy keeps, from one layer's measured bytes.

Always ``use_reentrant=False``: it works with inputs that do not require grad, keeps the RNG
state (dropout draws the same masks when recomputed), and raises no deprecation warning.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from chapter20.core.checks import check_int
from chapter20.core.models import TransformerBlock, TransformerEncoder, WeightedBagEncoder

__all__ = [
    "POLICIES",
    "segment_size",
    "CheckpointedSegment",
    "CheckpointedTransformerLayer",
    "apply_checkpointing",
    "undo_checkpointing",
    "predicted_activation_bytes",
]

POLICIES = ("none", "every_layer", "every_k", "sqrt", "selective")

#: Operators whose outputs the selective policy saves: the expensive ones (matrix multiplies
#: and attention). Everything else (norms, GELU, dropout, adds) is recomputed.
_SAVED_OPS = {
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten.bmm.default,
    torch.ops.aten.baddbmm.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
}


def _save_matmuls(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in _SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_context():
    return create_selective_checkpoint_contexts(_save_matmuls)


def segment_size(policy: str, num_layers: int, k: int | None = None) -> int:
    """Layers per checkpointed segment for ``policy`` on ``num_layers`` layers (§20.3.1):
    1 for every_layer and selective, ``k`` for every_k, ⌈√L⌉ for sqrt, 0 for none."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    num_layers = check_int("num_layers", num_layers, 1)
    if policy == "every_k":
        if k is None:
            raise ValueError("policy 'every_k' needs k, an int >= 1")
        return check_int("k", k, 1)
    if k is not None:
        raise ValueError(f"k is only used by policy 'every_k', not {policy!r}")
    if policy == "none":
        return 0
    if policy == "sqrt":
        return math.ceil(math.sqrt(num_layers))
    return 1


class CheckpointedSegment(nn.Module):
    """Consecutive encoder layers run as one checkpointed unit: only the segment's input is
    saved; its layers are recomputed during backward. ``selective=True`` keeps matmul and
    attention outputs (of a one-layer segment) and recomputes the rest."""

    def __init__(self, layers: list[TransformerBlock], *, selective: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.selective = selective

    def _run(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, keep)
        return x

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        if self.selective:
            return checkpoint(
                self._run, x, keep, use_reentrant=False, context_fn=_selective_context
            )
        return checkpoint(self._run, x, keep, use_reentrant=False)


class CheckpointedTransformerLayer(nn.Module):
    """Listing L7 on the current API: one encoder layer whose attention block and feed-forward
    block are each checkpointed (``use_reentrant=False``), so each keeps only its input."""

    def __init__(self, layer: TransformerBlock):
        super().__init__()
        self.attention = layer.attention
        self.feed_forward = layer.feed_forward

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        x = x + checkpoint(self.attention, x, keep, use_reentrant=False)
        return x + checkpoint(self.feed_forward, x, use_reentrant=False)


def apply_checkpointing(
    model: TransformerEncoder | WeightedBagEncoder, policy: str, *, k: int | None = None
) -> TransformerEncoder | WeightedBagEncoder:
    """Regroup ``model.layers`` under ``policy`` (see the module docstring) and return the model
    (changed in place; the parameters are the same objects, so an optimizer built before keeps
    working). Gradients equal the plain model's; apply to a model that is not checkpointed yet.

    A ``WeightedBagEncoder`` is one layer: every policy but "none" recomputes its pooled rows
    during backward (``checkpoint_pooling``), keeping only the token ids."""
    if isinstance(model, WeightedBagEncoder):
        if model.checkpoint_pooling:
            raise ValueError("model is already checkpointed: apply a policy to a plain model")
        model.checkpoint_pooling = segment_size(policy, 1, k) > 0
        return model
    if not isinstance(model, TransformerEncoder):
        raise TypeError(
            f"model must be a TransformerEncoder or WeightedBagEncoder, got {type(model).__name__}"
        )
    layers = list(model.layers)
    if not all(isinstance(layer, TransformerBlock) for layer in layers):
        raise ValueError("model is already checkpointed: apply a policy to a plain model")
    size = segment_size(policy, len(layers), k)
    if size == 0:
        return model
    model.layers = nn.ModuleList(
        CheckpointedSegment(layers[i : i + size], selective=policy == "selective")
        for i in range(0, len(layers), size)
    )
    return model


def undo_checkpointing(model: nn.Module) -> nn.Module:
    """Undo :func:`apply_checkpointing` on every encoder inside ``model``, in place, and return
    it: a bag pools without recomputing, a Transformer's checkpointed segments become its plain
    layers again (the same parameter objects, in the same order)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    for module in model.modules():
        if isinstance(module, WeightedBagEncoder):
            module.checkpoint_pooling = False
        elif isinstance(module, TransformerEncoder):
            module.layers = nn.ModuleList(
                layer
                for unit in module.layers
                for layer in (unit.layers if isinstance(unit, CheckpointedSegment) else [unit])
            )
    return model


def predicted_activation_bytes(
    policy: str,
    num_layers: int,
    *,
    layer_bytes: int,
    boundary_bytes: int,
    selective_layer_bytes: int | None = None,
    other_bytes: int = 0,
    k: int | None = None,
) -> dict[str, int]:
    """Activation bytes a policy keeps, predicted from one layer's measurements (§20.3.1).

    ``layer_bytes``: what one plain layer saves for backward; ``boundary_bytes``: one layer's
    input (what a checkpointed segment saves); ``selective_layer_bytes``: what one layer saves
    under the selective policy; ``other_bytes``: embeddings, final norm and pooling.
    Returns ``saved`` (kept from the forward until backward: every segment's input, or every
    layer's saved tensors) and ``backward_peak`` (``saved`` plus one segment recomputed).
    The sqrt policy makes both grow as √L: ⌈L/s⌉ boundaries + s layers with s = ⌈√L⌉.
    """
    size = segment_size(policy, num_layers, k)
    layer_bytes = check_int("layer_bytes", layer_bytes, 0)
    boundary_bytes = check_int("boundary_bytes", boundary_bytes, 0)
    other_bytes = check_int("other_bytes", other_bytes, 0)
    if selective_layer_bytes is not None:
        selective_layer_bytes = check_int("selective_layer_bytes", selective_layer_bytes, 0)
    if policy == "none":
        saved = num_layers * layer_bytes
        return {"saved": saved + other_bytes, "backward_peak": saved + other_bytes}
    if policy == "selective":
        if selective_layer_bytes is None:
            raise ValueError("policy 'selective' needs selective_layer_bytes")
        saved = num_layers * selective_layer_bytes
        return {"saved": saved + other_bytes, "backward_peak": saved + layer_bytes + other_bytes}
    segments = math.ceil(num_layers / size)
    saved = segments * boundary_bytes + other_bytes
    return {"saved": saved, "backward_peak": saved + min(size, num_layers) * layer_bytes}
