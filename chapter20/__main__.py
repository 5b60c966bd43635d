"""``python -m chapter20``: the same as the ``chapter20`` command (``chapter20.cli.main``)."""

import sys

from chapter20.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
