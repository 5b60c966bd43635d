"""A folder's public names from its ``__init__``, imported only when used.

``from chapter20.training import Trainer`` should work for every public name of every module of a
folder, yet importing the folder must not import them all: a training launch would pay for
distributed checkpointing and plotting it never uses, and ``python -m chapter20.demos.spot_run``
would import the module it runs twice. :func:`lazy_exports` reads each module's ``__all__`` from
its source (without importing it) and returns what the ``__init__`` needs: its ``__all__`` and a
module ``__getattr__`` (PEP 562) that imports the defining module on the first use of a name.
Every module of the folder is re-exported, so a new module's names need no second list.

    __all__, __getattr__ = lazy_exports(__name__)     # every module of the folder
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["COMMAND_LINE", "lazy_exports"]


def _declared_names(path: Path) -> list[str]:
    """The names a module's ``__all__`` lists, read from its source."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise ValueError(f"{path.name} declares no __all__: list its public names")


#: A module's command line, reached through the module (``python -m``, a script's import).
COMMAND_LINE = ("PROG", "main", "parse_args")


def lazy_exports(
    package: str, exclude: Sequence[str] = ()
) -> tuple[list[str], Callable[[str], Any]]:
    """``(__all__, __getattr__)`` for the ``__init__`` of ``package``, re-exporting the public
    names (``__all__``) of every module of its folder but those in ``exclude`` (a module run
    with ``python -m`` alone, say), and but a module's command line (:data:`COMMAND_LINE`). A
    name public in two modules is an error: a facade must say which one it means."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"package must be an importable package, got {package!r}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    modules = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("__"))
    unknown = set(exclude) - set(modules)
    if unknown:
        raise ValueError(f"exclude names no module of {package}: {sorted(unknown)}")
    owner: dict[str, str] = {}
    for module in (m for m in modules if m not in exclude):
        for name in _declared_names(folder / f"{module}.py"):
            if name in COMMAND_LINE:
                continue
            if name in owner:
                raise ValueError(f"{name} is public in both {owner[name]} and {module}")
            owner[name] = module

    def __getattr__(name: str) -> Any:
        if name not in owner:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{owner[name]}"), name)

    return sorted(owner), __getattr__
