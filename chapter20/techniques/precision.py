"""§20.2.2 Mixed precision on any device, with the current ``torch.amp`` API.

The chapter's trainer (listing L5) uses ``torch.cuda.amp``, deprecated and CUDA-only. Here:

- :func:`resolve_precision` and :func:`autocast` choose and enter
  ``torch.amp.autocast(device_type=...)`` in bf16 or fp16 (or plain fp32) on any device. The
  training step that uses them is ``chapter20.training.trainer.Trainer``
  (``TrainConfig(precision=...)``): master weights, gradients and optimizer state stay fp32, the
  loss is scaled with ``torch.amp.GradScaler`` when the dtype is fp16 — on CUDA, and on CPU too —
  gradients are unscaled before clipping, and a step whose gradients are not finite is skipped and
  counted, in every precision (bf16 needs no scaler, but an overflow still must not reach the
  weights).
- :func:`keep_batchnorm_fp32` is listing L6: a model cast to half precision whose BatchNorm
  layers stay fp32 (their running statistics lose too much in fp16).
- :func:`format_limits`, :func:`underflow_report` and :func:`gradient_underflow` show which
  magnitudes fp16 and bf16 can hold, and how much of a model's gradient would vanish in fp16
  without loss scaling (claim C08).
- :func:`matmul_speedup` times one square matrix multiply per dtype, the quantity of claim C06
  (tensor cores), with fp32 as PyTorch runs it by default and, on CUDA, with TF32 allowed;
  :func:`available_precisions` says which precisions are worth timing on a device, and
  :func:`speed_prediction` what 16-bit should do to its speed, from its hardware.
- :func:`store_weights_in` is a deliberately harmful variant for quality comparisons that must
  show they can detect harm: weights kept in a narrow float format with no fp32 master copy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
from torch import nn

from chapter20.core.checks import check_int, check_positive
from chapter20.core.device import autocast_dtype, get_device
from chapter20.core.measure import time_interleaved

# pandas costs every torchrun worker half a second to import; only the tables need it.
if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "PRECISIONS",
    "resolve_precision",
    "available_precisions",
    "autocast",
    "keep_batchnorm_fp32",
    "format_limits",
    "largest_rounding_to_zero",
    "underflow_report",
    "gradient_underflow",
    "matmul_speedup",
    "speed_prediction",
    "store_weights_in",
]

#: Precision names → dtype of the autocast region ("auto": ``device.autocast_dtype``).
PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _supports(device: torch.device, dtype: torch.dtype) -> bool:
    if dtype == torch.float32 or device.type == "cpu":
        return True  # CPU autocast runs bf16 and fp16 (fp16 slowly, without fast kernels)
    if device.type == "cuda":
        return dtype == torch.float16 or torch.cuda.is_bf16_supported()
    return dtype == torch.float16  # MPS: fp16 everywhere, bf16 only on recent systems


def resolve_precision(
    precision: str | torch.dtype = "auto", device: torch.device | str | None = None
) -> torch.dtype:
    """The autocast dtype for ``precision`` ("auto", "fp32", "bf16", "fp16" or a dtype) on
    ``device`` (§20.2.2). "auto" is ``device.autocast_dtype``: bf16 on CPU and on GPUs that
    support it, else fp16. ValueError for an unknown name or a dtype the device cannot run."""
    device = get_device() if device is None else torch.device(device)
    if precision == "auto":
        return autocast_dtype(device)
    if isinstance(precision, torch.dtype):
        dtype = precision
        if dtype not in PRECISIONS.values():
            raise ValueError(f"precision must be fp32, bf16 or fp16, got {dtype}")
    elif precision in PRECISIONS:
        dtype = PRECISIONS[precision]
    else:
        raise ValueError(
            f"precision must be 'auto', 'fp32', 'bf16' or 'fp16' (or that dtype), got {precision!r}"
        )
    if not _supports(device, dtype):
        raise ValueError(f"precision {precision!r} is not supported on {device} (try 'auto')")
    return dtype


def available_precisions(device: torch.device | str | None = None, *, fp16: bool | None = None):
    """The precisions worth timing on ``device``: fp32 and bf16, plus fp16 on accelerators
    (``fp16=None``). CPU autocast runs fp16 through generic kernels, without fast fp16
    instructions, so it is left out of CPU step timings unless ``fp16=True``."""
    device = get_device() if device is None else torch.device(device)
    names = ["fp32"]
    for name in ("bf16", "fp16"):
        wanted = (
            fp16
            if name == "fp16" and fp16 is not None
            else (name == "bf16" or device.type != "cpu")
        )
        try:
            resolve_precision(name, device)
        except ValueError:
            continue
        if wanted:
            names.append(name)
    return names


def autocast(precision: str | torch.dtype = "auto", device: torch.device | str | None = None):
    """``torch.amp.autocast`` for ``precision`` on ``device``; a null context for fp32 (§20.2.2).
    For evaluation and for code that wants the trainer's precision without the trainer."""
    device = get_device() if device is None else torch.device(device)
    dtype = resolve_precision(precision, device)
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.amp.autocast(device_type=device.type, dtype=dtype)


def keep_batchnorm_fp32(model: nn.Module) -> nn.Module:
    """Listing L6: after ``model.half()`` (or ``.to(torch.bfloat16)``), put every BatchNorm layer
    back in fp32 — its running mean and variance accumulate small updates that half precision
    rounds away (§20.2.2 gotchas). Returns ``model`` (changed in place)."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.float()
    return model


# --------------------------------------------------------------------------------------------
# What half precision can hold
# --------------------------------------------------------------------------------------------


def format_limits(dtypes: Iterable[torch.dtype] = (torch.float16, torch.bfloat16, torch.float32)):
    """Per dtype: smallest subnormal, smallest normal, largest value, epsilon, and the largest
    float32 value that rounds to zero — found by casting, not by formula (§20.2.2, C08)."""
    import pandas as pd

    records = []
    for dtype in dtypes:
        info = torch.finfo(dtype)
        subnormal = info.smallest_normal * info.eps  # one unit in the last place below normal
        records.append(
            {
                "dtype": str(dtype).removeprefix("torch."),
                "smallest_subnormal": subnormal,
                "smallest_normal": info.smallest_normal,
                "max": info.max,
                "eps": info.eps,
                "largest_that_rounds_to_zero": largest_rounding_to_zero(dtype),
            }
        )
    return pd.DataFrame(records)


def largest_rounding_to_zero(dtype: torch.dtype) -> float:
    """The largest positive float64 value whose cast to ``dtype`` is 0, by bisection on casts."""
    low, high = 0.0, 1.0
    for _ in range(200):
        mid = (low + high) / 2
        if torch.tensor(mid, dtype=torch.float64).to(dtype).item() == 0:
            low = mid
        else:
            high = mid
    return low


def underflow_report(values: torch.Tensor, dtype: torch.dtype = torch.float16) -> dict[str, float]:
    """Fractions of the non-zero ``values`` that become zero, subnormal (precision lost) or stay
    normal when cast to ``dtype``; and of those that overflow to infinity."""
    values = values.detach().flatten().float()
    values = values[values != 0]
    if values.numel() == 0:
        raise ValueError("values must hold at least one non-zero number")
    cast = values.to(dtype)
    info = torch.finfo(dtype)
    zero = cast == 0
    infinite = torch.isinf(cast)
    subnormal = ~zero & (cast.abs() < info.smallest_normal)
    n = values.numel()
    return {
        "zero": float(zero.sum()) / n,
        "subnormal": float(subnormal.sum()) / n,
        "normal": float((~zero & ~subnormal & ~infinite).sum()) / n,
        "infinite": float(infinite.sum()) / n,
    }


def gradient_underflow(
    model: nn.Module, scales: Iterable[float] = (1.0, 2.0**8, 2.0**16), dtype=torch.float16
) -> pd.DataFrame:
    """For the fp32 gradients in ``model``: the share that fp16 would flush to zero, leave
    subnormal, or overflow, if the loss were multiplied by each of ``scales`` (§20.2.2, loss
    scaling). Call after a backward pass."""
    import pandas as pd

    scales = [check_positive("scales", scale) for scale in scales]
    grads = [p.grad.detach().flatten() for p in model.parameters() if p.grad is not None]
    if not grads:
        raise ValueError("model has no gradients: run a backward pass first")
    flat = torch.cat(grads).float()
    return pd.DataFrame(
        [{"loss_scale": scale, **underflow_report(flat * scale, dtype)} for scale in scales]
    )


def store_weights_in(
    model: nn.Module, optimizer: torch.optim.Optimizer, dtype: torch.dtype
) -> torch.optim.Optimizer:
    """Keep ``model``'s weights in ``dtype`` with **no fp32 master copy** (§20.2.2): every
    parameter is rounded to ``dtype`` now and after every ``optimizer.step()`` (and stored back
    in its own dtype, so every operation still computes as before). A deliberately harmful
    variant, the positive control of notebook 03's quality comparison: an update smaller than
    half a unit in the last place of the weight it changes rounds away, which is what mixed
    precision's fp32 master weights prevent. Returns ``optimizer`` (a hook is registered on it)."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {optimizer!r}")
    parameters = list(model.parameters())

    @torch.no_grad()
    def round_weights(*_) -> None:
        for parameter in parameters:
            parameter.copy_(parameter.to(dtype).to(parameter.dtype))

    round_weights()
    optimizer.register_step_post_hook(round_weights)
    return optimizer


# --------------------------------------------------------------------------------------------
# What tensor cores give: one matrix multiply per dtype
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _tf32_matmuls(allowed: bool):
    """fp32 matrix multiplies on CUDA with TF32 allowed (or as PyTorch's default leaves them)."""
    if not allowed:
        yield
        return
    before = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.fp32_precision = before


def matmul_speedup(
    size: int = 4096,
    precisions: Iterable[str] = ("fp32", "bf16", "fp16"),
    *,
    repeat: int = 5,
    device: torch.device | str | None = None,
) -> pd.DataFrame:
    """Time one ``size`` × ``size`` matrix multiply per precision on ``device`` (§20.2.2, claim
    C06), the precisions in alternation (``core.measure.time_interleaved``, one warm-up call
    each): a row per precision with the median ``seconds`` and the repeats' ``seconds_min`` /
    ``seconds_max``, the ``tflops`` reached and the ``speedup`` over fp32 as PyTorch runs it by
    default (no TF32). On CUDA a ``tf32`` row adds fp32 with TF32 matrix multiplies allowed
    (tensor cores in fp32's range, 10 significant bits). A precision the device cannot run is
    left out. From about 4096 a GPU's matmul is bound by its arithmetic, not by launching it."""
    import pandas as pd

    size, repeat = check_int("size", size, 1, maximum=65_536), check_int("repeat", repeat, 1)
    device = get_device() if device is None else torch.device(device)
    names = [name for name in precisions if name in PRECISIONS]
    if "fp32" not in names:
        raise ValueError(f"precisions must include 'fp32' (the reference), got {list(precisions)}")
    runnable = [name for name in names if _supports(device, PRECISIONS[name])]
    a = torch.randn(size, size, device=device)
    operands = {name: a.to(PRECISIONS[name]) for name in runnable}
    calls = {name: (lambda x=x: x @ x) for name, x in operands.items()}
    if device.type == "cuda":
        calls["tf32"] = lambda x=operands["fp32"]: _tf32_call(x)
    timing = time_interleaved(calls, warmup=1, repeat=repeat, device=device)
    fp32 = timing["fp32"].median
    return pd.DataFrame(
        [
            {
                "precision": name,
                "seconds": t.median,
                "seconds_min": t.min,
                "seconds_max": t.max,
                "tflops": 2 * size**3 / t.median / 1e12,
                "speedup": fp32 / t.median,
            }
            for name, t in timing.items()
        ]
    )


def _tf32_call(x: torch.Tensor) -> torch.Tensor:
    with _tf32_matmuls(True):
        return x @ x


def speed_prediction(device: torch.device | str | None = None) -> str:
    """What 16-bit should do to speed on ``device``, from what its hardware offers (§20.2.2): on
    CUDA, tensor cores multiply 16-bit matrices several times faster than fp32; on a CPU with
    AVX512-BF16 or AMX (``torch.backends.cpu.get_cpu_capability()``), bf16 multiplies can be
    faster; on any other CPU no 16-bit instruction exists, so 16-bit is slower (casts and
    emulation)."""
    device = get_device() if device is None else torch.device(device)
    if device.type == "cuda":
        return "16-bit matmul faster than fp32 (tensor cores); the whole step gains less"
    capability = torch.backends.cpu.get_cpu_capability()
    if "AVX512" in capability and "BF16" in capability or "AMX" in capability:
        return f"{capability}: bf16 matmul faster than fp32; the whole step gains less"
    return (
        f"{capability}: no 16-bit multiply instructions, so 16-bit slower than fp32 "
        "(every operand is cast and each multiply emulated)"
    )
