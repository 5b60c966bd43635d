"""§20.5.2 spot training: resume == uninterrupted, bitwise (the checkpoint interval model is
``tests/test_young_daly.py``).

Equivalence here is bitwise (fingerprints of every parameter's bytes): a resumed run replays
exactly the same float operations as one that never stopped, so any difference is a bug.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch
from script_process import start_script

from chapter20.core.paths import repo_root
from chapter20.demos.elastic_run import resume_at_other_world_size
from chapter20.demos.fault_injection import (
    damaged_newest,
    disk_full_during_save,
    two_writers,
    writer_faults,
)
from chapter20.demos.spot_run import (
    SPOT_TRAINING,
    SpotConfig,
    launch_spot_demo,
    run_spot_training,
)
from chapter20.techniques.distributed import run_local_group
from chapter20.training.checkpoints import SAVE_PHASES, CheckpointManager
from chapter20.training.config import TrainConfig
from chapter20.training.loop import LoopConfig, StoppedLaunch, read_progress
from chapter20.training.preemption import EXIT_PREEMPTED, CheckpointSchedule, PreemptionHandler
from chapter20.training.sampler import ResumableBatchSampler
from chapter20.training.state import (
    capture_state,
    parameter_fingerprint,
    restore_state,
    rng_state,
    set_rng_state,
)
from chapter20.training.trainer import Trainer

# --- RNG, components, data order ------------------------------------------------------------


def _draws():
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_rng_state_round_trip():
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    _draws()
    saved = rng_state()
    first = [_draws() for _ in range(3)]
    _draws()
    set_rng_state(saved)
    assert [_draws() for _ in range(3)] == first


def _mixed_precision_run(steps_before: int, steps_after: int, resume_from: dict | None = None):
    """fp16 with a GradScaler on CPU, an LR schedule, dropout and sampled batches: every
    component of the state matters. Returns the fingerprint and the state after
    ``steps_before`` steps (a resumed run passes 0 and the state to start from)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)

    def loss_fn(m, batch):
        return (m(batch[0]).float() - batch[1]).pow(2).mean(dim=1)

    config = TrainConfig(precision="fp16", init_scale=2.0**10)
    trainer = Trainer(model, config, loss=loss_fn, optimizer=optimizer, scheduler=scheduler)
    sampler = ResumableBatchSampler(37, 8, seed=5)
    x, y = torch.randn(37, 8), torch.randn(37, 1)
    parts = {"model": model, "optimizer": optimizer, "scheduler": scheduler}
    parts |= {"scaler": trainer.scaler, "sampler": sampler}
    if resume_from is not None:
        restore_state(resume_from, **parts)

    saved = None
    for step in range(1, steps_before + steps_after + 1):
        idx = sampler.next_batch()
        trainer.step((x[idx], y[idx]))
        if step == steps_before:
            # Through bytes, as a checkpoint file does: a state dict holds the live tensors.
            buffer = io.BytesIO()
            torch.save(capture_state(step, **parts), buffer)
            saved = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    return parameter_fingerprint(model), saved


def test_capture_and_restore_every_component_bitwise():
    uninterrupted, saved = _mixed_precision_run(5, 6)
    torch.manual_seed(123), random.seed(9)  # the new process starts from other RNG states
    resumed, _ = _mixed_precision_run(0, 6, resume_from=saved)
    assert resumed == uninterrupted
    assert saved["scaler"]["scale"] > 0 and saved["scheduler"]["last_epoch"] == 5


def test_restore_without_rng_differs():
    """The RNG states are needed: dropout masks after the resume would differ without them."""
    uninterrupted, saved = _mixed_precision_run(5, 6)
    saved["rng"] = [rng_state() | {"torch": torch.Generator().manual_seed(7).get_state()}]
    resumed, _ = _mixed_precision_run(0, 6, resume_from=saved)
    assert resumed != uninterrupted


def test_restore_needs_the_same_components():
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = capture_state(0, model=model, optimizer=optimizer)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    with pytest.raises(ValueError, match="scheduler"):
        restore_state(state, model=model, optimizer=optimizer, scheduler=scheduler)


@pytest.mark.parametrize("n, batch", [(37, 8), (16, 16), (10, 3)])
def test_sampler_resumes_exactly_across_epochs(n, batch):
    full = ResumableBatchSampler(n, batch, seed=3)
    reference = [full.next_batch().tolist() for _ in range(9)]
    first = ResumableBatchSampler(n, batch, seed=3)
    head = [first.next_batch().tolist() for _ in range(4)]
    second = ResumableBatchSampler(n, batch, seed=3)
    second.load_state_dict(first.state_dict())
    assert head + [second.next_batch().tolist() for _ in range(5)] == reference
    epoch0 = [i for b in reference[: n // batch] for i in b]
    assert len(set(epoch0)) == len(epoch0) == (n // batch) * batch  # no repeats in an epoch


def test_sampler_bad_input():
    with pytest.raises(ValueError, match="global_batch"):
        ResumableBatchSampler(5, 6)
    with pytest.raises(ValueError, match="num_examples"):
        ResumableBatchSampler(0, 1)
    other = ResumableBatchSampler(10, 2, seed=1)
    with pytest.raises(ValueError, match="seed"):
        ResumableBatchSampler(10, 2, seed=2).load_state_dict(other.state_dict())


def test_sampler_ranks_split_the_global_batch(two_ranks):
    single = ResumableBatchSampler(30, 6, seed=1)
    for step in range(7):
        assert sum((r["slices"][step] for r in two_ranks), []) == single.next_batch().tolist()


# --- checkpoint files -----------------------------------------------------------------------


def _state(step: int) -> dict:
    return {"step": step, "weights": torch.full((4,), float(step))}


def test_manager_round_trip_and_rotation(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=3)
    assert manager.load_latest() is None
    for step in (2, 4, 6, 8, 10):
        manager.save(_state(step))
    assert [p.name for p in manager.checkpoints()] == [
        "ckpt-000003-step-000000006.ckpt",
        "ckpt-000004-step-000000008.ckpt",
        "ckpt-000005-step-000000010.ckpt",
    ]
    latest = manager.load_latest()
    assert latest["step"] == 10 and torch.equal(latest["weights"], torch.full((4,), 10.0))


@pytest.mark.parametrize("keep_last", [1, 3])
def test_rotation_by_save_order_keeps_the_checkpoint_just_written(tmp_path, keep_last):
    """The run fell back past a damaged step-200 file and saves step 5: rotation by step number
    deleted step 5 at once (keep_last=1) or kept k-1 good files; by save order it cannot."""
    manager = CheckpointManager(tmp_path, keep_last=keep_last)
    for step in (100, 200):
        newest = manager.save(_state(step))
    newest.write_bytes(newest.read_bytes()[:-7])
    with pytest.warns(UserWarning, match="is damaged"):
        fallback = manager.load_latest()
    assert (fallback is None) == (keep_last == 1)  # keep_last=1: step 100 was rotated away
    written = manager.save(_state(5))
    assert written.exists() and manager.checkpoints()[-1] == written
    assert manager.load_latest()["step"] == 5
    expected = [5] if keep_last == 1 else [100, 5]
    assert [int(p.name[-14:-5]) for p in manager.checkpoints()] == expected


@pytest.mark.parametrize("damage", ["truncate", "flip_byte", "not_a_checkpoint", "empty"])
def test_damaged_newest_is_set_aside_and_the_previous_loaded(tmp_path, damage):
    manager = CheckpointManager(tmp_path, keep_last=3)
    manager.save(_state(1))
    newest = manager.save(_state(2))
    data = newest.read_bytes()
    damaged = {
        "truncate": data[: len(data) // 2],
        "flip_byte": data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:],
        "not_a_checkpoint": b"hello",
        "empty": b"",
    }[damage]
    newest.write_bytes(damaged)
    with pytest.warns(UserWarning, match=f"{newest.name} is damaged .*renamed to .*corrupt"):
        state = manager.load_latest()
    assert state["step"] == 1
    assert not newest.exists()
    assert newest.with_name(newest.name + ".corrupt").read_bytes() == damaged  # kept to inspect
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # set aside once: the next load does not warn again
        assert manager.load_latest()["step"] == 1


def test_a_valid_archive_that_is_not_a_training_state_is_set_aside(tmp_path):
    manager = CheckpointManager(tmp_path)
    path = manager.save(_state(1))
    buffer = io.BytesIO()
    torch.save([1, 2, 3], buffer)
    payload = buffer.getvalue()
    header = b"chapter20-checkpoint v1\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n"
    path.write_bytes(header + payload)  # intact file, checksum right, but no "step"
    with pytest.warns(UserWarning, match="not a training checkpoint"):
        assert manager.load_latest() is None


def test_torch_save_file_without_header_is_set_aside(tmp_path):
    """A checkpoint written by plain torch.save (no checksum) is not trusted silently."""
    manager = CheckpointManager(tmp_path)
    torch.save(_state(3), tmp_path / "ckpt-000001-step-000000003.ckpt")
    with pytest.warns(UserWarning, match="no checkpoint header"):
        assert manager.load_latest() is None


@pytest.mark.parametrize(
    "error", [RuntimeError("CUDA out of memory"), MemoryError(), OSError(5, "I/O error")]
)
def test_load_latest_raises_what_is_not_corruption(tmp_path, monkeypatch, error):
    """Out of memory or a device error on the newest good file must not silently resume from
    an older one: it is raised, and the file stays where it is."""
    manager = CheckpointManager(tmp_path)
    manager.save(_state(1))
    newest = manager.save(_state(2))

    def failing_load(*args, **kwargs):
        raise error

    monkeypatch.setattr(torch, "load", failing_load)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(type(error)):
            manager.load_latest()
    assert newest.exists() and not list(tmp_path.glob("*.corrupt"))


def test_save_refuses_state_that_weights_only_cannot_load_and_names_the_key(tmp_path):
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    manager = CheckpointManager(tmp_path)
    state = capture_state(3, model=model, optimizer=optimizer, loss=np.float64(0.5))
    with pytest.raises(TypeError, match=r"state\['extra'\]\['loss'\] is a numpy.float64"):
        manager.save(state)
    assert manager.checkpoints() == [] and not list(tmp_path.glob(".ckpt-*"))
    manager.save(capture_state(3, model=model, optimizer=optimizer, loss=0.5))
    assert manager.load_latest()["extra"] == {"loss": 0.5}


def test_every_torch_load_in_the_package_is_weights_only():
    import ast

    package = repo_root() / "chapter20"
    unsafe = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "load"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch"
            ):
                flags = {k.arg: k.value for k in node.keywords}
                value = flags.get("weights_only")
                if not (isinstance(value, ast.Constant) and value.value is True):
                    unsafe.append(f"{path.relative_to(package)}:{node.lineno}")
    assert unsafe == []


def test_leftover_temporary_files_are_removed(tmp_path):
    (tmp_path / ".ckpt-000004-step-000000004.ckpt.tmp-999").write_bytes(b"half")
    (tmp_path / "ckpt-000004-step-000000004.dcp").mkdir()  # a sharded part never committed
    CheckpointManager(tmp_path)
    assert [p.name for p in tmp_path.iterdir() if p.name != ".lock"] == []


def test_sharded_model_in_a_world_of_one_resumes_through_dcp(tmp_path):
    from chapter20.techniques.sharding import ShardedEmbedding

    def parts(seed):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(ShardedEmbedding(9, 3, seed=seed), torch.nn.Linear(3, 1))
        return model, torch.optim.AdamW(model.parameters(), lr=0.1)

    model, optimizer = parts(0)
    model(torch.arange(9)).sum().backward()
    optimizer.step()
    manager = CheckpointManager(tmp_path)
    manager.save(capture_state(1, model=model, optimizer=optimizer))
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".dcp"] == [
        "ckpt-000001-step-000000001.dcp"
    ]
    fresh, fresh_optimizer = parts(5)
    assert restore_state(manager.load_latest(), model=fresh, optimizer=fresh_optimizer) == 1
    assert parameter_fingerprint(fresh) == parameter_fingerprint(model)
    moments = [s["exp_avg"] for s in optimizer.state.values()]
    assert all(
        torch.equal(a, b)
        for a, b in zip(moments, [s["exp_avg"] for s in fresh_optimizer.state.values()])
    )


# --- the fault matrix: each fault injected for real, then the next run resumes ---------------


@pytest.fixture(scope="module")
def faulted(tmp_path_factory) -> dict:
    return writer_faults(tmp_path_factory.mktemp("faults"))


@pytest.mark.parametrize("phase", SAVE_PHASES)
def test_sigkill_at_each_phase_of_a_save_loses_nothing_saved(faulted, phase):
    result = faulted[f"SIGKILL {phase}"]
    assert result["exit"] == -signal.SIGKILL
    committed = phase == "after-rename"
    assert result["loaded_step"] == (3 if committed else 2) and result["loaded_intact"]
    assert result["warnings"] == []  # a cut-short save is never a candidate, not even a warning
    leftovers = [n for n in result["files_before"] if n.startswith(".ckpt")]
    assert bool(leftovers) == (phase in ("mid-write", "after-fsync"))
    # The next save rotates normally: the newest two by save order, the new one included.
    assert result["files_after_next_save"][-1].endswith("step-000000004.ckpt")
    assert len(result["files_after_next_save"]) == 2


def test_sigterm_during_a_save_lets_it_finish_then_exits_143(faulted):
    handled = faulted["SIGTERM mid-write, PreemptionHandler"]
    default = faulted["SIGTERM mid-write, default action"]
    assert handled["exit"] == EXIT_PREEMPTED == 143
    assert default["exit"] == -signal.SIGTERM  # the shell reports 128 + 15 = 143
    for result in (handled, default):
        assert result["loaded_step"] == 3 and result["loaded_intact"]  # the save completed
        assert not [n for n in result["files_before"] if n.startswith(".ckpt")]


@pytest.mark.parametrize("keep_last", [1, 3])
@pytest.mark.parametrize("damage", ["truncate", "corrupt"])
def test_damaged_newest_with_keep_last(tmp_path, keep_last, damage):
    result = damaged_newest(tmp_path, keep_last, damage)
    assert result["loaded_step"] == (None if keep_last == 1 else 2)
    assert any("is damaged" in w for w in result["warnings"])
    assert (tmp_path / "ckpt-000003-step-000000003.ckpt.corrupt").exists()
    expected = ["ckpt-000004-step-000000004.ckpt"]
    if keep_last == 3:
        expected = ["ckpt-000001-step-000000001.ckpt", "ckpt-000002-step-000000002.ckpt"] + expected
    assert result["files_after_next_save"] == expected


def test_disk_full_during_a_save_is_a_clear_error_and_keeps_the_previous(tmp_path):
    result = disk_full_during_save(tmp_path)
    assert result["errno"] == errno.ENOSPC
    assert "not saved" in result["error"] and "No space left on device" in result["error"]
    assert "still ckpt-000002-step-000000002.ckpt" in result["error"]
    assert result["files_before"] == [
        "ckpt-000001-step-000000001.ckpt",
        "ckpt-000002-step-000000002.ckpt",
    ]  # no temporary file left, nothing rotated
    assert result["loaded_step"] == 2 and result["loaded_intact"] and result["warnings"] == []


def test_two_processes_saving_into_one_directory_is_refused(tmp_path):
    result = two_writers(tmp_path)
    assert "another process (pid" in result["error"]
    assert "its own directory" in result["error"]
    assert result["saved_after_first_ended"] == "ckpt-000002-step-000000002.ckpt"


def test_resume_at_another_world_size_warns_and_continues_correctly(tmp_path):
    """Saved by 2 ranks (a sharded table through DCP), resumed by 3: a warning, and the
    continuation equals the uninterrupted 2-rank run bitwise (the model's training does not
    depend on the world size: the table's rows are copied, never summed differently)."""
    result = resume_at_other_world_size(tmp_path, first=2, second=3)
    assert result["resumed_from"] == [3, 3, 3]
    assert any("saved by 2 ranks, this run has 3" in w for w in result["warnings"])
    assert result["max_abs_difference"] == 0.0


# --- schedule and preemption notice ---------------------------------------------------------


def test_schedule_by_steps_and_by_time():
    by_steps = CheckpointSchedule(every_steps=3)
    assert [s for s in range(1, 10) if by_steps.due(s)] == [3, 6, 9]
    now = [0.0]
    by_time = CheckpointSchedule(every_seconds=10, clock=lambda: now[0])
    now[0] = 9.9
    assert not by_time.due(1)
    now[0] = 10.0
    assert by_time.due(2)
    by_time.saved()
    assert not by_time.due(3)
    with pytest.raises(ValueError, match="every_steps"):
        CheckpointSchedule()


def test_preemption_handler_catches_sigterm_and_restores_the_old_handler(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    with PreemptionHandler() as preemption:
        assert not preemption.should_stop()
        os.kill(os.getpid(), signal.SIGTERM)
        assert preemption.should_stop() and preemption.reason == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before
    notice = tmp_path / "notice"
    with PreemptionHandler(notice_file=notice) as preemption:
        assert not preemption.requested
        notice.touch()
        assert preemption.requested and "notice" in preemption.reason


# --- the training run: resume == uninterrupted ----------------------------------------------

DEMO = ["--steps", "12", "--checkpoint-every", "3", "--batch", "32"]
# The composed step: bf16, gradient caching, a learned temperature, bitsandbytes state.
COMPOSED = replace(
    SPOT_TRAINING, precision="bf16", chunk_size=4, learn_temperature=True, optimizer="adamw8bit"
)
COMPOSED_DEMO = ["--precision", "bf16", "--chunk-size", "4", "--learn-temperature"]
COMPOSED_DEMO += ["--optimizer", "adamw8bit"]


def _fast(directory, *, steps: int = 12, training=SPOT_TRAINING, **loop) -> SpotConfig:
    """12 steps of 32 pairs, checkpoints every 3 steps (``loop``: other LoopConfig fields)."""
    loop = LoopConfig(**{"checkpoint_every": 3, **loop})
    return SpotConfig(
        output_dir=str(directory), steps=steps, batch=32, training=training, loop=loop
    )


@pytest.fixture(scope="module")
def single_reference(tmp_path_factory) -> str:
    """The fingerprint of an uninterrupted single-process run (in this process)."""
    return run_spot_training(_fast(tmp_path_factory.mktemp("ref"))).fingerprint


def _two_rank_story(directory: str) -> dict:
    """On each of 2 gloo ranks: an uninterrupted run; a run stopped after step 10 (as if
    killed: the last checkpoint is step 9) and its resume; and sampler slices."""
    reference = run_spot_training(_fast(f"{directory}/a", training=COMPOSED))
    run_spot_training(_fast(f"{directory}/b", training=COMPOSED, stop_after=10))
    resumed = run_spot_training(_fast(f"{directory}/b", training=COMPOSED))
    sampler = ResumableBatchSampler(30, 6, seed=1)
    slices = [sampler.next_batch().tolist() for _ in range(7)]
    return {"reference": reference.summary, "resumed": resumed.summary, "slices": slices}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    directory = str(tmp_path_factory.mktemp("two"))
    return run_local_group(_two_rank_story, 2, (directory,), timeout_s=600)  # a loaded machine


def test_notice_file_saves_and_exits_with_the_documented_code(tmp_path):
    notice = tmp_path / "notice"
    notice.touch()
    config = _fast(tmp_path / "run", notice_file=str(notice))
    with pytest.raises(SystemExit) as exit_info:
        run_spot_training(config)
    assert exit_info.value.code == EXIT_PREEMPTED == 143
    state = CheckpointManager(config.checkpoint_dir).load_latest()
    assert state["step"] == 1  # saved right after the step that noticed


def test_resume_equals_uninterrupted_single_process(tmp_path, single_reference):
    stopped = run_spot_training(_fast(tmp_path, stop_after=7))
    assert stopped.stopped_at == 7  # killed after step 7: the last checkpoint is step 6
    resumed = run_spot_training(_fast(tmp_path))
    assert resumed.summary["resumed_from"] == 6
    assert resumed.fingerprint == single_reference


def test_resume_equals_uninterrupted_two_gloo_ranks(two_ranks):
    fingerprints = {r[key]["fingerprint"] for r in two_ranks for key in ("reference", "resumed")}
    assert len(fingerprints) == 1
    assert [r["resumed"]["resumed_from"] for r in two_ranks] == [9, 9]


def _fingerprint(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split("fingerprint ")[-1].strip()


@pytest.mark.slow  # notebook 07 proves the same (2 ranks, 3 kills, bitwise equal) under nbval
def test_demo_under_torchrun_restarts_survives_three_kills(tmp_path, two_ranks):
    """2 processes under torchrun, rank 0 SIGKILLed 3 times, torchrun restarting the group: the
    composed trainer ends with the parameters of the uninterrupted 2-rank run (one thread per
    rank in both)."""
    chaos_args = [*DEMO, *COMPOSED_DEMO, "--output-dir", str(tmp_path), "--chaos-kills", "3"]
    chaotic = launch_spot_demo(chaos_args, nproc=2, max_restarts=4)
    assert _fingerprint(chaotic) == two_ranks[0]["reference"]["fingerprint"]
    checkpoints = tmp_path / "checkpoints"
    kills = json.loads((checkpoints / "chaos.json").read_text())["kills"]
    assert len(kills) == 3
    assert sum("kill" in r for r in read_progress(checkpoints)) == 3


@pytest.mark.slow  # the torchrun-restart test and notebook 07 cover resuming after a kill
def test_demo_under_a_relaunch_loop_survives_a_kill(tmp_path, single_reference):
    script = [sys.executable, "chapter20/scripts/spot_demo.py", *DEMO, "--chaos-kills", "1"]
    script += ["--output-dir", str(tmp_path)]
    codes = []
    for _ in range(4):
        result = subprocess.run(script, cwd=repo_root(), capture_output=True, text=True)
        codes.append(result.returncode)
        if result.returncode == 0:
            break
    assert codes == [-signal.SIGKILL, 0]
    assert _fingerprint(result) == single_reference


def test_demo_stop_after_says_where_it_stopped_and_resumes_to_the_uninterrupted_end(
    tmp_path, single_reference, capsys, monkeypatch
):
    """``spot_demo.py --stop-after 7`` (the README's command line; the script run as
    ``__main__`` in this process, the SIGTERM test launches the same file as a process): it ends
    normally printing the lines of the StoppedLaunch; the same arguments without it (the
    script's ``main``) resume from step 6 (the last checkpoint before the stop) and end bitwise
    equal to the uninterrupted run (this process's), writing the summary once."""
    import runpy

    from chapter20.demos import spot_run

    args = [*DEMO, "--output-dir", str(tmp_path)]
    checkpoints, summary = str(tmp_path / "checkpoints"), tmp_path / "summary.json"
    script = repo_root() / "chapter20" / "scripts" / "spot_demo.py"
    monkeypatch.setattr(sys, "argv", [str(script), *args, "--stop-after", "7"])
    capsys.readouterr()
    runpy.run_path(str(script), run_name="__main__")  # raises (exit status 2) on an error
    stopped = capsys.readouterr().out
    assert stopped.splitlines() == StoppedLaunch(7, None, checkpoints).lines()
    assert "stopped after step 7" in stopped and checkpoints in stopped
    assert not summary.exists()  # only a finished run writes its summary
    spot_run.main(args)
    assert capsys.readouterr().out.splitlines() == [
        f"done: 12 steps on 1 process(es), resumed from step 6; fingerprint {single_reference}"
    ]
    assert json.loads(summary.read_text())["fingerprint"] == single_reference


def test_a_cosine_schedule_ends_at_the_runs_steps_without_total_steps():
    """``--schedule cosine`` with ``--steps`` only: the spot and DDP demos' step decays to 0 at
    their last step; ``--total-steps`` still overrides it."""
    from chapter20.demos import ddp_run, spot_run

    spot = spot_run.parse_args(["--output-dir", "x", "--steps", "30", "--schedule", "cosine"])
    assert spot.train_config().total_steps == 30
    ddp = ddp_run.parse_args(["--steps", "12", "--schedule", "cosine", "--total-steps", "40"])
    assert ddp.train_config().total_steps == 40
    trainer = Trainer(torch.nn.Embedding(4, 2), spot.train_config())
    assert trainer.scheduler.lr_lambdas[0](30) == pytest.approx(0.0, abs=1e-12)
    assert trainer.scheduler.lr_lambdas[0](29) > 0


def test_demo_sigterm_checkpoints_and_exits_within_a_bound(tmp_path):
    directory = tmp_path / "run" / "checkpoints"
    args = [*DEMO, "--steps", "400", "--step-delay", "0.05", "--checkpoint-every", "100"]
    script = repo_root() / "chapter20" / "scripts" / "spot_demo.py"
    log = tmp_path / "demo.log"
    child = start_script(script, [*args, "--output-dir", tmp_path / "run"], log)
    deadline = time.monotonic() + 300  # the start-up (under load); the bound below is the exit
    while len(read_progress(directory)) < 5:
        assert time.monotonic() < deadline and child.is_alive(), log.read_text()
        time.sleep(0.05)
    sent = time.monotonic()
    child.terminate()  # SIGTERM
    child.join(timeout=30)
    assert child.exitcode == EXIT_PREEMPTED, log.read_text()
    assert time.monotonic() - sent < 5.0  # one step (50 ms) plus a save, with a wide margin
    state = CheckpointManager(directory).load_latest()
    assert state["step"] == read_progress(directory)[-1]["step"] >= 5


@pytest.mark.cuda
def test_resume_equals_uninterrupted_on_cuda(tmp_path):
    """The CUDA RNG state is saved and restored too (token dropout stays on the CPU RNG, but a
    CUDA run must resume bit for bit all the same)."""
    cuda = torch.device("cuda")
    reference = run_spot_training(_fast(tmp_path / "a"), cuda)
    run_spot_training(_fast(tmp_path / "b", stop_after=7), cuda)
    resumed = run_spot_training(_fast(tmp_path / "b"), cuda)
    assert resumed.fingerprint == reference.fingerprint
    assert "cuda" in CheckpointManager(tmp_path / "b" / "checkpoints").load_latest()["rng"][0]


def test_training_runs_in_deterministic_mode_and_gives_the_threads_back(tmp_path, monkeypatch):
    """The loop trains under deterministic_mode (one thread, deterministic algorithms): the
    property that makes a resumed process sum like the uninterrupted one (issue 24)."""
    seen = []
    step = Trainer.step

    def spy(self, *args):
        seen.append((torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()))
        return step(self, *args)

    monkeypatch.setattr(Trainer, "step", spy)
    threads = torch.get_num_threads()
    run_spot_training(_fast(tmp_path / "a", steps=3))
    assert seen == [(1, True)] * 3
    assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()
    seen.clear()
    run_spot_training(_fast(tmp_path / "b", steps=3, deterministic=False))
    assert seen == [(threads, False)] * 3


# --- notebook 07's readings: the state's components, the restart time, the fault record -----


def test_state_table_lists_every_component_of_the_state():
    from chapter20.training.state import state_table

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    sampler = ResumableBatchSampler(10, 2, seed=0)
    table = state_table(capture_state(1, model=model, optimizer=optimizer, sampler=sampler))
    assert list(table["component"]) == [
        "step", "world_size", "model", "optimizer", "scheduler", "scaler", "sampler", "rng",
        "extra",
    ]  # fmt: skip
    rows = table.set_index("component")["holds"]
    assert rows["model"] == "2 tensors: weight, bias"
    assert rows["optimizer"].startswith("exp_avg, exp_avg_sq, step for 2 tensors")
    assert rows["scheduler"] == "none in this run" and "position=0" in rows["sampler"]
    assert rows["rng"] == "1 rank(s) × python, numpy, torch"
    with pytest.raises(TypeError, match="state"):
        state_table({"model": None})


def test_restart_seconds_measure_from_each_kill_to_the_next_step():
    from chapter20.demos.chaos_launch import restart_seconds

    progress = [
        {"launch": 0, "step": 1, "time": 0.0},
        {"kill": 1, "time": 1.0},
        {"launch": 1, "step": 1, "time": 4.5},
        {"launch": 1, "step": 2, "time": 5.0},
    ]
    assert restart_seconds(progress) == [3.5]
    assert restart_seconds(progress[:2]) == []  # no step after the kill: nothing measured


def test_fault_record_holds_every_row_of_the_matrix_and_every_row_holds():
    from chapter20.core.study_record import read_study
    from chapter20.labs.nb07_faults import FAULT_RECORD, FAULTS, LIVE_FAULTS

    record = read_study(FAULT_RECORD)
    assert list(record["fault"]) == [name for name, _ in FAULTS]
    assert (record["as required"] == "✓").all()
    assert set(LIVE_FAULTS) <= set(record["fault"])


def test_checked_fault_matrix_checks_its_live_rows_against_the_record(tmp_path, monkeypatch):
    import chapter20.labs.nb07_faults as faults

    live = [name for name, how in faults.FAULTS if how in ("damage", "disk")]
    monkeypatch.setattr(faults, "LIVE_FAULTS", tuple(live))
    monkeypatch.delenv("CHAPTER20_SCALE", raising=False)
    table, text = faults.checked_fault_matrix(tmp_path)
    first, recorded = text.splitlines()[:2]
    n = len(live)
    assert first == (
        f"live, injected in this run: {n} faults, {n} end as required, "
        f"{n} match the outcome on record ✓"
    )
    assert recorded.startswith(f"the other {len(faults.FAULTS) - n} rows: recorded ")
    assert text.splitlines()[-1].startswith("reproduce: ")
    assert sorted(table.loc[table["run"] == "live", "fault"]) == sorted(live)
    assert set(table["run"]) == {"live", "recorded"}
    assert len(table) == len(faults.FAULTS)


def test_checked_fault_matrix_marks_a_live_row_that_fails(tmp_path, monkeypatch):
    import chapter20.labs.nb07_faults as faults

    monkeypatch.setattr(faults, "LIVE_FAULTS", ("newest corrupt, keep_last=1",))
    monkeypatch.delenv("CHAPTER20_SCALE", raising=False)
    failed = faults.fault_matrix(tmp_path / "real", faults.LIVE_FAULTS).assign(
        **{"as required": "✗"}
    )
    monkeypatch.setattr(faults, "fault_matrix", lambda directory, chosen: failed)
    table, text = faults.checked_fault_matrix(tmp_path)
    assert text.startswith("live, injected in this run: 1 faults, 0 end as required, 1 match")
    assert text.splitlines()[0].endswith("✗")
    assert table.set_index("fault").loc["newest corrupt, keep_last=1", "as required"] == "✗"
