"""The built book in a real browser (`make test-book`): Debian's headless Chromium, driven by
Playwright's Python package, opens every page of build/book/ from a loopback HTTP server.

Each page: no console error, no failed request, no uncaught exception; every image loaded
(natural width > 0) with alt text. The navigation of every page reaches every notebook; a search
for "gradient caching" finds notebook 02, over HTTP and from a file:// address. Screenshots of
the landing page, notebook 03 and the claims audit are saved in build/book-screenshots/. Skipped
without /usr/bin/chromium or playwright, or unless CHAPTER20_BOOK=1 (make test-book sets it
after building the book).
"""

from __future__ import annotations

import functools
import os
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "build" / "book"
SHOTS = ROOT / "build" / "book-screenshots"
CHROMIUM = Path("/usr/bin/chromium")
NOTEBOOK_STEMS = [p.stem for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
# The closed network refuses Chromium's own background connections; these switch them off.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
SCREENSHOTS = {"index": "index.html", "03_mixed_precision": "notebooks/03_mixed_precision.html",
               "claims": "claims.html"}  # fmt: skip

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make test-book)"),
    pytest.mark.skipif(
        os.environ.get("CHAPTER20_BOOK") != "1", reason="run by make test-book (CHAPTER20_BOOK=1)"
    ),
]


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test reports failures itself
        pass


@pytest.fixture(scope="module")
def base_url():
    if not (SITE / "index.html").exists():
        pytest.fail("build/book/index.html is missing: run make book first")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(SITE)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="needs playwright (make test-book)"
    )
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def _pages() -> list[str]:
    return sorted(
        str(p.relative_to(SITE))
        for p in SITE.rglob("*.html")
        if not {"_static", "_sources"} & set(p.relative_to(SITE).parts)
    )


def _open(browser, url: str):
    """A new page at ``url``, with every console error, page error and failed request kept."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type == "error" else None)  # fmt: skip
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} {r.failure}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}")
            if r.status >= 400 else None)  # fmt: skip
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, url
    page.wait_for_load_state("networkidle")
    return page, problems


def test_every_page_loads_cleanly_with_its_images_and_navigation(browser, base_url):
    pages = _pages()
    assert "index.html" in pages and len(pages) >= len(NOTEBOOK_STEMS) + 3
    for name in pages:
        page, problems = _open(browser, base_url + name)
        images = page.evaluate(
            "Array.from(document.images).map(i => ({src: i.currentSrc || i.src, complete: "
            "i.complete, width: i.naturalWidth, alt: i.getAttribute('alt') || ''}))"
        )
        for image in images:
            assert image["complete"] and image["width"] > 0, f"{name}: not loaded: {image['src']}"
            alt = image["alt"].strip()
            assert alt and not alt.endswith(".png"), f"{name}: no alt text: {image['src']}"
        nav = page.evaluate(
            "Array.from(document.querySelectorAll('nav.bd-docs-nav a')).map(a => a.href)"
        )
        for stem in NOTEBOOK_STEMS:
            assert any(href.split("#")[0].endswith(f"notebooks/{stem}.html") for href in nav), (
                f"{name}: the navigation does not reach {stem}"
            )
        page.close()
        assert not problems, f"{name}:\n" + "\n".join(problems)


def test_search_for_gradient_caching_finds_notebook_02(browser, base_url):
    page, problems = _open(browser, base_url + "search.html?q=gradient+caching")
    page.wait_for_selector("#search-results .search-summary", timeout=20_000)
    hits = page.evaluate(
        "Array.from(document.querySelectorAll('#search-results ul.search li a')).map(a => a.href)"
    )
    assert any("notebooks/02_gradient_accumulation.html" in href for href in hits), hits
    page.close()
    assert not problems, "\n".join(problems)


def test_search_works_from_a_file_address_too(browser):
    # From file:// the browser refuses the fetches of the results' excerpts (CORS): the search
    # lists its pages all the same, which is what README "Read it" promises there.
    page = browser.new_page()
    page.goto((SITE / "search.html").as_uri() + "?q=gradient+caching", wait_until="load")
    page.wait_for_selector("#search-results .search-summary", timeout=20_000)
    hits = page.evaluate(
        "Array.from(document.querySelectorAll('#search-results ul.search li a')).map(a => a.href)"
    )
    page.close()
    assert any("notebooks/02_gradient_accumulation.html" in href for href in hits), hits


def test_screenshots_of_three_pages(browser, base_url):
    SHOTS.mkdir(parents=True, exist_ok=True)
    for stem, name in SCREENSHOTS.items():
        page, problems = _open(browser, base_url + name)
        target = SHOTS / f"{stem}.png"
        page.screenshot(path=str(target))
        page.close()
        assert not problems, f"{name}:\n" + "\n".join(problems)
        assert target.stat().st_size > 10_000, target  # a rendered page, not a blank one
