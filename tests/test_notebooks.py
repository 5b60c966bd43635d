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
    """The claims check is the last section before the further reading and the exercises."""
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
    allowed = ("Further reading", "## Exercises")
    assert all(any(a in line for a in allowed) for line in after), (
        f"{path.name}: {after} after the check"
    )
    section = "".join("".join(c["source"]) for c in cells[checks[-1] :])
    assert "ClaimsLog" in section or "judged_in" in section, (
        f"{path.name}: the claims check section neither logs a claim (ClaimsLog) nor points to the "
        "notebook that judges one (claims.judged_in)"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_claims_check_is_one_compact_table(path):
    """Issue 55, item 2: a notebook that logs claims shows them as one compact table, the
    last expression of a cell (``log.table()``: claim, claimed, measured, verdict, judged on),
    never the long text form with its notes."""
    cells = [c for c in _load(path)["cells"] if c["cell_type"] == "code"]
    sources = ["".join(c["source"]) for c in cells]
    assert not any(".to_text()" in source for source in sources), f"{path.name}: to_text()"
    if any("ClaimsLog(" in source for source in sources):
        last_lines = [source.strip().splitlines()[-1] for source in sources if source.strip()]
        assert "log.table()" in last_lines, f"{path.name}: no cell ends with log.table()"


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


#: A row of a notebook's claims table (``ClaimsTable``'s text form): "C04 · A batch of ...".
_VERDICT_LINE = re.compile(r"^(C\d\d) · ", re.M)


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
                shown = out.get("text", "") or out.get("data", {}).get("text/plain", "")
                for claim_id in _VERDICT_LINE.findall("".join(shown)):
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


# --- issue 42 item 2: the notebooks speak to the reader only ---------------------------------

#: The Makefile's targets: ``make <target>`` in a notebook points the reader at the project's
#: plumbing, not at the idea.
_MAKE_TARGETS = sorted(
    set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)),
    key=len,
    reverse=True,
)

#: (the word as the failure names it, its pattern). Text for the project's developers, not for a
#: reader: the test tooling, the project's internal files, sentences about the code's history,
#: hashes of commits and blobs.
_DEVELOPER_WORDS = [
    ("nbval", re.compile(r"nbval", re.I)),
    ("pytest", re.compile(r"pytest", re.I)),
    (
        "make <target>",
        re.compile(r"\bmake (?:" + "|".join(map(re.escape, _MAKE_TARGETS)) + r")(?![\w-])"),
    ),
    ("`make", re.compile(r"`make\b")),
    ("tests/", re.compile(r"\btests/")),
    ("test_", re.compile(r"\btest_")),
    ("CHAPTER.md", re.compile(r"CHAPTER\.md")),
    ("ARCHITECTURE.md", re.compile(r"ARCHITECTURE\.md")),
    ("typed from memory", re.compile(r"typed from memory", re.I)),
    ("replaced the earlier", re.compile(r"replaced the earlier", re.I)),
    ("not guessed here", re.compile(r"not guessed here", re.I)),
    ("commit <hash>", re.compile(r"\bcommit\s+[`'\"(]?[0-9a-f]{7,40}\b", re.I)),
    ("blob", re.compile(r"\bblob", re.I)),
    ("a 40-hex-digit hash", re.compile(r"(?<![0-9A-Fa-f])[0-9a-fA-F]{40}(?![0-9A-Fa-f])")),
]
_BENCH = re.compile(r"chapter20\s+bench")
#: A committed study may name the command that rewrites it once, on a line of its own.
_REPRODUCE = re.compile(r"^[\s>*_`\-]*reproduce:")


def _reader_texts(nb: dict):
    """(cell number, what, text) for each markdown cell and each output a reader sees: streams,
    errors and the text forms of rich outputs (images excluded)."""
    for number, cell in enumerate(nb["cells"], 1):
        if cell["cell_type"] == "markdown":
            yield number, "markdown", "".join(cell["source"])
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")] + [
                value for key, value in out.get("data", {}).items() if key.startswith("text/")
            ]
            texts += [out.get("evalue", ""), "\n".join(out.get("traceback", []))]
            for text in texts:
                text = "".join(text) if isinstance(text, list) else str(text)
                if text.strip():
                    yield number, "output", text


def developer_words(nb: dict) -> list[str]:
    """Each developer word in ``nb``'s markdown and outputs, as 'cell N (markdown|output):
    word in "...context..."'."""
    found = []
    for number, what, text in _reader_texts(nb):
        hits = [(word, m) for word, pattern in _DEVELOPER_WORDS for m in pattern.finditer(text)]
        hits += [
            ("chapter20 bench off a reproduce: line", m)
            for line in text.splitlines()
            if not _REPRODUCE.match(line)
            for m in _BENCH.finditer(line)
        ]
        for word, m in hits:
            context = m.string[max(0, m.start() - 40) : m.end() + 40].replace("\n", " ")
            found.append(f"cell {number} ({what}): {word!r} in {context!r}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_speaks_to_the_reader_only(path):
    """Issue 42, item 2: no markdown cell and no output names the test tooling, a make target,
    the project's internal files, the code's history or a hash; ``chapter20 bench`` only on a
    line that starts with ``reproduce:``."""
    found = developer_words(_load(path))
    assert not found, f"{path.name}: {len(found)} developer word(s):\n" + "\n".join(found)


def test_the_word_list_catches_each_word():
    """The check above can fail: each listed word, planted in a markdown cell or an output, is
    found; a reader's sentence and a reproduce line are not."""
    planted = [
        "Run nbval on it.",
        "pytest -q",
        "then make test-unit",
        "`make run`",
        "see tests/x.py",
        "test_notebooks",
        "CHAPTER.md",
        "ARCHITECTURE.md says",
        "a table typed from memory",
        "which replaced the earlier trainer",
        "figures not guessed here",
        "at commit 3f2a1b9c",
        "blob 1234",
        "a" * 40,
        "run chapter20 bench nb11",
    ]
    for text in planted:
        for cell in (
            {"cell_type": "markdown", "source": [text]},
            {
                "cell_type": "code",
                "source": [],
                "outputs": [{"output_type": "stream", "text": text}],
            },
        ):
            assert developer_words({"cells": [cell]}), text
    clean = "Make sure the batch fits; train_test_split_articles holds out 20%.\n"
    clean += "reproduce: chapter20 bench nb11 --study batch\n  *reproduce:* `chapter20 bench nb03`"
    assert developer_words({"cells": [{"cell_type": "markdown", "source": [clean]}]}) == []


# --- issue 42 item 7: every notebook ends with exercises --------------------------------------


def _tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def exercise_problems(nb: dict) -> list[str]:
    """What keeps ``nb`` from ending with a '## Exercises' section of 3–4 exercises, each a
    markdown cell followed by a code cell tagged ``solution`` that printed its answer and starts
    collapsed in JupyterLab (its source and outputs hidden by its metadata), so that a reader
    predicts before seeing the answer there too, not only in the book."""
    cells = nb["cells"]
    heads = [
        (i, line.strip())
        for i, c in enumerate(cells)
        if c["cell_type"] == "markdown"
        for line in "".join(c["source"]).splitlines()
        if line.startswith("## ")
    ]
    if not heads or heads[-1][1] != "## Exercises":
        last = heads[-1][1] if heads else None
        return [f"the last section is {last!r}, not '## Exercises'"]
    start = heads[-1][0]
    problems = []
    rest = [(i, c) for i, c in enumerate(cells[start + 1 :], start + 1)]
    solutions = [(i, c) for i, c in rest if c["cell_type"] == "code" and "solution" in _tags(c)]
    if not 3 <= len(solutions) <= 4:
        problems.append(f"{len(solutions)} exercises with a solution (3 to 4 expected)")
    for i, c in rest:
        if c["cell_type"] == "code" and "solution" not in _tags(c):
            problems.append(f"cell {i + 1}: a code cell among the exercises not tagged 'solution'")
    for i, c in solutions:
        if cells[i - 1]["cell_type"] != "markdown":
            problems.append(f"cell {i + 1}: a solution not right after its exercise's markdown")
        hidden = c.get("metadata", {}).get("jupyter", {})
        if not (hidden.get("source_hidden") and hidden.get("outputs_hidden")):
            problems.append(f"cell {i + 1}: a solution that JupyterLab does not start collapsed")
        if not "".join(c["source"]).strip():
            problems.append(f"cell {i + 1}: an empty solution")
        elif not any(out.get("output_type") != "error" for out in c.get("outputs", [])):
            problems.append(f"cell {i + 1}: a solution that prints no answer")
    if cells[-1]["cell_type"] != "code" or "solution" not in _tags(cells[-1]):
        problems.append("the notebook does not end with an exercise's solution")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_ends_with_exercises(path):
    """Each exercise asks for a prediction, or for something to implement, derive or prove
    (markdown); its worked solution is the next cell, tagged ``solution`` so a rendered book
    folds it, and collapsed by its metadata so that JupyterLab opens it folded too."""
    problems = exercise_problems(_load(path))
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_the_exercise_check_can_fail():
    def md(text):
        return {"cell_type": "markdown", "source": [text]}

    def solution(tags=("solution",), outputs=({"output_type": "stream", "text": "4\n"},),
                 hidden=True):  # fmt: skip
        folded = {"jupyter": {"source_hidden": True, "outputs_hidden": True}} if hidden else {}
        return {
            "cell_type": "code",
            "source": ["print(2 + 2)"],
            "metadata": {"tags": list(tags), **folded},
            "outputs": list(outputs),
        }

    good = [
        md("## 3 · Claims check"),
        md("## Exercises\n\n1. Halve it."),
        solution(),
        md("2. Double it."),
        solution(),
        md("3. Prove it."),
        solution(),
    ]
    assert exercise_problems({"cells": good}) == []
    assert exercise_problems({"cells": good[:5]})  # two exercises
    assert exercise_problems({"cells": good[:6] + [solution(hidden=False)]})  # shown in the lab
    assert exercise_problems({"cells": good[:6] + [solution(tags=())]})  # untagged
    assert exercise_problems({"cells": good[:6] + [solution(outputs=())]})  # prints nothing
    assert exercise_problems({"cells": good + [md("## Further reading")]})  # not last
