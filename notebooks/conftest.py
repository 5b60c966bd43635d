"""nbval settings for the notebooks (``pytest --nbval notebooks/``).

The plain-text form of every output is compared; HTML renderings of the same objects (pandas
tables) and SVG figures are skipped, as nbval already skips PNG images. The kernels run in the
environment the outputs were recorded in (``recording_environment``: AVX2 kernels, PyTorch's and
oneDNN's, on an x86 CPU), so that they print the recorded digits on AVX2, AVX-512 and AMX machines
alike.
"""

import os

from chapter20.scripts.run_notebooks import recording_environment

for name, value in recording_environment().items():
    os.environ.setdefault(name, value)  # nbval's kernels inherit this process's environment


def pytest_collectstart(collector):
    if str(getattr(collector, "path", "")).endswith(".ipynb"):
        collector.skip_compare += ("text/html", "image/svg+xml", "application/javascript")
