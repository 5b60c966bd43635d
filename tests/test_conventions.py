"""The code conventions of ARCHITECTURE.md ("Code") that a parser can check.

Each rule the document states about the package's source is checked here over every module:
every module names its section, public functions and classes carry a docstring, modules stay
under 600 lines and functions under 80 (an exception is listed below with its reason), code, tests
and notebooks pass ``ruff format --check`` and ``ruff check``, and every training loop outside the
step is one of the loops ARCHITECTURE.md names ("One step, one configuration"). Unique module
names: ``tests/test_module_names.py``; layers and launches: ``tests/test_layering.py``.
"""

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import chapter20

PACKAGE = Path(chapter20.__file__).parent
ROOT = PACKAGE.parent
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80

#: Functions allowed past MAX_FUNCTION_LINES, each with the reason it is one piece.
LONG_FUNCTIONS: dict[str, str] = {}

#: Modules that call ``backward()`` and an optimizer's ``step()`` outside ``Trainer.step``, each
#: with why it does (ARCHITECTURE.md, "One step, one configuration", lists the same; word2vec
#: updates its rows by hand, without either call, and is listed there too).
OWN_LOOPS: dict[str, str] = {
    "vocab.autoencoder": "a reconstruction loss on a sparse matrix: nothing of the step applies",
    "vocab.bag_of_words": "a classifier whose input layer is what is compared",
    "labs.nb00_overview": "times forward, backward and optimizer.step() one by one",
    "demos.recommender": "a two-tower recommender: a user and an item table, not pairs",
    "demos.elastic_run": "the elastic run: state independent of the world size",
    "labs.nb04_activation_checkpointing": "each policy's memory alone, without the optimizer",
    "labs.nb06_distributed": "the plain DDP module the step's DDP is proven against",
    "techniques.ddp_practices": "find_unused_parameters and a barrier: DDP options the step lacks",
}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


_SECTION = re.compile(r"§|note on efficient embedding training|[Nn]ote, topic|[Nn]otebook")
#: Folders whose modules serve every section (ARCHITECTURE.md, "Code").
_EVERY_SECTION = {"core", "cli", "scripts"}


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_every_module_names_its_section(path):
    docstring = ast.get_docstring(_tree(path)) or ""
    assert docstring, f"{_name(path)} has no module docstring"
    folder = path.relative_to(PACKAGE).parts[0] if path.parent != PACKAGE else None
    if folder in _EVERY_SECTION or folder is None or path.name == "__init__.py":
        return
    assert _SECTION.search(docstring), f"{_name(path)}'s docstring names no section (§20.x, note)"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_public_functions_and_classes_have_docstrings(path):
    missing = [
        node.name
        for node in _tree(path).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and not node.name.startswith("_")
        and not ast.get_docstring(node)
    ]
    assert not missing, f"{_name(path)}: public names without a docstring: {missing}"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_modules_and_functions_stay_short(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_name(path)} has {lines} lines (> {MAX_MODULE_LINES})"
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1
            key = f"{_name(path)}.{node.name}"
            assert length <= MAX_FUNCTION_LINES or key in LONG_FUNCTIONS, (
                f"{key} has {length} lines (> {MAX_FUNCTION_LINES}): split it, or list it in "
                "LONG_FUNCTIONS with the reason it is one piece"
            )


@pytest.mark.parametrize("command", [["format", "--check"], ["check"]], ids=" ".join)
def test_code_tests_and_notebooks_pass_the_formatter_and_the_linter(command):
    """ruff (pyproject.toml: 100 columns) reads the notebooks too."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e .[dev])")
    folders = [str(ROOT / name) for name in ("chapter20", "tests", "notebooks")]
    done = subprocess.run([ruff, *command, *folders], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, f"ruff {' '.join(command)}:\n{done.stdout[-3000:]}"


_BACKWARD = re.compile(r"\.backward\(")


def test_training_loops_outside_the_step_are_the_listed_ones():
    found = set()
    for path in MODULES:
        text = path.read_text(encoding="utf-8")
        if _BACKWARD.search(text) and re.search(r"\b\w*(optimizer|opt)\w*\.step\(\)", text):
            found.add(_name(path))
    found.discard("training.trainer")
    unlisted = found - set(OWN_LOOPS)
    assert not unlisted, (
        f"{sorted(unlisted)} train in a loop of their own: use Trainer.step, or list the module "
        "in OWN_LOOPS (and ARCHITECTURE.md) with the reason"
    )
    stale = set(OWN_LOOPS) - found
    assert not stale, f"OWN_LOOPS lists modules that no longer train on their own: {sorted(stale)}"
