"""nbval settings for the notebooks (``pytest --nbval notebooks/``).

The plain-text form of every output is compared; HTML renderings of the same objects (pandas
tables) and SVG figures are skipped, as nbval already skips PNG images.
"""


def pytest_collectstart(collector):
    if str(getattr(collector, "path", "")).endswith(".ipynb"):
        collector.skip_compare += ("text/html", "image/svg+xml", "application/javascript")
