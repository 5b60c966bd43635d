"""What several labs share (ARCHITECTURE.md): the name of the untrained encoder's rows in the
quality comparisons of notebooks 01, 02, 03 and 05 (their run itself is
``chapter20.training.pair_training.heldout_run``) and the time a local process group of a lab
may take. The committed records of heavy studies are ``chapter20.core.study_record``'s."""

from __future__ import annotations

__all__ = ["LOCAL_GROUP_TIMEOUT_S", "UNTRAINED"]


#: The name of the untrained encoder's rows in a quality comparison (``heldout_run(steps=0)``).
UNTRAINED = "untrained"

#: Seconds a local gloo group of a lab may take: generous, because a machine shared with other
#: jobs starts processes slowly (on an idle 2-core machine each group takes a few seconds).
LOCAL_GROUP_TIMEOUT_S = 600.0
