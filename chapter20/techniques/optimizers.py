"""§20.3.2 Memory-efficient optimizers.

Adam and AdamW keep two float32 moments per parameter: 8 bytes of state for every 4-byte
weight. The chapter's ``MemoryEfficientOptimizer`` (listing L8) picks fused AdamW, SGD with
Nesterov momentum (one buffer, 4 bytes) or bitsandbytes' 8-bit Adam (two uint8 moments plus one
float32 scale per block of 256 values: about 2 bytes), and prints when it falls back.
:func:`make_optimizer` does the same with warnings, on CPU and CUDA, and can keep the state of
embedding tables in 32 bits inside the same optimizer (bitsandbytes' advice: rare rows get
rare, large updates that 8-bit state quantises badly). For tables too large for any dense
state, :func:`sparse_optimizers` updates only the rows a batch touched.
:func:`optimizer_state_bytes` reports what an optimizer really holds. :class:`CoarseStateAdamW`
is a deliberately harmful variant, for quality comparisons that must show they can detect harm:
AdamW whose moments are stored linearly quantised to a few bits per block.
:func:`quantise_dynamic` / :func:`dequantise_dynamic` are the reference of what an 8-bit
optimizer stores: one byte per value (an index into a 256-level dynamic code) and one float32
scale per block. :func:`adamw_reference_step` and :func:`sgd_nesterov_reference_step` are the
few lines that update AdamW's two moments and SGD's one momentum buffer
(``chapter20.techniques.optimizer_proofs`` proves these references against the kernels).
"""

from __future__ import annotations

import importlib
import warnings
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
from torch import nn

from chapter20.core.checks import check_int, check_positive
from chapter20.core.device import check_dependency

# pandas costs every torchrun worker half a second to import; only the state table needs it.
if TYPE_CHECKING:
    import pandas as pd


def _check_rates(lr: float, weight_decay: float, momentum: float) -> tuple[float, float, float]:
    """The learning rate (> 0), weight decay and momentum (>= 0), each a finite number."""
    return (
        check_positive("lr", lr),
        check_positive("weight_decay", weight_decay, zero=True),
        check_positive("momentum", momentum, zero=True),
    )


__all__ = [
    "OPTIMIZER_KINDS",
    "bitsandbytes_available",
    "make_optimizer",
    "bitsandbytes_optimizer",
    "sparse_optimizers",
    "MultiOptimizer",
    "optimizer_state_bytes",
    "CoarseStateAdamW",
    "quantise_blockwise",
    "quantise_dynamic",
    "dequantise_dynamic",
    "adamw_reference_step",
    "sgd_nesterov_reference_step",
    "dynamic_code",
]

OPTIMIZER_KINDS = (
    "adamw",
    "adamw_fused",
    "sgd_nesterov",
    "adam8bit",
    "adamw8bit",
    "paged_adamw8bit",
)
_BNB_CLASSES = {
    "adam8bit": "Adam8bit",
    "adamw8bit": "AdamW8bit",
    "paged_adamw8bit": "PagedAdamW8bit",
}


def bitsandbytes_available() -> bool:
    """Whether bitsandbytes imports here (its import logs kernel notices; they are silenced)."""
    return check_dependency("bitsandbytes").ok


def _parameters(params) -> list:
    """Parameters or parameter groups as a list, each group's ``params`` a list too (a
    generator would be used up by the first reader)."""
    params = list(params.parameters() if isinstance(params, nn.Module) else params)
    if not params:
        raise ValueError("params must hold at least one parameter (or parameter group)")
    return [{**p, "params": list(p["params"])} if isinstance(p, dict) else p for p in params]


def _tensors(params: list) -> list[torch.Tensor]:
    out = []
    for item in params:
        out.extend(item["params"] if isinstance(item, dict) else [item])
    return out


def make_optimizer(
    params: Iterable | nn.Module,
    kind: str,
    lr: float,
    *,
    weight_decay: float | None = None,
    momentum: float = 0.9,
    state_32bit: Iterable[nn.Module | torch.Tensor] = (),
    **kwargs,
) -> torch.optim.Optimizer:
    """An optimizer of ``kind`` (one of ``OPTIMIZER_KINDS``) for ``params`` (§20.3.2).

    - ``adamw``: ``torch.optim.AdamW``; ``adamw_fused``: with ``fused=True`` where the device
      supports it, else a warning and the plain one.
    - ``sgd_nesterov``: SGD with Nesterov ``momentum`` (one buffer per parameter).
    - ``adam8bit`` / ``adamw8bit`` / ``paged_adamw8bit``: bitsandbytes' 8-bit optimizers (CPU and
      CUDA). Paged state needs CUDA: elsewhere a warning and ``adamw8bit``. Without a working
      bitsandbytes: a warning and ``torch.optim.AdamW`` (32-bit state).
    - ``state_32bit``: modules (e.g. ``nn.Embedding`` tables, whose ``weight`` is meant) or
      parameters that keep 32-bit state under the 8-bit optimizers, inside the same optimizer.

    ``params`` may be a module, parameters or parameter groups (dicts); groups keep their own
    options (``lr``, ``weight_decay``, ...). ``weight_decay`` None means the kind's default
    (0.01, as ``torch.optim.AdamW``; 0 for ``adam8bit``, which like Adam decays only if asked);
    a value given is always used. The result is one ``torch.optim.Optimizer``: LR schedulers
    and ``state_dict``/``load_state_dict`` work on it. ``kwargs`` go to the optimizer.
    ValueError for an unknown kind or a bad ``lr``/``weight_decay``.
    """
    if kind not in OPTIMIZER_KINDS:
        raise ValueError(f"kind must be one of {', '.join(OPTIMIZER_KINDS)}, got {kind!r}")
    if weight_decay is None:
        weight_decay = 0.0 if kind == "adam8bit" else 0.01
    lr, weight_decay, momentum = _check_rates(lr, weight_decay, momentum)
    params = _parameters(params)
    state_32bit = list(state_32bit)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **kwargs)
    if kind == "adamw_fused":
        try:
            return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True, **kwargs)
        except (RuntimeError, ValueError) as error:
            warnings.warn(
                f"fused AdamW is not available here ({error}); using torch.optim.AdamW",
                stacklevel=2,
            )
            return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **kwargs)
    if kind == "sgd_nesterov":
        return torch.optim.SGD(
            params, lr=lr, momentum=momentum, nesterov=True, weight_decay=weight_decay, **kwargs
        )
    return bitsandbytes_optimizer(params, kind, lr, weight_decay, state_32bit, **kwargs)


def bitsandbytes_optimizer(
    params: list, kind: str, lr: float, weight_decay: float, state_32bit=(), **kwargs
) -> torch.optim.Optimizer:
    """The 8-bit branch of :func:`make_optimizer` (§20.3.2): bitsandbytes' optimizer of ``kind``
    (``adam8bit``, ``adamw8bit`` or ``paged_adamw8bit``) for the list of tensors or parameter
    groups ``params``, with 32-bit state for the tables or parameters of ``state_32bit``.

    Falls back with a warning, never a print: without a working bitsandbytes to
    ``torch.optim.AdamW`` (32-bit state), and paged state off CUDA to ``adamw8bit``. The 32-bit
    overrides go to a manager of this optimizer's own: bitsandbytes' process-wide one would
    apply them to every 8-bit optimizer created later. ValueError if ``state_32bit`` names a
    tensor that is not among ``params`` or ``kind`` is not an 8-bit kind.
    """
    if kind not in _BNB_CLASSES:
        raise ValueError(f"kind must be one of {', '.join(_BNB_CLASSES)}, got {kind!r}")
    lr, weight_decay, _ = _check_rates(lr, weight_decay, 0.0)
    if not bitsandbytes_available():
        warnings.warn(
            f"bitsandbytes is not usable here ({check_dependency('bitsandbytes').detail}); "
            f"{kind} falls back to torch.optim.AdamW with 32-bit state",
            stacklevel=3,
        )
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **kwargs)
    bnb = importlib.import_module("bitsandbytes")
    on_cuda = all(t.device.type == "cuda" for t in _tensors(params))
    if kind == "paged_adamw8bit" and not on_cuda:
        warnings.warn(
            "paged optimizer state needs CUDA (unified memory); using adamw8bit", stacklevel=3
        )
        kind = "adamw8bit"
    optimizer = getattr(bnb.optim, _BNB_CLASSES[kind])(
        params, lr=lr, weight_decay=weight_decay, **kwargs
    )
    # Per-parameter 32-bit state through a manager of this optimizer's own. bitsandbytes'
    # process-wide GlobalOptimManager would leak the override into every 8-bit optimizer
    # created later in the process.
    manager = type(optimizer.mng).__new__(type(optimizer.mng))
    manager.initialize()
    optimizer.mng = manager
    tables = [t.weight if isinstance(t, nn.Module) else t for t in state_32bit]
    optimized = {id(t) for t in _tensors(params)}
    for table in tables:
        if id(table) not in optimized:
            raise ValueError("state_32bit names a parameter that is not among params")
        manager.override_config(table, "optim_bits", 32)
    return optimizer


class MultiOptimizer(torch.optim.Optimizer):
    """Several optimizers stepped as one real ``torch.optim.Optimizer`` (§20.3.2), e.g.
    SparseAdam for a sparse table + AdamW for the rest.

    Its ``param_groups`` are the inner optimizers' own group dicts, so an LR scheduler that
    sets ``group["lr"]`` drives every inner optimizer; ``state`` holds every inner state;
    ``state_dict``/``load_state_dict`` use PyTorch's format (groups in order, inner optimizers
    in order) and hand each inner optimizer its part back.
    """

    def __init__(self, *optimizers: torch.optim.Optimizer):
        if not optimizers:
            raise ValueError("MultiOptimizer needs at least one optimizer")
        for optimizer in optimizers:
            if not isinstance(optimizer, torch.optim.Optimizer):
                raise TypeError(
                    f"optimizers must be torch.optim.Optimizer, got {type(optimizer).__name__}"
                )
        self.optimizers = optimizers
        super().__init__([g for o in optimizers for g in o.param_groups], {})
        self._share_groups()
        self._gather_state()

    def _share_groups(self) -> None:
        """Each inner optimizer reads its groups from ours (the same dicts, in order)."""
        start = 0
        for optimizer in self.optimizers:
            count = len(optimizer.param_groups)
            optimizer.param_groups = self.param_groups[start : start + count]
            start += count

    def _gather_state(self) -> None:
        self.state = defaultdict(dict, {p: s for o in self.optimizers for p, s in o.state.items()})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for optimizer in self.optimizers:
            optimizer.step()
        self._gather_state()  # inner optimizers create their state lazily, at the first step
        return loss

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)  # new group dicts and state: hand them back
        self._share_groups()
        for optimizer in self.optimizers:
            mine = [p for group in optimizer.param_groups for p in group["params"]]
            optimizer.state = defaultdict(dict, {p: self.state[p] for p in mine if p in self.state})


def sparse_optimizers(model: nn.Module, lr: float, *, weight_decay: float = 0.0) -> MultiOptimizer:
    """SparseAdam for the embedding tables built with ``sparse=True`` and AdamW for every other
    parameter, stepped together (§20.3.2, huge tables). The tables' gradients are sparse (the
    rows a batch touched, not a dense V×D tensor) and SparseAdam reads and writes only those
    rows of its moments: a step costs what the batch touched, not the table size. The moments
    themselves are still allocated for the whole table. ValueError if there is no sparse table."""
    lr, weight_decay, _ = _check_rates(lr, weight_decay, 0.0)
    sparse, dense = [], []
    for module in model.modules():
        if isinstance(module, (nn.Embedding, nn.EmbeddingBag)) and module.sparse:
            sparse.append(module.weight)
    sparse_ids = {id(p) for p in sparse}
    dense = [p for p in model.parameters() if id(p) not in sparse_ids]
    if not sparse:
        raise ValueError("model has no nn.Embedding / nn.EmbeddingBag with sparse=True")
    optimizers = [torch.optim.SparseAdam(sparse, lr=lr)]
    if dense:
        optimizers.append(torch.optim.AdamW(dense, lr=lr, weight_decay=weight_decay))
    return MultiOptimizer(*optimizers)


def optimizer_state_bytes(
    optimizer: torch.optim.Optimizer | MultiOptimizer, named: dict[str, torch.Tensor] | None = None
) -> pd.DataFrame:
    """Every tensor an optimizer holds in its state (§20.3.2): one row per (parameter, state
    key) with shape, dtype and bytes, and ``bytes_per_parameter`` of each parameter's whole
    state. ``named`` (e.g. ``dict(model.named_parameters())``) labels the parameters."""
    names = {id(t): n for n, t in (named or {}).items()}
    records = []
    for index, parameter in enumerate(p for g in optimizer.param_groups for p in g["params"]):
        state = optimizer.state.get(parameter, {})
        label = names.get(id(parameter), f"param {index}")
        tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
        total = sum(v.numel() * v.element_size() for v in tensors.values())
        for key, value in tensors.items():
            records.append(
                {
                    "parameter": label,
                    "numel": parameter.numel(),
                    "state": key,
                    "shape": tuple(value.shape),
                    "dtype": str(value.dtype).removeprefix("torch."),
                    "bytes": value.numel() * value.element_size(),
                    "bytes_per_parameter": total / parameter.numel(),
                }
            )
    columns = ["parameter", "numel", "state", "shape", "dtype", "bytes", "bytes_per_parameter"]
    import pandas as pd

    return pd.DataFrame(records, columns=columns)


# --------------------------------------------------------------------------------------------
# A harmful variant: state quantised far too coarsely
# --------------------------------------------------------------------------------------------


def quantise_blockwise(
    values: torch.Tensor, bits: int, block: int = 256, *, signed: bool = True
) -> torch.Tensor:
    """``values`` rounded to ``2**bits`` evenly spaced levels (§20.3.2): per block of ``block``
    consecutive values, scaled by the block's largest magnitude (absmax), as 8-bit optimizers
    store their moments — but linearly, without bitsandbytes' dynamic (non-linear) code.
    ``signed``: levels symmetric around 0 (a first moment), else from 0 up (a second moment).
    A value smaller than half a level of its block's largest becomes exactly 0."""
    bits, block = check_int("bits", bits, 1, maximum=16), check_int("block", block, 1)
    flat = values.detach().flatten().float()
    padded = torch.nn.functional.pad(flat, (0, -flat.numel() % block)).view(-1, block)
    absmax = padded.abs().amax(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
    steps = (2 ** (bits - 1) - 1 if signed else 2**bits - 1) or 1
    rounded = torch.round(padded / absmax * steps) / steps * absmax
    return rounded.flatten()[: flat.numel()].view_as(values).to(values.dtype)


class CoarseStateAdamW(torch.optim.AdamW):
    """AdamW whose two moments are re-quantised to ``bits`` bits per block of ``block`` values
    after every step (:func:`quantise_blockwise`, linear, absmax per block) — a **deliberately
    harmful** optimizer, the positive control of notebook 05's quality comparison (§20.3.2).

    Why it harms: within a block, every second moment below half a level of the block's largest
    rounds to 0, and Adam divides by its square root (plus ``eps``), so those weights take steps
    of the size of ``m / eps``; every first moment below half a level vanishes. bitsandbytes
    avoids both with a dynamic, non-linear 8-bit code and small blocks. Only the stored values
    are coarse: the state is kept in float32 tensors, so it saves no memory."""

    def __init__(self, params, lr: float, *, bits: int = 2, block: int = 256, **kwargs):
        super().__init__(params, lr=check_positive("lr", lr), **kwargs)
        self.bits = check_int("bits", bits, 1, maximum=16)
        self.block = check_int("block", block, 1)

    @torch.no_grad()
    def step(self, closure=None):
        """One AdamW step, then every moment re-quantised (what a coarse store would keep)."""
        loss = super().step(closure)
        for state in self.state.values():
            for key, signed in (("exp_avg", True), ("exp_avg_sq", False)):
                if key in state:
                    state[key].copy_(
                        quantise_blockwise(state[key], self.bits, self.block, signed=signed)
                    )
        return loss


# --------------------------------------------------------------------------------------------
# References: what an 8-bit optimizer stores, and the state lines of AdamW and SGD-Nesterov
# --------------------------------------------------------------------------------------------


def quantise_dynamic(
    values: torch.Tensor, code: torch.Tensor, block: int = 256
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-wise 8-bit quantisation, the reference of bitsandbytes' (§20.3.2): per block of
    ``block`` consecutive values, one float32 scale (the block's largest magnitude, absmax) and,
    per value, the byte of the level of ``code`` (256 sorted levels in [-1, 1], e.g. bitsandbytes'
    dynamic map) nearest to value / absmax. Returns ``(codes uint8, absmax float32)``."""
    flat = values.detach().flatten().float()
    blocks = nn.functional.pad(flat, (0, -flat.numel() % block)).view(-1, block)
    absmax = blocks.abs().amax(dim=1)
    scaled = (blocks / absmax.clamp_min(1e-38)[:, None]).clamp(-1, 1)
    midpoints = (code[:-1] + code[1:]) / 2  # level i wins between its two midpoints
    codes = torch.bucketize(scaled, midpoints).to(torch.uint8)
    return codes.flatten()[: flat.numel()].view(values.shape), absmax


def dequantise_dynamic(
    codes: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor, block: int = 256
) -> torch.Tensor:
    """The inverse of :func:`quantise_dynamic` (§20.3.2): each byte's level times its block's
    scale, as float32."""
    flat = code[codes.flatten().long()]
    blocks = nn.functional.pad(flat, (0, -flat.numel() % block)).view(-1, block)
    return (blocks * absmax[:, None]).flatten()[: flat.numel()].view(codes.shape)


@torch.no_grad()
def adamw_reference_step(p, grad, state: dict, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    """One AdamW step on ``p`` in place, written out (§20.3.2): the two moments of ``state``
    (created at the first step) are its 8 bytes of state per parameter."""
    if not state:
        state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
    state["step"] += 1
    m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
    m.mul_(betas[0]).add_(grad, alpha=1 - betas[0])  # first moment: 4 bytes
    v.mul_(betas[1]).addcmul_(grad, grad, value=1 - betas[1])  # second moment: 4 bytes
    p.mul_(1 - lr * weight_decay)  # decoupled weight decay
    denom = (v / (1 - betas[1] ** t)).sqrt_().add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - betas[0] ** t))


@torch.no_grad()
def sgd_nesterov_reference_step(p, grad, state: dict, lr, momentum=0.9, weight_decay=0.0):
    """One SGD step with Nesterov momentum on ``p`` in place, written out (§20.3.2): one
    momentum buffer, 4 bytes of state per parameter."""
    grad = grad + weight_decay * p
    if "momentum_buffer" not in state:
        state["momentum_buffer"] = grad.clone()
    else:
        state["momentum_buffer"].mul_(momentum).add_(grad)
    p.add_(grad + momentum * state["momentum_buffer"], alpha=-lr)


def dynamic_code(signed: bool = True) -> torch.Tensor:
    """bitsandbytes' dynamic 8-bit map (§20.3.2): 256 sorted levels in [-1, 1] (``signed``, a
    first moment) or [0, 1] (a second moment), dense near 0, the code :func:`quantise_dynamic`
    rounds to. Needs bitsandbytes (ImportError without it)."""
    return importlib.import_module("bitsandbytes.functional").create_dynamic_map(signed=signed)
