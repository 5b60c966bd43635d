"""The committed records of heavy studies (ARCHITECTURE.md, "Notebooks"), for every section.

A study too heavy for a notebook's minute runs behind ``chapter20 bench``; with ``--out`` (or
``CHAPTER20_STUDY_OUT``: :func:`study_output`) it is written by :func:`write_study` as a CSV
under ``data/`` with when, where and by which command it ran (:data:`PROVENANCE`), and the
notebook reads it back with :func:`read_study` (or :func:`run_or_record`, which takes this run's
rows when it trained the whole study) and says where it comes from (:func:`provenance_line`).
"""

from __future__ import annotations

import datetime
import os
import platform

import pandas as pd
import torch

from chapter20.core.paths import data_file

__all__ = [
    "PROVENANCE",
    "provenance_line",
    "read_study",
    "run_or_record",
    "study_output",
    "value_span",
    "write_study",
]


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
    (:func:`read_study`), with a line that says which ("this run", or when and on what it was
    recorded: :func:`provenance_line`)."""
    if own_run:
        return frame, "this run"
    record = read_study(name)
    return record, provenance_line(record)


def value_span(values: pd.Series) -> str:
    """``"a–b"`` for the smallest and largest of ``values``, or ``"a"`` when they are equal."""
    return "–".join(dict.fromkeys([f"{values.min():g}", f"{values.max():g}"]))


def provenance_line(frame: pd.DataFrame) -> str:
    """Where a committed study comes from, in the reader's words: one line with the dates
    ("recorded 2026-12-05 on ..."), machines and loads of its rows, then a ``reproduce:`` line
    with the command that measures it again."""
    dates = sorted(set(frame["measured_on"].astype(str)))
    machines = sorted(set(frame["machine"].astype(str)))
    commands = "; ".join(dict.fromkeys(frame["command"].astype(str)))
    return (
        f"recorded {' to '.join(dict.fromkeys([dates[0], dates[-1]]))} on {', '.join(machines)} "
        f"(load average {value_span(frame['load_average'])}, "
        f"{frame['torch_threads'].iloc[0]} torch threads)\nreproduce: {commands}"
    )
