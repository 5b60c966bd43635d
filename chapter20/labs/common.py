"""What several labs share (ARCHITECTURE.md): the name of the untrained encoder's rows in the
quality comparisons of notebooks 01, 02, 03 and 05 (their run itself is
``chapter20.training.pair_training.heldout_run``) and the time a local process group of a lab
may take.

The committed records of heavy studies are ``chapter20.core.study_record``, the reading of a
timing table ``chapter20.core.measure.timing_columns`` and
``chapter20.core.findings.compare_times``; the labs that still import them from here get them
re-exported.
"""

from __future__ import annotations

from chapter20.core.findings import compare_times
from chapter20.core.measure import timing_columns
from chapter20.core.study_record import (
    PROVENANCE,
    provenance_line,
    read_study,
    run_or_record,
    study_output,
    value_span,
    write_study,
)

__all__ = [
    "compare_times",
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

#: Seconds a local gloo group of a lab may take: generous, because a machine shared with other
#: jobs starts processes slowly (on an idle 2-core machine each group takes a few seconds).
LOCAL_GROUP_TIMEOUT_S = 600.0
