"""``make gpu-check`` (chapter20/scripts/gpu_check.py) and its record (chapter20.core.gpu_record):
the skip logic and the time budget, tested on a CPU with fake runners; the record's appender and
reader on a temporary file."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

from chapter20.core import gpu_record as gpu_log

SCRIPT = Path(__file__).resolve().parents[1] / "chapter20" / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("chapter20_gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _reasons(planned):
    return {step.name: reason for step, reason in planned}


def test_without_cuda_every_step_is_skipped(gpu_check):
    planned = gpu_check.plan(gpu_check.STEPS, False, lambda m: True, {"precision", "training"})
    assert set(_reasons(planned).values()) == {"no CUDA GPU"}
    names = [step.name for step, _ in planned]
    assert names[0] == "cuda tests" and "notebook 09_efficient_sampling" in names
    assert {"bench precision", "bench step-memory", "bench optimizers"} <= set(names)


def test_missing_packages_and_benchmarks_skip_only_their_steps(gpu_check):
    benchmarks = gpu_check.available_benchmarks() - {"training"}  # before issue 17 lands
    installed = lambda module: module not in ("gensim", "bitsandbytes")  # noqa: E731
    reasons = _reasons(gpu_check.plan(gpu_check.STEPS, True, installed, benchmarks))
    assert reasons["bench word2vec-gpu"] == "gensim not installed"
    assert reasons["notebook 09_efficient_sampling"] == "gensim not installed"
    assert reasons["bench optimizers"] == "bitsandbytes not installed"
    assert reasons["bench training"] == "no 'bench training' in this checkout"
    runs = [name for name, reason in reasons.items() if reason is None]
    assert runs == ["cuda tests", "bench precision", "bench step-memory",
                    "bench cost-throughput", "notebook 03_mixed_precision"]  # fmt: skip
    with_training = _reasons(
        gpu_check.plan(gpu_check.STEPS, True, lambda m: True, benchmarks | {"training"})
    )
    assert all(reason is None for reason in with_training.values())


def test_every_benchmark_step_names_a_registered_benchmark(gpu_check):
    known = gpu_check.available_benchmarks() | {"training"}
    benches = [s.command[4] for s in gpu_check.STEPS if s.command[3:4] == ("bench",)]
    assert benches and set(benches) <= known
    assert all(s.command[-1] == "--record" for s in gpu_check.STEPS if s.records_itself)


def test_steps_stop_when_the_budget_is_spent(gpu_check):
    now = [0.0]

    def runner(step, timeout):
        assert timeout > 0
        now[0] += 40.0  # every step takes 40 s
        return (None, "") if step.name == "bench step-memory" else (0, "3 passed, 1 skipped\n")

    planned = [(step, None) for step in gpu_check.STEPS]
    planned[1] = (planned[1][0], "bitsandbytes not installed")
    results = gpu_check.run_steps(planned, 80.0, runner, lambda: now[0])
    status = [(r["step"], r["status"]) for r in results]
    expected = [("cuda tests", "passed"), ("bench precision", "skipped"),
                ("bench step-memory", "timed out")]  # fmt: skip
    assert status[:3] == expected
    assert results[0]["detail"] == "3 passed, 1 skipped" and results[0]["seconds"] == 40.0
    assert results[1]["detail"] == "bitsandbytes not installed"
    assert all(r["status"] == "skipped" for r in results[3:])
    assert {r["detail"] for r in results[3:]} == {"time budget spent"}


def test_main_on_a_cpu_runs_nothing_and_says_so(gpu_check, capsys, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: main would run the checks")
    monkeypatch.setattr(gpu_log, "append_gpu_measurements", pytest.fail)
    assert gpu_check.main([]) == 0
    out = capsys.readouterr().out
    assert "nothing to check here" in out and out.count("(no CUDA GPU)") == len(gpu_check.STEPS)


# --- the record ---------------------------------------------------------------------------------


def test_the_committed_record_has_the_documented_columns():
    frame = gpu_log.read_gpu_measurements()
    assert tuple(frame.columns) == gpu_log.COLUMNS
    assert gpu_log.gpu_measurements_path().name == "gpu_measurements.csv"


def test_append_then_read_round_trips_with_provenance(tmp_path):
    path = tmp_path / "gpu.csv"
    provenance = {"date": "2026-11-30", "device": "NVIDIA H200", "driver": "570.1",
                  "torch": "2.13.0 (CUDA 12.8)"}  # fmt: skip
    rows = [
        {"command": "python -m chapter20 bench word2vec-gpu", "quantity": "speed-up",
         "value": 12.5, "unit": "x", "notes": "gensim, 16 workers, ρ 0.21 vs 0.21"},
        {"command": "make gpu-check", "quantity": "step wall time", "value": 41, "unit": "s"},
    ]  # fmt: skip
    assert gpu_log.append_gpu_measurements(rows, provenance=provenance, path=path) == 2
    assert gpu_log.append_gpu_measurements(rows[:1], provenance=provenance, path=path) == 1
    frame = gpu_log.read_gpu_measurements(path)
    assert len(frame) == 3 and frame.value.tolist() == [12.5, 41.0, 12.5]
    assert set(frame.device) == {"NVIDIA H200"} and frame.notes[1] == ""
    assert frame.notes[0] == "gensim, 16 workers, ρ 0.21 vs 0.21"
    with open(path, encoding="utf-8") as f:
        assert next(csv.reader(f)) == list(gpu_log.COLUMNS)  # one header, at the top


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ({"command": "x", "quantity": "q", "unit": "s"}, "missing"),
        ({"command": "x", "quantity": "q", "value": "fast", "unit": "s"}, "value"),
        ({"command": "x", "quantity": "q", "value": float("nan"), "unit": "s"}, "value"),
        ({"command": "x", "quantity": "q", "value": 1, "unit": "s", "speed": 2}, "unknown"),
    ],
)
def test_a_bad_row_raises_and_writes_nothing(tmp_path, row, match):
    path = tmp_path / "gpu.csv"
    good = {"command": "x", "quantity": "q", "value": 1.0, "unit": "s"}
    with pytest.raises(ValueError, match=match):
        gpu_log.append_gpu_measurements([good, row], provenance={}, path=path)
    assert not path.exists()


def test_provenance_on_this_machine():
    import torch

    info = gpu_log.gpu_provenance()
    assert set(info) == {"date", "device", "driver", "torch"}
    assert info["torch"].startswith(torch.__version__)
    assert len(info["date"]) == 10 and info["date"][4] == "-"
    if not torch.cuda.is_available():
        assert info["device"] == "cpu (no CUDA)" and info["driver"] == "none"


def test_a_file_with_other_columns_is_rejected(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("date,device,value\n2026-01-01,x,1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="columns"):
        gpu_log.read_gpu_measurements(path)


# --- reading figures back (issue 18: GPU evidence as data) ----------------------------------------


def test_the_record_holds_the_gpu_figures_measured_so_far():
    frame = gpu_log.read_gpu_measurements()
    commands = " ".join(frame["command"])
    for needed in ("EMBEDDING_WORKLOAD", "bench precision", "bench step-memory", "ddp_demo",
                   "bench word2vec-gpu"):  # fmt: skip
        assert needed in commands, needed
    assert (frame["device"] == "NVIDIA H200").all() and (frame["date"] != "").all()


def test_gpu_figure_takes_the_newest_gpu_row_and_names_a_missing_quantity(tmp_path):
    path = tmp_path / "record.csv"
    row = {"command": "chapter20 bench precision", "quantity": "q", "value": 1.5, "unit": "×"}
    old = {"date": "2026-01-01", "device": "NVIDIA A100", "driver": "1", "torch": "2.9"}
    gpu_log.append_gpu_measurements([row], provenance=old, path=path)
    newer = {**old, "date": "2026-06-01"}
    gpu_log.append_gpu_measurements([{**row, "value": 2.5}], provenance=newer, path=path)
    cpu = {**old, "date": "2027-01-01", "device": "cpu (no CUDA)"}
    gpu_log.append_gpu_measurements([{**row, "value": 0.1}], provenance=cpu, path=path)
    figure = gpu_log.gpu_figure("q", path=path)
    assert (figure.value, figure.date) == (2.5, "2026-06-01")  # newest on a GPU, not the CPU row
    assert figure.provenance.startswith("NVIDIA A100, 2026-06-01, torch 2.9: chapter20 bench")
    with pytest.raises(ValueError, match="'nope'"):
        gpu_log.gpu_figure("nope", path=path)
    assert len(gpu_log.gpu_figures("bench precision", path=path)) == 3


def test_the_cost_models_h200_measurement_is_read_from_the_record():
    from chapter20 import cost

    frame = gpu_log.read_gpu_measurements()
    steps = frame[frame["quantity"].str.startswith("step seconds, ")]
    assert len(steps) == 10
    for row in steps.itertuples():
        _, precision, pairs = (part.strip() for part in row.quantity.split(","))
        assert cost.H200_MEASUREMENT.step_seconds[precision][int(pairs.split()[0])] == row.value
    assert cost.H200_MEASUREMENT.date == "2026-11-29"


def test_code_version_changes_exactly_when_the_measured_code_does(tmp_path, monkeypatch):
    version = gpu_log.code_version("word2vec")
    assert version.startswith("word2vec@") and len(version.split("@")[1]) == 12
    assert gpu_log.code_version("word2vec") == version  # deterministic
    assert gpu_log.code_version("training.trainer") != gpu_log.code_version("training.config")
    copy = tmp_path / "chapter20"
    (copy / "word2vec").mkdir(parents=True)
    source = gpu_log._PACKAGE / "word2vec" / "corpus.py"
    (copy / "word2vec" / "corpus.py").write_text(source.read_text())
    monkeypatch.setattr(gpu_log, "_PACKAGE", copy)
    before = gpu_log.code_version("word2vec")
    (copy / "word2vec" / "corpus.py").write_text(source.read_text() + "\n# a change\n")
    assert gpu_log.code_version("word2vec") != before
    with pytest.raises(ValueError, match="neither a module nor a folder"):
        gpu_log.code_version("no_such_module")


def test_a_verdict_reads_only_rows_of_the_current_code(tmp_path):
    path = tmp_path / "record.csv"
    gpu = {"date": "2026-01-01", "device": "NVIDIA H200", "driver": "1", "torch": "2"}
    row = {"command": "bench x", "quantity": "q", "value": 3.0, "unit": "×"}
    gpu_log.append_gpu_measurements(
        [{**row, "code": "word2vec@000000000000"}], provenance=gpu, path=path
    )
    assert gpu_log.current_gpu_figure("q", ("word2vec",), path=path) is None  # older code
    current = {**row, "value": 4.0, "code": gpu_log.code_version("word2vec")}
    gpu_log.append_gpu_measurements([current], provenance=gpu, path=path)
    assert gpu_log.current_gpu_figure("q", ("word2vec",), path=path).value == 4.0
    assert gpu_log.gpu_figure("q", path=path).value == 4.0  # the newest, whatever the code
