"""The fault matrix of notebook 07 (§20.5.2): every fault a checkpoint writer meets (SIGKILL at each
phase of a save, SIGTERM, a full disk, a damaged newest file, a second writer) and a sharded run
resumed at another world size, injected for real (``chapter20.demos.fault_injection``,
``chapter20.demos.elastic_run``): what the next run finds, as one table with a verdict per row;
the rows a notebook run does not inject are read from their dated record, and say so.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pandas as pd

from chapter20.core.device import size_scale
from chapter20.core.study_record import provenance_line, read_study, study_output, write_study
from chapter20.demos.elastic_run import resume_at_other_world_size
from chapter20.demos.fault_injection import (
    WRITER_FAULTS,
    damaged_newest,
    disk_full_during_save,
    two_writers,
    writer_faults,
)
from chapter20.training.checkpoints import SAVE_PHASES

__all__ = [
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
    ``CHAPTER20_SCALE`` >= 2. Returns the table (a column ``run``: ``live`` or ``recorded``) and
    what the reader needs to tell them apart: how many live faults end as required (✓ only when
    every live row does and matches the outcome on record for it), then, where rows are read
    from the record, when and on what they were recorded. A recorded row is shown, not checked."""
    everything = size_scale() >= 2
    live = fault_matrix(directory, None if everything else LIVE_FAULTS)
    record = read_study(FAULT_RECORD).set_index("fault")
    agree = sum(row.outcome == record.loc[row.fault, "outcome"] for row in live.itertuples())
    held = int((live["as required"] == "✓").sum())
    mark = "✓" if held == agree == len(live) else "✗"
    lines = [f"live, injected in this run: {len(live)} faults, {held} end as required, "
             f"{agree} match the outcome on record {mark}"]  # fmt: skip
    table = record.reset_index()[["fault", "outcome", "as required"]].assign(run="recorded")
    table = table.set_index("fault")
    table.loc[live["fault"], ["outcome", "as required"]] = live.set_index("fault").values
    table.loc[live["fault"], "run"] = "live"
    recorded = record[~record.index.isin(live["fault"])]
    if len(recorded):
        lines.append(f"the other {len(recorded)} rows: {provenance_line(recorded)}")
    return table.reset_index(), "\n".join(lines)


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
