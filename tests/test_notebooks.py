"""Notebook hygiene (ARCHITECTURE.md, "Notebooks"): what nbval does not check.

nbval (``make test``) re-runs every notebook and compares its outputs; these tests check how the
committed notebooks were produced and what they may contain.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MACHINE_PATH = re.compile(r"(/work/|/tmp/|/root/|/home/\w+/|/Users/\w+/|/farm/|[A-Z]:\\\\Users)")
NAME = re.compile(r"^\d\d_[a-z0-9_]+\.ipynb$")


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no notebook"
    assert NOTEBOOKS[0].name == "00_overview.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_name_and_kernel(path):
    nb = _load(path)
    assert NAME.match(path.name), f"{path.name}: notebooks are named NN_snake_case.ipynb"
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_executed_top_to_bottom_without_errors(path):
    cells = _code_cells(_load(path))
    counts = [c["execution_count"] for c in cells]
    assert counts == list(range(1, len(cells) + 1)), f"{path.name}: execution counts {counts}"
    for cell in cells:
        for out in cell["outputs"]:
            assert out["output_type"] != "error", f"{path.name}: a cell ends in {out.get('ename')}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_machine_paths_in_outputs(path):
    for cell in _code_cells(_load(path)):
        for out in cell["outputs"]:
            text = json.dumps(out.get("text", "")) + json.dumps(
                {k: v for k, v in out.get("data", {}).items() if not k.startswith("image/")}
            )
            match = MACHINE_PATH.search(text)
            assert match is None, f"{path.name}: an output shows the path {match.group(0)!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_cell_is_a_titled_markdown_with_section_and_runtime(path):
    first = _load(path)["cells"][0]
    text = "".join(first["source"])
    assert first["cell_type"] == "markdown"
    assert text.startswith(f"# {path.name[:2]} ·"), f"{path.name}: title must start '# NN ·'"
    assert "§" in text or "note" in text.lower(), f"{path.name}: name the section"
    assert re.search(r"\d+\s*(seconds|minutes?|s\b|min)", text), f"{path.name}: state the runtime"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_cells_stay_short_and_import_only_chapter20(path):
    allowed = {"chapter20", "torch", "matplotlib", "numpy", "pandas"}
    for cell in _code_cells(_load(path)):
        src = "".join(cell["source"])
        lines = [line for line in src.splitlines() if line.strip()]
        assert len(lines) <= 15, f"{path.name}: {len(lines)} lines in a cell: move it to chapter20/"
        for module in re.findall(r"^\s*(?:from|import)\s+([\w]+)", src, re.M):
            assert module in allowed, f"{path.name}: imports {module}; logic comes from chapter20"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_ends_with_a_claims_check(path):
    """The last section is the claims check; only its further reading may follow it."""
    cells = _load(path)["cells"]
    headings = [
        (i, line)
        for i, c in enumerate(cells)
        if c["cell_type"] == "markdown"
        for line in "".join(c["source"]).splitlines()
        if line.startswith("## ")
    ]
    checks = [i for i, line in headings if "Claims check" in line]
    assert checks, f"{path.name}: no '## ... Claims check' section"
    after = [line for i, line in headings if i > checks[-1]]
    assert all("Further reading" in line for line in after), f"{path.name}: {after} after the check"
    section = "".join("".join(c["source"]) for c in cells[checks[-1] :])
    assert "ClaimsLog" in section or "judged_in" in section, (
        f"{path.name}: the claims check section neither logs a claim (ClaimsLog) nor points to the "
        "notebook that judges one (claims.judged_in)"
    )


# A verdict is computed by chapter20.core.claims from a measured value and the claim's criterion,
# never typed (issue 18): no verdict keyword, no verdict string, no literal True/False in a check.
_TYPED = re.compile(
    r"\b(holds|needs_gpu|verdict)\s*=|[\"'](holds|does not hold( here)?|needs a GPU|"
    r"not measurable here|consistent with the model)[\"']"
)
_CHECK_CALL = re.compile(r"\.check\(")


def _call_text(src: str, start: int) -> str:
    depth = 0
    for i in range(start, len(src)):
        depth += {"(": 1, ")": -1}.get(src[i], 0)
        if depth == 0 and src[i] == ")":
            return src[start : i + 1]
    return src[start:]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_notebook_types_a_verdict(path):
    for cell in _code_cells(_load(path)):
        src = "".join(cell["source"])
        typed = _TYPED.search(src)
        assert typed is None, f"{path.name}: a typed verdict {typed.group(0)!r}"
        for call in _CHECK_CALL.finditer(src):
            text = _call_text(src, call.end() - 1)
            literal = re.search(r"\b(True|False)\b", text)
            assert literal is None, f"{path.name}: a literal {literal.group(0)} in {text[:80]!r}"


_VERDICT_LINE = re.compile(r"^(C\d\d) \[", re.M)


def test_each_claim_is_judged_by_its_owner_notebook_only():
    """The executed notebooks print each claim's verdict once, in the notebook that owns it
    (data/claims.csv), so that the audit has one row per claim."""
    from chapter20.core.claims import load_claims

    claims = load_claims()
    printed: dict[str, set[str]] = {}
    for path in NOTEBOOKS:
        for cell in _code_cells(_load(path)):
            src = "".join(cell["source"])
            for claim_id in re.findall(r"\.check\(\s*[\"'](C\d\d)[\"']", src):
                assert claims[claim_id].notebook == path.stem, (
                    f"{path.name} logs {claim_id}, owned by {claims[claim_id].notebook}"
                )
            for out in cell["outputs"]:
                for claim_id in _VERDICT_LINE.findall("".join(out.get("text", ""))):
                    printed.setdefault(claim_id, set()).add(path.stem)
    for claim_id, claim in claims.items():
        if (ROOT / "notebooks" / f"{claim.notebook}.ipynb").exists():
            assert printed.get(claim_id) == {claim.notebook}, (claim_id, printed.get(claim_id))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_listed_in_readme(path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert path.stem in readme, f"{path.name} is not in README.md's notebook map"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_nbval_markers_are_cell_tags_not_comments(path):
    """A reader sees code, not test plumbing: nbval's markers are cell tags
    (``nbval-ignore-output``, ``nbval-skip``), which nbval reads like the comments."""
    for cell in _code_cells(_load(path)):
        src = "".join(cell["source"])
        assert "NBVAL_" not in src, f"{path.name}: an NBVAL_ comment in {src[:60]!r}: make it a tag"


def _unchecked(cell: dict) -> bool:
    tags = cell.get("metadata", {}).get("tags", [])
    return cell["cell_type"] == "code" and bool({"nbval-ignore-output", "nbval-skip"} & set(tags))


#: Words that state how two measured values compare. After a cell whose output nbval does not
#: check (a timing, a machine's memory), such a sentence would be typed prose about numbers that
#: change from run to run; the comparison is printed by chapter20.core.findings instead.
_OUTCOME = re.compile(
    r"\b(faster|slower|quicker|smaller|larger|bigger|cheaper|grew|grows|shrank|shrinks|halves|"
    r"halved|doubles|doubled|hides|hid|wins|loses|beats|outperforms?|speeds? up|slows? down|"
    r"is a (loss|gain|win))\b",
    re.I,
)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_typed_outcome_after_an_output_nbval_does_not_check(path):
    """Markdown carries the claim, the prediction and the reasoning, before the measurement;
    right after a cell whose output is not compared by nbval, no sentence states how measured
    values compare (it could contradict the next recording). This check misses a comparison
    worded without the listed words, one written further down the notebook, and one typed into
    a code cell's string: it catches the common case, and review catches the rest."""
    cells = _load(path)["cells"]
    for before, cell in zip(cells, cells[1:]):
        if cell["cell_type"] != "markdown" or not _unchecked(before):
            continue
        text = "".join(cell["source"])
        found = _OUTCOME.search(text)
        assert found is None, (
            f"{path.name}: '{found.group(0)}' in the markdown after an unchecked output: "
            f"{text[max(0, found.start() - 60) : found.end() + 40]!r}; print it with "
            "chapter20.core.findings instead"
        )
