"""The small embedding models every notebook shares (§20.1–§20.4).

- ``BagOfEmbeddingsEncoder``: an embedding table (``nn.EmbeddingBag``, mean of the token rows)
  followed by a linear projection. Almost all of its parameters are the table, as in
  recommendation models and word vectors, so it shows what large tables cost.
- ``TransformerEncoder``: token + position embeddings, ``n_layers`` pre-norm Transformer blocks,
  a final LayerNorm, mean pooling over the real (non-padding) tokens, and an optional
  projection. Its activations grow with depth and sequence length, so it shows what
  activation memory costs (§20.3.1). Each block's attention and feed-forward parts are
  separate submodules, so they can be checkpointed one by one (listing L7).

Both take a ``[batch, length]`` LongTensor of token ids padded with ``padding_idx`` and return one
vector per row. Ids are validated: an id outside ``[0, vocab_size)`` raises, never a zero row.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from chapter20.core.checks import check_int, check_real


def check_ids(ids: torch.Tensor, num_embeddings: int, name: str = "ids") -> None:
    """Raise unless ``ids`` is an integer tensor with every value in ``[0, num_embeddings)``.

    Embedding lookups must never turn a bad id into a zero row or a wrong row (§20.1).
    """
    num_embeddings = check_int("num_embeddings", num_embeddings, 1)
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of integer ids, got {type(ids).__name__}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name} must have an integer dtype, got {ids.dtype}")
    if ids.numel() == 0:
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= num_embeddings:
        bad = low if low < 0 else high
        raise IndexError(f"{name} contains {bad}, outside the valid range [0, {num_embeddings})")


def _check_dropout(dropout: float) -> float:
    dropout = check_real("dropout", dropout)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    return dropout


def _check_rows_not_empty(keep: torch.Tensor) -> None:
    # An all-padding row has no tokens to average: its "embedding" would be made up.
    empty = (~keep.any(dim=1)).nonzero().flatten()
    if empty.numel():
        raise ValueError(
            f"every row of ids needs a non-padding token; rows {empty.tolist()} have none"
        )


def count_parameters(model: nn.Module) -> int:
    """Number of parameters of ``model`` (shared parameters counted once)."""
    return sum(p.numel() for p in model.parameters())


class BagOfEmbeddingsEncoder(nn.Module):
    """Text or item encoder = mean of its tokens' embedding rows, then a linear projection.

    The embedding-table model of §20.1 (listing L2's embedding + projection). ``padding_idx``
    rows are excluded from the mean and get no gradient; ``sparse=True`` makes the table's
    gradient a sparse tensor (only the rows a batch touched), for SGD / SparseAdam (§20.3.2).
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int = 128,
        output_dim: int | None = None,
        *,
        padding_idx: int | None = 0,
        sparse: bool = False,
    ):
        super().__init__()
        output_dim = embedding_dim if output_dim is None else output_dim
        for name, value in (
            ("vocab_size", vocab_size),
            ("embedding_dim", embedding_dim),
            ("output_dim", output_dim),
        ):
            check_int(name, value, 1)
        if padding_idx is not None and not 0 <= check_int("padding_idx", padding_idx) < vocab_size:
            raise ValueError(f"padding_idx must be None or in [0, {vocab_size}), got {padding_idx}")
        self.vocab_size = vocab_size
        self.padding_idx = padding_idx
        self.embedding = nn.EmbeddingBag(
            vocab_size, embedding_dim, mode="mean", padding_idx=padding_idx, sparse=sparse
        )
        self.projection = nn.Linear(embedding_dim, output_dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids``: ``[batch, length]`` padded token ids → ``[batch, output_dim]``."""
        check_ids(ids, self.vocab_size)
        if ids.dim() != 2:
            raise ValueError(f"ids must be 2-D [batch, length], got shape {tuple(ids.shape)}")
        if self.padding_idx is not None and ids.numel():
            _check_rows_not_empty(ids != self.padding_idx)
        return self.projection(self.embedding(ids))


class AttentionBlock(nn.Module):
    """Pre-norm multi-head self-attention; returns the residual branch (not yet added)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        d_model, n_heads = check_int("d_model", d_model, 1), check_int("n_heads", n_heads, 1)
        dropout = _check_dropout(dropout)
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.dropout = dropout
        self.norm = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.out_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (t.view(batch, length, self.n_heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=keep[:, None, None, :],
            dropout_p=self.dropout if self.training else 0.0,
        )
        return self.out_dropout(self.out(attended.transpose(1, 2).reshape(batch, length, width)))


class FeedForwardBlock(nn.Module):
    """Pre-norm two-layer MLP with GELU; returns the residual branch (not yet added)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        d_model, d_ff = check_int("d_model", d_model, 1), check_int("d_ff", d_ff, 1)
        self.norm = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(_check_dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.gelu(self.up(self.norm(x)))))


class TransformerBlock(nn.Module):
    """One encoder layer: ``x + attention(x)``, then ``x + feed_forward(x)``."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.attention = AttentionBlock(d_model, n_heads, dropout)
        self.feed_forward = FeedForwardBlock(d_model, d_ff, dropout)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(x, keep)
        return x + self.feed_forward(x)


class TransformerEncoder(nn.Module):
    """Small Transformer text encoder with mean pooling (§20.2–§20.3 experiments).

    ``forward(ids)`` with ``ids`` of shape ``[batch, length]`` (``length <= max_len``, padded
    with ``padding_idx``) returns ``[batch, output_dim or d_model]``. Padding tokens are masked
    out of attention and of the mean. Every row must hold at least one real token.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 128,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int | None = None,
        max_len: int = 128,
        dropout: float = 0.1,
        output_dim: int | None = None,
        padding_idx: int = 0,
    ):
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        for name, value in dict(
            vocab_size=vocab_size,
            d_model=d_model,
            n_heads=n_heads,
            n_layers=n_layers,
            d_ff=d_ff,
            max_len=max_len,
        ).items():
            check_int(name, value, 1)
        if output_dim is not None:
            check_int("output_dim", output_dim, 1)
        dropout = _check_dropout(dropout)
        if not 0 <= check_int("padding_idx", padding_idx) < vocab_size:
            raise ValueError(f"padding_idx must be in [0, {vocab_size}), got {padding_idx}")
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.padding_idx = padding_idx
        self.token_embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.embedding_dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.projection = nn.Linear(d_model, output_dim) if output_dim else nn.Identity()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        check_ids(ids, self.vocab_size)
        if ids.dim() != 2 or ids.shape[1] > self.max_len:
            raise ValueError(
                f"ids must be [batch, length] with length <= max_len={self.max_len}, "
                f"got shape {tuple(ids.shape)}"
            )
        keep = ids != self.padding_idx
        if ids.numel():
            _check_rows_not_empty(keep)
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.embedding_dropout(self.token_embedding(ids) + self.position_embedding(positions))
        for layer in self.layers:
            x = layer(x, keep)
        x = self.norm(x)
        weights = keep.unsqueeze(-1).to(x.dtype)
        pooled = (x * weights).sum(dim=1) / weights.sum(dim=1)
        return self.projection(pooled)


class WeightedBagEncoder(nn.Module):
    """Text encoder = weighted mean of its tokens' embedding rows, one learned weight per token
    (§20.6, the capstone encoder).

    ``forward(ids)`` (``[batch, length]``, padded with ``padding_idx``) returns ``Σ_t w[id_t] ·
    E[id_t] / Σ_t w[id_t]`` over each row's real tokens, ``[batch, dim]``. The weights are
    ``exp(log_weight)``, so they stay positive; ``token_weights`` (e.g. inverse document
    frequencies) sets them at the start, 1 everywhere by default, and ``learn_weights=False``
    freezes them. It is the bag of embeddings of §20.1 with the lexical weighting of TF-IDF, and
    nothing else: almost every parameter is in the table ``embedding`` (an ``nn.Embedding``, or any
    module with the same call, e.g. a ``chapter20.techniques.sharding.ShardedEmbedding``;
    ``sparse=True`` gives sparse table gradients).

    ``checkpoint_pooling`` (set by
    ``chapter20.techniques.activation_checkpointing.apply_checkpointing``, §20.3.1) recomputes the
    gathered rows during backward instead of keeping them: they are the model's only large
    activation (``batch × length × dim``), so this is its activation checkpointing.
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int = 256,
        *,
        padding_idx: int = 0,
        token_weights: torch.Tensor | None = None,
        learn_weights: bool = True,
        sparse: bool = False,
    ):
        super().__init__()
        check_int("vocab_size", vocab_size, 1)
        check_int("embedding_dim", embedding_dim, 1)
        padding_idx = check_int("padding_idx", padding_idx, 0, vocab_size - 1)
        if token_weights is None:
            token_weights = torch.ones(vocab_size)
        token_weights = torch.as_tensor(token_weights, dtype=torch.float32)
        if token_weights.shape != (vocab_size,):
            raise ValueError(
                f"token_weights must have shape ({vocab_size},), got {tuple(token_weights.shape)}"
            )
        real = torch.ones(vocab_size, dtype=torch.bool)
        real[padding_idx] = False
        if not bool((token_weights[real] > 0).all()) or not bool(token_weights.isfinite().all()):
            raise ValueError("token_weights must be finite and > 0 (padding excepted)")
        self.vocab_size = vocab_size
        self.padding_idx = padding_idx
        self.embedding = nn.Embedding(vocab_size, embedding_dim, sparse=sparse)
        # Rows of norm ≈ 1 whatever the width, so the learning rate does not depend on it.
        nn.init.normal_(self.embedding.weight, std=embedding_dim**-0.5)
        with torch.no_grad():
            self.embedding.weight[padding_idx].zero_()
        log_weight = token_weights.clamp_min(torch.finfo(torch.float32).tiny).log()
        log_weight[padding_idx] = 0.0
        self.log_weight = nn.Parameter(log_weight, requires_grad=learn_weights)
        self.checkpoint_pooling = False

    @property
    def embedding_dim(self) -> int:
        return self.embedding.embedding_dim

    def token_weights(self) -> torch.Tensor:
        """The current weight of every token (padding's is not used)."""
        return self.log_weight.detach().exp()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        check_ids(ids, self.vocab_size)
        if ids.dim() != 2:
            raise ValueError(f"ids must be 2-D [batch, length], got shape {tuple(ids.shape)}")
        keep = ids != self.padding_idx
        if ids.numel():
            _check_rows_not_empty(keep)
        if self.checkpoint_pooling and torch.is_grad_enabled():
            return checkpoint(self._pool, ids, keep, use_reentrant=False)
        return self._pool(ids, keep)

    def _pool(self, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        weights = self.log_weight[ids].exp() * keep
        weights = weights / weights.sum(dim=1, keepdim=True)
        rows = self.embedding(ids)
        return (rows * weights.unsqueeze(-1).to(rows.dtype)).sum(dim=1)
