"""chapter20: the runnable companion to "Scaling Embedding Training".

One module per section of the chapter (see README.md for the map); every technique is proven
against its plain reference before it is measured. Import what you need from the submodules,
e.g. ``from chapter20.core.measure import peak_memory``.
"""

__version__ = "0.1.0"
