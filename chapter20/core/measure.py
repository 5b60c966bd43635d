"""The one place that measures time and memory, for every section (§20.2–§20.4).

Rules every notebook inherits from here:

- Time: warm-up calls first, then several repeats, report the median; CUDA is synchronised
  before each clock read, because kernels run asynchronously.
- Memory on CUDA: the caching allocator's peak (``torch.cuda.max_memory_allocated``).
- Memory anywhere (CPU included): a live-tensor tracker. Every tensor an operation returns is
  seen through a ``TorchDispatchMode``; its storage is counted once and uncounted when it is
  freed (a weak reference to the storage). That gives the peak of live tensor bytes and, at the
  moment of the peak, a breakdown into parameters, gradients, optimizer state and activations.
  On CUDA both run and the report carries both numbers, so each checks the other.

Every result says which method produced it.
"""

from __future__ import annotations

import math
import statistics
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from chapter20.core.checks import check_int, check_positive, check_real
from chapter20.core.device import get_device, synchronize

CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations")
"""Memory categories of a training step. ``activations`` is every other live tensor: tensors
saved for backward, temporaries, and the batch itself."""

_SCALARS = (
    int,
    float,
    complex,
    bool,
    str,
    bytes,
    type(None),
    torch.dtype,
    torch.device,
    torch.Size,
)


# --------------------------------------------------------------------------------------------
# Bytes of tensors
# --------------------------------------------------------------------------------------------

StorageKey = tuple[str, int]


def iter_tensors(*objs: Any) -> Iterator[torch.Tensor]:
    """Every tensor reachable from ``objs``: tensors, modules (parameters and buffers),
    optimizers (their state), and any nesting of dicts, lists, tuples and sets of those."""
    stack: list[Any] = list(reversed(objs))
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            yield obj
        elif isinstance(obj, nn.Module):
            stack.extend(obj.parameters())
            stack.extend(obj.buffers())
        elif isinstance(obj, torch.optim.Optimizer):
            stack.extend(obj.state.values())
        elif isinstance(obj, Mapping):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif not isinstance(obj, _SCALARS):
            raise TypeError(
                f"cannot count the bytes of a {type(obj).__name__}; pass tensors, modules, "
                "optimizers, or dicts/lists/tuples/sets of them"
            )


def _dense_parts(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The strided tensors whose storages hold ``t``'s data (a sparse tensor has several)."""
    if t.layout == torch.strided:
        return (t,)
    if t.layout == torch.sparse_coo:
        return (t._indices(), t._values())
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return (t.crow_indices(), t.col_indices(), t.values())
    if t.layout in (torch.sparse_csc, torch.sparse_bsc):
        return (t.ccol_indices(), t.row_indices(), t.values())
    raise TypeError(f"cannot count the bytes of a tensor with layout {t.layout}")


def _storage_entry(t: torch.Tensor) -> tuple[StorageKey, int, torch.UntypedStorage]:
    """(key, bytes, storage) of a strided tensor; views of one storage share the key."""
    storage = t.untyped_storage()
    ptr = storage.data_ptr()
    # Meta tensors and empty storages have no address; key them by object so none collapse.
    key = (str(t.device), ptr if ptr else -id(storage))
    return key, storage.nbytes(), storage


def storage_sizes(*objs: Any) -> dict[StorageKey, int]:
    """Map every distinct storage reachable from ``objs`` (see ``iter_tensors``) to its bytes.

    Two tensors that share a storage (views, tied weights) map to one entry, so nothing is
    counted twice.
    """
    sizes: dict[StorageKey, int] = {}
    for t in iter_tensors(*objs):
        for part in _dense_parts(t):
            key, nbytes, _ = _storage_entry(part)
            sizes[key] = nbytes
    return sizes


def tensor_bytes(*objs: Any) -> int:
    """Bytes held by the tensors in ``objs``, each storage counted once (§20.3).

    Meta tensors count the bytes they would hold, which is what a planner wants.
    ``tensor_bytes(model)`` is the bytes of its parameters and buffers; ``tensor_bytes(opt)``
    the bytes of the optimizer state; ``tensor_bytes(a, a[:10])`` counts ``a`` once.
    """
    return sum(storage_sizes(*objs).values())


def gradients_of(module: nn.Module) -> list[torch.Tensor]:
    """The ``.grad`` tensors a module currently holds (for ``tensor_bytes``)."""
    return [p.grad for p in module.parameters() if p.grad is not None]


def named_gradients(module: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of the ``.grad`` of each parameter of ``module`` that has one, by name: what a
    proof compares after two ways of computing one gradient (§20.2.1)."""
    return {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}


def max_grad_diff(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    """Largest absolute difference between two {name: tensor} dicts with the same names
    (gradients of :func:`named_gradients`, or two models' weights)."""
    if a.keys() != b.keys():
        raise ValueError(f"gradients of different parameters: {sorted(a)} vs {sorted(b)}")
    return max(float((a[n] - b[n]).abs().max()) for n in a)


def format_bytes(n: float) -> str:
    """Human-readable binary size: ``format_bytes(2**26) == '64.0 MiB'`` (a difference may be
    negative)."""
    value = check_real("n", n, finite=True)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if round(abs(value), 1) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------------------------
# Time
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of repeated calls: median (the figure to report), min, max, all."""

    median: float
    min: float
    max: float
    times: tuple[float, ...]

    def __str__(self) -> str:
        ms = [t * 1e3 for t in (self.median, self.min, self.max)]
        return f"{ms[0]:.2f} ms (min {ms[1]:.2f}, max {ms[2]:.2f}, n={len(self.times)})"


def timing_columns(timing: Timing) -> dict[str, float]:
    """A :class:`Timing` as table columns: ``seconds`` (the median, the figure to read),
    ``seconds_min`` and ``seconds_max`` (its repeats' spread)."""
    return {"seconds": timing.median, "seconds_min": timing.min, "seconds_max": timing.max}


def _timed_call(fn: Callable[[], Any], device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def _timing(times: list[float]) -> Timing:
    return Timing(statistics.median(times), min(times), max(times), tuple(times))


def format_difference(max_abs_diff: float, tolerance: float) -> str:
    """A proof's verdict as text that is the same on every machine (for nbval-checked cells).
    With ``tolerance=0`` the claim is bitwise: ``max |Δ| = 0 ✓``. Otherwise any value within
    the tolerance, zero included, prints ``max |Δ| < 1e-05 ✓`` — whether the rounding noise
    happens to vanish differs between CPUs. Beyond it, or NaN: ``max |Δ| = 0.17 ✗``."""
    if isinstance(max_abs_diff, torch.Tensor) and max_abs_diff.numel() == 1:
        max_abs_diff = float(max_abs_diff)
    if not (isinstance(max_abs_diff, float) and math.isnan(max_abs_diff)):
        max_abs_diff = check_real("max_abs_diff", max_abs_diff)
    if max_abs_diff < 0:
        raise ValueError(f"max_abs_diff must be >= 0 (an absolute difference), got {max_abs_diff}")
    tolerance = check_positive("tolerance", tolerance, zero=True)
    if max_abs_diff == 0 and tolerance == 0:
        return "max |Δ| = 0 ✓"
    if max_abs_diff < tolerance:
        return f"max |Δ| < {tolerance:.0e} ✓"
    return f"max |Δ| = {max_abs_diff:.2g} ✗"


def time_fn(
    fn: Callable[[], Any],
    *,
    warmup: int = 2,
    repeat: int = 5,
    device: torch.device | str | None = None,
) -> Timing:
    """Time ``fn()`` (§20.2–§20.4 benchmarks): ``warmup`` untimed calls, then ``repeat`` timed.

    The device is synchronised before the clock starts and before it stops, so asynchronous
    CUDA (or MPS) kernels are inside the measurement. ``device`` defaults to ``get_device()``.
    Compare two variants by timing both in the same run and taking the ratio of medians.
    """
    warmup = check_int("warmup", warmup, 0)
    repeat = check_int("repeat", repeat, 1)
    sync_device = torch.device(device) if device is not None else get_device()
    for _ in range(warmup):
        fn()
    return _timing([_timed_call(fn, sync_device) for _ in range(repeat)])


def time_interleaved(
    fns: Mapping[str, Callable[[], Any]],
    *,
    warmup: int = 2,
    repeat: int = 5,
    device: torch.device | str | None = None,
) -> dict[str, Timing]:
    """Time several variants in alternation (§20.2–§20.4 benchmarks): round r calls each once,
    so that clock-speed drift, caches and other load affect every variant alike; the ratio of
    two medians is then a fair comparison. Same synchronisation as :func:`time_fn`."""
    if not fns:
        raise ValueError("fns must name at least one function to time")
    warmup = check_int("warmup", warmup, 0)
    repeat = check_int("repeat", repeat, 1)
    sync_device = torch.device(device) if device is not None else get_device()
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            times[name].append(_timed_call(fn, sync_device))
    return {name: _timing(values) for name, values in times.items()}


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryReport:
    """Peak memory of one call and what was alive at that moment (§20.3).

    ``peak_bytes`` is the figure to report; ``method`` says how it was measured.
    ``breakdown`` maps each of ``CATEGORIES`` to bytes alive at the tracker's peak.
    ``tracked_peak_bytes`` is the live-tensor tracker's peak and ``peak_op`` the operator that
    reached it; ``allocator_peak_bytes`` is the CUDA allocator's raw ``max_memory_allocated``
    (None off CUDA). On CUDA ``peak_bytes`` is the allocator's growth during the call plus the
    tracked start (``baseline_bytes``), so it means what the tracker's peak means on a CPU.
    ``end_bytes`` is what was alive when ``fn`` returned (see ``retained_bytes``).
    """

    peak_bytes: int
    breakdown: dict[str, int]
    method: str
    baseline_bytes: int
    tracked_peak_bytes: int
    peak_op: str = ""
    allocator_peak_bytes: int | None = None
    result: Any = field(default=None, repr=False, compare=False)
    end_bytes: int = 0

    @property
    def retained_bytes(self) -> int:
        """Bytes ``fn`` left alive when it returned, beyond the start: for a forward pass, the
        activations autograd keeps for backward (and the output)."""
        return self.end_bytes - self.baseline_bytes

    def __str__(self) -> str:
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in self.breakdown.items())
        return f"peak {format_bytes(self.peak_bytes)} at {self.peak_op} ({parts}) [{self.method}]"


class _LiveTensorTracker(TorchDispatchMode):
    """Counts the bytes of live tensor storages on one device, and remembers their peak."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in dynamo.disable unless this says False; the
        # wrapper imports torch._dynamo on the first op (seconds per process) for a mode that is
        # never compiled.
        return False

    def __init__(
        self,
        device: torch.device,
        categorize: Callable[[dict[StorageKey, int], int], dict[str, int]],
    ):
        super().__init__()
        self.device_type = device.type
        self.categorize = categorize
        self.live: dict[StorageKey, int] = {}
        self.current = 0
        self.peak = 0
        self.peak_breakdown: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
        self.op = "(before fn)"
        self.peak_op = self.op
        self._finalizers: list[weakref.finalize] = []

    def track(self, tensors: Iterable[Any]) -> None:
        for t in tensors:
            if not isinstance(t, torch.Tensor) or t.device.type != self.device_type:
                continue
            for part in _dense_parts(t):
                key, nbytes, storage = _storage_entry(part)
                if self.live.get(key) == nbytes:
                    continue
                self.current += nbytes - self.live.get(key, 0)
                self.live[key] = nbytes
                self._finalizers.append(weakref.finalize(storage, self._release, key, nbytes))
        self._update_peak()

    def _release(self, key: StorageKey, nbytes: int) -> None:
        if self.live.get(key) == nbytes:
            del self.live[key]
            self.current -= nbytes

    def _update_peak(self) -> None:
        if self.current > self.peak:
            self.peak = self.current
            self.peak_breakdown = self.categorize(self.live, self.current)
            self.peak_op = self.op

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.op = str(func.overloadpacket.__name__)
        # A view allocates nothing, and a view of a tensor that existed before fn (a slice of a
        # data set) must not count that storage. lift_fresh is the exception: it is how a new
        # tensor made from data (torch.tensor(...), Adam's step counters) enters the dispatcher.
        if not func.is_view or func.overloadpacket is torch.ops.aten.lift_fresh:
            self.track(tree_leaves(out))
        return out

    def close(self) -> None:
        for fin in self._finalizers:
            fin.detach()
        self._finalizers.clear()


def _categorizer(model: nn.Module | None, optimizer: torch.optim.Optimizer | None):
    """Breakdown of the live bytes; called at every new peak, so it only looks up the few
    parameter, gradient and state storages (not every live tensor): the rest is activations."""
    param_keys = set(storage_sizes(model)) if model is not None else set()

    def categorize(live: dict[StorageKey, int], current: int) -> dict[str, int]:
        grad_keys = set(storage_sizes(gradients_of(model))) if model is not None else set()
        grad_keys -= param_keys
        state_keys = set(storage_sizes(optimizer)) if optimizer is not None else set()
        state_keys -= param_keys | grad_keys
        out = dict.fromkeys(CATEGORIES, 0)
        for category, keys in (
            ("parameters", param_keys),
            ("gradients", grad_keys),
            ("optimizer_state", state_keys),
        ):
            out[category] = sum(live.get(key, 0) for key in keys)
        out["activations"] = current - sum(out.values())
        return out

    return categorize


def _infer_device(*objs: Any) -> torch.device:
    for obj in objs:
        if obj is None:
            continue
        for key in storage_sizes(obj):
            return torch.device(key[0])
    return torch.device("cpu")


def peak_memory(
    fn: Callable[[], Any],
    *,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    inputs: Any = None,
    device: torch.device | str | None = None,
) -> MemoryReport:
    """Run ``fn()`` once and report its peak memory with a breakdown (§20.3).

    The tensors of ``model`` (parameters, buffers, gradients), ``optimizer`` (state) and
    ``inputs`` count from the start; every tensor an operation allocates during ``fn`` counts
    from its creation until it is freed. Other tensors that existed before ``fn`` are not
    counted while ``fn`` only reads or slices them; an in-place write makes them count (which
    covers tensors that bypass the dispatcher, such as ``torch.from_numpy(...)``).
    The breakdown is taken at the tracker's peak; parameters and buffers count as
    ``parameters``.

    On CUDA the reported peak is the caching allocator's: its growth during ``fn``
    (``max_memory_allocated`` minus what was allocated before) plus the tracked start, so it
    means the same as on a CPU but also sees kernel workspaces. The raw allocator figure is
    ``allocator_peak_bytes``; the tracker's own peak is ``tracked_peak_bytes``.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    dev = torch.device(device) if device is not None else _infer_device(model, inputs, optimizer)
    tracker = _LiveTensorTracker(dev, _categorizer(model, optimizer))
    baseline_objs = [o for o in (model, optimizer, inputs) if o is not None]
    if model is not None:
        baseline_objs.append(gradients_of(model))

    on_cuda = dev.type == "cuda"
    tracker.track(iter_tensors(*baseline_objs))
    # Hold no reference during fn: a gradient that fn frees (zero_grad(set_to_none=True)) must
    # leave the count, as it leaves memory.
    del baseline_objs
    baseline = tracker.current
    if on_cuda:
        synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        allocated_before = torch.cuda.memory_allocated(dev)
    try:
        with tracker:
            result = fn()
        synchronize(dev)
        end = (
            torch.cuda.memory_allocated(dev) - allocated_before + baseline
            if on_cuda
            else tracker.current
        )
    finally:
        tracker.close()
    allocator_peak = int(torch.cuda.max_memory_allocated(dev)) if on_cuda else None
    if on_cuda:
        method = (
            "CUDA allocator peak (torch.cuda.max_memory_allocated); "
            "breakdown from the live-tensor tracker"
        )
    else:
        method = f"live-tensor tracker on {dev.type} (TorchDispatchMode + storage weakrefs)"
    return MemoryReport(
        peak_bytes=allocator_peak - allocated_before + baseline if on_cuda else tracker.peak,
        breakdown=dict(tracker.peak_breakdown),
        method=method,
        baseline_bytes=baseline,
        tracked_peak_bytes=tracker.peak,
        peak_op=tracker.peak_op,
        allocator_peak_bytes=allocator_peak,
        result=result,
        end_bytes=end,
    )


def saved_activation_bytes(fn: Callable[[], Any], *, exclude: Any = None) -> int:
    """Bytes of the tensors autograd saves for backward while ``fn()`` runs (§20.3.1).

    Seen through ``torch.autograd.graph.saved_tensors_hooks``; each storage counts once, so a
    tensor saved by several operations (or views of it) is not double-counted. Pass the model as
    ``exclude`` to leave out its parameters, which are saved too but are not activations.
    Call ``fn`` without running backward: the figure is what the forward pass keeps alive.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    excluded = set(storage_sizes(exclude)) if exclude is not None else set()
    saved: dict[StorageKey, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        for key, nbytes in storage_sizes(t).items():
            if key not in excluded:
                saved[key] = nbytes
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(saved.values())


def machine_busy(seconds: float = 1.0) -> float:
    """The share of all CPU cores busy over the next ``seconds`` (0 idle, 1 every core busy),
    from ``/proc/stat`` on Linux, elsewhere the 1-minute load average over the core count.
    Timings recorded on a busy machine describe the other work, not the code: notebook
    recording (``scripts/run_notebooks.py``) checks this before each notebook."""
    import os

    seconds = check_real("seconds", seconds, minimum=0, exclusive=True, maximum=60)
    stat = Path("/proc/stat")
    if not stat.exists():
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        return min(1.0, load / (os.cpu_count() or 1))

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in stat.read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields), idle

    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    elapsed = max(total1 - total0, 1)
    return max(0.0, min(1.0, 1.0 - (idle1 - idle0) / elapsed))
