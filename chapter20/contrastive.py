"""Contrastive losses for embedding training (§20.1, §20.2.1).

InfoNCE with in-batch negatives: row i of ``queries`` should match row i of ``keys``, and every
other key in the batch is a negative. The more rows, the more negatives (the chapter's reason
for 4K–32K batches, claim C01). Cross-rank negatives and gradient caching build on this.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def _check_temperature(temperature: float | torch.Tensor) -> None:
    if isinstance(temperature, torch.Tensor):
        if temperature.numel() != 1:
            raise ValueError(f"temperature must be a scalar, got shape {tuple(temperature.shape)}")
        value = temperature.detach().item()
    else:
        value = float(temperature)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"temperature must be a finite number > 0, got {value}")


def info_nce(
    queries: torch.Tensor,
    keys: torch.Tensor,
    temperature: float | torch.Tensor = 0.05,
    *,
    symmetric: bool = False,
) -> torch.Tensor:
    """Mean InfoNCE loss of ``queries[i]`` against its positive ``keys[i]`` (§20.2.1).

    Both inputs are ``[batch, dim]``; they are L2-normalised, so the logits are cosine
    similarities divided by ``temperature`` (a float or a learnable scalar tensor, > 0).
    ``symmetric=True`` averages the query→key and key→query losses (as in CLIP).
    The loss is computed in float32 whatever the input dtype, since the softmax over the
    batch is where half precision loses accuracy.
    """
    if queries.dim() != 2 or queries.shape != keys.shape:
        raise ValueError(
            "queries and keys must both be [batch, dim] with the same shape, got "
            f"{tuple(queries.shape)} and {tuple(keys.shape)}"
        )
    if queries.shape[0] == 0:
        raise ValueError("queries and keys must hold at least one pair")
    _check_temperature(temperature)
    q = F.normalize(queries.float(), dim=-1)
    k = F.normalize(keys.float(), dim=-1)
    logits = q @ k.T / temperature
    labels = torch.arange(q.shape[0], device=q.device)
    loss = F.cross_entropy(logits, labels)
    if symmetric:
        loss = (loss + F.cross_entropy(logits.T, labels)) / 2
    return loss


def contrastive_loss(
    model: nn.Module,
    anchors: torch.Tensor,
    positives: torch.Tensor,
    temperature: float = 0.05,
) -> torch.Tensor:
    """InfoNCE of ``model(anchors)`` against ``model(positives)``: one shared encoder (§20.1)."""
    return info_nce(model(anchors), model(positives), temperature)


def contrastive_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    anchors: torch.Tensor,
    positives: torch.Tensor,
    temperature: float = 0.05,
) -> float:
    """One plain training step: encode both sides, InfoNCE, backward, optimizer step.

    The reference step that every memory technique of §20.2–§20.3 is compared against.
    Returns the loss as a float; gradients are cleared (set to None) after the step.
    """
    loss = contrastive_loss(model, anchors, positives, temperature)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach().item()
