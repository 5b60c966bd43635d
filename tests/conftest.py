"""Shared test settings: tests marked ``cuda`` or ``multigpu`` skip cleanly without the hardware
(DESIGN.md, "Tests"), so a mark is all a GPU-only test needs."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if item.get_closest_marker("cuda") and gpus < 1:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if item.get_closest_marker("multigpu") and gpus < 2:
            item.add_marker(pytest.mark.skip(reason="needs two or more CUDA GPUs"))
