"""§20.3.2 chapter20.techniques.optimizers: state bytes read from the real optimizers (bitsandbytes
included), fallbacks warn, 8-bit AdamW trains like AdamW, sparse tables."""

import warnings

import pytest
import torch
from torch import nn

from chapter20.labs.nb05_optimizers import state_bytes_per_parameter
from chapter20.techniques.optimizers import (
    OPTIMIZER_KINDS,
    MultiOptimizer,
    make_optimizer,
    optimizer_state_bytes,
    sparse_optimizers,
)


@pytest.fixture(scope="module")
def state_frame():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return state_bytes_per_parameter((1_000, 4_096, 1_048_576)).set_index(
            ["numel", "optimizer"]
        )


def test_adamw_keeps_8_bytes_per_parameter(state_frame):
    for size in (1_000, 4_096, 1_048_576):
        # two fp32 moments, plus one 4-byte step counter per tensor
        assert state_frame.loc[(size, "adamw"), "bytes_per_parameter"] == pytest.approx(
            8 + 4 / size
        )
        assert state_frame.loc[(size, "sgd_nesterov"), "bytes_per_parameter"] == 4


def test_8bit_state_is_2_bytes_plus_block_scales_from_4096_elements(state_frame):
    large = state_frame.loc[(1_048_576, "adamw8bit"), "bytes_per_parameter"]
    # two uint8 moments, one fp32 absmax per 256 values for each, two 256-entry fp32 maps
    assert large == pytest.approx(2 + 2 * 4 / 256 + 2 * 256 * 4 / 1_048_576)
    assert state_frame.loc[(4_096, "adamw8bit"), "bytes_per_parameter"] < 2.6
    assert state_frame.loc[(1_000, "adamw8bit"), "bytes_per_parameter"] == 8  # small: 32-bit


def test_state_dtypes_of_the_8bit_optimizer():
    parameter = nn.Parameter(torch.randn(8_192))
    optimizer = make_optimizer([parameter], "adamw8bit", 1e-3)
    parameter.grad = torch.randn(8_192)
    optimizer.step()
    frame = optimizer_state_bytes(optimizer, {"w": parameter}).set_index("state")
    assert frame.loc["state1", "dtype"] == frame.loc["state2", "dtype"] == "uint8"
    assert frame.loc["absmax1", "shape"] == (8_192 // 256,)
    assert set(frame["parameter"]) == {"w"}


def _train(kind: str, lr: float, steps: int = 60) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 64))
    optimizer = make_optimizer(model.parameters(), kind, lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(1)
    target = nn.Linear(64, 64)
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 64, generator=generator)
        loss = (model(x) - target(x).detach()).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_8bit_adamw_reaches_the_adamw_loss():
    # Tolerance: within 10% of AdamW's final loss (8-bit state quantises the moments, it does
    # not change the update rule), and both learn (loss falls by more than half).
    full, eight = _train("adamw", 3e-3), _train("adamw8bit", 3e-3)
    assert full[-1] < full[0] / 2 and eight[-1] < eight[0] / 2
    assert eight[-1] == pytest.approx(full[-1], rel=0.10)


def test_embedding_state_can_stay_32_bit():
    table = nn.Embedding(5_000, 16)
    optimizer = make_optimizer(table.parameters(), "adamw8bit", 1e-3, state_32bit=[table])
    table(torch.tensor([1, 2])).sum().backward()
    optimizer.step()
    assert optimizer.state[table.weight]["state1"].dtype == torch.float32


def test_paged_state_needs_cuda_and_falls_back_with_a_warning():
    parameter = nn.Parameter(torch.randn(8_192))
    with pytest.warns(UserWarning, match="paged optimizer state needs CUDA"):
        optimizer = make_optimizer([parameter], "paged_adamw8bit", 1e-3)
    assert type(optimizer).__name__ == "AdamW8bit"


def test_missing_bitsandbytes_falls_back_to_adamw(monkeypatch):
    import chapter20.techniques.optimizers as optimizers

    monkeypatch.setattr(optimizers, "bitsandbytes_available", lambda: False)
    with pytest.warns(UserWarning, match="falls back to torch.optim.AdamW"):
        optimizer = make_optimizer([nn.Parameter(torch.randn(3))], "adamw8bit", 1e-3)
    assert isinstance(optimizer, torch.optim.AdamW)


def test_the_8bit_builder_refuses_a_kind_it_does_not_build():
    from chapter20.techniques.optimizers import bitsandbytes_optimizer

    with pytest.raises(ValueError, match="kind must be one of"):
        bitsandbytes_optimizer([nn.Parameter(torch.randn(3))], "adamw", 1e-3, 0.0)


def test_notebook_05_lists_every_kind_built_and_each_fallback_warning():
    """Section 1 of notebook 05: one line per kind, the fallback's warning under its kind."""
    from chapter20.labs.nb05_optimizers import built_optimizers

    model = nn.Sequential(nn.Embedding(100, 8), nn.Linear(8, 8))
    lines = built_optimizers(model, kinds=("adamw", "paged_adamw8bit"))
    assert lines[0].strip() == "adamw -> torch.AdamW"
    if torch.cuda.is_available():
        return
    assert lines[1].strip() == "paged_adamw8bit -> bitsandbytes.AdamW8bit"
    assert "warning: paged optimizer state needs CUDA" in lines[2]


def test_fused_adamw_where_supported():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # CPU supports fused AdamW in current PyTorch
        optimizer = make_optimizer([nn.Parameter(torch.randn(3))], "adamw_fused", 1e-3)
    assert optimizer.defaults["fused"] is True


def test_sgd_nesterov_and_every_kind_builds():
    optimizer = make_optimizer([nn.Parameter(torch.randn(3))], "sgd_nesterov", 0.1)
    assert optimizer.defaults["nesterov"] and optimizer.defaults["momentum"] == 0.9
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in OPTIMIZER_KINDS:
            make_optimizer([nn.Parameter(torch.randn(8))], kind, 1e-3)


@pytest.mark.parametrize(
    "args, match",
    [
        ((["p"], "lamb", 1e-3), "kind must be one of"),
        ((["p"], "adamw", 0), "lr must be"),
        (([], "adamw", 1e-3), "at least one parameter"),
    ],
)
def test_bad_arguments(args, match):
    params, kind, lr = args
    params = [nn.Parameter(torch.randn(2))] if params else []
    with pytest.raises(ValueError, match=match):
        make_optimizer(params, kind, lr)


def test_sparse_tables_get_sparse_adam_and_touched_rows_only():
    model = nn.Sequential(nn.Embedding(1_000, 8, sparse=True), nn.Linear(8, 2))
    optimizer = sparse_optimizers(model, lr=0.1)
    before = model[0].weight.detach().clone()
    model(torch.tensor([3, 7])).sum().backward()
    assert model[0].weight.grad.is_sparse
    optimizer.step()
    changed = (model[0].weight != before).any(dim=1).nonzero().flatten().tolist()
    assert changed == [3, 7]
    assert [type(o).__name__ for o in optimizer.optimizers] == ["SparseAdam", "AdamW"]
    with pytest.raises(ValueError, match="sparse=True"):
        sparse_optimizers(nn.Linear(2, 2), lr=0.1)


def test_32_bit_table_state_does_not_leak_into_later_optimizers():
    table = nn.Embedding(5_000, 16)
    make_optimizer(table.parameters(), "adamw8bit", 1e-3, state_32bit=[table])
    later = nn.Parameter(torch.randn(8_192))
    optimizer = make_optimizer([later], "adamw8bit", 1e-3)
    later.grad = torch.randn(8_192)
    optimizer.step()
    assert optimizer.state[later]["state1"].dtype == torch.uint8


def test_32_bit_tables_next_to_8_bit_layers():
    model = nn.Sequential(nn.Embedding(5_000, 16), nn.Linear(16, 4096))
    optimizer = make_optimizer(model.parameters(), "adamw8bit", 1e-3, state_32bit=[model[0]])
    model(torch.tensor([1, 2])).sum().backward()
    optimizer.step()
    assert optimizer.state[model[0].weight]["state1"].dtype == torch.float32
    assert optimizer.state[model[1].weight]["state1"].dtype == torch.uint8


def _table_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(5_000, 16), nn.Linear(16, 4096))


def _groups(model):
    return [
        {"params": model[0].parameters()},
        {"params": model[1].parameters(), "lr": 5e-4, "weight_decay": 0.1},
    ]


def test_8bit_with_32bit_tables_is_one_optimizer_that_schedulers_and_checkpoints_accept(tmp_path):
    from chapter20.training.checkpoints import CheckpointManager

    model = _table_model()
    optimizer = make_optimizer(_groups(model), "adamw8bit", 1e-3, state_32bit=[model[0]])
    assert isinstance(optimizer, torch.optim.Optimizer)
    # the groups and their own options are kept
    assert [(g["lr"], g["weight_decay"]) for g in optimizer.param_groups] == [
        (1e-3, 0.01),
        (5e-4, 0.1),
    ]
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: (step + 1) / 4)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randint(0, 5_000, (8,))).sum().backward()
        optimizer.step()
        schedule.step()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.75e-3, 3.75e-4])
    CheckpointManager(tmp_path).save({"step": 2, "optimizer": optimizer.state_dict()})
    saved = CheckpointManager(tmp_path).load_latest()["optimizer"]  # weights_only=True
    fresh = make_optimizer(_groups(model), "adamw8bit", 1e-3, state_32bit=[model[0]])
    fresh.load_state_dict(saved)
    for parameter, state in optimizer.state.items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(fresh.state[parameter][key], value), key
    assert fresh.state[model[0].weight]["state1"].dtype == torch.float32
    assert fresh.state[model[1].weight]["state1"].dtype == torch.uint8


def test_an_explicit_weight_decay_is_never_dropped():
    parameter = nn.Parameter(torch.randn(8_192))
    for kind in ("adam8bit", "adamw8bit", "adamw", "sgd_nesterov"):
        optimizer = make_optimizer([parameter], kind, 1e-3, weight_decay=0.05)
        assert optimizer.param_groups[0]["weight_decay"] == 0.05, kind
    assert make_optimizer([parameter], "adam8bit", 1e-3).param_groups[0]["weight_decay"] == 0.0
    assert make_optimizer([parameter], "adamw", 1e-3).param_groups[0]["weight_decay"] == 0.01
    with pytest.raises(ValueError, match="weight_decay"):
        make_optimizer([parameter], "adamw", 1e-3, weight_decay=-1)
    with pytest.raises(ValueError, match="state_32bit"):
        make_optimizer([parameter], "adamw8bit", 1e-3, state_32bit=[nn.Linear(2, 2)])


def test_multi_optimizer_is_an_optimizer_whose_groups_drive_the_inner_ones():
    model = nn.Sequential(nn.Embedding(100, 4, sparse=True), nn.Linear(4, 2))
    optimizer = sparse_optimizers(model, lr=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    model(torch.tensor([1, 2])).sum().backward()
    optimizer.step()
    schedule.step()
    assert [g["lr"] for o in optimizer.optimizers for g in o.param_groups] == [0.05, 0.05]
    assert set(optimizer.state) == {p for p in model.parameters()}
    fresh = sparse_optimizers(model, lr=0.1)
    fresh.load_state_dict(optimizer.state_dict())
    sparse_adam = fresh.optimizers[0]
    assert sparse_adam.param_groups[0]["lr"] == 0.05
    assert torch.equal(
        sparse_adam.state[model[0].weight]["exp_avg"],
        optimizer.optimizers[0].state[model[0].weight]["exp_avg"],
    )
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        MultiOptimizer(object())


# --- the positive control: state quantised far too coarsely ---------------------------------


def test_quantise_blockwise_rounds_to_levels_of_each_blocks_absmax():
    from chapter20.techniques.optimizers import quantise_blockwise

    values = torch.tensor([1.0, 0.4, 0.1, -0.2, 8.0, 3.0, 0.9, 5.0, 0.5])
    signed = quantise_blockwise(values, bits=2, block=4)  # levels {-1, 0, 1} × absmax
    assert signed.tolist() == [1.0, 0.0, 0.0, 0.0, 8.0, 0.0, 0.0, 8.0, 0.5]
    unsigned = quantise_blockwise(values.abs(), bits=2, block=4, signed=False)  # {0,1,2,3}/3
    assert torch.allclose(unsigned[:4], torch.tensor([1.0, 1 / 3, 0.0, 1 / 3]))
    fine = quantise_blockwise(values, bits=16, block=4)
    assert torch.allclose(fine, values, rtol=1e-4)
    assert quantise_blockwise(torch.zeros(5), 4).eq(0).all()  # an all-zero block stays 0


def test_coarse_state_adamw_stores_quantised_moments_and_zeroes_small_second_moments():
    from chapter20.techniques.optimizers import CoarseStateAdamW, quantise_blockwise

    weight = torch.nn.Parameter(torch.zeros(8))
    optimizer = CoarseStateAdamW([weight], 0.1, bits=4, block=8)
    weight.grad = torch.tensor([1.0, 0.5, 0.1, 0.01, -1.0, 0.2, 0.05, 0.001])
    optimizer.step()
    state = optimizer.state[weight]
    for key, signed in (("exp_avg", True), ("exp_avg_sq", False)):
        assert torch.equal(state[key], quantise_blockwise(state[key], 4, 8, signed=signed))
    # a second moment far below its block's largest is stored as 0: Adam will divide by ~eps
    assert state["exp_avg_sq"][3] == 0 and state["exp_avg_sq"][0] > 0


def test_notebook_05s_control_takes_adamws_default_weight_decay_when_the_config_has_none():
    """The quality runs' config leaves weight_decay None (the kind's default): the control
    must then decay as AdamW does, not fail on None."""
    from chapter20.labs.nb05_optimizers import _coarse_state
    from chapter20.techniques.optimizers import CoarseStateAdamW, make_optimizer

    model = torch.nn.Linear(4, 4)
    control = _coarse_state(1e-3, None)(model)
    assert isinstance(control, CoarseStateAdamW)
    adamw = make_optimizer(model.parameters(), "adamw", lr=1e-3)
    assert control.defaults["weight_decay"] == adamw.defaults["weight_decay"]
    assert _coarse_state(1e-3, 0.0)(model).defaults["weight_decay"] == 0.0


def test_the_reference_steps_equal_pytorchs_fused_foreach_adamw_and_nesterov_sgd():
    """§20.3.2: the written-out AdamW and SGD-Nesterov steps match PyTorch's kernels within
    float32 rounding over five steps (notebook 05's proof, checked here too)."""
    from chapter20.techniques.optimizer_proofs import reference_step_proof

    lines = reference_step_proof()
    assert len(lines) == 3 and all("✓" in line for line in lines)


def test_the_dynamic_quantisation_reference_matches_bitsandbytes():
    """§20.3.2: decoding equals bitsandbytes' exactly; encoding within 1e-4 of a block's scale;
    the AdamW8bit state decodes to 0.1 x the gradient."""
    pytest.importorskip("bitsandbytes")
    from chapter20.techniques.optimizer_proofs import quantisation_proof

    lines = quantisation_proof(size=8_192)
    assert len(lines) == 4 and all("✓" in line for line in lines)


def test_quantise_dynamic_round_trips_the_codes_levels_exactly():
    from chapter20.techniques.optimizers import dequantise_dynamic, quantise_dynamic

    code = torch.linspace(-1, 1, 256)
    values = code[torch.randint(0, 256, (1000,), generator=torch.Generator().manual_seed(0))] * 3
    values[0] = 3.0  # every block's scale is 3
    values[256] = values[512] = values[768] = 3.0
    codes, absmax = quantise_dynamic(values, code, 256)
    assert codes.dtype == torch.uint8 and absmax.shape == (4,)
    assert torch.allclose(dequantise_dynamic(codes, absmax, code, 256), values, atol=1e-6)


def test_beside_record_puts_each_live_row_under_its_recorded_row():
    from chapter20.core.study_record import read_study
    from chapter20.labs.nb05_optimizers import QUALITY_STUDY, beside_record

    record = read_study(QUALITY_STUDY)
    columns = ["optimizer", "seed", "steps", "final_loss", "recall@1", "recall@10"]
    live = record[(record["seed"] == 0) & (record["steps"] == 30)][columns]
    live = live.assign(**{"recall@10": live["recall@10"] + 0.01})  # a live run that moved
    shown = beside_record(live)
    assert list(shown["run"]) == ["recorded", "this run"]
    gap = shown["recall@10"].iloc[1] - shown["recall@10"].iloc[0]
    assert gap == pytest.approx(0.01)
    with pytest.raises(ValueError, match="one row"):
        beside_record(live.assign(steps=31))
