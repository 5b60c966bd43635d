"""Sphinx configuration of the book: the committed notebooks as a static site (`make book`).

The sources are assembled in build/book-src by `python -m chapter20.scripts.book_pages` (the
landing page and the toc from this folder, copies of the notebooks, the pages generated from
data/); `sphinx-build -W -c book build/book-src build/book` renders them. Nothing is executed:
every output is the one recorded in the committed notebook. Nothing is loaded from the internet
when the site is read: the theme's fonts and scripts are its own static files, and no page has
math (MathJax would come from a CDN).
"""

project = "chapter20 — Scaling Embedding Training, runnable"
author = "chapter20"
copyright = "chapter20"

extensions = ["myst_nb"]

# The recorded outputs, never a kernel: a book build takes seconds and needs no torch.
nb_execution_mode = "off"
# Headings get GitHub-style anchors (`8 · Claims check` -> `#8--claims-check`), which the claims
# audit links to; a missing one is a warning, and warnings are errors (-W).
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
# A cell's code and output stay apart; stderr streams (warnings) are shown, as in the notebook.
nb_output_stderr = "show"
nb_merge_streams = True

# _generated/ holds the fragments that index.md includes, not pages of their own.
exclude_patterns = ["_build", "_generated", "**.ipynb_checkpoints"]
suppress_warnings = []

html_theme = "sphinx_book_theme"
html_title = "Scaling Embedding Training, runnable"
# A page without an icon makes the browser ask for /favicon.ico, a 404 in its console.
html_favicon = "favicon.svg"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "navigation_with_keys": False,
}
html_last_updated_fmt = None
html_static_path = ["_static"]  # relative to this folder (sphinx-build -c book)
html_css_files = ["book.css"]
# The theme's light/dark switch starts from the reader's system setting (left unset, its script
# logs an error on every page).
html_context = {"default_mode": "auto"}
html_show_sourcelink = False
# The download button offers each page's source: the notebook itself, to run it afterwards.
html_copy_source = True


def _render_image_with_alt(render_image):
    """MyST-NB 1.4 takes an image output's width and height from the output's metadata but not
    its alt text, which chapter20.core.plotting puts there (``metadata["image/png"]["alt"]``, as
    nbconvert and JupyterLab read it); without this every figure's alt would be its file name."""

    def render(self, data):
        nodes = render_image(self, data)
        alt = data.output_metadata.get(data.mime_type, {}).get("alt")
        for node in nodes:
            if alt:
                node["alt"] = str(alt)
        return nodes

    return render


def setup(app):
    from myst_nb.core.render import NbElementRenderer

    if not getattr(NbElementRenderer.render_image, "carries_alt", False):
        NbElementRenderer.render_image = _render_image_with_alt(NbElementRenderer.render_image)
        NbElementRenderer.render_image.carries_alt = True
    return {"parallel_read_safe": True}
