"""§20.6 The trained encoder as a file: saved without any training state, loaded in one call.

:func:`save_encoder` writes the encoder's weights, its architecture (by name and keyword
arguments) and its tokeniser into one ``torch.save`` file of plain tensors, strings and lists,
so :func:`load_encoder` reads it with ``weights_only=True`` (no pickled code runs) and needs
nothing of the run that trained it: no optimizer, no checkpoint, no corpus.

    encoder = load_encoder("encoder.pt")
    vectors = encoder.encode(["A sentence.", "Another one."])   # [2, d], unit rows, float32
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from chapter20.core.checks import check_int
from chapter20.core.models import TransformerEncoder, WeightedBagEncoder
from chapter20.core.paths import atomic_torch_save
from chapter20.vocab.tokenizers import pad_batch, tokenizer_from_spec

__all__ = ["ENCODER_FORMAT", "MODEL_KINDS", "TextEncoder", "load_encoder", "save_encoder"]

#: Written into every encoder file; a file of another format is refused.
ENCODER_FORMAT = "chapter20-encoder/1"
#: Architectures an encoder file can hold, by the name stored in it.
MODEL_KINDS: dict[str, type[nn.Module]] = {
    "weighted_bag": WeightedBagEncoder,
    "transformer": TransformerEncoder,
}


def _kind_of(model: nn.Module) -> str:
    for kind, cls in MODEL_KINDS.items():
        if type(model) is cls:
            return kind
    raise TypeError(
        f"model must be one of {[c.__name__ for c in MODEL_KINDS.values()]}, "
        f"got {type(model).__name__}"
    )


class TextEncoder:
    """A trained encoder with its tokeniser (§20.6): raw texts in, unit vectors out.

    ``encode(texts)`` tokenises each text (the tokeniser the model trained with), runs the
    model in eval mode without gradients in batches of ``batch_size``, and returns
    ``[len(texts), dim]`` float32 rows of L2 norm 1 on ``device``. A Transformer reads at most
    its ``max_len`` first tokens.
    """

    def __init__(self, model: nn.Module, tokenizer, device: torch.device | str = "cpu"):
        self.kind = _kind_of(model)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.max_len = getattr(model, "max_len", None)

    def encode(self, texts: list[str], batch_size: int = 256) -> torch.Tensor:
        """One L2-normalised float32 row per text. ``texts`` must be a non-empty list of str;
        a text with no word (e.g. empty or punctuation only) raises ValueError."""
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
            raise TypeError(f"texts must be a list of str, got {type(texts).__name__}")
        if not texts:
            raise ValueError("texts is empty: give at least one text to encode")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}")
        batch_size = check_int("batch_size", batch_size, 1)
        rows = [self.tokenizer.encode(text) for text in texts]
        for i, row in enumerate(rows):
            if not len(row):
                raise ValueError(f"texts[{i}] has no word to encode: {texts[i][:40]!r}")
        out = []
        with torch.inference_mode():
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                length = self.max_len or max(len(r) for r in chunk)
                ids = pad_batch([np.asarray(r)[: self.max_len] for r in chunk], length)
                out.append(self.model(ids.to(self.device)).float())
        return F.normalize(torch.cat(out), dim=-1)

    @property
    def dim(self) -> int:
        """Width of the vectors :meth:`encode` returns."""
        if isinstance(self.model, WeightedBagEncoder):
            return self.model.embedding_dim
        projection = self.model.projection
        if isinstance(projection, nn.Linear):
            return projection.out_features
        return self.model.token_embedding.embedding_dim


def save_encoder(
    path: str | os.PathLike,
    model: nn.Module,
    tokenizer,
    model_kwargs: dict[str, Any],
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write ``model`` (a kind of :data:`MODEL_KINDS`, rebuilt from ``model_kwargs``), its
    tokeniser and JSON-like ``metadata`` to ``path`` atomically (§20.6). Tensors are saved on
    the CPU in float32 whatever the training precision."""
    kind = _kind_of(model)
    state = {k: v.detach().to("cpu", torch.float32) if v.is_floating_point() else v.cpu()
             for k, v in model.state_dict().items()}  # fmt: skip
    kwargs = {k: (v.detach().cpu() if isinstance(v, torch.Tensor) else v)
              for k, v in model_kwargs.items()}  # fmt: skip
    payload = {
        "format": ENCODER_FORMAT,
        "kind": kind,
        "kwargs": kwargs,
        "state_dict": state,
        "tokenizer": tokenizer.spec(),
        "metadata": dict(metadata or {}),
    }
    return atomic_torch_save(payload, path)


def load_encoder(path: str | os.PathLike, device: torch.device | str = "cpu") -> TextEncoder:
    """The encoder saved at ``path`` as a :class:`TextEncoder` on ``device`` (CPU by default)
    (§20.6). Reads with ``weights_only=True``; a file that is not an encoder file raises
    ValueError, a missing one FileNotFoundError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no encoder file at {path}")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != ENCODER_FORMAT:
        raise ValueError(f"{path} is not a chapter20 encoder file ({ENCODER_FORMAT})")
    if payload["kind"] not in MODEL_KINDS:
        raise ValueError(f"{path} holds an unknown model kind {payload['kind']!r}")
    model = MODEL_KINDS[payload["kind"]](**payload["kwargs"])
    model.load_state_dict(payload["state_dict"])
    encoder = TextEncoder(model, tokenizer_from_spec(payload["tokenizer"]), device)
    encoder.metadata = payload["metadata"]
    return encoder
