"""Where the companion reads and writes files (shared by every section).

- ``repo_root()``: the checkout holding the package, or None for an installed wheel.
- ``cache_dir()``: derived data (tokenised corpora), outside the repository:
  ``$CHAPTER20_CACHE`` or ``~/.cache/chapter20``.
- ``results_dir()``: measured claim rows written by the notebooks, read by
  ``python -m chapter20 audit``: ``$CHAPTER20_RESULTS``, else ``build/claims`` in a checkout,
  else ``<cache_dir>/claims``.
- ``data_file(name)``: a small data file of the repository's ``data/`` folder (claims, price
  snapshot, GPU record, recipe study): read from the checkout's ``data/`` in a checkout or an
  editable install, and from ``chapter20/data/`` inside an installed wheel (pyproject.toml
  ships ``data/`` there), found through ``importlib.resources``. Every module reads its data
  through this one function.
- ``atomic_torch_save(obj, path)`` and ``check_weights_only(obj, name)``: files that are never
  half-written and that ``torch.load(..., weights_only=True)`` is known to read back.
"""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # chapter20/


def repo_root() -> Path | None:
    """The repository checkout that holds this package, or None when installed elsewhere."""
    root = _PACKAGE_DIR.parent
    return root if (root / "pyproject.toml").is_file() else None


def cache_dir() -> Path:
    """Directory for derived data, created on first use (never inside the repository)."""
    path = Path(os.environ.get("CHAPTER20_CACHE") or Path.home() / ".cache" / "chapter20")
    path.mkdir(parents=True, exist_ok=True)
    return path


def results_dir() -> Path:
    """Directory where notebooks record measured claim rows (see ``chapter20.core.claims``)."""
    env = os.environ.get("CHAPTER20_RESULTS")
    if env:
        path = Path(env)
    elif (root := repo_root()) is not None:
        path = root / "build" / "claims"
    else:
        path = cache_dir() / "claims"
    path.mkdir(parents=True, exist_ok=True)
    return path


#: The folder that holds the data files: ``data/`` beside ``chapter20/`` in the repository,
#: ``chapter20/data/`` in a wheel (pyproject.toml maps one to the other).
DATA_DIR = "data"


def data_file(name: str) -> Path:
    """Path of the data file ``data/<name>``: the checkout's ``data/`` folder when this package
    runs from a checkout (editable install included), else ``chapter20/data/`` inside the
    installed package (found through ``importlib.resources``); FileNotFoundError naming the file
    if there is none.

    For an install that is not a plain directory (a zip), the file is copied once into
    ``cache_dir()/data`` so that callers always get a real path.
    """
    if not isinstance(name, str) or not name or Path(name).name != name:
        raise ValueError(f"name must be a bare file name like 'claims.csv', got {name!r}")
    root = repo_root()
    if root is not None:
        path = root / DATA_DIR / name
        if not path.is_file():
            raise FileNotFoundError(f"data file {name!r} not found in {root / DATA_DIR}")
        return path
    resource = resources.files("chapter20").joinpath(DATA_DIR).joinpath(name)
    if not resource.is_file():
        raise FileNotFoundError(
            f"data file {name!r} not found in the installed package (chapter20/{DATA_DIR}/)"
        )
    if isinstance(resource, Path):
        return resource
    copy = cache_dir() / DATA_DIR / name
    copy.parent.mkdir(parents=True, exist_ok=True)
    with resources.as_file(resource) as path:
        shutil.copyfile(path, copy)
    return copy


def atomic_torch_save(obj: object, path: str | os.PathLike) -> Path:
    """``torch.save(obj, path)`` that never leaves a half-written file under ``path`` (§20.4
    "save from rank 0", §20.5.2 checkpoints): write a temporary file in the same directory,
    flush it to disk, then rename it into place (atomic on POSIX and Windows). ``obj`` must load
    back with ``weights_only=True`` (:func:`check_weights_only`), checked before anything is
    written."""
    import torch

    check_weights_only(obj, "obj")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def check_weights_only(obj: object, name: str = "state") -> None:
    """Raise TypeError, naming the key (e.g. ``state['extra']['loss']``), if ``obj`` holds a
    value that ``torch.load(..., weights_only=True)`` refuses (§20.5.2).

    ``torch.save`` pickles anything, and the unrestricted unpickler that would read it back can
    run arbitrary code; every load in this package is restricted to tensors and plain values.
    A value outside that set (a ``numpy.float64``, a dataclass) would save fine and fail at
    resume, after the work is done. Tensors, containers and plain Python values are accepted on
    sight; anything else is judged by torch's own restricted unpickler on a round trip.
    """
    import torch

    plain = (int, float, bool, str, bytes, type(None), torch.dtype, torch.device, torch.Size)
    pending = [(name, obj)]
    while pending:
        where, value = pending.pop()
        kind = type(value)
        if kind in (torch.Tensor, torch.nn.Parameter) or kind in plain:
            continue
        if isinstance(value, dict) and kind.__module__ in ("builtins", "collections"):
            for key, item in value.items():
                pending.append((f"{where}[{key!r}] (key)", key))
                pending.append((f"{where}[{key!r}]", item))
            continue
        if kind in (list, tuple):
            pending.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
            continue
        _round_trip(where, value)


def _round_trip(where: str, value: object) -> None:
    import io

    import torch

    buffer = io.BytesIO()
    try:
        torch.save(value, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except Exception as exc:  # the unpickler's refusal (or a value torch.save cannot write)
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = [line for line in lines if "Unsupported global" in line or "error:" in line]
        reason = (detail or lines or [type(exc).__name__])[0].split(" Please use")[0][:200]
        raise TypeError(
            f"{where} is a {type(value).__module__}.{type(value).__qualname__}, which "
            "torch.load(..., weights_only=True) cannot read back; store a tensor or a plain "
            f"Python value instead (e.g. float(x), x.tolist()). Unpickler: {reason}"
        ) from None
