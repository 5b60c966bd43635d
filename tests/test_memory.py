"""Tests for chapter20.techniques.memory_model and chapter20.training.memory_plan: predicted bytes
of parameters, gradients and
optimizer state."""

import pytest
import torch
from torch import nn

from chapter20.core.measure import gradients_of, tensor_bytes
from chapter20.techniques.memory_model import (
    OPTIMIZER_STATE_ELEMENTS,
    EncoderShape,
    training_state_bytes,
)
from chapter20.training.config import TrainConfig


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


# --- the planner ---------------------------------------------------------------------------


def test_encoder_shape_counts_parameters_exactly():
    from chapter20.core.models import TransformerEncoder, count_parameters
    from chapter20.techniques.memory_model import EncoderShape

    for kwargs in (
        dict(vocab_size=1000, d_model=64, n_heads=4, n_layers=3, max_len=64),
        dict(vocab_size=500, d_model=32, n_heads=2, n_layers=1, max_len=16, output_dim=8),
    ):
        model = TransformerEncoder(**kwargs)
        shape = EncoderShape(**kwargs)
        assert shape.parameter_sizes() == [p.numel() for p in model.parameters()]
        assert shape.num_parameters == count_parameters(model)
        assert EncoderShape.of(model) == shape


@pytest.fixture(scope="module")
def planned_vs_measured():
    import warnings

    from chapter20.techniques.memory_model import EncoderShape
    from chapter20.training.memory_plan import plan_vs_measured

    def config(layers, precision="fp32", policy="none", vocab=2000, batch=16, seq_len=64):
        shape = EncoderShape(vocab, 64, 4, layers, max_len=64)
        step = TrainConfig(precision=precision, optimizer="adamw", lr=1e-4,
                           activation_checkpointing=policy, state_32bit_tables=False)  # fmt: skip
        return shape, step, batch, seq_len

    configs = [
        config(4),
        config(4, precision="bf16"),
        config(8, policy="every_layer"),
        config(2, vocab=50_000, batch=8, seq_len=32),  # an embedding-table-heavy model
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan_vs_measured(configs)


def test_plan_is_within_15_percent_of_the_measured_peak(planned_vs_measured):
    ratios = planned_vs_measured["planned / measured"]
    assert ((ratios > 0.85) & (ratios < 1.15)).all(), planned_vs_measured
    assert set(planned_vs_measured["phase"]) >= {"forward", "embedding backward"}


def test_plan_zero_stages_shard_state_then_gradients_then_parameters():
    from chapter20.techniques.memory_model import EncoderShape
    from chapter20.training.memory_plan import plan

    shape = EncoderShape(10_000, 128, 4, 4)
    base = plan(shape, TrainConfig(), batch=8, seq_len=32).components
    for stage, sharded in (
        (1, {"optimizer_state"}),
        (2, {"optimizer_state", "gradients"}),
        (3, {"optimizer_state", "gradients", "parameters"}),
    ):
        got = plan(
            shape, TrainConfig(), batch=8, seq_len=32, world_size=4, zero_stage=stage
        ).components
        for name in ("parameters", "gradients", "optimizer_state"):
            expected = base[name] // 4 if name in sharded else base[name]
            assert got[name] == expected, (stage, name)


def test_plan_predicts_4x_less_state_for_8bit_and_fits():
    from chapter20.techniques.memory_model import EncoderShape
    from chapter20.training.memory_plan import parallelism_advice, plan

    shape = EncoderShape(100_000_000, 128, 4, 2)  # a 100M-row table
    adam = plan(shape, TrainConfig(), batch=64, seq_len=32, gpu_bytes=80e9)
    eight = plan(
        shape,
        TrainConfig(optimizer="adamw8bit", state_32bit_tables=False),
        batch=64,
        seq_len=32,
        gpu_bytes=80e9,
    )
    ratio = adam.components["optimizer_state"] / eight.components["optimizer_state"]
    assert 3.8 < ratio < 4.0
    assert adam.fits is False
    assert any("shard its rows" in line for line in parallelism_advice(adam, 80e9))
    small = plan(EncoderShape(1000, 64, 4, 2), TrainConfig(), batch=8, seq_len=16, gpu_bytes=80e9)
    assert small.fits and parallelism_advice(small, 80e9)[0].startswith("fits on one device")


#: Arguments of plan() itself; the others belong to its TrainConfig.
PLAN_ARGUMENTS = ("batch", "seq_len", "zero_stage")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"precision": "fp8"}, "precision must be"),
        ({"optimizer": "lamb"}, "optimizer must be"),
        ({"zero_stage": 4}, "zero_stage"),
        ({"seq_len": 1000}, "seq_len must be <= max_len"),
        ({"batch": 0}, "batch"),
        ({"activation_checkpointing": "all"}, "activation_checkpointing must be one of"),
    ],
)
def test_plan_rejects_bad_arguments(kwargs, match):
    from chapter20.techniques.memory_model import EncoderShape
    from chapter20.training.memory_plan import plan

    sizes = {"batch": 8, "seq_len": 16, **{k: v for k, v in kwargs.items() if k in PLAN_ARGUMENTS}}
    with pytest.raises(ValueError, match=match):
        config = TrainConfig(**{k: v for k, v in kwargs.items() if k not in PLAN_ARGUMENTS})
        plan(EncoderShape(100, 16, 2, 1), config, **sizes)


def test_bag_shape_counts_the_trained_parameters_exactly():
    from chapter20.core.models import WeightedBagEncoder
    from chapter20.techniques.memory_model import BagShape

    for learn in (True, False):
        model = WeightedBagEncoder(700, 24, learn_weights=learn)
        shape = BagShape.of(model)
        trained = [p.numel() for p in model.parameters() if p.requires_grad]
        assert sorted(shape.parameter_sizes()) == sorted(trained)
        assert shape.parameter_sizes()[0] == model.embedding.weight.numel()  # the table first
        assert shape == BagShape(700, 24, learn)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"activation_checkpointing": "every_layer"},
        {"chunk_size": 16},
        {"optimizer": "adamw8bit", "state_32bit_tables": False},
    ],
    ids=["plain", "checkpointing", "gradient-caching", "8bit-table"],
)
def test_bag_plan_is_within_10_percent_of_the_measured_peak(options):
    """The capstone encoder's plan (a weighted bag) against the live-tensor tracker's peak of a
    real step of the composed trainer, after the step that creates the optimizer state."""
    import warnings

    from chapter20.core.models import WeightedBagEncoder
    from chapter20.techniques.memory_model import BagShape
    from chapter20.training.config import TrainConfig
    from chapter20.training.memory_plan import plan
    from chapter20.training.trainer import Trainer, step_peak_memory

    torch.manual_seed(0)
    ids = torch.randint(1, 3000, (2, 64, 32))
    ids[:, :, 20:] = 0  # padded views, as the view sampler makes them
    config = TrainConfig(**options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bitsandbytes' notices about optional CPU kernels
        trainer = Trainer(WeightedBagEncoder(3000, 32), config)
        measured = step_peak_memory(trainer, (ids[0], ids[1])).peak_bytes
    planned = plan(BagShape(3000, 32), config, batch=64, seq_len=32)
    assert 0.9 < planned.peak_bytes / measured < 1.1, (planned.settings["peak_phase"], measured)


def test_bag_plan_shards_the_table_and_refuses_it_for_the_transformer():
    from chapter20.techniques.memory_model import BagShape, EncoderShape
    from chapter20.training.memory_plan import plan

    shard = TrainConfig(sharded_table=True)
    whole = plan(BagShape(10_000, 64), TrainConfig(), batch=8, seq_len=16, world_size=4)
    sharded = plan(BagShape(10_000, 64), shard, batch=8, seq_len=16, world_size=4)
    for name in ("parameters", "gradients"):
        table = 4 * 10_000 * 64
        assert whole.components[name] - sharded.components[name] == table - table // 4
    with pytest.raises(ValueError, match="BagShape only"):
        plan(EncoderShape(100, 16, 2, 1), shard, batch=2, seq_len=8)


def test_a_shape_builds_the_encoder_it_describes():
    from chapter20.core.device import set_seed
    from chapter20.core.models import TransformerEncoder

    shape = EncoderShape(500, 32, 4, 2, max_len=16)
    built = shape.build(seed=3)
    set_seed(3)
    plain = TransformerEncoder(500, d_model=32, n_heads=4, n_layers=2, max_len=16, dropout=0.0)
    assert EncoderShape.of(built) == shape
    for a, b in zip(built.state_dict().values(), plain.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_notebook_05s_plan_grid_and_claim_notes():
    import pandas as pd

    from chapter20.labs.nb05_optimizers import checklist_config, checklist_notes, replay_ratios
    from chapter20.training.memory_plan import plan, plan_grid

    bert = EncoderShape(30_522, 768, 12, 12, max_len=512)
    shapes = {
        "small": (EncoderShape(1_000, 64, 4, 2), 8, 16),
        "BERT-base-like, long": (bert, 256, 512),
    }
    settings = {"fp32 + AdamW": TrainConfig(), "checklist": checklist_config("bf16", "adamw8bit")}
    plans, table = plan_grid(shapes, settings, gpu_bytes=80e9)
    assert list(plans) == [(m, s) for m in shapes for s in settings] and len(table) == 4
    expected = plan(bert, settings["checklist"], batch=256, seq_len=512, gpu_bytes=80e9)
    assert plans["BERT-base-like, long", "checklist"].peak_bytes == expected.peak_bytes
    assert table["fits 80 GB"].tolist() == [p.fits for p in plans.values()]
    replay = pd.DataFrame(
        {
            "step": ["fp32 + AdamW", "+ bf16", "+ checkpointing", "+ all"],
            "peak_bytes": [100.0, 50.0, 20.0, 10.0],
            "parameters": [4.0] * 4,
            "optimizer_state": [8.0] * 4,
            "in_chain": [True, True, True, False],
        }
    )
    per_parameter = pd.DataFrame({"adamw": [8.0], "adamw8bit": [2.0]}, index=[1_024])
    notes = checklist_notes(replay, per_parameter, plans)
    assert notes["C12"] == "one tensor of 1,024 elements: 8.000 vs 2.000 B/param"
    assert notes["C13"].endswith("ratios 1.00 -> 0.50 -> 0.20 (chapter 1 -> 0.5 -> 0.2 -> 0.125)")
    assert notes["C23"].startswith("measured, 6-layer encoder, + all on top of the chain;")
    line = replay_ratios(replay)
    assert "weights x3.00 (C11 is shown in notebook " in line and "checkpointing x2.50" in line
