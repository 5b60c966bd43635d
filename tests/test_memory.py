"""Tests for chapter20.memory: predicted bytes of parameters, gradients and optimizer state."""

import pytest
import torch
from torch import nn

from chapter20.measure import gradients_of, tensor_bytes
from chapter20.memory import OPTIMIZER_STATE_ELEMENTS, training_state_bytes


def test_adam_float32_is_16_bytes_per_parameter_plus_step_counters():
    predicted = training_state_bytes(1000, num_tensors=3, optimizer="adam")
    assert predicted == {
        "parameters": 4000,
        "gradients": 4000,
        "optimizer_state": 8000 + 3 * 4,
    }
    assert sum(training_state_bytes(10**6).values()) == 16 * 10**6  # no tensors: exactly 16 B/param


def test_adam_bf16_is_8_bytes_per_parameter():
    # bf16 weights, bf16 grads, two bf16 moments; the step counters stay float32.
    predicted = training_state_bytes(1000, num_tensors=2, dtype=torch.bfloat16)
    assert predicted == {"parameters": 2000, "gradients": 2000, "optimizer_state": 4000 + 8}
    assert sum(training_state_bytes(1000, dtype=torch.bfloat16).values()) == 8 * 1000


def test_adamw_same_as_adam():
    assert training_state_bytes(77, num_tensors=5, optimizer="adamw") == training_state_bytes(
        77, num_tensors=5, optimizer="adam"
    )


def test_sgd_has_no_state_and_momentum_one_buffer():
    assert training_state_bytes(1000, num_tensors=4, optimizer="sgd")["optimizer_state"] == 0
    assert training_state_bytes(1000, num_tensors=4, optimizer="sgd_momentum") == {
        "parameters": 4000,
        "gradients": 4000,
        "optimizer_state": 4000,
    }


def test_zero_parameters():
    assert training_state_bytes(0) == {"parameters": 0, "gradients": 0, "optimizer_state": 0}


@pytest.mark.parametrize(
    ("name", "make_optimizer", "dtype"),
    [
        ("adam", lambda ps: torch.optim.Adam(ps, lr=1e-3), torch.float32),
        ("adam", lambda ps: torch.optim.Adam(ps, lr=1e-3), torch.bfloat16),
        ("adamw", lambda ps: torch.optim.AdamW(ps, lr=1e-3), torch.float32),
        ("sgd_momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), torch.float32),
        ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1), torch.float32),
    ],
)
def test_prediction_matches_pytorch_to_the_byte(name, make_optimizer, dtype):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 7), nn.Tanh(), nn.Linear(7, 3)).to(dtype)
    optimizer = make_optimizer(model.parameters())
    model(torch.randn(5, 12, dtype=dtype)).sum().backward()
    optimizer.step()
    params = list(model.parameters())
    predicted = training_state_bytes(
        sum(p.numel() for p in params), num_tensors=len(params), dtype=dtype, optimizer=name
    )
    assert predicted["parameters"] == tensor_bytes(model)
    assert predicted["gradients"] == tensor_bytes(gradients_of(model))
    assert predicted["optimizer_state"] == tensor_bytes(optimizer)


def test_known_optimizers():
    assert set(OPTIMIZER_STATE_ELEMENTS) == {"adam", "adamw", "sgd", "sgd_momentum"}


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "name"),
    [
        ((-1,), {}, ValueError, "num_parameters"),
        ((10,), {"num_tensors": -1}, ValueError, "num_tensors"),
        ((10.0,), {}, TypeError, "num_parameters"),
        ((True,), {}, TypeError, "num_parameters"),
        ((10,), {"num_tensors": 2.0}, TypeError, "num_tensors"),
        ((10,), {"optimizer": "lion"}, ValueError, "optimizer"),
        ((10,), {"optimizer": "Adam"}, ValueError, "optimizer"),
    ],
)
def test_bad_arguments(args, kwargs, error, name):
    with pytest.raises(error, match=name):
        training_state_bytes(*args, **kwargs)
