"""Where the companion reads and writes files (shared by every section).

- ``repo_root()``: the checkout holding the package, or None for an installed wheel.
- ``cache_dir()``: derived data (tokenised corpora), outside the repository:
  ``$CHAPTER20_CACHE`` or ``~/.cache/chapter20``.
- ``results_dir()``: measured claim rows written by the notebooks, read by
  ``python -m chapter20 audit``: ``$CHAPTER20_RESULTS``, else ``build/claims`` in a checkout,
  else ``<cache_dir>/claims``.
- ``data_file(name)``: a small data file that ships inside the package, ``chapter20/data/``
  (claims, price snapshot, measurements): found through ``importlib.resources``, so it works the
  same in a checkout, an editable install and an installed wheel. Every module reads its data
  through this one function.
"""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


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
    """Directory where notebooks record measured claim rows (see ``chapter20.claims``)."""
    env = os.environ.get("CHAPTER20_RESULTS")
    if env:
        path = Path(env)
    elif (root := repo_root()) is not None:
        path = root / "build" / "claims"
    else:
        path = cache_dir() / "claims"
    path.mkdir(parents=True, exist_ok=True)
    return path


#: The package folder that holds the data files (package data, listed in pyproject.toml).
DATA_PACKAGE_DIR = "data"


def data_file(name: str) -> Path:
    """Path of the data file ``chapter20/data/<name>`` (package data, found through
    ``importlib.resources``); FileNotFoundError naming the file if the package has none.

    For an install that is not a plain directory (a zip), the file is copied once into
    ``cache_dir()/data`` so that callers always get a real path.
    """
    if not isinstance(name, str) or not name or Path(name).name != name:
        raise ValueError(f"name must be a bare file name like 'claims.csv', got {name!r}")
    resource = resources.files(__package__).joinpath(DATA_PACKAGE_DIR).joinpath(name)
    if not resource.is_file():
        raise FileNotFoundError(
            f"data file {name!r} not found in the package data (chapter20/{DATA_PACKAGE_DIR}/)"
        )
    if isinstance(resource, Path):
        return resource
    copy = cache_dir() / DATA_PACKAGE_DIR / name
    copy.parent.mkdir(parents=True, exist_ok=True)
    with resources.as_file(resource) as path:
        shutil.copyfile(path, copy)
    return copy


def atomic_torch_save(obj: object, path: str | os.PathLike) -> Path:
    """``torch.save(obj, path)`` that never leaves a half-written file under ``path`` (§20.4
    "save from rank 0", §20.5.2 checkpoints): write a temporary file in the same directory,
    flush it to disk, then rename it into place (atomic on POSIX and Windows)."""
    import torch

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
