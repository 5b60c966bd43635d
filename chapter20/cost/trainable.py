"""§20.5.1 Which of the catalog's GPUs this package can train on, and why the others are out.

The price catalog lists every GPU instance type a cloud sells, including GPUs that PyTorch's
build cannot use. This package trains on CUDA: ``make`` installs PyTorch's CUDA build from PyPI
where an NVIDIA GPU is present (its CPU build elsewhere) and never its ROCm build, so an AMD GPU
is out. PyTorch's CUDA wheels carry kernels for a fixed list of compute capabilities
(:data:`TORCH_CUDA_ARCHS`), so an NVIDIA GPU whose compute capability is not on it is out too,
and so is one whose compute capability no document read here gives. Each GPU's compute
capability is a row of ``data/gpu_compute_capability.csv`` with its document, the address it
was read at and the date; :func:`trainable_gpu_models` applies the rule to every GPU model of a
catalog and says why each excluded model is excluded; :func:`trainable_catalog` keeps the
trainable ones, the menu claim C19 is judged on.
"""

from __future__ import annotations

from functools import cache

import pandas as pd

from chapter20.core.paths import data_file
from chapter20.cost.catalog import catalog_or_default

__all__ = [
    "TORCH_CUDA_ARCHS",
    "TORCH_CUDA_ARCHS_COMMITS",
    "TORCH_CUDA_ARCHS_SOURCE",
    "load_compute_capabilities",
    "trainable_catalog",
    "trainable_gpu_models",
]

#: The compute capabilities PyTorch's CUDA 12.8 wheels (x86-64 Linux) are built for: the
#: ``TORCH_CUDA_ARCH_LIST`` of their build script (:data:`TORCH_CUDA_ARCHS_SOURCE`). The CUDA 12.6
#: wheels' list starts at 5.0 and ends at 9.0; the 12.8 list drops sm_50-sm_60 (deprecated in
#: CUDA 12.8, the script says) and adds Blackwell. The rule needs an exact match: a GPU whose
#: capability is not on the list has no kernels built for it.
TORCH_CUDA_ARCHS = ("7.0", "7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
#: Where :data:`TORCH_CUDA_ARCHS` is read, and the aarch64 (Arm) CUDA build's list.
TORCH_CUDA_ARCHS_SOURCE = (
    "pytorch/pytorch .ci/manywheel/build_cuda.sh (CUDA 12.8: 7.0;7.5;8.0;8.6;9.0;10.0;12.0); "
    "aarch64 wheels: .ci/aarch64_linux/aarch64_ci_build.sh (CUDA 12.9: 8.0;9.0;10.0;11.0;12.0;12.1)"
)
#: The commit of pytorch/pytorch each file of :data:`TORCH_CUDA_ARCHS_SOURCE` was read at.
TORCH_CUDA_ARCHS_COMMITS = {
    ".ci/manywheel/build_cuda.sh": "00c7a380b8369d08e02dd400aa76dc6c0738b589",
    ".ci/aarch64_linux/aarch64_ci_build.sh": "04c5727d0cd4a683768e3b503daf94a6a4c6547d",
}
_COLUMNS = ("gpu_model", "compute_capability", "document", "read_via", "date_read", "note")
_AMD = ("Radeon",)  # the catalog's AMD GPU names start with this word


@cache
def load_compute_capabilities() -> pd.DataFrame:
    """``data/gpu_compute_capability.csv``, one row per GPU model (the catalog's names), indexed
    by it: ``compute_capability`` (a string such as ``"8.6"``, empty where no document read here
    gives one), ``document``, ``read_via``, ``date_read``, ``note``. A row with a compute
    capability always names its document and address; ValueError otherwise, or for a model
    listed twice or a malformed capability."""
    frame = pd.read_csv(data_file("gpu_compute_capability.csv"), dtype=str, keep_default_na=False)
    if tuple(frame.columns) != _COLUMNS:
        raise ValueError(f"gpu_compute_capability.csv must have the columns {_COLUMNS}")
    if frame["gpu_model"].duplicated().any():
        raise ValueError("gpu_compute_capability.csv lists a GPU model twice")
    cited = frame["compute_capability"] != ""
    if (cited & ((frame["document"] == "") | (frame["read_via"] == ""))).any():
        raise ValueError("every compute capability needs its document and read_via")
    if not frame.loc[cited, "compute_capability"].str.fullmatch(r"\d+\.\d").all():
        raise ValueError("a compute capability is written major.minor, e.g. 8.6")
    return frame.set_index("gpu_model")


def _reason(gpu_model: str, capability: str) -> str:
    """Why ``gpu_model`` cannot be trained on, or "" where it can."""
    if gpu_model.startswith(_AMD):
        return "AMD GPU: this package installs PyTorch's CUDA (or CPU) build, never ROCm"
    if not capability:
        return "compute capability not cited"
    if capability not in TORCH_CUDA_ARCHS:
        return f"compute capability {capability}: PyTorch's CUDA wheels carry no kernels for it"
    return ""


def trainable_gpu_models(catalog: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every GPU model of ``catalog`` (default: ``load_catalog()``), sorted, with its
    ``compute_capability`` ("" where not cited), ``trainable`` (whether PyTorch's CUDA wheels
    can train on it: an NVIDIA GPU whose cited capability is in :data:`TORCH_CUDA_ARCHS`) and
    the ``reason`` an excluded model is excluded ("" for a trainable one). A model the data file
    does not list counts as not cited, so a new GPU in the catalog is never trained on by
    default."""
    cited = load_compute_capabilities()
    records = []
    for model in sorted(catalog_or_default(catalog)["gpu_model"].unique()):
        capability = cited.at[model, "compute_capability"] if model in cited.index else ""
        reason = _reason(model, capability)
        records.append(
            {
                "gpu_model": model,
                "compute_capability": capability,
                "trainable": not reason,
                "reason": reason,
            }
        )
    return pd.DataFrame(records).set_index("gpu_model")


def trainable_catalog(catalog: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rows of ``catalog`` (default: ``load_catalog()``) whose GPU this package can train on
    (:func:`trainable_gpu_models`), in the catalog's order."""
    frame = catalog_or_default(catalog)
    models = trainable_gpu_models(frame)
    keep = models.index[models["trainable"]]
    return frame[frame["gpu_model"].isin(keep)]
