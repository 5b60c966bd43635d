"""The ``chapter20`` command (``env``, ``audit``, ``bench``, ``train``): thin entry points over
the layers below (ARCHITECTURE.md)."""
