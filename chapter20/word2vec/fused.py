"""word2vec's SGD step fused into one loop per pair, in C: the fast path of
``chapter20.word2vec.skipgram``.

The note on efficient embedding training, topic 1. ``SkipGram.step`` (the plain path) computes
a batch's update op by op: gather the output rows into a ``[B, 1 + k, D]`` tensor, multiply,
sum, take sigmoids, multiply again, scatter. Each op is one pass over memory and writes a
temporary of megabytes that the next op reads back; where the time goes is
``chapter20.labs.nb09_step_cost.profile_step`` (notebook 09): moving rows, not arithmetic.
word2vec's C loop never has that problem. It takes one pair at a time and keeps its few rows
(1 + k of them, or one per node on a Huffman path) in the first-level cache from the first dot
product to the last update, fused into one pass.

``kernels.c`` (next to this file, about two hundred lines with its comments) is that loop,
written to do for each pair exactly what ``SkipGram.step`` does for a batch of that one pair:
the same scores, the same steps, the same per-row step cap (tested equal, to float32 rounding, pair
after pair). So the fast path is word2vec's sequential SGD, the algorithm of word2vec and
gensim, and the plain path is its batched form for GPUs, where a batch of one pair would leave
the device idle. This module compiles the file and calls it:

- the C compiler of the machine (``cc``, ``gcc`` or ``clang``) builds it in well under a
  second, once per process, into a temporary directory (no cache to go stale); ``-O3`` and
  ``-march=native`` (dropped if the compiler refuses it). Without a compiler, or if compiling
  fails, :func:`load_kernels` warns and returns ``None`` and the trainer takes the plain path;
- the functions are called through ``ctypes`` on the tensors' memory (``data_ptr``), which
  releases Python's lock for the call: Hogwild worker threads run the loop in parallel, as
  gensim's workers run its Cython;
- noise words are drawn inside the loop (Walker's alias method on ``NoiseSampler``'s tables,
  from a SplitMix64 stream seeded by the caller): :func:`draw_noise` returns the same draws,
  which is how the tests feed the plain path the noise the kernel used.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import sysconfig
import tempfile
import warnings
from pathlib import Path

import torch

__all__ = [
    "MAX_EXP",
    "FusedKernels",
    "compiler_available",
    "load_kernels",
]

#: Hierarchical-softmax steps whose score is this large are skipped, as in word2vec and gensim
#: (their ``MAX_EXP``): the sigmoid is saturated there.
MAX_EXP = 6.0

SOURCE = Path(__file__).with_name("kernels.c")
_FLAGS = ("-O3", "-fPIC", "-shared", "-fopenmp-simd")
_NATIVE = "-march=native"  # the machine's vector width; some compilers refuse it


def _compiler() -> str | None:
    """The first C compiler found: ``$CC``, Python's own, ``cc``, ``gcc``, ``clang``."""
    names = [os.environ.get("CC", ""), sysconfig.get_config_var("CC") or "", "cc", "gcc", "clang"]
    for name in names:
        if name and (path := shutil.which(name.split()[0])):
            return path
    return None


def compiler_available() -> bool:
    """Whether a C compiler for the fused kernels is on the PATH."""
    return _compiler() is not None


def _build(compiler: str, directory: str) -> Path:
    """Compile ``SOURCE`` into a shared library in ``directory``; the error output on failure."""
    target = Path(directory) / "word2vec_kernels.so"
    errors = ""
    for flags in ((*_FLAGS, _NATIVE), _FLAGS):
        result = subprocess.run(
            [compiler, *flags, str(SOURCE), "-o", str(target), "-lm"],
            capture_output=True,
            text=True,
        )
        if result.returncode == 0:
            return target
        errors = result.stderr.strip()
    raise RuntimeError(errors.splitlines()[0] if errors else "the compiler failed")


_I64, _F32, _F64, _PTR = ctypes.c_int64, ctypes.c_float, ctypes.c_double, ctypes.c_void_p
_SIGNATURES = {
    "draw_noise": (None, [_PTR, _PTR, _I64, ctypes.c_uint64, _PTR, _I64]),
    "negative_pairs": (
        _F64,
        [_PTR, _PTR, _I64, _PTR, _PTR, _I64, _I64, _PTR, _PTR, _I64, ctypes.c_uint64, _F32],
    ),
    "hierarchical_pairs": (
        _F64,
        [_PTR, _PTR, _I64, _PTR, _PTR, _I64, _PTR, _PTR, _PTR, _I64, _F32, _F32],
    ),
}


def _pointer(tensor: torch.Tensor, dtype: torch.dtype, name: str) -> int:
    """The address of ``tensor``'s memory, after checking what the C code assumes of it."""
    if tensor.device.type != "cpu" or tensor.dtype != dtype or not tensor.is_contiguous():
        raise ValueError(
            f"{name} must be a contiguous {dtype} tensor on the CPU, got {tensor.dtype} on "
            f"{tensor.device}{'' if tensor.is_contiguous() else ', not contiguous'}"
        )
    return tensor.data_ptr()


class FusedKernels:
    """The compiled loops of ``kernels.c`` (note, topic 1), made by :func:`load_kernels`.

    Every method works in place on the tables and checks the dtype, device and layout of what
    it is given, since the C code reads raw memory. Ids must be in range: the trainer draws
    them, and the C code does not check them again on every access.
    """

    def __init__(self, library: ctypes.CDLL):
        self._lib = library
        for name, (restype, argtypes) in _SIGNATURES.items():
            function = getattr(library, name)
            function.restype, function.argtypes = restype, argtypes

    def draw_noise(self, prob: torch.Tensor, alias: torch.Tensor, seed: int, count: int):
        """``count`` noise words (int64), the stream :meth:`negative_pairs` draws for ``seed``
        (``k`` per pair, pair after pair), from ``NoiseSampler``'s ``prob`` and ``alias``."""
        out = torch.empty(count, dtype=torch.int64)
        self._lib.draw_noise(
            _pointer(prob, torch.float64, "prob"), _pointer(alias, torch.int64, "alias"),
            len(prob), seed, out.data_ptr(), count,
        )  # fmt: skip
        return out

    def negative_pairs(self, w_in, w_out, inputs, outputs, k, prob, alias, seed, lr) -> float:
        """Negative sampling on the pairs ``(inputs[p], outputs[p])``, one after another, ``k``
        noise words each (drawn from ``seed``'s stream); returns the summed loss."""
        if not len(inputs) == len(outputs):
            raise ValueError(f"inputs and outputs differ in length: {len(inputs)}, {len(outputs)}")
        return self._lib.negative_pairs(
            _pointer(w_in, torch.float32, "w_in"), _pointer(w_out, torch.float32, "w_out"),
            w_in.shape[1], _pointer(inputs, torch.int64, "inputs"),
            _pointer(outputs, torch.int64, "outputs"), len(inputs), k,
            _pointer(prob, torch.float64, "prob"), _pointer(alias, torch.int64, "alias"),
            len(prob), seed, lr,
        )  # fmt: skip

    def hierarchical_pairs(self, w_in, w_out, inputs, outputs, points, labels, lengths, lr):
        """The hierarchical softmax on the pairs, one after another: word ``o``'s path is
        ``points[o, :lengths[o]]`` (int64), ``labels[o]`` = 1 - code (float32); steps beyond
        ``±MAX_EXP`` skipped. Returns the summed loss."""
        if not len(inputs) == len(outputs):
            raise ValueError(f"inputs and outputs differ in length: {len(inputs)}, {len(outputs)}")
        if points.shape != labels.shape or len(lengths) != len(points):
            raise ValueError("points, labels and lengths must describe the same paths")
        return self._lib.hierarchical_pairs(
            _pointer(w_in, torch.float32, "w_in"), _pointer(w_out, torch.float32, "w_out"),
            w_in.shape[1], _pointer(inputs, torch.int64, "inputs"),
            _pointer(outputs, torch.int64, "outputs"), len(inputs),
            _pointer(points, torch.int64, "points"), _pointer(labels, torch.float32, "labels"),
            _pointer(lengths, torch.int64, "lengths"), points.shape[1], MAX_EXP, lr,
        )  # fmt: skip


@functools.cache
def load_kernels() -> FusedKernels | None:
    """The fused kernels, compiled on first use in this process; ``None``, with a warning
    saying why, when there is no C compiler or compiling fails (the trainer then takes the
    plain path)."""
    compiler = _compiler()
    if compiler is None:
        warnings.warn(
            "no C compiler found: word2vec trains on the plain (batched) path, several times "
            "slower on a CPU; install one (e.g. gcc) for the fused per-pair kernels",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    scratch = tempfile.TemporaryDirectory(prefix="chapter20-w2v-", ignore_cleanup_errors=True)
    with scratch as directory:
        try:
            # Loaded before the directory goes: the library stays mapped once opened.
            return FusedKernels(ctypes.CDLL(str(_build(compiler, directory))))
        except (RuntimeError, OSError) as error:
            warnings.warn(
                f"compiling the fused word2vec kernels failed ({error}); training on the plain "
                "path",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
