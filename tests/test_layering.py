"""The package's layers (ARCHITECTURE.md, "Layers"), read from the imports.

Each folder of ``chapter20/`` has a rank. A module may import modules of its own folder and of
folders with a lower rank, never a folder of the same or a higher rank: labs never import each
other (``labs/common.py``, which they share, is the one module of ``labs/`` they may import),
and nothing below the labs imports one. A subprocess launch is an edge like an import: a module
that starts ``python -m chapter20.<folder>...`` (``torchrun --module``) or a file
``chapter20/<folder>/....py`` obeys the same rule, so nothing below ``scripts/`` launches a
script by its path.
"""

import ast
import functools
import re
from pathlib import Path

import pytest

import chapter20

PACKAGE = Path(chapter20.__file__).parent

#: Folder → rank, bottom first. Folders of one rank are independent of each other.
RANKS = {
    "core": 0,
    "techniques": 1,
    "vocab": 1,
    "training": 2,
    "word2vec": 2,
    "cost": 3,
    "capstone": 4,
    "demos": 4,
    "labs": 5,
    "cli": 6,
    "scripts": 7,
}
#: The modules at the package's top (``__init__.py``, ``__main__.py``) sit above every folder.
TOP_RANK = max(RANKS.values()) + 1


@functools.cache
def _parsed(source: str, filename: str) -> ast.Module:
    """The syntax tree of a source text, parsed once: the import and the launch checks read
    every file, and the copy of the package in the wrong-import test is the same text."""
    return ast.parse(source, filename=filename)


def _tree(path: Path) -> ast.Module:
    return _parsed(path.read_text(), path.name)


def imported_modules(path: Path) -> set[str]:
    """Every chapter20 module a file imports, dotted below ``chapter20`` (``import
    chapter20.x.y``, ``from chapter20.x.y import z``, ``from chapter20.x import y``: ``x.y``)."""
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found |= {a.name[10:] for a in node.names if a.name.startswith("chapter20.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "chapter20":
                found |= {a.name for a in node.names}
            elif node.module.startswith("chapter20."):
                module = node.module[10:]
                found.add(module)
                if "." not in module:  # from chapter20.labs import common → labs.common
                    found |= {f"{module}.{a.name}" for a in node.names}
    return found


#: The flags after which ``python`` and ``torchrun`` take a module to run.
MODULE_FLAGS = ("-m", "--module")
_MODULE = re.compile(r"chapter20((?:\.\w+)+)")
_PATH = re.compile(r"(?:.*/)?chapter20/(\w+(?:/\w+)*)\.py")


def _strings(tree: ast.Module) -> dict[str, str]:
    """The module-level constants holding one string (``DEMO_MODULE = "chapter20..."``)."""
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if isinstance(node.value.value, str):
                found |= {t.id: node.value.value for t in targets if isinstance(t, ast.Name)}
    return found


def _path_parts(node: ast.AST) -> list[str] | None:
    """The string pieces of a path built with ``/`` (``root / "scripts" / "x.py"``), in order."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left, right = _path_parts(node.left), _path_parts(node.right)
        return (left or []) + (right or [])
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return None


def launched_modules(path: Path) -> set[str]:
    """Every chapter20 module a file launches as a process, dotted below ``chapter20``: a name
    beside ``-m``/``--module`` in one list or tuple (a literal, or a module-level constant
    holding one), a literal path ``.../chapter20/<folder>/<name>.py``, or such a path built with
    ``/`` (``Path(__file__).parents[1] / "scripts" / "spot_demo.py"``)."""
    tree = _tree(path)
    constants = _strings(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            values = [
                e.value if isinstance(e, ast.Constant) else constants.get(getattr(e, "id", ""))
                for e in node.elts
            ]
            if any(v in MODULE_FLAGS for v in values):
                found |= {
                    m.group(1)[1:]
                    for v in values
                    if isinstance(v, str) and (m := _MODULE.fullmatch(v))
                }
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if m := _PATH.fullmatch(node.value):
                found.add(m.group(1).replace("/", "."))
        parts = _path_parts(node) if isinstance(node, ast.BinOp) else None
        if parts and len(parts) >= 2 and parts[-1].endswith(".py"):
            joined = "/".join(parts)[: -len(".py")].removeprefix("chapter20/")
            if joined.split("/")[0] in RANKS:
                found.add(joined.replace("/", "."))
    return found


def folder_of(module: str) -> str | None:
    """The layer folder of a dotted module name below chapter20 (None: the package's top)."""
    head = module.split(".")[0]
    return head if head in RANKS else None


def violation(importer: str, imported: str) -> str | None:
    """Why ``importer`` (dotted, below chapter20) may not import ``imported``; None if it may."""
    source, target = folder_of(importer), folder_of(imported)
    if target is None or source == target:
        if source == target == "labs" and imported not in ("labs", "labs.common"):
            if importer != "labs.common" and imported != importer:
                return "a lab imports another lab (shared code belongs in labs/common.py)"
        return None
    if imported in ("labs", "labs.common") and source != "labs":
        return "labs/common.py is the labs' own; the library does not import it"
    source_rank = TOP_RANK if source is None else RANKS[source]
    if RANKS[target] >= source_rank:
        below = source or "the top"
        return f"{target}/ (rank {RANKS[target]}) is not below {below} (rank {source_rank})"
    return None


def file_violations(path: Path, importer: str) -> list[str]:
    """Each import and each launch of the file ``path`` (the module ``importer``, dotted below
    chapter20) that the layers forbid, named with the file and the rule it breaks."""
    name = "chapter20/" + importer.replace(".", "/") + ".py"
    problems = []
    for verb, targets in (
        ("imports", imported_modules(path)),
        ("launches", launched_modules(path)),
    ):
        for target in sorted(targets):
            if reason := violation(importer, target):
                problems.append(f"{name} {verb} {target}: {reason}")
    return problems


def violations(package: Path = PACKAGE) -> list[str]:
    """Every forbidden import or launch of the package's modules (:func:`file_violations`)."""
    problems = []
    for path in sorted(package.rglob("*.py")):
        importer = ".".join(path.relative_to(package).with_suffix("").parts)
        problems += file_violations(path, importer)
    return problems


def test_every_folder_of_the_package_has_a_rank():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    assert folders == set(RANKS)


def test_every_import_points_down_the_layers():
    assert violations() == []


@pytest.mark.parametrize(
    "importer, imported",
    [
        ("core.measure", "techniques.precision"),  # up one layer
        ("techniques.sharding", "training.trainer"),
        ("training.trainer", "cost.throughput"),  # what issue 32 removed
        ("training.encoder_file", "capstone.views"),
        ("vocab.bpe", "techniques.sharding"),  # same rank, other folder
        ("capstone.run", "labs.nb11_capstone"),  # the library into a lab
        ("capstone.run", "labs.common"),
        ("labs.nb02_contrastive", "labs.nb03_precision"),  # lab into lab
        ("cli.main", "scripts.ddp_demo"),
        ("capstone.run", "demos.spot_run"),  # same rank, other folder
        ("demos.spot_run", "capstone.run"),
        ("training.loop", "demos.spot_run"),
    ],
)
def test_an_upward_import_is_caught(importer, imported):
    assert violation(importer, imported) is not None


@pytest.mark.parametrize(
    "importer, imported",
    [
        ("techniques.sharding", "core.checks"),
        ("training.trainer", "techniques.precision"),
        ("training.trainer", "training.state"),
        ("capstone.run", "cost.estimates"),
        ("labs.nb02_contrastive", "labs.common"),
        ("labs.nb02_contrastive", "capstone.evaluation"),
        ("cli.main", "labs.nb01_sharding"),
        ("__main__", "cli.main"),
        ("demos.spot_run", "training.loop"),
        ("labs.nb07_spot", "demos.spot_run"),
        ("scripts.spot_demo", "demos.spot_run"),
    ],
)
def test_a_downward_import_is_allowed(importer, imported):
    assert violation(importer, imported) is None


def test_the_check_sees_every_import_form(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import chapter20.core.a\nfrom chapter20.labs.b import x\n"
        "from chapter20.labs import common\nfrom chapter20 import cost\n"
        "def f():\n    from chapter20.training import trainer\n"
    )
    assert imported_modules(sample) == {
        "core.a", "labs.b", "labs", "labs.common", "cost", "training", "training.trainer",
    }  # fmt: skip


def test_a_deliberately_wrong_import_fails_the_check(tmp_path):
    """A copy of the package with one upward import added: the check names it."""
    import shutil

    copy = tmp_path / "chapter20"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "core" / "measure.py"
    target.write_text(target.read_text() + "\nfrom chapter20.training.trainer import Trainer\n")
    found = violations(copy)
    assert len(found) == 1 and "core/measure.py imports training.trainer" in found[0], found


def test_the_check_sees_every_launch_form(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import subprocess, sys\nfrom pathlib import Path\n"
        'WRITER = "chapter20.demos.fault_writer"\n'
        'subprocess.run([sys.executable, "-m", "chapter20.labs.nb07_spot", "--x"])\n'
        'subprocess.run([sys.executable, "-m", WRITER])\n'
        'torchrun = ("torchrun", "--module", "chapter20.demos.spot_run")\n'
        'subprocess.run([sys.executable, "chapter20/scripts/train.py"])\n'
        'script = Path(__file__).parents[1] / "scripts" / "spot_demo.py"\n'
        'help_text = "the flags of chapter20/scripts/train.py"  # prose, not a launch\n'
        'subprocess.run([sys.executable, "-m", "torch.distributed.run", "-m", "pytest"])\n'
    )
    assert launched_modules(sample) == {
        "labs.nb07_spot", "demos.fault_writer", "demos.spot_run", "scripts.train",
        "scripts.spot_demo",
    }  # fmt: skip


def test_a_deliberately_added_upward_launch_fails_the_check(tmp_path):
    """A module of ``training/`` that launches ``chapter20/scripts/spot_demo.py`` by its path
    (what ``spot_run.py`` did before issue 41) or its demo module with ``-m``: both named."""
    launcher = tmp_path / "spot_launch.py"
    launcher.write_text(
        "import subprocess, sys\nfrom pathlib import Path\n\n\n"
        "def launch(args):\n"
        '    script = Path(__file__).parents[1] / "scripts" / "spot_demo.py"\n'
        "    return subprocess.run([sys.executable, str(script), *args])\n\n\n"
        "def launch_module(args):\n"
        '    return subprocess.run([sys.executable, "-m", "chapter20.demos.spot_run", *args])\n'
    )
    found = file_violations(launcher, "training.spot_launch")
    print("\n".join(found))
    assert found == [
        "chapter20/training/spot_launch.py launches demos.spot_run: "
        "demos/ (rank 4) is not below training (rank 2)",
        "chapter20/training/spot_launch.py launches scripts.spot_demo: "
        "scripts/ (rank 7) is not below training (rank 2)",
    ]


def facade_modules(folder: str) -> set[str]:
    """The modules a folder's ``__init__`` re-exports, dotted below ``chapter20``: every module
    of the folder but those it names in ``lazy_exports(..., exclude=...)``."""
    excluded = {
        element.value
        for node in ast.walk(_tree(PACKAGE / folder / "__init__.py"))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports"
        for keyword in node.keywords
        if keyword.arg == "exclude"
        for element in ast.walk(keyword.value)
        if isinstance(element, ast.Constant) and isinstance(element.value, str)
    }
    stems = {p.stem for p in (PACKAGE / folder).glob("*.py") if not p.stem.startswith("__")}
    return {f"{folder}.{stem}" for stem in stems - excluded}


@pytest.mark.parametrize("folder", ["cost", "vocab", "word2vec", "training", "demos"])
def test_a_facade_re_exports_the_public_names_of_the_modules_it_imports(folder):
    """``from chapter20 import cost; cost.load_catalog()``, ``from chapter20.training import
    Trainer`` (notebooks, tests): a folder's ``__init__`` re-exports exactly the ``__all__`` of
    every module of the folder (a module's command line aside), the same objects; a module the
    facade leaves out (``exclude``) is one its docstring names."""
    import importlib

    from chapter20.core.facade import COMMAND_LINE

    facade = importlib.import_module(f"chapter20.{folder}")
    exported = {}
    for module in facade_modules(folder):
        names = importlib.import_module(f"chapter20.{module}").__all__
        exported.update({n: f"chapter20.{module}" for n in names if n not in COMMAND_LINE})
    assert sorted(facade.__all__) == sorted(exported)
    for name, module in exported.items():
        assert getattr(facade, name) is getattr(importlib.import_module(module), name), name
    left_out = {p.stem for p in (PACKAGE / folder).glob("*.py") if not p.stem.startswith("__")}
    left_out -= {m.split(".", 1)[1] for m in facade_modules(folder)}
    assert all(f"``{name}``" in facade.__doc__ for name in left_out), left_out  # said why


def test_a_training_launch_does_not_import_what_it_does_not_use():
    """Every torchrun launch and every restart after a preemption imports the spot loop: the
    plotting library, DCP and FSDP (seconds of start-up) are imported only when used."""
    import subprocess
    import sys

    heavy = ("matplotlib", "torch.distributed.checkpoint", "torch.distributed.fsdp")
    code = (
        "import sys, chapter20.training.loop, chapter20.demos.spot_run, chapter20.training\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
