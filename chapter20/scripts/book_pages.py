"""The sources of the rendered book (`make book`, README "Read it"): the committed notebooks, the
landing page and configuration of ``book/``, and the pages generated from the data.

``python -m chapter20.scripts.book_pages --out build/book-src`` assembles, in ``--out``:

- ``index.md`` and the other pages of ``book/`` (its configuration ``conf.py`` stays there:
  ``sphinx-build -c book``), with ``_generated/`` beside them: the README's opening paragraph,
  its quick start and notebook map, and the toctree of the notebooks in reading order, each
  titled with its number and the chapter's sections (from the README's map);
- ``notebooks/NN_*.ipynb``: copies of the committed notebooks, outputs as recorded (nothing is
  executed), cells tagged :data:`SOLUTION_TAG` folded (MyST-NB's ``hide-cell``);
- ``claims.md``: the claims audit, one row per claim (its words, claimed vs measured, the
  verdict as recorded in ``data/claims_recorded.json``, a link to the "Claims check" section of
  the notebook that judges it), then each claim's criterion;
- ``data.md``: ``data/README.md``, the data's sources and licences.

Markdown only: Sphinx and MyST-NB write every page of HTML.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

from chapter20.core.claims import audit, load_claims
from chapter20.core.paths import data_file

#: The tag of an exercise's solution cell: the book folds it (code and output behind a toggle).
SOLUTION_TAG = "solution"
#: MyST-NB's tag for a cell shown folded, input and output.
FOLD_TAG = "hide-cell"
#: Written into ``--out`` so that a rebuild deletes only a folder this script made.
MARKER = ".chapter20-book-src"
MAP_HEADING = "What is where"
QUICK_START_HEADING = "Quick start"


def fold_solutions(notebook: dict) -> dict:
    """Note on the book: ``notebook`` (nbformat JSON) with every cell tagged
    :data:`SOLUTION_TAG` also tagged :data:`FOLD_TAG`, so the book shows it folded; other cells
    unchanged. Returns a new dict; the argument is not modified."""
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise TypeError("notebook must be a notebook's JSON: a dict with a list of 'cells'")
    out = json.loads(json.dumps(notebook))
    for cell in out["cells"]:
        tags = cell.setdefault("metadata", {}).get("tags", [])
        if SOLUTION_TAG in tags and FOLD_TAG not in tags:
            cell["metadata"]["tags"] = [*tags, FOLD_TAG]
    return out


def readme_sections(text: str) -> dict[str, str]:
    """The README's level-2 sections by heading, and its opening (before the first one) under
    ``""``; level-3 headings stay inside their section. Headings inside code fences are text."""
    sections: dict[str, list[str]] = {"": []}
    current, fenced = "", False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif not (not fenced and line.startswith("# ")):
            sections[current].append(line)
    return {name: "\n".join(lines).strip() + "\n" for name, lines in sections.items()}


def _plain_anchors(markdown: str) -> str:
    """``[SLURM](#slurm)`` -> ``SLURM``: the README's own sections are not pages of the book."""
    return re.sub(r"\[([^\]]+)\]\(#[^)]*\)", r"\1", markdown)


def notebook_map(map_section: str) -> tuple[str, dict[str, str]]:
    """The README's notebook map (the first table of its "What is where" section) with each
    notebook linked to its page, and each notebook's sections, by file stem."""
    table = []
    for line in map_section.splitlines():
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    sections = {}
    for row in table[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        match = re.fullmatch(r"`notebooks/(\w+)\.ipynb`", cells[0])
        if match is None:
            raise ValueError(f"README notebook map: the first column must name a notebook: {row}")
        sections[match.group(1)] = cells[1]
    linked = re.sub(r"`notebooks/(\w+)\.ipynb`", r"[\1](notebooks/\1.ipynb)", "\n".join(table))
    return _plain_anchors(linked) + "\n", sections


def nav_title(notebook: dict, section: str) -> str:
    """The notebook's title in the book's navigation: its number and short title (its first
    heading up to a dash or colon) and the chapter's sections, e.g. ``03 · Mixed precision
    (§20.2.2)``."""
    first = "".join(notebook["cells"][0]["source"]).splitlines()[0]
    title = re.split(r" — |: ", first.lstrip("# ").strip())[0]
    title = re.sub(r"\s*\([^)]*\)$", "", title)
    return f"{title} ({section})"


def claims_anchor(notebook: dict) -> str:
    """The anchor of the notebook's "Claims check" heading as MyST writes it (GitHub style,
    ``8 · Claims check`` -> ``8--claims-check``); ValueError if it has none."""
    from myst_parser.mdit_to_docutils.base import default_slugify

    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for line in "".join(cell["source"]).splitlines():
            if re.match(r"##+ .*Claims check", line):
                return default_slugify(line.lstrip("#").strip())
    raise ValueError("the notebook has no 'Claims check' heading")


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _section(section: str) -> str:
    return f"§{section}" if section[:1].isdigit() else _cell(section)


def claims_page(notebooks: dict[str, dict]) -> str:
    """The claims audit as a Markdown page: the recorded verdict of each claim C01–C30 with a
    link to the Claims check of its owner notebook (``notebooks``: JSON by stem), then the
    criterion and note of each."""
    with tempfile.TemporaryDirectory() as empty:  # the committed record, not a local run
        frame = audit(Path(empty))
    claims = load_claims()
    shown = sorted({s for s in frame["shown"] if s})
    lines = [
        "# The claims audit (C01–C30)",
        "",
        "Every quantitative claim of the chapter, next to what the notebook that owns it measured "
        "and the verdict that `chapter20.core.claims.check` computed from it. The rows are the "
        "committed record of the last in-order run of the notebooks "
        f"(`data/claims_recorded.json`: {'; '.join(shown) or 'no record yet'}); "
        "`make run` measures them again on your machine and prints the same audit. The last "
        "column links to the Claims check of the notebook that judges the claim.",
        "",
        "| claim | the chapter says | claimed | measured | verdict | judged in |",
        "|---|---|---|---|---|---|",
    ]
    for row in frame.itertuples(index=False):
        stem = claims[row.id].notebook
        if stem not in notebooks:
            raise ValueError(f"claim {row.id} is owned by {stem}, which is not a notebook here")
        anchor = claims_anchor(notebooks[stem])
        link = f'[{stem[:2]}](notebooks/{stem}.ipynb#{anchor} "the Claims check of {stem}")'
        verdict = f"{row.verdict}, {row.direction}" if row.direction else row.verdict
        lines.append(
            f"| [{row.id}](#{row.id.lower()}) {_section(row.section)} | {_cell(row.claim)} | "
            f"{_cell(row.expected)} | {_cell(row.measured)} | **{_cell(verdict)}** | {link} |"
        )
    lines += ["", "## How each claim is judged", ""]
    for row in frame.itertuples(index=False):
        lines += [
            f"### {row.id}",
            "",
            f"{_cell(row.claim)}",
            "",
            f"- criterion: {_cell(row.criterion)}",
        ]
        if row.note:
            lines.append(f"- note: {_cell(row.note)}")
        lines.append("")
    return "\n".join(lines)


def assemble(out: Path, book_dir: Path, readme: Path, notebook_paths: list[Path]) -> Path:
    """Write the book's sources into ``out`` (replacing a previous build of this script) from
    ``book_dir``'s pages, the ``readme``, ``data/`` and the committed ``notebook_paths``."""
    if out.exists():
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise ValueError(f"out: {out} is not empty and was not made by this script")
        shutil.rmtree(out)
    (out / "_generated").mkdir(parents=True)
    (out / "notebooks").mkdir()
    (out / MARKER).write_text("made by python -m chapter20.scripts.book_pages\n")
    for page in book_dir.glob("*.md"):  # conf.py and the icon stay: sphinx-build -c book
        shutil.copy2(page, out / page.name)
    sections = readme_sections(readme.read_text(encoding="utf-8"))
    table, nb_sections = notebook_map(sections[MAP_HEADING])
    generated = {
        "intro.md": _plain_anchors(sections[""]),
        "quickstart.md": _plain_anchors(sections[QUICK_START_HEADING]),
        "notebook_map.md": table,
    }
    notebooks = {}
    for path in sorted(notebook_paths):
        if path.stem not in nb_sections:
            raise ValueError(f"{path.name} has no row in the README's notebook map")
        notebooks[path.stem] = json.loads(path.read_text(encoding="utf-8"))
        folded = fold_solutions(notebooks[path.stem])
        (out / "notebooks" / path.name).write_text(
            json.dumps(folded, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    toc = [
        f"{nav_title(nb, nb_sections[stem])} <notebooks/{stem}>" for stem, nb in notebooks.items()
    ]
    generated["notebook_toc.md"] = "\n".join(
        ["```{toctree}", ":caption: Notebooks, in reading order", ":maxdepth: 1", ":hidden:", "",
         *toc, "```", ""]
    )  # fmt: skip
    for name, text in generated.items():
        (out / "_generated" / name).write_text(text, encoding="utf-8")
    (out / "claims.md").write_text(claims_page(notebooks), encoding="utf-8")
    shutil.copy2(data_file("README.md"), out / "data.md")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m chapter20.scripts.book_pages``: assemble the book's sources (see the module)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/book-src"))
    parser.add_argument("--book", type=Path, default=Path("book"), help="the book's own pages")
    parser.add_argument("--readme", type=Path, default=Path("README.md"))
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/[0-9]*.ipynb")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(Path("notebooks").glob("[0-9][0-9]_*.ipynb"))
    try:
        out = assemble(args.out, args.book, args.readme, paths)
    except (OSError, ValueError, KeyError) as exc:
        print(f"book_pages: {exc}", file=sys.stderr)
        return 2
    print(f"book sources: {out} ({len(paths)} notebooks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
