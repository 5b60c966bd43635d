"""The fault matrix of notebook 07 (§20.5.2): every fault a checkpoint writer meets (SIGKILL at each
phase of a save, SIGTERM, a full disk, a damaged newest file, a second writer), injected for
real, and what the next run finds; and a sharded run resumed at another world size.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist

from chapter20.core.device import size_scale
from chapter20.core.paths import repo_root
from chapter20.demos import fault_writer
from chapter20.labs.common import read_study, study_output, write_study
from chapter20.techniques.distributed import preloaded_process_context, run_local_group
from chapter20.techniques.sharding import ShardedEmbedding
from chapter20.training.checkpoints import (
    SAVE_PHASES,
    CheckpointDirectoryBusyError,
    CheckpointManager,
)
from chapter20.training.sampler import ResumableBatchSampler
from chapter20.training.state import capture_state, restore_state

__all__ = [
    "WRITER_FAULTS",
    "writer_faults",
    "damaged_newest",
    "disk_full_during_save",
    "two_writers",
    "elastic_training",
    "resume_at_other_world_size",
    "FAULTS",
    "LIVE_FAULTS",
    "FAULT_RECORD",
    "fault_matrix",
    "checked_fault_matrix",
    "fault_matrix_benchmark",
]


# --------------------------------------------------------------------------------------------
# The fault matrix: each fault a checkpoint writer meets, injected for real
# --------------------------------------------------------------------------------------------

#: The writer processes that the faults strike: ``fault`` (two good saves, then a third that a
#: fault strikes at a phase) and ``hold`` (one save, then holds the directory until its standard
#: input closes).
_WRITER = "chapter20.demos.fault_writer"


def _child_env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _start_child(mode: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", _WRITER, mode, *map(str, args)],
        cwd=repo_root() or Path.cwd(),
        env=_child_env(),
        text=True,
        **kwargs,
    )


def _resume(directory: Path, keep_last: int) -> dict:
    """What the next run finds: files before and after it starts, the step it loads, the
    warnings, and the files after one more save (step 4)."""
    before = sorted(p.name for p in directory.iterdir() if p.name != ".lock")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager = CheckpointManager(directory, keep_last=keep_last)
        state = manager.load_latest()
    loaded = None if state is None else state["step"]
    intact = state is None or bool((state["w"] == float(loaded)).all())
    manager.save({"step": 4, "w": torch.full((50_000,), 4.0)})
    after = [p.name for p in manager.checkpoints()]
    manager.close()
    return {
        "files_before": before,
        "loaded_step": loaded,
        "loaded_intact": intact,
        "warnings": [str(w.message) for w in caught],
        "files_after_next_save": after,
    }


#: The writer faults: name -> (phase of the third save, what strikes there).
WRITER_FAULTS = {
    **{f"SIGKILL {phase}": (phase, "kill") for phase in SAVE_PHASES},
    "SIGTERM mid-write, PreemptionHandler": ("mid-write", "term-handled"),
    "SIGTERM mid-write, default action": ("mid-write", "term-default"),
}


def writer_faults(directory: str | Path, faults=tuple(WRITER_FAULTS), timeout: float = 120.0):
    """Run a writer process per fault in ``faults`` (all at once): two good saves, then the
    fault strikes the third (a SIGKILL at a phase of the save, or a SIGTERM in its middle);
    then resume each directory as the next run would (:func:`_resume`). Returns, per fault,
    the writer's exit status and what the resume found."""
    directory = Path(directory)
    # Forked from a server that has torch imported (a fresh interpreter per writer spent most
    # of its life importing torch); each writer is still its own process, killed for real.
    context = preloaded_process_context()
    children = {}
    for number, name in enumerate(faults):
        phase, action = WRITER_FAULTS[name]
        where = directory / str(number)
        where.mkdir(parents=True, exist_ok=True)
        argv = ["fault", str(where), phase, action, "2"]
        children[name] = (where, context.Process(target=fault_writer.main, args=(argv,)))
        children[name][1].start()
    results = {}
    for name, (where, child) in children.items():
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            raise TimeoutError(f"the writer of fault {name!r} did not finish in {timeout} s")
        results[name] = {"exit": child.exitcode, **_resume(where, 2)}
    return results


def damaged_newest(directory: str | Path, keep_last: int, damage: str = "truncate") -> dict:
    """Three saves, the newest then damaged (``"truncate"``: cut in half; ``"corrupt"``: one
    byte flipped); then the resume of the next run."""
    directory = Path(directory)
    manager = CheckpointManager(directory, keep_last=keep_last)
    for step in (1, 2, 3):
        newest = manager.save({"step": step, "w": torch.full((50_000,), float(step))})
    manager.close()
    data = newest.read_bytes()
    if damage == "truncate":
        newest.write_bytes(data[: len(data) // 2])
    elif damage == "corrupt":
        newest.write_bytes(data[:-100] + bytes([data[-100] ^ 0xFF]) + data[-99:])
    else:
        raise ValueError(f"damage must be 'truncate' or 'corrupt', got {damage!r}")
    return _resume(directory, keep_last)


@contextlib.contextmanager
def _disk_full_at(phase: str):
    """Make the next save's write fail with ENOSPC at ``phase``, as a full disk would."""
    import chapter20.training.checkpoints as checkpoints

    def fail(at: str) -> None:
        if at == phase:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    original, checkpoints._fault_point = checkpoints._fault_point, fail
    try:
        yield
    finally:
        checkpoints._fault_point = original


def disk_full_during_save(directory: str | Path) -> dict:
    """Two saves, then a third whose write hits ENOSPC half-way: the error it raises, the files
    left, and the resume of the next run."""
    directory = Path(directory)
    manager = CheckpointManager(directory, keep_last=2)
    for step in (1, 2):
        manager.save({"step": step, "w": torch.full((50_000,), float(step))})
    error = None
    with _disk_full_at("mid-write"):
        try:
            manager.save({"step": 3, "w": torch.full((50_000,), 3.0)})
        except OSError as exc:
            error = exc
    manager.close()
    return {
        "error": None if error is None else f"{type(error).__name__}: {error}",
        "errno": None if error is None else error.errno,
        **_resume(directory, 2),
    }


def two_writers(directory: str | Path, timeout: float = 120.0) -> dict:
    """A second process saving into a directory that a running process writes: the error it
    gets; then, once the first process has ended, its save."""
    directory = Path(directory)
    holder = _start_child("hold", directory, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        if holder.stdout.readline().strip() != "saved":
            raise RuntimeError("the first writer did not start")
        error = None
        manager = CheckpointManager(directory)
        try:
            manager.save({"step": 2, "w": torch.zeros(4)})
        except CheckpointDirectoryBusyError as exc:
            error = str(exc)
    finally:
        holder.communicate(input="", timeout=timeout)
    saved_after = manager.save({"step": 2, "w": torch.zeros(4)}).name
    manager.close()
    return {"error": error, "saved_after_first_ended": saved_after}


# A model whose training does not depend on the world size: a sharded table with replicated
# inputs (every rank sees the global batch, rows owned by one rank each) and a linear head.
_ELASTIC = {"vocab": 23, "dim": 4, "examples": 60, "tokens": 5, "global_batch": 6}


def _elastic_parts() -> dict:
    torch.manual_seed(0)
    table = ShardedEmbedding(_ELASTIC["vocab"], _ELASTIC["dim"], seed=1)
    model = torch.nn.ModuleDict({"table": table, "head": torch.nn.Linear(_ELASTIC["dim"], 1)})
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    sampler = ResumableBatchSampler(_ELASTIC["examples"], _ELASTIC["global_batch"], seed=2)
    return {"model": model, "optimizer": optimizer, "sampler": sampler}


def _elastic_data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    shape = (_ELASTIC["examples"], _ELASTIC["tokens"])
    ids = torch.randint(0, _ELASTIC["vocab"], shape, generator=generator)
    return ids, torch.randn(_ELASTIC["examples"], 1, generator=generator)


def _global_batch(sampler: ResumableBatchSampler) -> torch.Tensor:
    mine = sampler.next_batch()
    if sampler.world_size == 1:
        return mine
    slices = [torch.empty_like(mine) for _ in range(sampler.world_size)]
    dist.all_gather(slices, mine)
    return torch.cat(slices)


def elastic_training(directory: str, steps: int, stop_after: int | None = None) -> dict:
    """Train the world-size-independent model to ``steps``, resuming from ``directory`` and
    saving every 3 steps (every rank calls it); ``stop_after`` ends it early without saving,
    as a lost node would. Returns the whole logical table, the head, the step it resumed from
    and the warnings of the resume."""
    parts = _elastic_parts()
    model, optimizer, sampler = parts["model"], parts["optimizer"], parts["sampler"]
    ids, targets = _elastic_data()
    manager = CheckpointManager(directory, keep_last=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = manager.load_latest()
        start = restore_state(state, **parts) if state is not None else 0
    for step in range(start + 1, steps + 1):
        batch = _global_batch(sampler)
        prediction = model["head"](model["table"](ids[batch]).mean(dim=1))
        loss = torch.nn.functional.mse_loss(prediction, targets[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 3 == 0:
            manager.save(capture_state(step, **parts))
        if step == stop_after:
            break
    manager.close()
    return {
        "table": model["table"].full_weight(),
        "head": [p.detach().clone() for p in model["head"].parameters()],
        "resumed_from": start,
        "warnings": [str(w.message) for w in caught],
    }


def _elastic_first_launch(directory: str, steps: int, stop_after: int) -> dict:
    reference = elastic_training(f"{directory}/reference", steps)
    elastic_training(f"{directory}/elastic", steps, stop_after)
    return reference


def resume_at_other_world_size(
    directory: str | Path, first: int = 2, second: int = 3, steps: int = 9, stop_after: int = 5
) -> dict:
    """Train on ``first`` ranks, lose the run after ``stop_after`` steps (newest checkpoint:
    step 3), resume on ``second`` ranks to ``steps``; and the same run uninterrupted on
    ``first`` ranks. Returns the largest difference between the two (tables, head) and the
    resumed run's warnings and start step."""
    directory = Path(directory)
    reference = run_local_group(_elastic_first_launch, first, (str(directory), steps, stop_after))[
        0
    ]
    resumed = run_local_group(elastic_training, second, (str(directory / "elastic"), steps))
    difference = max(float((r["table"] - reference["table"]).abs().max()) for r in resumed)
    for r in resumed:
        for got, expected in zip(r["head"], reference["head"]):
            difference = max(difference, float((got - expected).abs().max()))
    return {
        "max_abs_difference": difference,
        "resumed_from": [r["resumed_from"] for r in resumed],
        "warnings": resumed[0]["warnings"],
    }


_PHASE_NAMES = {
    "before-temporary": "before the temporary file",
    "mid-write": "mid-write",
    "after-fsync": "after fsync, before rename",
    "after-rename": "after rename, before rotation",
}


def _loaded(result: dict) -> str:
    step = result["loaded_step"]
    text = "no checkpoint: a fresh start" if step is None else f"step {step} loaded"
    return text if result["loaded_intact"] else text + " (VALUES WRONG)"


#: The rows of the matrix, in order: (fault, how it is injected).
FAULTS = (
    *[(f"SIGKILL {_PHASE_NAMES[phase]}", "writer") for phase in SAVE_PHASES],
    *[(f"newest {state}, keep_last={k}", "damage") for k in (1, 3)
      for state in ("truncated", "corrupt")],
    ("disk full (ENOSPC) mid-write", "disk"),
    *[(name, "writer") for name in tuple(WRITER_FAULTS)[len(SAVE_PHASES):]],
    ("resume at another world size (2 → 3 ranks)", "elastic"),
    ("two processes saving into one directory", "busy"),
)  # fmt: skip

#: The faults a notebook run injects live at the default size: the in-process ones and one
#: writer killed for real; the committed record holds the whole matrix.
LIVE_FAULTS = (
    "SIGKILL mid-write",
    *[name for name, how in FAULTS if how in ("damage", "disk")],
)

#: The committed record of the whole matrix under ``data/``.
FAULT_RECORD = "fault_matrix.csv"

_WRITER_NAMES = {f"SIGKILL {_PHASE_NAMES[phase]}": f"SIGKILL {phase}" for phase in SAVE_PHASES}


def _writer_row(name: str, result: dict) -> tuple[str, bool]:
    if name.startswith("SIGKILL"):
        expected = 3 if name.endswith("before rotation") else 2
        kept = len(result["files_after_next_save"])
        ok = (result["exit"] == -9 and result["loaded_step"] == expected
              and not result["warnings"] and result["loaded_intact"] and kept == 2)  # fmt: skip
        return f"{_loaded(result)}, no warning; the next save keeps {kept}", ok
    status = {143: "exit 143", -15: "ended by SIGTERM (shell: 143)"}.get(
        result["exit"], f"exit {result['exit']}"
    )
    ok = result["exit"] in (143, -15) and result["loaded_step"] == 3
    return f"the save completed, then {status}; {_loaded(result)}", ok


def _damage_row(directory: Path, name: str) -> tuple[str, bool]:
    keep_last = int(name.rsplit("=", 1)[1])
    damage = "truncate" if "truncated" in name else "corrupt"
    result = damaged_newest(directory / f"{damage}-{keep_last}", keep_last, damage)
    after = result["files_after_next_save"]
    ok = (result["loaded_step"] == (None if keep_last == 1 else 2)
          and len(result["warnings"]) == 1 and after[-1].endswith("step-000000004.ckpt")
          and len(after) == min(keep_last, 3))  # fmt: skip
    text = (
        f"set aside as .corrupt with a warning; {_loaded(result)}; the next save keeps {len(after)}"
    )
    return text, ok


def _other_row(directory: Path, how: str) -> tuple[str, bool]:
    if how == "disk":
        full = disk_full_during_save(directory / "full")
        ok = (full["errno"] == errno.ENOSPC and full["loaded_step"] == 2 and not full["warnings"]
              and not [n for n in full["files_before"] if n.startswith(".ckpt")])  # fmt: skip
        text = f"OSError errno {full['errno']} names the disk error; {_loaded(full)}, no leftovers"
        return text, ok
    if how == "elastic":
        elastic = resume_at_other_world_size(directory / "elastic", first=2, second=3)
        warned = any("saved by 2 ranks, this run has 3" in w for w in elastic["warnings"])
        text = (f"{'a warning' if warned else 'NO warning'}; resumed from step "
                f"{elastic['resumed_from'][0]}; max |Δ| vs uninterrupted = "
                f"{elastic['max_abs_difference']:.1e}")  # fmt: skip
        return text, warned and elastic["max_abs_difference"] == 0.0
    busy = two_writers(directory / "two")
    ok = busy["error"] is not None and busy["saved_after_first_ended"] is not None
    refused = "the second is refused (CheckpointDirectoryBusyError); it saves once the first ends"
    return refused if busy["error"] else "NOT refused", ok


def fault_matrix(directory: str | Path, faults=None) -> pd.DataFrame:
    """The faults of the matrix named in ``faults`` (default: every row of :data:`FAULTS`),
    injected for real, with what happened and whether it is what a spot run needs: the newest
    valid state loaded and nothing else lost (§20.5.2). Deterministic text only (no paths, no
    times), for notebook 07."""
    directory = Path(directory)
    chosen = [(name, how) for name, how in FAULTS if faults is None or name in faults]
    writers = [_WRITER_NAMES.get(name, name) for name, how in chosen if how == "writer"]
    results = writer_faults(directory / "writers", writers, timeout=600.0) if writers else {}
    rows = []
    for name, how in chosen:
        if how == "writer":
            outcome, ok = _writer_row(name, results[_WRITER_NAMES.get(name, name)])
        elif how == "damage":
            outcome, ok = _damage_row(directory, name)
        else:
            outcome, ok = _other_row(directory, how)
        rows.append({"fault": name, "outcome": outcome, "as required": "✓" if ok else "✗"})
    return pd.DataFrame(rows)


def checked_fault_matrix(directory: str | Path) -> tuple[pd.DataFrame, str]:
    """Notebook 07's fault matrix: :data:`LIVE_FAULTS` injected now and the other rows from the
    committed record (``data/fault_matrix.csv``), every row live when
    ``CHAPTER20_SCALE`` >= 2. Returns the table (a column ``run``: this run or the record) and
    one line that checks each live row's outcome against its row of the record."""
    everything = size_scale() >= 2
    live = fault_matrix(directory, None if everything else LIVE_FAULTS)
    record = read_study(FAULT_RECORD).set_index("fault")
    agree = [row.outcome == record.loc[row.fault, "outcome"] for row in live.itertuples()]
    line = (f"{sum(agree)} of {len(live)} faults injected now give the recorded outcome "
            f"(tolerance: identical text) {'✓' if all(agree) else '✗'}")  # fmt: skip
    table = record.reset_index()[["fault", "outcome", "as required"]].assign(run="record")
    table = table.set_index("fault")
    table.loc[live["fault"], ["outcome", "as required"]] = live.set_index("fault").values
    table.loc[live["fault"], "run"] = "this run"
    when = f"the record: measured {record['measured_on'].iloc[0]} on {record['machine'].iloc[0]}"
    return table.reset_index(), f"{line}; {when}"


def fault_matrix_benchmark(out: str = "") -> None:
    """``python -m chapter20 bench faults``: every fault of notebook 07's matrix injected for
    real (§20.5.2); with ``--out`` (or ``CHAPTER20_STUDY_OUT``) the table is written as the
    committed record the notebook reads (:func:`checked_fault_matrix`)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        frame = fault_matrix(tmp)
    print(frame.to_string(index=False))
    if study_output(out):
        command = "chapter20 bench faults"
        print("written:", write_study(frame, study_output(out), command))
