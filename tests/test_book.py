"""The rendered book (`make book`, README "Read it"): its sources, and the built site's links.

The first tests need nothing but the package (they run with the unit tests). The others read the
site in build/book/ or run Sphinx: they run under `make book-check` (CI), which sets
CHAPTER20_BOOK=1 after building the book; without it they skip, so `make test` is unchanged.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from chapter20.scripts.book_pages import (
    FOLD_TAG,
    SOLUTION_TAG,
    fold_solutions,
    nav_title,
    notebook_map,
    readme_sections,
)

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "build" / "book"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
FIXTURE = ROOT / "tests" / "fixtures" / "book_solution.ipynb"

needs_book = pytest.mark.skipif(
    os.environ.get("CHAPTER20_BOOK") != "1",
    reason="the built book is checked by make book-check (CHAPTER20_BOOK=1)",
)


def _cells(tags_list):
    return {
        "cells": [{"cell_type": "code", "metadata": {"tags": t}, "source": ""} for t in tags_list]
    }


def test_fold_solutions_tags_exactly_the_solution_cells():
    notebook = _cells([[], [SOLUTION_TAG], ["nbval-ignore-output", SOLUTION_TAG], ["other"]])
    before = json.dumps(notebook)
    folded = fold_solutions(notebook)
    assert [c["metadata"]["tags"] for c in folded["cells"]] == [
        [],
        [SOLUTION_TAG, FOLD_TAG],
        ["nbval-ignore-output", SOLUTION_TAG, FOLD_TAG],
        ["other"],
    ]
    assert json.dumps(notebook) == before  # the committed notebook's JSON is not touched
    assert fold_solutions(folded) == folded  # folding twice adds nothing


def test_fold_solutions_refuses_what_is_not_a_notebook():
    with pytest.raises(TypeError, match="notebook"):
        fold_solutions({"cells": "not a list"})


def test_every_notebook_has_a_row_and_a_titled_entry_in_the_readme_map():
    sections = readme_sections((ROOT / "README.md").read_text(encoding="utf-8"))
    table, by_stem = notebook_map(sections["What is where"])
    assert sorted(by_stem) == [p.stem for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        assert f"[{path.stem}](notebooks/{path.name})" in table
        title = nav_title(json.loads(path.read_text(encoding="utf-8")), by_stem[path.stem])
        assert title.startswith(path.stem[:2] + " · ") and title.endswith(f"({by_stem[path.stem]})")


def test_readme_sections_ignore_headings_inside_code():
    text = "# T\nintro\n## A\n```bash\n# a comment\n## not a heading\n```\n## B\nb\n"
    sections = readme_sections(text)
    assert list(sections) == ["", "A", "B"]
    assert "## not a heading" in sections["A"] and sections[""] == "intro\n"


class _Page(HTMLParser):
    """The ids of one HTML page and every link/resource it points at."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str]] = []  # (tag, url)
        self.images: list[dict] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src", "action"):
            if attrs.get(key):
                self.refs.append((tag, attrs[key]))
        if tag == "img":
            self.images.append(attrs)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def site() -> dict[Path, _Page]:
    if not (SITE / "index.html").exists():
        pytest.fail("build/book/index.html is missing: run make book first")
    # _static/ holds the theme's Jinja macros (*.html), templates rather than pages.
    pages = [p for p in sorted(SITE.rglob("*.html")) if "_static" not in p.relative_to(SITE).parts]
    return {path: _parse(path) for path in pages}


@needs_book
def test_every_internal_link_and_anchor_resolves(site):
    broken = []
    for path, page in site.items():
        for _tag, url in page.refs:
            parts = urlsplit(url)
            if parts.scheme or url.startswith("//"):
                continue  # external: checked below that none is a resource the page loads
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if not target.is_file():
                broken.append(f"{path.relative_to(SITE)}: {url} (no file)")
            elif parts.fragment and target.suffix == ".html":
                if unquote(parts.fragment) not in site[target].ids:
                    broken.append(f"{path.relative_to(SITE)}: {url} (no anchor)")
    assert not broken, "\n".join(broken[:30])


@needs_book
def test_the_site_loads_nothing_from_the_internet(site):
    loaded = [
        f"{path.relative_to(SITE)}: <{tag}> {url}"
        for path, page in site.items()
        for tag, url in page.refs
        if tag != "a" and (urlsplit(url).scheme in ("http", "https") or url.startswith("//"))
    ]
    assert not loaded, "\n".join(loaded[:20])


@needs_book
def test_the_audit_links_each_claim_to_its_owners_claims_check(site):
    from chapter20.core.claims import load_claims

    claims = load_claims()
    audit = site[SITE / "claims.html"]
    links = [url for tag, url in audit.refs if tag == "a" and "#" in url and "notebooks/" in url]
    assert len(links) == len(claims) == 30
    for claim, url in zip(claims.values(), links):
        page, _, anchor = url.partition("#")
        assert page == f"notebooks/{claim.notebook}.html", (claim.id, url)
        assert anchor.endswith("claims-check") and anchor in site[SITE / page].ids, (claim.id, url)


@needs_book
def test_every_notebook_is_a_page_reached_from_the_navigation(site):
    index = site[SITE / "index.html"]
    linked = {urlsplit(url).path for tag, url in index.refs if tag in ("a", "form")}
    for path in NOTEBOOKS:
        assert SITE / "notebooks" / f"{path.stem}.html" in site, path.name
        assert f"notebooks/{path.stem}.html" in linked, path.name
    assert {"claims.html", "data.html", "search.html"} <= linked


@needs_book
def test_every_figure_has_its_alt_text(site):
    figures = 0
    for path in NOTEBOOKS:
        recorded = [
            output["metadata"]["image/png"]["alt"]
            for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]
            for output in cell.get("outputs", [])
            if "image/png" in output.get("data", {})
        ]
        images = [i for i in site[SITE / "notebooks" / f"{path.stem}.html"].images
                  if "_images/" in i.get("src", "")]  # fmt: skip
        assert [i.get("alt") for i in images] == recorded, path.name
        figures += len(images)
    assert figures > 0


@needs_book
def test_a_solution_cell_is_folded_by_the_books_configuration(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    folded = fold_solutions(json.loads(FIXTURE.read_text(encoding="utf-8")))
    (source / FIXTURE.name).write_text(json.dumps(folded), encoding="utf-8")
    (source / "index.md").write_text(f"# Fixture\n\n```{{toctree}}\n{FIXTURE.stem}\n```\n")
    subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", "-c", str(ROOT / "book"),
         str(source), str(tmp_path / "out")],
        check=True,
    )  # fmt: skip
    html = (tmp_path / "out" / f"{FIXTURE.stem}.html").read_text(encoding="utf-8")
    folds = re.findall(r"<details.*?</details>", html, flags=re.S)
    assert len(folds) == 1 and "solution output" in folds[0]  # code and output folded together
    assert "exercise output" in html and "exercise output" not in folds[0]
    assert 'alt="A fixture figure: y against x, one rising line."' in html
