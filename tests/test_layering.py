"""The package's layers (DESIGN.md, "Layout"), read from the imports: no library module or script
imports a ``*_lab`` module, and no lab imports another lab (what two labs share belongs in the
library)."""

import ast
from pathlib import Path

import chapter20

PACKAGE = Path(chapter20.__file__).parent


def _imported_modules(path: Path) -> set[str]:
    """Every chapter20 module a file imports (``import chapter20.x``, ``from chapter20.x import``,
    ``from chapter20 import x``), by its last name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[-1] for a in node.names if a.name.startswith("chapter20.")}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "chapter20":
                found |= {a.name for a in node.names}
            elif node.module.startswith("chapter20."):
                found.add(node.module.split(".")[-1])
    return found


def _violations() -> list[str]:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        labs = {m for m in _imported_modules(path) if m.endswith("_lab")}
        if not labs:
            continue
        where = path.relative_to(PACKAGE.parent)
        kind = "lab" if path.stem.endswith("_lab") else "library module or script"
        problems.append(f"{where} ({kind}) imports {', '.join(sorted(labs))}")
    return problems


def test_no_library_module_or_script_imports_a_lab_and_no_lab_imports_another():
    assert _violations() == []


def test_the_check_sees_every_import_form(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import chapter20.a_lab\nfrom chapter20.b_lab import x\nfrom chapter20 import c_lab, data\n"
    )
    assert _imported_modules(sample) == {"a_lab", "b_lab", "c_lab", "data"}


def test_a_training_launch_does_not_import_what_it_does_not_use():
    """Every torchrun launch and every restart after a preemption imports the spot loop: the
    plotting library, DCP and FSDP (seconds of start-up) are imported only when used."""
    import subprocess
    import sys

    heavy = ("matplotlib", "torch.distributed.checkpoint", "torch.distributed.fsdp")
    code = (
        "import sys, chapter20.spot_training, chapter20.scripts.spot_demo, chapter20.training\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
