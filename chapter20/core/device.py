"""Device, backend and precision choices shared by every section (§20.2.2, §20.4).

One place decides where code runs, so that a notebook written on a laptop CPU runs unchanged
on a CUDA GPU or an Apple GPU:

- ``get_device()``: CUDA > MPS > CPU, or what the ``CHAPTER20_DEVICE`` variable asks for.
- ``dist_backend(device)``: nccl on CUDA, gloo everywhere else (§20.4).
- ``autocast_dtype(device)``: the half-precision type autocast should use there (§20.2.2).
- ``set_seed(seed)``: the one seeding helper (Python, NumPy, torch, every CUDA device);
  ``seeded(seed)``: a block seeded by it that gives the caller's generators back.
- ``deterministic_mode()``: the settings under which a training step computes bit for bit the
  same thing in every process (§20.5.2 resume), as a context manager that undoes them.
- ``describe_environment()``: versions and hardware, for reports and ``python -m chapter20 env``;
  ``environment_line()``: the one short line every notebook prints first.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.metadata
import logging
import os
import platform
import random
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from chapter20.core.checks import check_int

DEVICE_ENV_VAR = "CHAPTER20_DEVICE"
_DEVICE_TYPES = ("cpu", "cuda", "mps")


def get_device(prefer: str | None = None) -> torch.device:
    """Return the device to compute on (§20.4): CUDA > MPS > CPU.

    ``prefer`` (or the ``CHAPTER20_DEVICE`` environment variable, e.g. ``cpu`` or ``cuda:1``)
    forces a choice; asking for a device that is not available raises ``ValueError`` instead of
    silently falling back, so a run never measures a different device than the one requested.
    """
    choice = prefer if prefer is not None else os.environ.get(DEVICE_ENV_VAR) or None
    if choice is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(choice)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"prefer={choice!r} is not a device; use one of {_DEVICE_TYPES} (optionally 'cuda:N')"
        ) from exc
    if device.type not in _DEVICE_TYPES:
        raise ValueError(f"prefer={choice!r}: device type must be one of {_DEVICE_TYPES}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"prefer={choice!r} but CUDA is not available on this machine")
    if (
        device.type == "cuda"
        and device.index is not None
        and device.index >= torch.cuda.device_count()
    ):
        raise ValueError(
            f"prefer={choice!r} but only {torch.cuda.device_count()} CUDA device(s) exist"
        )
    if device.type == "mps" and not _mps_available():
        raise ValueError(f"prefer={choice!r} but MPS is not available on this machine")
    return device


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def _as_device(device: torch.device | str | None) -> torch.device:
    return get_device() if device is None else torch.device(device)


def dist_backend(device: torch.device | str | None = None) -> str:
    """Return the torch.distributed backend for ``device`` (§20.4): nccl on CUDA, gloo otherwise.

    The chapter's setup (listing L10) hard-codes nccl, which cannot run on a CPU; gloo runs the
    same collectives on CPU tensors, so every distributed code path is testable on a laptop.
    """
    return "nccl" if _as_device(device).type == "cuda" else "gloo"


def autocast_dtype(device: torch.device | str | None = None) -> torch.dtype:
    """Return the half-precision dtype for ``torch.amp.autocast`` on ``device`` (§20.2.2).

    CUDA: bf16 where the GPU supports it (Ampere and newer: no loss scaling needed), else fp16
    (which needs a GradScaler). CPU: bf16, the type its autocast supports best. MPS: fp16,
    which every Apple GPU supports (bf16 needs a recent macOS).
    """
    device = _as_device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.bfloat16


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for queued kernels on ``device`` to finish, so clocks and memory readings are true."""
    device = _as_device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and every CUDA device) with one call.

    Call it right before model initialisation and data generation, so that a comparison between
    two variants (sharded vs plain, accumulated vs full batch, ...) starts from identical state.
    """
    seed = check_int("seed", seed, 0)
    if seed >= 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def seeded(seed: int, devices: Sequence[int] | None = None) -> contextlib.AbstractContextManager:
    """A block seeded by :func:`set_seed` that gives back every generator it seeds (torch's on
    the CPU and on ``devices``, None: every CUDA device; Python's; NumPy's): what runs inside is
    the same for the same ``seed``, and the caller's streams go on as if the block had not run.
    ``seed`` is checked here, before the block."""
    seed = check_int("seed", seed, 0, maximum=2**32 - 1)
    if devices is not None:
        count = torch.cuda.device_count()
        devices = [check_int("devices", d, 0) for d in devices]
        if any(d >= count for d in devices):
            raise ValueError(f"devices must be CUDA device indices below {count}, got {devices}")
    return _seeded_block(seed, devices)


@contextlib.contextmanager
def _seeded_block(seed: int, devices: Sequence[int] | None) -> Iterator[None]:
    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=devices):
        try:
            set_seed(seed)
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)


#: MKL's conditional numerical reproducibility (CNR) mode that :func:`deterministic_mode` asks
#: for: the code branch MKL would pick anyway (AUTO), in strict mode, which makes ?gemm bitwise
#: reproducible whatever the alignment of the arrays and however many threads run it.
MKL_CNR_MODE = "AUTO,STRICT"
# CUBLAS needs a fixed workspace to be deterministic (CUDA >= 10.2); read at the first call.
_CUBLAS_WORKSPACE = ":4096:8"


def _set_deterministic_algorithms(enabled: bool, warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms(enabled, warn_only=warn_only)`` without the import of
    ``torch._inductor`` (and ``torch._dynamo``) it makes to set inductor's flag: 3 s of CPU in
    every process that trains. The same flags through the public debug-mode setter; inductor's
    flag too where ``torch.compile`` has already loaded it."""
    torch.set_deterministic_debug_mode((1 if warn_only else 2) if enabled else 0)
    inductor_config = sys.modules.get("torch._inductor.config")
    if inductor_config is not None:
        inductor_config.deterministic = enabled


class DeterministicMode:
    """What :func:`deterministic_mode` changed, and a context manager that changes it back.

    ``settings`` names every setting and its value while the mode is on. On exit (or
    :meth:`restore`) the thread count and the deterministic-algorithms flags return to what
    they were; the MKL and CUBLAS environment variables stay, because those libraries read them
    once per process.
    """

    def __init__(self, threads: int | None, cuda: bool, warn_only: bool):
        self._previous = (
            torch.get_num_threads(),
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark,
        )
        self._active = True
        os.environ.setdefault("MKL_CBWR", MKL_CNR_MODE)
        if cuda:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", _CUBLAS_WORKSPACE)
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
        _set_deterministic_algorithms(True, warn_only)
        if threads is not None:
            torch.set_num_threads(threads)
        self.settings: dict[str, object] = {
            "intra-op threads": torch.get_num_threads(),
            "deterministic algorithms": True,
            "MKL_CBWR": os.environ["MKL_CBWR"],
            "MKL CNR in effect": mkl_cnr_mode(),
        }
        if cuda:
            self.settings["CUBLAS_WORKSPACE_CONFIG"] = os.environ["CUBLAS_WORKSPACE_CONFIG"]

    def restore(self) -> None:
        """Put the thread count and the deterministic-algorithm flags back (idempotent)."""
        if not self._active:
            return
        self._active = False
        threads, enabled, warn_only, cudnn_deterministic, cudnn_benchmark = self._previous
        torch.set_num_threads(threads)
        _set_deterministic_algorithms(enabled, warn_only)
        torch.backends.cudnn.deterministic = cudnn_deterministic
        torch.backends.cudnn.benchmark = cudnn_benchmark

    def __enter__(self) -> DeterministicMode:
        return self

    def __exit__(self, *exc) -> None:
        self.restore()


def deterministic_mode(threads: int | None = 1, *, enabled: bool = True, warn_only: bool = False):
    """Make every training step bitwise reproducible from one process to the next (§20.5.2).

    A resumed run replays the steps of an uninterrupted one only if each step computes exactly
    the same floats in every process. Three things are not guaranteed by default:

    - **How many threads split a kernel, and how.** PyTorch's CPU kernels and MKL's BLAS give
      results that depend on the number of threads that share the work (an inner dimension
      split in two is summed in another order), and MKL chooses that number at run time
      (``MKL_DYNAMIC``). The OpenMP team is created by the first parallel kernel of a process:
      in a fresh run that is the first matrix product of step 0, in a resumed one it is the
      checkpoint load, so step 0 of a fresh process is the one computation whose threading can
      differ from run to run. ``threads`` (default 1) fixes the intra-op thread count; with one
      thread no kernel is split at all. ``None`` keeps the current count.
    - **MKL's code branch.** Without conditional numerical reproducibility MKL may take another
      code path depending on the alignment of its arrays. ``MKL_CBWR`` is set to
      :data:`MKL_CNR_MODE` unless already set; MKL reads it at its first call, so call this
      before any computation (see ``settings["MKL CNR in effect"]``).
    - **Kernels that accumulate in a racing order** (``index_put_``/``put_`` with
      ``accumulate=True`` on CPU, scatter-adds and most backward passes of indexing on CUDA):
      ``torch.use_deterministic_algorithms(True)`` switches them to ordered versions and makes
      an op that has none raise (``warn_only=True``: warn instead, and the guarantee is gone).
      On CUDA also cuDNN's deterministic algorithms, no autotuning, and the CUBLAS workspace
      setting (read at cuBLAS's first call).

    Returns a :class:`DeterministicMode`; use it as a context manager (``with
    deterministic_mode(): ...``) to undo the thread count and flags afterwards. With
    ``enabled=False`` it changes nothing (a null context), so a caller can make it optional.
    """
    if not enabled:
        return contextlib.nullcontext()
    if threads is not None:
        check_int("threads", threads, 1)
    return DeterministicMode(threads, torch.cuda.is_available(), warn_only)


def mkl_cnr_mode() -> str | None:
    """MKL's conditional numerical reproducibility mode in this process (§20.5.2): ``"off"``,
    a branch name such as ``"AUTO,STRICT"``, or None when it cannot be read (no MKL).

    Reading it counts as MKL's first call: from then on the mode is fixed for the process, so
    set ``MKL_CBWR`` (or call :func:`deterministic_mode`) before asking.
    """
    if not torch.backends.mkl.is_available():
        return None
    try:
        lib = ctypes.CDLL(_torch_cpu_library())
        mode = lib.mkl_serv_cbwr_get(ctypes.c_int(-1))  # MKL_CBWR_ALL
    except (OSError, AttributeError):
        return None
    branch = _MKL_BRANCHES.get(mode & 0xFFFF, str(mode & 0xFFFF))
    return f"{branch},STRICT" if mode & 0x10000 else branch


# MKL's CNR branch codes (mkl_cbwr.h); 1 is "branch off", i.e. no reproducibility mode.
_MKL_BRANCHES = {
    0: "off",
    1: "off",
    2: "AUTO",
    3: "COMPATIBLE",
    4: "SSE2",
    8: "SSE4_2",
    9: "AVX",
    10: "AVX2",
    12: "AVX512",
}


def _torch_cpu_library() -> str:
    # torch links MKL statically into libtorch_cpu; its service symbols are exported there.
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib"):
        path = os.path.join(lib_dir, name)
        if os.path.exists(path):
            return path
    raise OSError("libtorch_cpu not found")


@dataclass(frozen=True)
class Dependency:
    """One package the companion uses, and whether it imported here."""

    name: str
    version: str | None
    ok: bool
    detail: str = ""


#: Packages that the notebooks import; (import name, distribution name).
DEPENDENCIES = (
    ("torch", "torch"),
    ("numpy", "numpy"),
    ("pandas", "pandas"),
    ("matplotlib", "matplotlib"),
    ("tqdm", "tqdm"),
    ("gensim", "gensim"),
    ("tokenizers", "tokenizers"),
    ("bitsandbytes", "bitsandbytes"),
)


#: Packages that wrap functions in ``torch.compile`` as they are imported, for kernels that serve
#: only devices without their own (bitsandbytes' "default" backend: CPU and CUDA have their own
#: kernels, so the wrapped functions never run there). The wrapper imports TorchDynamo and
#: Inductor, several seconds in every process that imports the package on a 2-core CPU.
_COMPILE_AT_IMPORT = ("bitsandbytes",)


@contextlib.contextmanager
def _torch_compile_left_out():
    """Inside the block ``torch.compile`` returns its function unchanged (used as a decorator,
    with or without arguments); the real one is back after it."""
    real = torch.compile

    def identity(model=None, **_options):
        return model if model is not None else (lambda function: function)

    torch.compile = identity
    try:
        yield
    finally:
        torch.compile = real


def check_dependency(module: str) -> Dependency:
    """Import ``module`` and report its version, or why it failed, without raising. A package
    of :data:`_COMPILE_AT_IMPORT` is imported with its import-time ``torch.compile`` wrappers
    left out (its fallback kernels run eagerly, where they run at all)."""
    previous = logging.root.manager.disable
    compile_left_out = module.split(".")[0] in _COMPILE_AT_IMPORT
    try:
        # Some packages log optional-kernel notices at import (bitsandbytes on CPU); a
        # dependency check reports only whether the import itself worked.
        logging.disable(logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with _torch_compile_left_out() if compile_left_out else contextlib.nullcontext():
                mod = importlib.import_module(module)
    except Exception as exc:  # any import failure is a report, not a crash
        return Dependency(module, None, False, f"{type(exc).__name__}: {exc}")
    finally:
        logging.disable(previous)
    return Dependency(module, str(getattr(mod, "__version__", "unknown")), True)


def describe_environment() -> dict[str, object]:
    """Return the facts a measurement depends on: versions, device, GPU name, CPU threads.

    Every notebook prints this first, so a reader comparing figures knows what produced them.
    The dependencies' versions are read from their installed metadata, without importing them.
    """
    device = get_device()
    info: dict[str, object] = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "torch": torch.__version__,
        "device": str(device),
        "cpu_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "dist_backend": dist_backend(device),
        "autocast_dtype": str(autocast_dtype(device)).removeprefix("torch."),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = props.name
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["cuda"] = torch.version.cuda
    # Versions from the installed metadata: importing gensim and bitsandbytes only to print
    # their versions cost every notebook seconds (`chapter20 env` checks that they import).
    for module, distribution in DEPENDENCIES[1:]:
        info[module] = installed_version(distribution) or "missing (not installed)"
    return info


def environment_line() -> str:
    """The one short line every notebook prints first: device (and the GPU's name on CUDA),
    torch's version, the CPU's cores and torch's threads, e.g.
    ``'device cpu · torch 2.5.1 · 2 CPU cores, 2 threads'``."""
    info = describe_environment()
    device = str(info["device"])
    if "gpu" in info:
        count = info["gpu_count"]
        device += (
            f" ({info['gpu']}{f' ×{count}' if count > 1 else ''}, {info['gpu_memory_gib']} GiB)"
        )
    cores = f"{info['cpu_count']} CPU cores, {info['cpu_threads']} threads"
    return f"device {device} · torch {info['torch']} · {cores}"


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (pip name) from its metadata, without
    importing it; None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


SCALE_ENV_VAR = "CHAPTER20_SCALE"


def size_scale() -> float:
    """The notebooks' size knob: ``$CHAPTER20_SCALE`` (default 1.0, must be > 0).

    Every notebook multiplies its problem sizes by this factor, so the same notebook that runs
    in a minute on a laptop CPU measures GPU-sized problems with ``CHAPTER20_SCALE=16``. The
    committed outputs (checked by nbval) are recorded at 1.0.
    """
    text = os.environ.get(SCALE_ENV_VAR, "").strip()
    if not text:
        return 1.0
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{SCALE_ENV_VAR} must be a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{SCALE_ENV_VAR} must be a positive finite number, got {text!r}")
    return value


def scaled(size: int, minimum: int = 1) -> int:
    """``size`` (>= 1) multiplied by ``size_scale()``, rounded, and at least ``minimum``
    (>= 1)."""
    size, minimum = check_int("size", size, 1), check_int("minimum", minimum, 1)
    return max(minimum, round(size * size_scale()))
