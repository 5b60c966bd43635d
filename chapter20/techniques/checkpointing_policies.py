"""§20.3.1 The checkpointing policies side by side, as notebook 04 compares them.

- :data:`POLICY_CASES`: every policy of :func:`apply_checkpointing` with its label, and listing
  L7's layer; :func:`checkpointed`: a copy of a model under one of them.
- :func:`policy_roles` (:data:`ROLES`): what each layer keeps for backward and what it
  recomputes, under each policy, from the segments ``apply_checkpointing`` builds.
- :func:`gradient_proof`: every policy gives the plain model's gradients, dropout on.
- :func:`layer_measurements`: one layer's activation bytes, measured, the inputs of
  :func:`predicted_activation_bytes`; :func:`predicted_time_ratio`: the step time predicted.

The models are the shared Transformer encoder (:func:`make_encoder`) on seeded token ids
(:func:`encoder_ids`).
"""

from __future__ import annotations

import copy

import pandas as pd
import torch
from torch import nn

from chapter20.core.checks import check_int
from chapter20.core.device import set_seed
from chapter20.core.measure import peak_memory
from chapter20.core.models import TransformerEncoder
from chapter20.techniques.activation_checkpointing import (
    CheckpointedTransformerLayer,
    apply_checkpointing,
    segment_size,
)

__all__ = [
    "POLICY_CASES",
    "make_encoder",
    "checkpointed",
    "encoder_ids",
    "gradient_proof",
    "retained_bytes",
    "layer_measurements",
    "ROLES",
    "policy_roles",
    "predicted_time_ratio",
]


#: (label, policy, k) of every policy notebook 04 compares, plus listing L7's layer (policy
#: ``"L7"``: :class:`CheckpointedTransformerLayer` around every layer).
POLICY_CASES = (
    ("none", "none", None),
    ("every_layer", "every_layer", None),
    ("every_k (k=4)", "every_k", 4),
    ("sqrt", "sqrt", None),
    ("selective", "selective", None),
    ("listing L7", "L7", None),
)


def make_encoder(
    layers: int, *, vocab: int = 1_000, d_model: int = 64, dropout: float = 0.0, seed: int = 0
) -> TransformerEncoder:
    """The shared Transformer encoder at ``layers`` deep (``d_model`` dims, 4 heads, 64 tokens
    max), its weights drawn after ``set_seed(seed)``."""
    layers, vocab = check_int("layers", layers, 1), check_int("vocab", vocab, 2)
    d_model, seed = check_int("d_model", d_model, 4), check_int("seed", seed, 0)
    set_seed(seed)
    return TransformerEncoder(
        vocab, d_model=d_model, n_heads=4, n_layers=layers, max_len=64, dropout=dropout
    )


def checkpointed(model: TransformerEncoder, policy: str, k: int | None = None) -> nn.Module:
    """A deep copy of ``model`` under ``policy``; ``"L7"`` wraps every layer as listing L7."""
    model = copy.deepcopy(model)
    if policy == "L7":
        model.layers = nn.ModuleList(CheckpointedTransformerLayer(layer) for layer in model.layers)
        return model
    return apply_checkpointing(model, policy, k=k)


def encoder_ids(batch: int, seq_len: int, vocab: int = 1_000, seed: int = 0) -> torch.Tensor:
    """A seeded ``[batch, seq_len]`` batch of token ids in ``1..vocab-1`` (no padding) for
    :func:`make_encoder`'s models (at most 64 tokens a row)."""
    batch, seq_len = check_int("batch", batch, 1), check_int("seq_len", seq_len, 1, 64)
    vocab, seed = check_int("vocab", vocab, 2), check_int("seed", seed, 0)
    return torch.randint(1, vocab, (batch, seq_len), generator=torch.Generator().manual_seed(seed))


def gradient_proof(layers: int = 7, dropout: float = 0.1, batch: int = 4, seq_len: int = 16):
    """Max gradient difference of every policy against the plain model, dropout on (§20.3.1).
    Each run starts from the same RNG state, so a correct recomputation draws the same masks."""
    base = make_encoder(layers, dropout=dropout)
    ids = encoder_ids(batch, seq_len, 1_000)

    def gradients(model: nn.Module) -> list[torch.Tensor]:
        set_seed(123)
        model.zero_grad(set_to_none=True)
        model(ids).square().sum().backward()
        return [p.grad for p in model.parameters()]

    reference = gradients(base)
    records = []
    for label, policy, k in POLICY_CASES[1:]:
        got = gradients(checkpointed(base, policy, k))
        diff = max(float((a - b).abs().max()) for a, b in zip(got, reference))
        records.append({"policy": label, "layers": layers, "max_abs_diff": diff})
    return pd.DataFrame(records)


def retained_bytes(model: nn.Module, ids: torch.Tensor) -> int:
    """The bytes autograd keeps from ``model``'s forward pass on ``ids`` for its backward
    (``core.measure.peak_memory``'s ``retained_bytes``: the selective policy's cache too)."""
    return peak_memory(lambda: model(ids), model=model, inputs=ids).retained_bytes


def layer_measurements(batch: int = 16, seq_len: int = 64, d_model: int = 64) -> dict[str, int]:
    """One layer's activation bytes, measured on 1- and 2-layer encoders: ``layer_bytes`` (plain),
    ``selective_layer_bytes``, ``boundary_bytes`` (a checkpointed layer's saved input) and
    ``other_bytes`` (embeddings, norm, pooling) — the inputs of the prediction
    (:func:`predicted_activation_bytes`)."""
    ids = encoder_ids(batch, seq_len, 1_000)
    one, two = make_encoder(1, d_model=d_model), make_encoder(2, d_model=d_model)
    layer = retained_bytes(two, ids) - retained_bytes(one, ids)
    selective = retained_bytes(checkpointed(two, "selective"), ids) - retained_bytes(
        checkpointed(one, "selective"), ids
    )
    boundary = retained_bytes(checkpointed(two, "every_layer"), ids) - retained_bytes(
        checkpointed(one, "every_layer"), ids
    )
    return {
        "layer_bytes": layer,
        "selective_layer_bytes": selective,
        "boundary_bytes": boundary,
        "other_bytes": retained_bytes(one, ids) - layer,
    }


#: What each layer does between forward and backward under a policy (:func:`policy_roles`).
ROLES = {
    "kept": "keeps every tensor it saves",
    "input": "keeps its input, recomputed in backward",
    "inside": "keeps nothing, recomputed from its segment's input",
    "selective": "keeps matmul and attention outputs, recomputes the rest",
    "blocks": "keeps each block's input (2), recomputed in backward",
}


def policy_roles(layers: int = 8, cases=POLICY_CASES) -> pd.DataFrame:
    """Section 1 of notebook 04: for each policy of ``cases`` (rows) and each layer (columns,
    1 = nearest the embeddings), its role, a key of :data:`ROLES`, and ``segment`` (the index
    of the checkpointed unit it belongs to), from ``segment_size`` as ``apply_checkpointing``
    deals the layers."""
    layers = check_int("layers", layers, 1)
    records = []
    for label, policy, k in cases:
        size = 1 if policy == "L7" else segment_size(policy, layers, k)
        for layer in range(layers):
            if size == 0:
                role = "kept"
            elif policy in ("selective", "L7"):
                role = "selective" if policy == "selective" else "blocks"
            else:
                role = "input" if layer % size == 0 else "inside"
            segment = layer if size == 0 else layer // size
            records.append({"policy": label, "layer": layer + 1, "role": role, "segment": segment})
    return pd.DataFrame(records)


def predicted_time_ratio(label: str) -> float:
    """The step time of the policy labelled ``label`` (of :data:`POLICY_CASES`) over no
    checkpointing, predicted (notebook 04, section 3): backward costs about two forwards, so
    recomputing every layer once adds one forward to three, 4/3; the selective policy
    recomputes only pointwise operations, nearly free by FLOPs, 1."""
    policies = dict((case[0], case[1]) for case in POLICY_CASES)
    if label not in policies:
        raise ValueError(f"label must be one of {', '.join(policies)}, got {label!r}")
    policy = policies[label]
    return 1.0 if policy in ("none", "selective") else 4 / 3
