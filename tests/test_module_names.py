"""Module names (ARCHITECTURE.md, "Layers"): no two modules of the package share a file name, so
a name (``trainer``, ``options``, ``preemption``) says which module it is without its folder.
``__init__.py`` and ``__main__.py`` are the package's own names and do not count. The files of
``scripts/`` count too: a script is named after what it runs (``ddp_demo.py`` runs
``demos.ddp_run``), never after a module it would then shadow in a reader's mind."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import chapter20

PACKAGE = Path(chapter20.__file__).parent

#: Pairs that exist today and are to be renamed (each names the exact files, so a third module of
#: the same name still fails); remove an entry when its rename lands.
PENDING: dict[str, frozenset[str]] = {}


def shared_module_names(root: Path) -> dict[str, list[str]]:
    """Each file name that more than one Python file under ``root`` has (scripts included), with
    those files' paths relative to ``root``."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py") or "__pycache__" in path.parts:
            continue
        found[path.name].append(path.relative_to(root).as_posix())
    return {name: paths for name, paths in found.items() if len(paths) > 1}


def test_no_two_modules_of_the_package_share_a_name():
    shared = shared_module_names(PACKAGE)
    unexpected = {
        name: paths for name, paths in shared.items() if frozenset(paths) != PENDING.get(name)
    }
    assert not unexpected, "modules that share a name (rename one so it says what it holds): " + (
        "; ".join(f"{name}: {', '.join(paths)}" for name, paths in unexpected.items())
    )
    stale = {name for name in PENDING if name not in shared}
    assert not stale, f"renamed already: remove {sorted(stale)} from PENDING"


def test_the_check_finds_a_shared_name_and_ignores_package_files_but_not_scripts(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        for name in ("__init__.py", "__main__.py", "trainer.py"):
            (tmp_path / folder / name).write_text("")
    (tmp_path / "a" / "only_here.py").write_text("")
    (tmp_path / "scripts").mkdir()  # no __init__.py: entry points, which count all the same
    (tmp_path / "scripts" / "trainer.py").write_text("")
    assert shared_module_names(tmp_path) == {
        "trainer.py": ["a/trainer.py", "b/trainer.py", "scripts/trainer.py"]
    }
