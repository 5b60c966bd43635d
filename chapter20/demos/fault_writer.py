"""§20.5.2 The checkpoint writers of notebook 07's fault matrix, as processes a fault strikes
for real (``chapter20.demos.fault_injection`` launches them with ``python -m``).

    python -m chapter20.demos.fault_writer fault DIRECTORY PHASE ACTION KEEP_LAST
    python -m chapter20.demos.fault_writer hold DIRECTORY

``fault``: two good saves (steps 1 and 2), then a third that meets ACTION at PHASE of the save
(one of ``chapter20.training.checkpoints.SAVE_PHASES``): ``kill`` (SIGKILL), ``term-default``
(SIGTERM, its default action) or ``term-handled`` (SIGTERM under a ``PreemptionHandler``: the
save completes, then the process exits with ``EXIT_PREEMPTED``); prints ``no fault`` if it
survives. ``hold``: one save, prints ``saved``, then holds the directory until its standard
input closes (a second writer meets a busy directory meanwhile).
"""

from __future__ import annotations

import os
import signal
import sys

import torch

import chapter20.training.checkpoints as checkpoints
from chapter20.training.checkpoints import CheckpointManager
from chapter20.training.preemption import EXIT_PREEMPTED, PreemptionHandler

__all__ = ["ACTIONS", "main"]

#: What strikes the third save.
ACTIONS = ("kill", "term-default", "term-handled")

#: Elements of the saved tensor: large enough that a save has a middle to strike.
_SIZE = 50_000


def _faulted_save(directory: str, phase: str, action: str, keep_last: int) -> None:
    """§20.5.2 Two good saves into ``directory``, then a third that ``action`` strikes at
    ``phase`` of the save (this process is the one killed or terminated); prints ``no fault``
    if it survives. ``keep_last`` as in ``CheckpointManager``."""
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {ACTIONS}, got {action!r}")
    if phase not in checkpoints.SAVE_PHASES:
        raise ValueError(f"phase must be one of {checkpoints.SAVE_PHASES}, got {phase!r}")
    manager = CheckpointManager(directory, keep_last=keep_last)
    for step in (1, 2):
        manager.save({"step": step, "w": torch.full((_SIZE,), float(step))})

    def fault(at: str) -> None:
        if at == phase:
            os.kill(os.getpid(), signal.SIGKILL if action == "kill" else signal.SIGTERM)

    checkpoints._fault_point = fault
    if action == "term-handled":
        with PreemptionHandler() as preemption:
            manager.save({"step": 3, "w": torch.full((_SIZE,), 3.0)})
            if preemption.should_stop():
                sys.exit(EXIT_PREEMPTED)
    else:
        manager.save({"step": 3, "w": torch.full((_SIZE,), 3.0)})
    print("no fault", flush=True)


def _hold_directory(directory: str) -> None:
    """§20.5.2 One save into ``directory``, print ``saved``, then hold the directory (its writer
    lock) until standard input closes."""
    manager = CheckpointManager(directory)
    manager.save({"step": 1, "w": torch.zeros(4)})
    print("saved", flush=True)
    sys.stdin.read()


def main(argv: list[str] | None = None) -> None:
    """§20.5.2 ``fault DIRECTORY PHASE ACTION KEEP_LAST`` or ``hold DIRECTORY`` (see the module
    docstring); anything else exits with status 2 and one line on stderr."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["fault"] and len(argv) == 5:
        _faulted_save(argv[1], argv[2], argv[3], int(argv[4]))
    elif argv[:1] == ["hold"] and len(argv) == 2:
        _hold_directory(argv[1])
    else:
        print(
            "fault_writer: error: give 'fault DIRECTORY PHASE ACTION KEEP_LAST' or "
            f"'hold DIRECTORY', got {argv!r}",
            file=sys.stderr,
        )
        raise SystemExit(2)


if __name__ == "__main__":
    main()
