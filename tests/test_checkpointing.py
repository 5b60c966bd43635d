"""§20.3.1 chapter20.techniques.activation_checkpointing: every policy gives the plain model's
gradients (dropout on), keeps the activation bytes it predicts, and raises no use_reentrant warning.

Gradients are compared bitwise: recomputation replays the same operations on the same inputs
with the same RNG state, and the backward runs in the same order.
"""

import warnings

import pytest
import torch

from chapter20.core.measure import saved_activation_bytes
from chapter20.labs.nb04_activation_checkpointing import activation_vs_depth
from chapter20.techniques.activation_checkpointing import (
    POLICIES,
    CheckpointedSegment,
    apply_checkpointing,
    predicted_activation_bytes,
    segment_size,
)
from chapter20.techniques.checkpointing_policies import (
    checkpointed,
    gradient_proof,
    layer_measurements,
    make_encoder,
)


@pytest.mark.parametrize("layers", [1, 5, 7])
def test_every_policy_gives_the_plain_gradients_with_dropout(layers):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a use_reentrant (or any) warning fails the test
        frame = gradient_proof(layers=layers, dropout=0.2)
    assert len(frame) == 5  # every_layer, every_k, sqrt, selective, listing L7
    assert (frame["max_abs_diff"] == 0).all(), frame


def test_dropout_is_really_on_in_the_proof():
    model = make_encoder(3, dropout=0.2)
    ids = torch.randint(1, 1_000, (4, 16))
    torch.manual_seed(0)
    first = model(ids)
    assert not torch.equal(first, model(ids))  # other masks without the same RNG state


@pytest.fixture(scope="module")
def depth_frame():
    return activation_vs_depth(depths=(2, 4, 9, 16), batch=4, seq_len=16)


def _at(frame, layers, policy, column):
    return int(frame[(frame["layers"] == layers) & (frame["policy"] == policy)][column].iloc[0])


def test_saved_activations_fall_as_predicted(depth_frame):
    for layers in (2, 4, 9, 16):
        none = _at(depth_frame, layers, "none", "retained_bytes")
        every = _at(depth_frame, layers, "every_layer", "retained_bytes")
        selective = _at(depth_frame, layers, "selective", "retained_bytes")
        assert every < selective < none
    # Prediction from one layer's measurements, within 1% (the pooled output is counted once).
    measured, predicted = depth_frame["retained_bytes"], depth_frame["predicted_retained"]
    assert ((measured - predicted).abs() <= 0.01 * measured).all()


def test_activation_peak_is_the_activations_own_peak(depth_frame):
    """Claim C10's quantity: with the gradients allocated before the step, the peak above the
    start is the activations' own. It grows with depth without checkpointing (the activations
    at the moment the whole step peaks do not have to), and stays near the prediction."""
    none = [_at(depth_frame, layers, "none", "activation_peak") for layers in (2, 4, 9, 16)]
    assert none == sorted(none) and none[-1] > 4 * none[0]
    every = _at(depth_frame, 16, "every_layer", "activation_peak")
    assert every < none[-1] / 4
    ratio = depth_frame["activation_peak"] / depth_frame["predicted_backward_peak"]
    # above the prediction by backward's transient buffers, a larger share at these tiny sizes
    assert ((ratio > 0.8) & (ratio < 1.5)).all(), ratio.round(2).tolist()


def test_sqrt_policy_grows_as_the_square_root_of_depth(depth_frame):
    # L=4 → 2 segments of 2; L=16 → 4 segments of 4: twice the saved inputs for 4x the layers.
    boundary = layer_measurements(batch=4, seq_len=16)["boundary_bytes"]
    four = _at(depth_frame, 4, "sqrt", "retained_bytes")
    sixteen = _at(depth_frame, 16, "sqrt", "retained_bytes")
    assert sixteen - four == pytest.approx(2 * boundary, rel=0.01)
    assert _at(depth_frame, 16, "none", "retained_bytes") > 10 * sixteen


def test_saved_tensor_hooks_see_segment_inputs_only():
    model = make_encoder(4)
    ids = torch.randint(1, 1_000, (4, 16))
    plain = saved_activation_bytes(lambda: model(ids), exclude=model)
    every = checkpointed(model, "every_layer")
    assert saved_activation_bytes(lambda: every(ids), exclude=every) < plain / 4


@pytest.mark.parametrize(
    "policy, layers, k, size",
    [
        ("none", 8, None, 0),
        ("every_layer", 8, None, 1),
        ("every_k", 8, 3, 3),
        ("sqrt", 8, None, 3),
        ("sqrt", 16, None, 4),
        ("sqrt", 1, None, 1),
        ("selective", 8, None, 1),
    ],
)
def test_segment_sizes(policy, layers, k, size):
    assert segment_size(policy, layers, k) == size


def test_apply_regroups_layers_and_keeps_parameters():
    model = make_encoder(7)
    parameters = list(model.parameters())
    apply_checkpointing(model, "every_k", k=3)
    assert [len(segment.layers) for segment in model.layers] == [3, 3, 1]
    assert all(isinstance(segment, CheckpointedSegment) for segment in model.layers)
    assert all(a is b for a, b in zip(model.parameters(), parameters))  # optimizers still work
    with pytest.raises(ValueError, match="already checkpointed"):
        apply_checkpointing(model, "sqrt")


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"policy": "everything"}, ValueError, "policy must be one of none, every_layer"),
        ({"policy": "every_k"}, ValueError, "needs k"),
        ({"policy": "every_k", "k": 0}, ValueError, "k must be an int >= 1"),
        ({"policy": "every_k", "k": 2.5}, TypeError, "k must be an int"),
        ({"policy": "sqrt", "k": 2}, ValueError, "only used by policy 'every_k'"),
    ],
)
def test_bad_policies_are_rejected(kwargs, error, match):
    with pytest.raises(error, match=match):
        apply_checkpointing(make_encoder(2), **kwargs)


def test_only_transformer_and_bag_encoders_are_accepted():
    with pytest.raises(TypeError, match="TransformerEncoder or WeightedBagEncoder"):
        apply_checkpointing(torch.nn.Linear(2, 2), "sqrt")


def test_checkpointed_bag_gives_the_same_gradients_and_keeps_only_ids():
    """The weighted bag's pooling recomputed in backward: bitwise-equal gradients (the same
    operations run again on the same inputs), and the forward keeps no gathered rows."""
    from chapter20.core.measure import peak_memory
    from chapter20.core.models import WeightedBagEncoder

    torch.manual_seed(0)
    ids = torch.randint(1, 500, (16, 24))
    ids[:, 12:] = 0
    grads, kept = [], []
    for policy in ("none", "every_layer"):
        torch.manual_seed(1)
        model = apply_checkpointing(WeightedBagEncoder(500, 32), policy)
        report = peak_memory(lambda m=model: m(ids), model=model, inputs=ids)
        report.result.pow(2).sum().backward()
        grads.append([p.grad for p in model.parameters()])
        kept.append(report.retained_bytes)
    for plain, recomputed in zip(*grads):
        assert torch.equal(plain, recomputed)
    rows = 16 * 24 * 32 * 4
    assert kept[0] - kept[1] >= rows  # the rows [batch, length, dim] are not kept
    with pytest.raises(ValueError, match="already checkpointed"):
        apply_checkpointing(model, "sqrt")


def test_prediction_formula():
    unit = {"layer_bytes": 100, "boundary_bytes": 10, "selective_layer_bytes": 60, "other_bytes": 5}
    assert predicted_activation_bytes("none", 16, **unit) == {"saved": 1605, "backward_peak": 1605}
    assert predicted_activation_bytes("sqrt", 16, **unit) == {"saved": 45, "backward_peak": 445}
    every = predicted_activation_bytes("every_k", 16, k=8, **unit)
    assert every == {"saved": 25, "backward_peak": 825}
    assert set(POLICIES) == {"none", "every_layer", "every_k", "sqrt", "selective"}


# --- the notebook's readings: C10's depth and the timing lines -----------------------------


def test_depth_reaching_interpolates_between_measured_depths_and_never_extrapolates():
    import pandas as pd

    from chapter20.labs.nb04_activation_checkpointing import depth_reaching

    ratios = pd.DataFrame({"layers": [8, 16, 32, 64], "ratio": [4.0, 7.0, 9.0, 13.0]})
    reached = depth_reaching(ratios, 10.0)
    assert 32 < reached < 64  # a quarter of the way from 9 to 13, in log-depth
    assert reached == pytest.approx(2 ** (5 + 0.25))
    assert depth_reaching(ratios, 7.0) == 16
    assert depth_reaching(ratios, 2.0) == 8
    assert depth_reaching(ratios, 20.0) is None


def test_checkpointing_ratio_is_none_over_the_lowest_policy(depth_frame):
    from chapter20.labs.nb04_activation_checkpointing import checkpointing_ratio

    ratios = checkpointing_ratio(depth_frame)
    assert list(ratios["layers"]) == [2, 4, 9, 16]
    deepest = depth_frame[depth_frame["layers"] == 16].set_index("policy")["activation_peak"]
    assert ratios["ratio"].iloc[-1] == pytest.approx(deepest["none"] / deepest.drop("none").min())
    assert ratios["ratio"].is_monotonic_increasing


def test_time_findings_say_indistinguishable_within_the_repeats_spread():
    import pandas as pd

    from chapter20.labs.nb04_activation_checkpointing import time_findings

    frame = pd.DataFrame(
        {
            "policy": ["none", "every_layer", "selective"],
            "seconds": [0.100, 0.140, 0.103],
            "seconds_min": [0.095, 0.138, 0.099],
            "seconds_max": [0.108, 0.150, 0.110],
        }
    )
    slower, same = time_findings(frame)
    assert slower.startswith("every_layer: 1.40× slower than none")
    assert same.startswith("selective: indistinguishable from none")


def test_notebook_04s_readings_versus_none_depth_table_and_c10_note():
    import pandas as pd

    from chapter20.labs.nb04_activation_checkpointing import (
        activation_saving_note,
        depth_table,
        versus_none,
    )

    step = pd.DataFrame(
        {
            "policy": ["none", "every_layer"],
            "peak_bytes": [4 * 2**20, 2**20],
            "memory_vs_none": [1.0, 0.25],
        }
    )
    assert versus_none(step, "every_layer", "peak_bytes", "whole step") == (
        "every_layer, whole step: 4.00× smaller than none (1 MiB vs 4 MiB)"
    )
    same = step.assign(peak_bytes=[2**20, 2**20])
    assert "indistinguishable" in versus_none(same, "every_layer", "peak_bytes", "x", tolerance=0)
    depth = pd.DataFrame(
        {
            "layers": [2, 2, 4, 4],
            "policy": ["none", "sqrt", "none", "sqrt"],
            "retained_bytes": [2048, 1024, 4096, 1536],
        }
    )
    table = depth_table(depth, "retained_bytes")
    assert list(table.columns) == ["none", "sqrt"] and table.loc[4].tolist() == [4, 2]
    ratios = pd.DataFrame({"layers": [8, 16], "ratio": [4.0, 12.0], "best_policy": ["a", "b"]})
    note = activation_saving_note(ratios, 30.0, step)
    assert note.startswith("b at 16 layers, batch 8x32; reaches 10x at L ≈ ")
    assert note.endswith(
        "; limit for deep encoders 30.0x; whole Adam step of section 4's encoder: x4.0"
    )
    assert "no measured depth" in activation_saving_note(
        ratios.assign(ratio=[2.0, 3.0]), 30.0, step
    )


def test_policy_roles_follow_the_segments_apply_checkpointing_builds():
    """Notebook 04's map: under every_k (k=4) on 8 layers, layers 1 and 5 keep their input and
    the others are recomputed from it; none keeps everything; every layer under every_layer is
    its own segment."""
    from chapter20.techniques.checkpointing_policies import ROLES, policy_roles

    roles = policy_roles(8).set_index(["policy", "layer"])
    every_4 = roles.loc["every_k (k=4)"]
    assert list(every_4["role"]) == ["input", "inside", "inside", "inside"] * 2
    assert list(every_4["segment"]) == [0] * 4 + [1] * 4
    assert set(roles.loc["none", "role"]) == {"kept"}
    assert roles.loc["every_layer", "segment"].nunique() == 8
    assert set(roles["role"]) <= set(ROLES)


def test_the_depth_record_matches_the_code_to_the_byte():
    """The committed sweep of notebook 04 (byte counts) is what the current code measures: the
    shallowest depth is remeasured here and compared, every column, exactly."""
    from chapter20.core.study_record import read_study
    from chapter20.labs.nb04_activation_checkpointing import (
        DEPTH_SIZES,
        DEPTH_STUDY,
        DEPTHS,
        record_agreement,
    )  # fmt: skip

    record = read_study(DEPTH_STUDY)
    assert sorted(set(record["layers"])) == list(DEPTHS)
    live = activation_vs_depth((2,), **DEPTH_SIZES)
    assert record_agreement(live, record) == (len(live), 0)


def test_predicted_time_ratio_is_four_thirds_for_full_recomputation():
    from chapter20.techniques.checkpointing_policies import POLICY_CASES, predicted_time_ratio

    ratios = {label: predicted_time_ratio(label) for label, _, _ in POLICY_CASES}
    assert ratios["none"] == ratios["selective"] == 1.0
    assert ratios["every_layer"] == ratios["listing L7"] == pytest.approx(4 / 3)


def test_step_flops_count_the_recomputation_and_selective_reruns_no_matmul():
    from chapter20.labs.nb04_activation_checkpointing import step_flops

    rerun = step_flops(4, batch=2, seq_len=16).set_index("policy")
    assert rerun.loc["none", "vs_none"] == 1.0
    # The counter sees the forward pass a checkpoint reruns inside backward: the counts grow.
    assert rerun.loc["every_layer", "flops"] > rerun.loc["none", "flops"]
    full = rerun["recomputed_forwards"].drop(["none", "selective"])
    # Early stop skips each segment's last linear layer: a little less than one forward.
    assert ((full > 0.5) & (full < 1.0)).all()
    # The selective policy's matmul and attention outputs are replayed, not recomputed.
    assert rerun.loc["selective", "flops"] == rerun.loc["none", "flops"]
    whole = step_flops(4, batch=2, seq_len=16, early_stop=False).set_index("policy")
    full = whole["recomputed_forwards"].drop(["none", "selective"])
    assert full.to_numpy() == pytest.approx(1.0, abs=0.01)


def test_the_cpu_attention_kernel_is_counted_as_two_batched_matmuls():
    from chapter20.labs.nb04_activation_checkpointing import _counted_flops

    q = torch.randn(1, 2, 8, 4)  # batch 1, 2 heads, 8 tokens, 4 dims a head
    flops = _counted_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    assert flops == 2 * (2 * 2 * 8 * 4 * 8)  # q·kᵀ and scores·v, 2 FLOPs a multiply-add
