"""§20.2.2 chapter20.techniques.precision, and the composed trainer in each precision: autocast with
fp32 master weights on any device, loss scaling and skipped steps, BatchNorm kept in fp32, and what
fp16 / bf16 can hold."""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from chapter20.labs.nb03_precision import encoder, pair_loss, parity_run
from chapter20.techniques.contrastive import info_nce
from chapter20.techniques.precision import (
    autocast,
    format_limits,
    gradient_underflow,
    keep_batchnorm_fp32,
    largest_rounding_to_zero,
    resolve_precision,
    underflow_report,
)
from chapter20.training.config import TrainConfig
from chapter20.training.trainer import Trainer

CPU_PRECISIONS = ["fp32", "bf16", "fp16"]


def _small_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def _mse(model, batch, factor: float = 1.0):
    """One squared error per example (times ``factor``: inf or NaN make the step overflow)."""
    x, y = batch
    return factor * F.mse_loss(model(x).float(), y, reduction="none").mean(dim=1)


def _trainer(model, precision, *, loss=_mse, **config):
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    return Trainer(model, TrainConfig(precision=precision, **config), loss=loss, optimizer=sgd)


def _batch():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(16, 6, generator=generator), torch.randn(16, 3, generator=generator)


@pytest.mark.parametrize("precision", CPU_PRECISIONS)
def test_no_deprecation_warning_on_cpu(precision):
    model = _small_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every warning, deprecations included, is an error
        result = _trainer(model, precision, clip_norm=1.0).step(_batch())
    assert math.isfinite(result.loss) and not result.skipped


@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_autocast_runs_linear_in_half_and_keeps_embeddings_loss_and_weights_fp32(precision, dtype):
    linear, table = nn.Linear(4, 4), nn.Embedding(10, 4)
    with autocast(precision, "cpu"):
        out = linear(table(torch.tensor([1, 2])))
        loss = info_nce(out, out.detach() + 1)
    assert out.dtype == dtype  # matmuls run in half precision
    assert table(torch.tensor([1])).dtype == torch.float32  # outside: plain fp32
    assert loss.dtype == torch.float32  # InfoNCE computes its softmax in fp32
    model = encoder(vocab=50, d_model=16, layers=1)
    trainer = Trainer(model, TrainConfig(precision=precision))
    with trainer.autocast():
        embedded = model.token_embedding(torch.tensor([[1, 2]]))
    assert embedded.dtype == torch.float32
    pairs = torch.randint(1, 50, (2, 4, 6))
    trainer.step(tuple(pairs))
    for parameter in model.parameters():  # master weights and their gradients stay fp32
        assert parameter.dtype == torch.float32
        assert parameter.grad is None or parameter.grad.dtype == torch.float32


def test_fp32_is_a_null_context():
    linear = nn.Linear(3, 3)
    with autocast("fp32", "cpu"):
        assert linear(torch.randn(2, 3)).dtype == torch.float32


#: Adam steps of the parity runs: the fp32 loss halves within 3, and by 15 the runs have gone
#: up and down several times (a half-precision run that drifted would part from it).
PARITY_STEPS = 15


@pytest.fixture(scope="module")
def fp32_losses():
    """The fp32 reference run, computed once for both half precisions."""
    return parity_run("fp32", steps=PARITY_STEPS)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_loss_tracks_fp32_over_training(precision, fp32_losses):
    # Tolerance 2% relative per step: bf16 keeps 8 mantissa bits (0.4% per rounding) and the
    # rounding errors of 15 steps of Adam do not compound into a different run.
    reference, half = fp32_losses, parity_run(precision, steps=PARITY_STEPS)
    assert len(half) == PARITY_STEPS
    for step, (a, b) in enumerate(zip(reference, half)):
        assert abs(a - b) <= 0.02 * abs(a) + 1e-3, (step, a, b)
    assert reference[-1] < reference[0] / 2  # the task is learned, not a flat line


def test_fp16_step_with_an_infinite_gradient_is_skipped_and_counted():
    model = _small_model()
    before = [p.detach().clone() for p in model.parameters()]
    factor = {"value": float("inf")}
    trainer = _trainer(
        model, "fp16", loss=lambda m, b: _mse(m, b, factor["value"]), init_scale=1024.0
    )
    result = trainer.step(_batch())
    assert result.skipped and trainer.skipped_steps == 1 and trainer.steps == 1
    assert trainer.scaler.get_scale() == 512.0  # the scale backs off
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))  # untouched
    factor["value"] = 1.0
    assert not trainer.step(_batch()).skipped  # the next good step goes through
    assert trainer.skipped_steps == 1


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_non_finite_gradients_are_skipped_without_a_scaler_too(precision):
    model = _small_model()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = _trainer(model, precision, loss=lambda m, b: _mse(m, b, float("nan")))
    result = trainer.step(_batch())
    assert result.skipped and trainer.skipped_steps == 1
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))


def test_gradients_are_unscaled_before_clipping():
    norms = {}
    for precision in ("fp32", "fp16"):
        model = _small_model()
        result = _trainer(model, precision, clip_norm=1e-3).step(_batch())
        norms[precision] = result.grad_norm
        clipped = torch.linalg.vector_norm(
            torch.cat([p.grad.flatten() for p in model.parameters()])
        )
        assert float(clipped) == pytest.approx(1e-3, rel=1e-3)  # clipped in true units
    # The fp16 norm is the unscaled one (not 65536 times larger), up to fp16 rounding.
    assert norms["fp16"] == pytest.approx(norms["fp32"], rel=1e-2)


def test_precision_names_and_errors(monkeypatch):
    assert resolve_precision("auto", "cpu") == torch.bfloat16
    assert resolve_precision("fp16", "cpu") == torch.float16
    assert resolve_precision(torch.float32, "cpu") == torch.float32
    with pytest.raises(ValueError, match="precision must be"):
        resolve_precision("fp8", "cpu")
    with pytest.raises(ValueError, match="precision must be"):
        resolve_precision(torch.float64, "cpu")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    with pytest.raises(ValueError, match="not supported on cuda"):
        resolve_precision("bf16", "cuda")
    with pytest.raises(ValueError, match="not supported on mps"):
        resolve_precision("bf16", "mps")
    with pytest.raises(ValueError, match="clip_norm"):
        TrainConfig(clip_norm=0)
    with pytest.raises(ValueError, match="init_scale"):
        TrainConfig(init_scale=math.inf)


def test_keep_batchnorm_fp32_after_half():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).half()
    keep_batchnorm_fp32(model)
    assert model[0].weight.dtype == model[2].weight.dtype == torch.float16
    batchnorm = model[1]
    assert batchnorm.weight.dtype == batchnorm.running_var.dtype == torch.float32
    assert model(torch.randn(8, 4).half()).dtype == torch.float16
    # Why: fp16 cannot hold the small steps a running statistic takes near 1.0.
    assert torch.tensor(1.0, dtype=torch.float16) + 1e-4 == 1.0
    assert torch.tensor(1.0) + 1e-4 != 1.0


def test_fp16_limits_found_by_casting():
    limits = format_limits().set_index("dtype")
    assert limits.loc["float16", "smallest_subnormal"] == pytest.approx(2.0**-24)
    assert limits.loc["float16", "smallest_normal"] == pytest.approx(2.0**-14)
    assert largest_rounding_to_zero(torch.float16) == pytest.approx(2.0**-25)  # ≈ 2.98e-8
    assert torch.tensor(1e-7).half().item() != 0  # the chapter's 1e-7 survives, as a subnormal
    assert torch.tensor(2.9e-8).half().item() == 0
    assert limits.loc["bfloat16", "largest_that_rounds_to_zero"] < 1e-40


def test_underflow_report_counts_each_kind():
    values = torch.tensor([1e-9, 1e-6, 1.0, 1e6, 0.0])
    report = underflow_report(values, torch.float16)
    assert report == {"zero": 0.25, "subnormal": 0.25, "normal": 0.25, "infinite": 0.25}
    with pytest.raises(ValueError, match="non-zero"):
        underflow_report(torch.zeros(3))


def test_loss_scaling_rescues_small_gradients():
    model = encoder(vocab=200, d_model=32, layers=1)
    pair_loss(model, tuple(torch.randint(1, 200, (2, 8, 12)))).backward()
    frame = gradient_underflow(model, scales=(1.0, 2.0**16)).set_index("loss_scale")
    lost = frame["zero"] + frame["subnormal"]
    assert lost.loc[2.0**16] < lost.loc[1.0]
    assert frame.loc[2.0**16, "infinite"] == 0
    with pytest.raises(ValueError, match="backward"):
        gradient_underflow(nn.Linear(2, 2))


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_cuda_mixed_precision_step(precision):
    model = _small_model().cuda()
    trainer = Trainer(model, TrainConfig(precision=precision), loss=_mse)
    x, y = (t.cuda() for t in _batch())
    result = trainer.step((x, y))
    assert not result.skipped and (trainer.scaler is not None) == (precision == "fp16")
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.cuda
def test_cuda_bf16_activations_use_less_memory():
    from chapter20.labs.nb03_precision import memory_by_precision

    frame = memory_by_precision(batch=16, precisions=["fp32", "bf16"]).set_index("precision")
    assert frame.loc["bf16", "activations"] < frame.loc["fp32", "activations"]
    assert frame.loc["bf16", "parameters"] == frame.loc["fp32", "parameters"]


# --- C06's quantity: one matrix multiply per dtype ------------------------------------------


def test_matmul_speedup_times_every_runnable_precision_against_fp32():
    from chapter20.techniques.precision import matmul_speedup

    frame = matmul_speedup(32, ("fp32", "bf16", "fp16"), repeat=2, device="cpu")
    assert list(frame["precision"]) == ["fp32", "bf16", "fp16"]  # no tf32 row off CUDA
    fp32 = frame.set_index("precision").loc["fp32"]
    assert fp32["speedup"] == 1.0
    assert (frame["seconds_min"] <= frame["seconds"]).all()
    assert (frame["seconds"] <= frame["seconds_max"]).all()
    assert frame["tflops"].gt(0).all()
    with pytest.raises(ValueError, match="fp32"):
        matmul_speedup(8, ("bf16",), device="cpu")
    with pytest.raises(ValueError, match="size"):
        matmul_speedup(0, device="cpu")


def test_bench_precision_records_c06s_quantity_with_the_code_version(monkeypatch):
    """The rows `bench precision --record` appends are the ones claim C06 reads: the matmul
    speed-up of the current code (a row of another version no longer decides)."""
    import chapter20.labs.nb03_precision as lab
    from chapter20.core.gpu_record import code_version

    monkeypatch.setattr(lab, "step_time_vs_batch", lambda batches: _fake_steps())
    monkeypatch.setattr(lab, "memory_by_precision", lambda batch: _fake_memory())
    rows = lab.benchmark(batches=(4,), matmul_sizes=(16,))
    assert {r["quantity"] for r in rows} == {lab.matmul_quantity(16, "bf16")}
    assert all(r["code"] == code_version(*lab.MATMUL_MODULES) for r in rows)
    assert lab.matmul_quantity(4096, "fp16") == "matmul 4096x4096 speed-up vs fp32 (no TF32), fp16"


def _fake_steps():
    import pandas as pd

    row = {"batch": 4, "seconds": 1.0, "seconds_min": 0.9, "seconds_max": 1.1, "speedup": 1.0}
    return pd.DataFrame([{**row, "precision": "fp32"}, {**row, "precision": "bf16"}])


def _fake_memory():
    import pandas as pd

    return pd.DataFrame(
        [{"precision": "fp32", "peak_bytes": 10, "vs_fp32": 1.0, "measured_by": "test"}]
    )


# --- the quality run of C27 -------------------------------------------------------------------


def test_heldout_run_builds_the_given_encoder_and_optimizer_and_scores_nan_weights_as_zero():
    from chapter20.core.corpora import PairData
    from chapter20.core.models import TransformerEncoder
    from chapter20.training.pair_training import PairRunConfig, heldout_run

    ids = torch.randint(1, 30, (4, 16, 6), generator=torch.Generator().manual_seed(0))
    data = PairData(*ids, vocab_size=30)
    built = {}

    def encoder(vocab, dim):
        built["model"] = TransformerEncoder(vocab, d_model=dim, n_heads=2, n_layers=1, max_len=6)
        return built["model"]

    def broken(model):  # a step that writes NaN into every weight
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        optimizer.register_step_post_hook(
            lambda *_: [p.data.fill_(math.nan) for p in model.parameters()]
        )
        return optimizer

    run_config = PairRunConfig(steps=2, batch=4, vocab=30, dim=8)
    run = heldout_run(run_config, data, encoder=encoder)
    assert isinstance(built["model"], TransformerEncoder) and 0 <= run.recall[10] <= 1
    nan = heldout_run(run_config, data, optimizer=broken)
    assert nan.recall == {1: 0.0, 10: 0.0}  # not "every anchor ties with its positive"
    assert nan.mrr == 0.0 and 1 / 16 <= run.mrr <= 1  # the worst possible rank is 16


def test_quality_runs_follow_fp32_in_fp16_and_the_control_drifts_away():
    """C27's arms on a small problem: fp16's losses stay within rounding of fp32's, step by
    step, while the fp8 control (no master copy) loses Adam's steps and drifts."""
    from chapter20.core.corpora import PairData
    from chapter20.labs.nb03_precision import CONTROL, quality_runs

    ids = torch.randint(1, 200, (4, 64, 8), generator=torch.Generator().manual_seed(0))
    runs = quality_runs(PairData(*ids, vocab_size=200), seeds=(0,), steps=4, batch=16, seq_len=8)
    rows = runs.set_index("arm")
    assert list(rows.index) == ["untrained", "fp32", "fp16", CONTROL]
    assert rows.loc["fp32", "loss_gap_vs_fp32"] == 0 and 0 < rows.loc["untrained", "mrr"] <= 1
    assert rows.loc["fp16", "loss_gap_vs_fp32"] < 1e-2 < rows.loc[CONTROL, "loss_gap_vs_fp32"]


def test_store_weights_in_keeps_no_master_copy_and_loses_small_updates():
    """The positive control of C27: weights rounded to fp8 after every step, so an update below
    half a unit in the last place is lost (an fp32 master copy would keep it)."""
    from chapter20.techniques.precision import store_weights_in

    model = nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 0.3, 0.0, -2.0]]))
    optimizer = store_weights_in(
        model, torch.optim.SGD(model.parameters(), lr=1.0), torch.float8_e4m3fn
    )
    assert model.weight.tolist() == [[1.0, 0.3125, 0.0, -2.0]]  # rounded to e4m3 at once
    model.weight.grad = torch.tensor([[0.01, 0.01, -0.01, 0.5]])
    optimizer.step()
    # 1.0 - 0.01 rounds back to 1.0 (e4m3's step at 1 is 0.125); 0 + 0.01 is representable
    assert model.weight.tolist()[0][0] == 1.0 and model.weight.tolist()[0][3] == -2.5
    assert model.weight.tolist()[0][2] == pytest.approx(0.009765625)
    assert model.weight.dtype == torch.float32  # stored back in its own dtype
    with pytest.raises(TypeError, match="dtype"):
        store_weights_in(model, optimizer, torch.int8)


def test_c06_reads_only_a_gpu_row_of_the_current_code(monkeypatch):
    """The old 512 x 512 rows no longer decide C06: without a 4096 x 4096 row written by the
    current code the verdict is "needs a GPU"; with one, that row is judged."""
    import chapter20.labs.nb03_precision as lab
    from chapter20.core.claims import check
    from chapter20.core.gpu_record import GpuFigure

    value, device, note = lab.fp16_matmul_speedup(None, 1024)
    assert value is None and "no 4096 x 4096 figure" in note
    assert check("C06", value, device=device).verdict == "needs a GPU"
    asked = {}

    def figure(quantity, modules):
        asked.update(quantity=quantity, modules=modules)
        return GpuFigure(quantity, 9.5, "×", "NVIDIA H200", "2026-12-02", "x", "y", "bench", "")

    monkeypatch.setattr(lab, "current_gpu_figure", figure)
    value, device, _ = lab.fp16_matmul_speedup(None, 1024)
    assert asked == {"quantity": lab.matmul_quantity(4096, "fp16"), "modules": lab.MATMUL_MODULES}
    row = check("C06", value, device=device)
    assert (row.verdict, row.direction) == ("holds", "larger than claimed")


def test_recorded_gpu_speeds_are_dated_lines_of_the_gpu_record(monkeypatch, tmp_path):
    """Notebook 03's GPU figures: the training step's speed-ups from the throughput record, then
    one line per matrix-multiply row that ``bench precision`` wrote, each with its GPU and date;
    a row of another command or another quantity is left out."""
    import pandas as pd

    import chapter20.labs.nb03_precision as lab
    from chapter20.core.gpu_record import COLUMNS, read_gpu_measurements

    rows = [
        ("2026-12-01", "NVIDIA H100", "chapter20 bench precision",
         lab.matmul_quantity(4096, "fp16"), "5.5"),
        ("2026-12-01", "NVIDIA H100", "chapter20 bench precision", "step ms, fp16", "3.0"),
        ("2026-12-01", "NVIDIA H100", "chapter20 bench other",
         "matmul 512x512 speed-up vs fp32, bf16", "9.0"),
    ]  # fmt: skip
    frame = pd.DataFrame([dict.fromkeys(COLUMNS, "") | dict(zip(
        ("date", "device", "command", "quantity", "value"), row)) for row in rows])  # fmt: skip
    path = tmp_path / "gpu.csv"
    frame.to_csv(path, index=False)
    monkeypatch.setattr(lab, "read_gpu_measurements", lambda: read_gpu_measurements(path))
    lines = lab.recorded_gpu_speeds()
    assert lines[0].startswith(f"{lab.H200_MEASUREMENT.gpu}, {lab.H200_MEASUREMENT.date}: ")
    step = lab.H200_MEASUREMENT.speedup("bf16", "fp32", 1024)
    assert f"bf16 {step:.2f}x the speed of fp32" in lines[0]
    assert lines[1:] == ["NVIDIA H100, 2026-12-01: one 4096 x 4096 matrix multiply, fp16 5.50x "
                         "the speed of fp32"]  # fmt: skip


def test_fp16_quality_note_names_the_judged_run_and_every_arms_recall():
    """Notebook 03's C27 note (its cell's output is not compared by nbval): the committed record
    with its date when the notebook's run was too short, this run otherwise, and each arm's mean
    recall@10 with the spread of fp16 and fp32, rounded to three places."""
    import pandas as pd

    from chapter20.labs.nb03_precision import CONTROL, fp16_quality_note

    by_arm = pd.DataFrame(
        {"seeds": 3, "recall@10_mean": [0.05, 0.2, 0.19, 0.1], "recall@10_std": 0.0123},
        index=["untrained", "fp32", "fp16", CONTROL],
    )
    judged = pd.DataFrame({"measured_on": ["2026-11-30"]})
    recalls = "fp16 0.190 ± 0.012, fp32 0.200 ± 0.012, control 0.100, untrained 0.050"
    expected = f"3 seeds; recall@10 {recalls}"
    assert fp16_quality_note(by_arm, judged, own_run=True) == f"this run, {expected}"
    assert fp16_quality_note(by_arm, judged, own_run=False) == (f"recorded 2026-11-30, {expected}")


def test_learned_needs_fp32_and_fp16_above_the_untrained_encoder_beyond_the_seeds_noise():
    """Notebook 03's "the runs learned": better than the same encoder untrained, by more than
    twice the larger standard deviation over the seeds, for fp32 and for fp16 alike."""
    import pandas as pd

    from chapter20.labs.nb03_precision import learned

    def summary(fp16_mean):
        return pd.DataFrame(
            {"arm": ["untrained", "fp32", "fp16"], "recall@10_mean": [0.05, 0.07, fp16_mean],
             "recall@10_std": [0.004, 0.002, 0.002]}
        )  # fmt: skip

    assert learned(summary(0.069))
    assert not learned(summary(0.055))  # above the untrained mean, within twice its spread


def test_quality_agreement_compares_the_untrained_start_and_the_loss_at_the_live_step():
    import pandas as pd

    from chapter20.labs.nb03_precision import LIVE_LOSS, quality_agreement

    scores = {"recall@1": 0.01, "recall@10": 0.05, "mrr": 0.02}
    judged = pd.DataFrame(
        {"arm": ["untrained", "fp32", "fp16", "fp32"], "seed": [0, 0, 0, 1],
         LIVE_LOSS: [None, 4.0, 4.0, 3.0], **scores}
    )  # fmt: skip
    live = judged.iloc[:3].assign(**{LIVE_LOSS: [None, 4.0, 4.004]})
    assert quality_agreement(live, judged) == (5, pytest.approx(1e-3))
    older = judged.drop(columns=LIVE_LOSS)  # a record without the loss: the start only
    assert quality_agreement(live, older) == (3, 0.0)
    moved = live.assign(mrr=[0.03, 0.02, 0.02])
    assert quality_agreement(moved, older)[1] == pytest.approx(0.5)


def test_the_committed_records_of_notebook_03_hold_every_arm_seed_and_batch():
    """The quality record keeps its three seeds, its control and the untrained encoder, with the
    loss the live run is checked against; the memory record both batches and precisions."""
    from chapter20.core.study_record import read_study
    from chapter20.labs.nb03_precision import (
        LIVE_LOSS,
        MEMORY_BATCHES,
        MEMORY_STUDY,
        QUALITY_ARMS,
        QUALITY_STUDY,
    )  # fmt: skip

    quality = read_study(QUALITY_STUDY)
    assert set(zip(quality["arm"], quality["seed"])) == {
        (arm, seed) for arm in QUALITY_ARMS for seed in (0, 1, 2)
    }
    if LIVE_LOSS in quality:
        assert quality.loc[quality["arm"] != "untrained", LIVE_LOSS].notna().all()
    memory = read_study(MEMORY_STUDY)
    assert set(zip(memory["batch"], memory["precision"])) == {
        (b, p) for b in MEMORY_BATCHES for p in ("fp32", "bf16")
    }


def test_speed_prediction_names_what_this_hardware_offers():
    from chapter20.techniques.precision import speed_prediction

    assert "tensor cores" in speed_prediction("cuda")
    cpu = speed_prediction("cpu")
    assert torch.backends.cpu.get_cpu_capability() in cpu and "fp32" in cpu
