"""Predicted memory of training (§20.3): bytes per component, from the configuration alone.

Measurements (``chapter20.measure.peak_memory``) are checked against these predictions, so a
reader can trust the predictions for sizes too large to run here.
"""

from __future__ import annotations

import torch

from chapter20.checks import check_int

#: Optimizer state elements per parameter element (Adam/AdamW: two moments; SGD with
#: momentum: one buffer; plain SGD: none).
OPTIMIZER_STATE_ELEMENTS = {"adam": 2, "adamw": 2, "sgd_momentum": 1, "sgd": 0}

#: PyTorch's Adam/AdamW keep their step count as one float32 scalar tensor per parameter tensor.
_STEP_COUNTER_BYTES = {"adam": 4, "adamw": 4, "sgd_momentum": 0, "sgd": 0}


def training_state_bytes(
    num_parameters: int,
    *,
    num_tensors: int = 0,
    dtype: torch.dtype = torch.float32,
    optimizer: str = "adam",
) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state for ``num_parameters`` (§20.3.2).

    Parameters and gradients take ``dtype``'s size each; the optimizer keeps its state in the
    same dtype (PyTorch allocates it like the parameter): ``OPTIMIZER_STATE_ELEMENTS`` per
    element, plus Adam's 4-byte step counter for each of the ``num_tensors`` parameter tensors.
    For Adam in float32 that is 4 + 4 + 8 = 16 bytes per parameter (pass ``num_tensors``, e.g.
    ``len(list(model.parameters()))``, to count the step counters too).
    """
    num_parameters = check_int("num_parameters", num_parameters, 0)
    num_tensors = check_int("num_tensors", num_tensors, 0)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    if optimizer not in OPTIMIZER_STATE_ELEMENTS:
        raise ValueError(
            f"optimizer must be one of {sorted(OPTIMIZER_STATE_ELEMENTS)}, got {optimizer!r}"
        )
    size = torch.empty((), dtype=dtype).element_size()
    state = num_parameters * size * OPTIMIZER_STATE_ELEMENTS[optimizer]
    return {
        "parameters": num_parameters * size,
        "gradients": num_parameters * size,
        "optimizer_state": state + num_tensors * _STEP_COUNTER_BYTES[optimizer],
    }
