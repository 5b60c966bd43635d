"""What several labs share (ARCHITECTURE.md): the reading of the quality runs of notebooks 02, 03
and 05 (their run itself is ``chapter20.training.pair_training.heldout_run``), the reading of a
timing table, the committed records of heavy studies.

:func:`gain_over_untrained` reads a quality comparison against the untrained encoder.
:func:`timing_columns` and :func:`compare_times` put a timed variant's median with its
repeats' spread (min–max, the one convention of ``chapter20.core.seed_statistics``) in a table
and print how it compares with a reference, from that run's numbers (``chapter20.core.findings``).

A study too heavy for a notebook's minute runs behind ``chapter20 bench``; with ``--out`` (or
``CHAPTER20_STUDY_OUT``) it is written by :func:`write_study` as a CSV under ``data/`` with when,
where and by which command it ran, and the notebook reads it back with :func:`read_study`.
"""

from __future__ import annotations

import datetime
import os
import platform

import pandas as pd
import torch

from chapter20.core.findings import compare
from chapter20.core.measure import Timing
from chapter20.core.paths import data_file

__all__ = [
    "compare_times",
    "gain_over_untrained",
    "LOCAL_GROUP_TIMEOUT_S",
    "PROVENANCE",
    "provenance_line",
    "read_study",
    "run_or_record",
    "study_output",
    "timing_columns",
    "UNTRAINED",
    "value_span",
    "write_study",
]


#: The name of the untrained encoder's rows in a quality comparison (``heldout_run(steps=0)``).
UNTRAINED = "untrained"


def gain_over_untrained(frame, *, by: str, column: str):
    """For each group of ``by`` but :data:`UNTRAINED`, its weakest ``column`` over the seeds as a
    multiple of the untrained encoder's of the same seed: how much training added. Random
    embeddings already retrieve a next sentence that shares words with its anchor, so "above
    chance" alone does not show that a run learned."""
    base = frame[frame[by] == UNTRAINED].set_index("seed")[column]
    trained = frame[frame[by] != UNTRAINED]
    ratio = trained[column].values / base.loc[trained["seed"]].values
    return trained.assign(gain=ratio).groupby(by, sort=False)["gain"].min()


def timing_columns(timing: Timing) -> dict[str, float]:
    """A :class:`~chapter20.core.measure.Timing` as table columns: ``seconds`` (the median, the
    figure to read), ``seconds_min`` and ``seconds_max`` (its repeats' spread)."""
    return {"seconds": timing.median, "seconds_min": timing.min, "seconds_max": timing.max}


def compare_times(name: str, row, reference_name: str, reference) -> str:
    """The reading of two timed variants (rows with :func:`timing_columns`' fields), printed by
    ``chapter20.core.findings.compare`` from the medians in ms: "indistinguishable" when they
    differ by no more than the wider of the two repeats' min–max ranges, else how many times
    faster or slower. So the sentence follows the run, whichever way it went."""
    spread = max(row.seconds_max - row.seconds_min, reference.seconds_max - reference.seconds_min)
    return compare(
        name, row.seconds * 1e3, reference_name, reference.seconds * 1e3,
        quantity="time", unit="ms", spread=spread * 1e3,
    )  # fmt: skip


#: Seconds a local gloo group of a lab may take: generous, because a machine shared with other
#: jobs starts processes slowly (on an idle 2-core machine each group takes a few seconds).
LOCAL_GROUP_TIMEOUT_S = 600.0


#: The columns :func:`write_study` adds to every row: when, where and how a study ran.
PROVENANCE = ("measured_on", "machine", "torch_threads", "load_average", "command")


def study_output(out: str = "") -> str:
    """Where a bench writes its study: ``out``, else ``$CHAPTER20_STUDY_OUT``, else nowhere
    (``""``: print only)."""
    return out or os.environ.get("CHAPTER20_STUDY_OUT", "")


def write_study(frame: pd.DataFrame, path: str, command: str) -> str:
    """Write a study's rows to ``path`` (CSV) with the :data:`PROVENANCE` columns: the date,
    the machine (CPU count and model, or the GPU), torch's threads, the load average at the end
    and the ``command`` that reproduces it. Returns the path."""
    if not isinstance(frame, pd.DataFrame) or frame.empty:
        raise ValueError("frame must be a non-empty DataFrame")
    device = (
        torch.cuda.get_device_name() if torch.cuda.is_available()
        else f"{os.cpu_count()}-core {platform.machine()} CPU"
    )  # fmt: skip
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    stamped = frame.assign(
        measured_on=datetime.date.today().isoformat(), machine=device,
        torch_threads=torch.get_num_threads(), load_average=round(load, 1), command=command,
    )  # fmt: skip
    stamped.to_csv(path, index=False)
    return path


def read_study(name: str) -> pd.DataFrame:
    """A committed study, ``data/<name>`` (written by :func:`write_study`)."""
    frame = pd.read_csv(data_file(name))
    missing = [c for c in PROVENANCE if c not in frame.columns]
    if missing:
        raise ValueError(f"data/{name} lacks the provenance columns {missing}")
    return frame


def run_or_record(frame: pd.DataFrame, own_run: bool, name: str) -> tuple[pd.DataFrame, str]:
    """The rows a study is judged on and where they come from: ``frame`` when this run trained
    the whole study (``own_run``), else the committed record ``data/<name>``
    (:func:`read_study`), with a line that says which."""
    if own_run:
        return frame, "this run"
    record = read_study(name)
    return record, f"the committed record, {provenance_line(record)}"


def value_span(values: pd.Series) -> str:
    """``"a–b"`` for the smallest and largest of ``values``, or ``"a"`` when they are equal."""
    return "–".join(dict.fromkeys([f"{values.min():g}", f"{values.max():g}"]))


def provenance_line(frame: pd.DataFrame) -> str:
    """Where a committed study comes from: one line with the dates, machines and loads of its
    rows, then a ``reproduce:`` line with the command that measures it again."""
    dates = sorted(set(frame["measured_on"].astype(str)))
    machines = sorted(set(frame["machine"].astype(str)))
    commands = "; ".join(dict.fromkeys(frame["command"].astype(str)))
    return (
        f"measured {' to '.join(dict.fromkeys([dates[0], dates[-1]]))} on {', '.join(machines)} "
        f"(load average {value_span(frame['load_average'])}, "
        f"{frame['torch_threads'].iloc[0]} torch threads)\nreproduce: {commands}"
    )
