"""The experiments behind the notebooks, one module per notebook (``nbNN_topic.py``; a notebook
whose experiments outgrow one module has several ``nbNN_*.py``): sizes, sweeps, tables and
figures, and the ``chapter20 bench`` entries. Labs import every layer below them, never each
other; what several labs share lives in ``labs/common.py`` (ARCHITECTURE.md)."""
