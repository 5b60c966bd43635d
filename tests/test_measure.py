"""Tests for chapter20.core.measure: tensor bytes, the live-tensor tracker, saved activations,
timing."""

import warnings

import pytest
import torch
from torch import nn

from chapter20.core.measure import (
    CATEGORIES,
    MemoryReport,
    format_bytes,
    gradients_of,
    peak_memory,
    saved_activation_bytes,
    tensor_bytes,
    time_fn,
    time_interleaved,
)

cuda = pytest.mark.cuda

MiB = 2**20


# --- tensor_bytes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "dtype", "expected"),
    [
        ((3, 5), torch.float32, 60),
        ((3, 5), torch.bfloat16, 30),
        ((7,), torch.int64, 56),
        ((2, 3, 4), torch.float16, 48),
        ((), torch.float32, 4),
        ((0, 8), torch.float32, 0),
    ],
)
def test_tensor_bytes_known_shapes(shape, dtype, expected):
    assert tensor_bytes(torch.zeros(shape, dtype=dtype)) == expected


def test_tensor_bytes_view_and_base_counted_once():
    a = torch.zeros(100)
    assert tensor_bytes(a, a[:10]) == 400
    assert tensor_bytes(a, a.view(10, 10), a[::2], a) == 400
    # A view alone still holds (keeps alive) the whole storage of its base.
    assert tensor_bytes(a[:10]) == 400


def test_tensor_bytes_distinct_tensors_add():
    assert tensor_bytes(torch.zeros(10), torch.zeros(10)) == 80


def test_tensor_bytes_nested_containers():
    a, b, c = torch.zeros(1), torch.zeros(2), torch.zeros(4)
    assert tensor_bytes({"x": [a, (b, {c})], "n": 3, "s": "text", "none": None}) == 28


def test_tensor_bytes_tied_weights_counted_once():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    assert tensor_bytes(model) == 10 * 4 * 4


def test_tensor_bytes_linear():
    # 10*5 weights + 5 biases, float32.
    assert tensor_bytes(nn.Linear(10, 5)) == 220


def test_tensor_bytes_counts_buffers():
    bn = nn.BatchNorm1d(8)
    # weight, bias, running_mean, running_var (8 float32 each) + num_batches_tracked (int64).
    assert tensor_bytes(bn) == 4 * 8 * 4 + 8


def test_tensor_bytes_adam_state_after_one_step():
    lin = nn.Linear(10, 5)
    opt = torch.optim.Adam(lin.parameters())
    assert tensor_bytes(opt) == 0  # no state before the first step
    lin(torch.randn(3, 10)).sum().backward()
    opt.step()
    num_params = 55
    # Two float32 moments per element, plus one float32 'step' scalar per parameter tensor.
    assert tensor_bytes(opt) == 2 * 4 * num_params + 4 * 2
    assert tensor_bytes(gradients_of(lin)) == 4 * num_params


def test_tensor_bytes_sparse_coo():
    indices = torch.tensor([[0, 1, 2], [1, 2, 0]])
    values = torch.tensor([1.0, 2.0, 3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the sparse-invariants notice is not under test
        sparse = torch.sparse_coo_tensor(indices, values, (3, 3))
    # 2x3 int64 indices + 3 float32 values; the 3x3 dense shape costs nothing.
    assert tensor_bytes(sparse) == 2 * 3 * 8 + 3 * 4


def test_tensor_bytes_meta_counts_nominal_bytes():
    # Meta tensors have no address; they count their nominal size, each storage once.
    m1 = torch.empty(10, device="meta")
    m2 = torch.empty(20, device="meta")
    assert tensor_bytes(m1) == 40
    assert tensor_bytes(m1, m2) == 120
    assert tensor_bytes(m1, m1[:5]) == 40


@pytest.mark.parametrize("bad", [object(), object, lambda: None, bytearray(4)])
def test_tensor_bytes_unsupported_object(bad):
    with pytest.raises(TypeError, match="cannot count the bytes"):
        tensor_bytes(bad)


def test_tensor_bytes_scalars_are_ignored():
    assert tensor_bytes([torch.zeros(1), 1j, 2.0, "text", None, torch.float32]) == 4


def test_tensor_bytes_unsupported_object_in_container():
    with pytest.raises(TypeError, match="object"):
        tensor_bytes({"a": torch.zeros(1), "b": object()})


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (2**26, "64.0 MiB"),
        (3 * 2**30, "3.0 GiB"),
        (2**40, "1.0 TiB"),
        (2**50, "1024.0 TiB"),
        (-2048, "-2.0 KiB"),
    ],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


# --- peak_memory -----------------------------------------------------------------------------


def test_peak_memory_known_pattern():
    def pattern():
        a = torch.empty(1000)  # 4000 B
        b = torch.empty(2000)  # 8000 B -> 12000 B live
        del a  # 8000 B live
        c = torch.empty(500)  # 2000 B -> 10000 B live
        return b, c

    report = peak_memory(pattern)
    assert isinstance(report, MemoryReport)
    assert report.peak_bytes == 12000
    assert report.tracked_peak_bytes == 12000
    assert report.baseline_bytes == 0
    assert report.breakdown == {
        "parameters": 0,
        "gradients": 0,
        "optimizer_state": 0,
        "activations": 12000,
    }
    assert tuple(report.breakdown) == CATEGORIES
    assert report.allocator_peak_bytes is None
    assert "tracker" in report.method
    assert "cpu" in report.method
    assert report.peak_op == "empty"  # the operator that reached the peak
    assert "peak 11.7 KiB" in str(report)


def test_peak_memory_freed_tensors_are_uncounted():
    def loop():
        for _ in range(10):
            t = torch.ones(250)  # 1000 B
            del t  # freed before the next one exists

    assert peak_memory(loop).peak_bytes == 1000


def test_peak_memory_rebinding_keeps_two_alive():
    # `t = torch.ones(...)` creates the new tensor before the old one is released, so two are
    # alive at once: the tracker must see that moment (as the allocator would).
    def loop():
        t = None
        for _ in range(10):
            t = torch.ones(250)
        return t

    assert peak_memory(loop).peak_bytes == 2000


def test_peak_memory_views_do_not_add():
    def views():
        t = torch.ones(250)
        return t[:10], t.view(25, 10), t.view(25, 10).t(), t.unsqueeze(0)

    assert peak_memory(views).peak_bytes == 1000


def test_peak_memory_inputs_count_from_the_start():
    x = torch.zeros(100)  # 400 B

    report = peak_memory(lambda: x * 2, inputs=x)
    assert report.baseline_bytes == 400
    assert report.peak_bytes == 800
    assert report.breakdown["activations"] == 800


def test_peak_memory_model_optimizer_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 30), nn.ReLU(), nn.Linear(30, 4))
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 20)

    def step():
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        return loss.item()

    loss_before = model(x).pow(2).mean().item()
    first = peak_memory(step, model=model, optimizer=optimizer, inputs=x)
    param_bytes = tensor_bytes(model)
    assert param_bytes == 4 * (20 * 30 + 30 + 30 * 4 + 4)
    assert first.baseline_bytes == param_bytes + x.nbytes  # no grads, no state yet
    assert first.breakdown["parameters"] == param_bytes
    assert first.breakdown["gradients"] == tensor_bytes(gradients_of(model)) == param_bytes
    assert first.breakdown["optimizer_state"] == tensor_bytes(optimizer)
    assert tensor_bytes(optimizer) == 2 * param_bytes + 4 * 4  # moments + 4 'step' scalars
    assert first.breakdown["activations"] > 0
    assert first.peak_bytes == sum(first.breakdown.values())
    assert isinstance(first.result, float)
    # Same parameters, same kernels: the step's forward reproduces the loss bitwise.
    assert first.result == loss_before

    # A second step starts with gradients and Adam state already alive.
    second = peak_memory(step, model=model, optimizer=optimizer, inputs=x)
    assert second.baseline_bytes == 4 * param_bytes + 4 * 4 + x.nbytes
    assert second.peak_bytes >= second.baseline_bytes


def test_peak_memory_returns_fn_result():
    sentinel = object()
    assert peak_memory(lambda: sentinel).result is sentinel


@pytest.mark.parametrize("bad", [3, None, "fn"])
def test_peak_memory_fn_not_callable(bad):
    with pytest.raises(TypeError, match="fn must be callable"):
        peak_memory(bad)


# --- saved_activation_bytes ------------------------------------------------------------------


def _linear_relu():
    torch.manual_seed(0)
    linear = nn.Linear(16, 8)
    return linear, nn.Sequential(linear, nn.ReLU())


def test_saved_activation_bytes_linear_relu():
    linear, model = _linear_relu()
    x = torch.randn(4, 16, requires_grad=True)
    # addmm saves its input x (for dL/dW: 4*16 floats = 256 B) and W^T (for dL/dx, a view of
    # the 8x16 weight = 512 B); relu saves its output (4*8 floats = 128 B). The bias is not
    # saved (its gradient is a sum over the batch).
    assert saved_activation_bytes(lambda: model(x)) == 256 + 512 + 128
    # Excluding the model leaves out the weight: only the activations remain.
    assert saved_activation_bytes(lambda: model(x), exclude=model) == 256 + 128


def test_saved_activation_bytes_input_without_grad():
    _, model = _linear_relu()
    x = torch.randn(4, 16)
    # x needs no gradient, so addmm does not save W^T; it still saves x for dL/dW.
    assert saved_activation_bytes(lambda: model(x)) == 256 + 128


def test_saved_activation_bytes_no_grad_is_zero():
    _, model = _linear_relu()
    x = torch.randn(4, 16, requires_grad=True)

    def forward():
        with torch.no_grad():
            return model(x)

    assert saved_activation_bytes(forward) == 0


def test_saved_activation_bytes_not_callable():
    with pytest.raises(TypeError, match="fn must be callable"):
        saved_activation_bytes(None)


# --- time_fn ---------------------------------------------------------------------------------


def test_time_fn_call_count_and_order():
    calls = []
    timing = time_fn(lambda: calls.append(1), warmup=3, repeat=4, device="cpu")
    assert len(calls) == 3 + 4
    assert len(timing.times) == 4
    assert timing.min <= timing.median <= timing.max
    assert timing.min == min(timing.times) and timing.max == max(timing.times)
    assert all(t >= 0 for t in timing.times)
    assert "n=4" in str(timing)


def test_time_fn_zero_warmup():
    calls = []
    timing = time_fn(lambda: calls.append(1), warmup=0, repeat=1)
    assert len(calls) == 1 and len(timing.times) == 1
    assert timing.min == timing.median == timing.max


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"warmup": -1}, ValueError),
        ({"repeat": 0}, ValueError),
        ({"warmup": 1.5}, TypeError),
        ({"repeat": True}, TypeError),
        ({"repeat": "3"}, TypeError),
    ],
)
def test_time_fn_bad_arguments(kwargs, error):
    calls = []
    with pytest.raises(error, match="warmup|repeat"):
        time_fn(lambda: calls.append(1), **kwargs)
    assert calls == []  # validated before anything runs


# --- CUDA ------------------------------------------------------------------------------------


@cuda
def test_peak_memory_cuda_allocator_matches_tracker():
    device = torch.device("cuda")
    torch.cuda.synchronize()
    # Tensors other tests left on the GPU count in the allocator's peak but not in the
    # tracker's, so they are part of the allowed difference.
    already = torch.cuda.memory_allocated(device)

    def pattern():
        a = torch.empty(4 * MiB // 4, device=device)  # 4 MiB
        b = torch.empty(8 * MiB // 4, device=device)  # 8 MiB -> 12 MiB live
        del a
        c = torch.empty(2 * MiB // 4, device=device)
        return b, c

    report = peak_memory(pattern, device=device)
    assert report.tracked_peak_bytes == 12 * MiB
    assert report.baseline_bytes == 0
    assert report.allocator_peak_bytes is not None
    assert "allocator" in report.method
    # peak_bytes is the allocator's growth during the call (plus the tracked start, here 0),
    # so tensors other tests left on the GPU are excluded from it but not from the raw figure.
    assert report.peak_bytes == report.allocator_peak_bytes - already
    # The allocator rounds blocks up (512 B granularity) and may keep workspaces: within
    # 10% + 1 MiB of the tracked live bytes.
    assert report.tracked_peak_bytes <= report.peak_bytes <= 1.1 * report.tracked_peak_bytes + MiB


def test_peak_memory_does_not_count_a_slice_of_a_preexisting_tensor():
    # Slicing a tensor that existed before fn (a data set) allocates nothing: only the clone
    # of 10 float32 values (40 B) is new, not the 40,000-byte storage behind the slice.
    data = torch.zeros(10_000)
    assert peak_memory(lambda: data[:10].clone()).peak_bytes == 40


def test_peak_memory_counts_tensors_made_from_python_data():
    # torch.tensor(...) enters the dispatcher through aten::lift_fresh, a view-like op; the new
    # tensor must still count (Adam's step counters are made this way).
    assert peak_memory(lambda: torch.tensor([1.0, 2.0, 3.0])).peak_bytes == 12


def test_time_interleaved_alternates_the_variants():
    calls = []
    timings = time_interleaved(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        warmup=1,
        repeat=3,
        device="cpu",
    )
    assert calls == ["a", "b"] * 4  # one warm-up round, then three timed rounds in turn
    assert set(timings) == {"a", "b"} and all(len(t.times) == 3 for t in timings.values())
    with pytest.raises(ValueError, match="fns"):
        time_interleaved({}, device="cpu")


def test_format_difference_is_machine_independent_text():
    from chapter20.core.measure import format_difference

    assert format_difference(0.0, 0) == "max |Δ| = 0 ✓"  # bitwise
    assert format_difference(0.0, 1e-6) == "max |Δ| < 1e-06 ✓"  # zero noise reads as any noise
    assert format_difference(3.1e-8, 1e-6) == format_difference(7.9e-8, 1e-6) == "max |Δ| < 1e-06 ✓"
    assert format_difference(0.1745, 1e-6) == "max |Δ| = 0.17 ✗"


def test_peak_memory_reports_what_fn_left_alive():
    def allocate():
        scratch = torch.empty(1_000)  # 4,000 B, freed on return
        kept = torch.empty(500)  # 2,000 B, returned
        del scratch
        return kept

    report = peak_memory(allocate, device="cpu")
    assert report.peak_bytes == 6_000
    assert report.retained_bytes == 2_000
    model = torch.nn.Linear(10, 10)
    forward = peak_memory(lambda: model(torch.ones(4, 10)).relu(), model=model)
    # The graph keeps the linear output for relu's backward; the input is not a new tensor.
    assert forward.retained_bytes >= 4 * 10 * 4


def test_gradients_freed_by_fn_leave_the_count():
    model = torch.nn.Linear(256, 256)
    model(torch.ones(1, 256)).sum().backward()  # a previous step's gradients exist
    grad_bytes = 256 * 256 * 4 + 256 * 4

    def clear_then_allocate():
        model.zero_grad(set_to_none=True)
        return torch.empty(10)

    report = peak_memory(clear_then_allocate, model=model)
    assert report.baseline_bytes == 2 * grad_bytes  # weights + gradients at the start
    assert report.end_bytes == grad_bytes + 40  # the gradients are gone, the new tensor is not
