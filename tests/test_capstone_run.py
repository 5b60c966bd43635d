"""The capstone run (chapter20.capstone.run, scripts/train.py): plan and cost before training,
training through the composed step in the resumable loop, evaluation, the encoder file, and a
resumed / killed / preempted run ending bitwise equal to a clean one (§20.6)."""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from script_process import run_as_main

from chapter20.capstone.capstone_config import CAPSTONE_TRAINING, CapstoneConfig
from chapter20.capstone.report import cost_projection, memory_plan
from chapter20.capstone.run import parse_args, run_capstone
from chapter20.cli.main import main as chapter20_main
from chapter20.core.models import WeightedBagEncoder
from chapter20.core.paths import repo_root
from chapter20.techniques.distributed import preloaded_process_context
from chapter20.training.driver import FinishedRun
from chapter20.training.encoder_file import load_encoder
from chapter20.training.loop import LoopConfig, StoppedLaunch, read_progress
from chapter20.training.preemption import EXIT_PREEMPTED
from chapter20.training.run_config import SUMMARY_FILE

# Small enough for seconds: 8 steps of 32 documents, a 32-wide table, checkpoints every 2 steps.
TINY = dict(dim=32, steps=8, batch=32, eval_every=4, eval_pairs=100, progress=False,
            training=replace(CAPSTONE_TRAINING, warmup_steps=2),
            loop=LoopConfig(checkpoint_every=2))  # fmt: skip
TINY_ARGS = ["--dim", "32", "--steps", "8", "--batch", "32", "--eval-every", "4",
             "--eval-pairs", "100", "--checkpoint-every", "2", "--warmup-steps", "2",
             "--no-progress", "--no-baselines"]  # fmt: skip


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """One uninterrupted tiny run, in this process: its result and what it printed."""
    lines: list[str] = []
    out = tmp_path_factory.mktemp("clean")
    result = run_capstone(CapstoneConfig(output_dir=str(out), **TINY), log=lines.append)
    assert isinstance(result, FinishedRun)
    return result, "\n".join(lines)


def test_the_run_prints_its_plan_and_cost_then_trains_evaluates_and_saves(clean):
    result, printed = clean
    summary = result.summary
    assert "memory plan of one step" in printed and "fits on one GPU of 80 GB" in printed
    assert "advice:" in printed
    assert "on demand:" in printed and "spot (median zone, preemptions):" in printed
    assert "SkyPilot catalog prices: aws 2023-12-13" in printed
    assert summary["steps"] == 8 and summary["resumed_from"] == 0
    assert [e["step"] for e in summary["evaluations"]] == [4, 8]
    final = summary["final"]
    assert -1 <= final["lee_pearson"] <= 1 and final["recall@1"] >= 0
    assert summary["measured_peak_bytes"] > 0
    # the plan is calibrated on this measurement (chapter20.techniques.memory_planner, the bag's
    # plan)
    assert 0.5 < summary["measured_peak_bytes"] / summary["planned_peak_bytes"] < 2
    on_file = json.loads(Path(result.summary_file).read_text())
    assert on_file == json.loads(json.dumps(summary, default=str))  # the file is the summary
    assert on_file["fingerprint"] == summary["fingerprint"] and "baselines" not in on_file
    assert on_file["config"]["steps"] == 8


def test_the_final_lines_say_what_the_start_provides_and_what_training_adds(clean):
    from chapter20.capstone.report import summary_lines

    summary = clean[0].summary
    start, final = summary["start"], summary["final"]
    assert set(start) >= {"lee_pearson", "mrr", "val_mrr", "alignment"}
    text = "\n".join(summary_lines(summary))
    added = final["lee_pearson"] - start["lee_pearson"]
    assert "the untrained start (Lee r): " in text and f"training adds {added:+.3f}" in text
    assert f"MRR {final['mrr']:.3f} (chance {final['chance_mrr']:.4f})" in text
    assert f"held-out recall@1 {final['recall@1']:.3f}" in text and "(held-out MRR)" in text
    assert summary["fingerprint"] in text  # the resume check compares it (scripts/train.py)
    assert summary["fingerprint"] not in "\n".join(summary_lines(summary, fingerprint=False))


def test_the_encoder_file_loads_without_training_state_and_encodes_unit_rows(clean):
    encoder = load_encoder(clean[0].summary["encoder_file"])
    assert isinstance(encoder.model, WeightedBagEncoder)
    vectors = encoder.encode(["Bushfires are burning near Sydney.", "The Democrats met."])
    assert vectors.dtype == torch.float32 and vectors.shape == (2, 32)
    torch.testing.assert_close(vectors.norm(dim=1), torch.ones(2))
    with pytest.raises(ValueError, match="empty"):
        encoder.encode([])
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        encoder.encode(["a text", 3])


def test_the_plan_follows_the_techniques(tmp_path):
    model = WeightedBagEncoder(1000, 32)
    base = CapstoneConfig(output_dir=str(tmp_path), dim=32, batch=64)
    plain = memory_plan(base, model)
    cached = memory_plan(replace(base, training=replace(base.training, chunk_size=8)), model)
    policy = replace(base.training, activation_checkpointing="every_layer")
    recomputed = memory_plan(replace(base, training=policy), model)
    assert cached.components["activations"] < plain.components["activations"]
    assert recomputed.components["activations"] < plain.components["activations"]
    shard = replace(base.training, sharded_table=True)
    sharded = memory_plan(replace(base, training=shard), model, world_size=2)
    assert sharded.components["parameters"] < plain.components["parameters"]


def test_the_cost_projection_fits_the_planned_step_and_spot_is_cheaper_on_its_type():
    projection = cost_projection(gpus=8)
    on_demand, spot = projection["on_demand"], projection["spot"]
    for option in (on_demand, spot):
        assert option["gpus"] == 8
        assert option["gpu_memory_gib"] * 2**30 >= projection["planned_peak_bytes"]
    # the cheapest spot type costs less on spot than on demand (another type may be cheaper
    # on demand: the projection picks the cheapest of each kind)
    assert spot["cost"] < spot["on_demand_cost_same_type"]
    assert on_demand["cost"] <= spot["on_demand_cost_same_type"]
    assert projection["snapshot"].startswith("SkyPilot catalog prices: aws 2023-12-13")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("model", "lstm", "model"),
        ("training", replace(CAPSTONE_TRAINING, sharded_table=True), "sharded_table"),
        ("steps", 0, "steps"),
        ("training", {"optimizer": "adam9"}, "training"),
        ("loop", None, "loop"),
    ],
)
def test_bad_run_settings_are_refused(tmp_path, field, value, message):
    extra = {"model": "transformer"} if message == "sharded_table" else {}  # the bag's table
    with pytest.raises((ValueError, TypeError), match=message):
        CapstoneConfig(output_dir=str(tmp_path), **{**extra, field: value})


def test_linear_lr_scaling_and_every_k_checkpointing_reach_the_train_config(tmp_path):
    training = replace(CAPSTONE_TRAINING, lr=1e-3, activation_checkpointing="every_k",
                       activation_checkpointing_k=2)  # fmt: skip
    config = CapstoneConfig(output_dir=str(tmp_path), batch=1024, training=training,
                            model="transformer")  # fmt: skip
    train = config.train_config()
    assert train.base_batch == 512 and train.global_batch == 1024
    assert train.peak_lr == pytest.approx(2e-3) and train.warmup_steps == training.warmup_steps
    assert (train.activation_checkpointing, train.activation_checkpointing_k) == ("every_k", 2)
    unscaled = replace(config, training=replace(training, base_batch=None))
    assert unscaled.train_config().peak_lr == pytest.approx(1e-3)


def _launch(args: list[str], **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = repo_root() / "chapter20" / "scripts" / "train.py"
    return subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=repo_root(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **kwargs)  # fmt: skip


@pytest.mark.slow  # the resumable loop's kill and SIGTERM paths are proven in test_spot
def test_killed_then_preempted_launches_resume_to_the_clean_fingerprint(clean, tmp_path):
    """Launch 1 SIGKILLs itself (--chaos-kills 1); launch 2 gets SIGTERM mid-run, checkpoints and
    exits 143; the last launch (in this process) finishes: bitwise the uninterrupted run."""
    args = [*TINY_ARGS, "--output-dir", str(tmp_path), "--chaos-kills", "1", "--step-delay", "0.2"]
    first = _launch(args)
    output = first.communicate(timeout=300)[0]
    assert first.returncode == -signal.SIGKILL, output
    second = _launch(args)
    deadline = time.monotonic() + 300
    while not any(r.get("launch") == 1 for r in read_progress(tmp_path / "checkpoints")):
        assert second.poll() is None and time.monotonic() < deadline, second.communicate()[0]
        time.sleep(0.05)
    second.send_signal(signal.SIGTERM)
    output = second.communicate(timeout=120)[0]
    assert second.returncode == EXIT_PREEMPTED, output
    config, _ = parse_args(args)
    last = run_capstone(config, log=lambda *_: None).summary
    assert last["resumed_from"] > 0
    assert last["fingerprint"] == clean[0].summary["fingerprint"]


def _torchrun(script: str, argv: list[str], log: str, environment: dict) -> None:
    """torchrun's elastic agent (``elastic_launch``, what the ``torchrun`` command runs), 2
    workers, one restart, in a process of the ranks' fork server (PyTorch already imported);
    the workers are forked from it once it has imported the capstone, so no worker or restart
    starts a fresh interpreter. Each runs ``scripts/train.py`` as ``__main__`` (its output in
    ``log``). The SIGKILL, the restart, the rendezvous and the process group are the real ones."""
    os.environ.clear()
    os.environ.update(environment)  # the workers' own variables (RANK, ...) come on top
    import gensim.test.utils  # noqa: F401  the corpora's location
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    import chapter20.capstone.run  # noqa: F401

    torch.set_num_threads(1)  # a forked worker must not inherit an OpenMP thread team
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, rdzv_backend="c10d",
                          rdzv_endpoint="localhost:0", run_id=str(uuid.uuid4()), max_restarts=1,
                          monitor_interval=0.05, start_method="fork")  # fmt: skip
    elastic_launch(config, run_as_main)(script, argv, log)


def test_two_processes_under_torchrun_survive_a_kill_with_a_sharded_table(tmp_path):
    """torchrun's agent, 2 processes (gloo), one elastic restart after rank 0's SIGKILL:
    cross-rank negatives, gradient caching and the table's rows split over the ranks (saved
    through DCP); the encoder file holds the whole table."""
    args = [*TINY_ARGS, "--output-dir", str(tmp_path), "--sharded-table", "--chunk-size", "8",
            "--chaos-kills", "1", "--patience", "none"]  # fmt: skip
    script = str(repo_root() / "chapter20" / "scripts" / "train.py")
    log = tmp_path / "train.log"
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    agent = preloaded_process_context().Process(
        target=_torchrun, args=(script, args, str(log), environment)
    )
    agent.start()
    agent.join(timeout=600)
    assert agent.exitcode == 0, log.read_text()[-3000:] if log.exists() else "no output"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 8 and summary["resumed_from"] > 0
    assert [e["step"] for e in summary["evaluations"]] == [4, 8]
    assert load_encoder(summary["encoder_file"]).encode(["one text"]).shape == (1, 32)
    assert len(json.loads((tmp_path / "checkpoints" / "chaos.json").read_text())["kills"]) == 1


def test_the_command_line_maps_every_flag(tmp_path):
    config, args = parse_args([*TINY_ARGS, "--output-dir", str(tmp_path), "--precision", "bf16",
                               "--no-cross-rank-negatives", "--optimizer", "adamw8bit",
                               "--chunk-size", "4", "--activation-checkpointing", "every_layer",
                               "--base-batch", "none", "--sharded-table",
                               "--no-state-32bit-tables", "--chaos-kills", "2"])  # fmt: skip
    training = config.training
    assert (training.precision, training.cross_rank_negatives, training.optimizer) == (
        "bf16", False, "adamw8bit")  # fmt: skip
    assert (training.chunk_size, training.activation_checkpointing, training.base_batch) == (
        4, "every_layer", None)  # fmt: skip
    assert training.sharded_table and not training.state_32bit_tables and not args.baselines
    assert (config.steps, config.batch, config.output_dir) == (8, 32, str(tmp_path))
    assert (config.loop.checkpoint_every, config.loop.chaos_kills) == (2, 2)
    assert (training.temperature, training.symmetric) == (0.2, True)  # the recipe's defaults


@pytest.mark.parametrize(
    "argv, message",
    [(["--steps", "0"], "steps must be"), (["--precision", "fp8"], "invalid choice"),
     (["--activation-checkpointing", "every_k"], "activation_checkpointing_k")],
)  # fmt: skip
def test_a_bad_flag_is_one_line_and_exit_status_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and message in err[-1] and "Traceback" not in "".join(err)


def test_stop_after_prints_how_to_resume_and_the_resumed_run_ends_at_the_clean_fingerprint(
    clean, tmp_path, capsys, monkeypatch
):
    """scripts/train.py --stop-after 3 (the script run as ``__main__`` in this process, as the
    torchrun test's workers run it; the slow kill test launches it as a fresh process) and
    ``chapter20 train --stop-after 1`` each end normally printing StoppedLaunch.lines() and
    writing no summary; ``chapter20 train`` without it then resumes from the last checkpoint
    (step 2) and finishes: bitwise the uninterrupted run, with its evaluations."""

    args = [*TINY_ARGS, "--output-dir", str(tmp_path)]
    checkpoints = str(tmp_path / "checkpoints")
    script = repo_root() / "chapter20" / "scripts" / "train.py"
    monkeypatch.setattr(sys, "argv", [str(script), *args, "--stop-after", "3"])
    capsys.readouterr()
    runpy.run_path(str(script), run_name="__main__")  # raises (exit status 1) on an error
    output = "\n".join(capsys.readouterr())
    assert "\n".join(StoppedLaunch(3, None, checkpoints).lines()) in output
    assert "Traceback" not in output and not (tmp_path / SUMMARY_FILE).exists()
    assert chapter20_main(["train", *args, "--stop-after", "1"]) == 0  # resumes from step 2
    out = capsys.readouterr().out
    assert "\n".join(StoppedLaunch(3, 2, checkpoints).lines()) in out
    assert not (tmp_path / SUMMARY_FILE).exists()  # a stopped launch writes no summary
    assert "to resume: run the same command again without --stop-after" in out
    assert chapter20_main(["train", *args]) == 0
    fingerprint = clean[0].summary["fingerprint"]
    assert f"resumed from step 2; fingerprint {fingerprint}" in capsys.readouterr().out
    resumed = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert (resumed["fingerprint"], resumed["resumed_from"]) == (fingerprint, 2)
    assert [e["step"] for e in resumed["evaluations"]] == [4, 8]


@pytest.mark.parametrize("where", ["proc", "below a file"])
def test_an_output_dir_that_cannot_be_created_is_one_line_and_exit_status_2(
    where, tmp_path, capsys
):
    if where == "proc":
        if not Path("/proc/self").exists():
            pytest.skip("no /proc on this system")
        output_dir = "/proc/forbidden/x"
    else:
        (tmp_path / "file").write_text("")
        output_dir = str(tmp_path / "file" / "x")
    with pytest.raises(SystemExit) as exit_:
        chapter20_main(["train", "--output-dir", output_dir, "--steps", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"chapter20 train: error: --output-dir {output_dir}: cannot be")


def test_summary_json_is_written_once_with_the_baselines(tmp_path, monkeypatch, capsys):
    """``chapter20 train --baselines``: the baselines are printed beside the encoder and are in
    summary.json, which is written once (a second write, e.g. adding them afterwards, fails)."""
    import pandas as pd

    from chapter20.capstone import baselines

    figures = {"lee_pearson": 0.5, "recall@1": 0.06, "recall@10": 0.2, "mrr": 0.11}
    frame = pd.DataFrame([
        {"method": "lsi", "corpus": "training text", "seed": 0,
         "settings": {"lsi_topics": 7}, **figures},
        {"method": "bm25", "corpus": "training text", "seed": 0,
         "settings": {"bm25_k1": 0.6, "bm25_b": 0.75},
         **{**figures, "lee_pearson": float("nan"), "mrr": 0.14}},
    ])  # fmt: skip
    monkeypatch.setattr(baselines, "baseline_table", lambda **_: frame)
    writes, write_text = [], Path.write_text

    def counted(path, *args, **kwargs):
        if path.name == SUMMARY_FILE:
            writes.append(path)
        return write_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", counted)
    args = [a for a in TINY_ARGS if a != "--no-baselines"] + ["--steps", "4"]  # one evaluation
    assert chapter20_main(["train", *args, "--output-dir", str(tmp_path)]) == 0
    assert writes == [tmp_path / SUMMARY_FILE]
    out = capsys.readouterr().out.splitlines()
    first = out.index("baselines (measured now; every setting chosen on the validation pairs):")
    assert out[first + 2].split()[:2] == ["encoder", "training"]
    assert out[first + 3].split()[:2] == ["LSI-7", "training"]
    assert out[first + 4].split()[:6] == ["BM25", "(k1", "0.6,", "b", "0.75)", "training"]
    assert out[first + 4].split()[7] == "—"  # BM25 has no Lee score
    saved = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert out[first + 5] == (
        "the encoder against the tuned BM25 of the same text: held-out MRR "
        f"{saved['final']['mrr']:.3f} vs 0.140 ({saved['final']['mrr'] - 0.14:+.3f})"
    )
    assert [b["method"] for b in saved["baselines"]] == ["lsi", "bm25"]
    assert saved["baselines"][0]["settings"] == {"lsi_topics": 7}
