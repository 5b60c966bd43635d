"""§20.4 and §20.5.2 The demos: applications of the composed step, at the capstone's rank.

- ``ddp_run``: §20.4 the DDP demo's run (:class:`DemoConfig`, :func:`run_ddp_demo`);
- ``spot_run``: §20.5.2 the spot demo's run, which survives preemption bit for bit
  (:class:`SpotConfig`, :func:`run_spot_training`, launches under torchrun);
- ``resume_stress``: §20.5.2 the stress test of bitwise resume (:class:`StressConfig`,
  :func:`stress_resume`), which kills spot demo launches from outside;
- ``fault_writer``: notebook 07's checkpoint writers that a fault strikes for real;
- ``ddp_demo``, ``spot_demo``, ``spot_stress``: their command lines, each with ``main(argv)``,
  run as ``python -m chapter20.demos.<name>`` (or ``torchrun --module``) or through
  ``chapter20/scripts/<name>.py``; not imported here, so ``python -m`` runs each once.

The names readers use most are importable from here::

    from chapter20.demos import SpotConfig, run_spot_training
"""

from chapter20.demos.ddp_run import DEMO_TRAINING, DemoConfig, run_ddp_demo
from chapter20.demos.resume_stress import (
    StressConfig,
    StressRun,
    demo_command,
    demo_summary_path,
    run_killed,
    run_uninterrupted,
    stress_resume,
)
from chapter20.demos.spot_run import (
    DEMO_MODULE,
    SPOT_TRAINING,
    SpotConfig,
    SpotResult,
    launch_spot_demo,
    run_spot_training,
    start_spot_demo,
    wait_for_spot_demos,
)

__all__ = [
    "DEMO_MODULE",
    "DEMO_TRAINING",
    "SPOT_TRAINING",
    "DemoConfig",
    "SpotConfig",
    "SpotResult",
    "StressConfig",
    "StressRun",
    "demo_command",
    "demo_summary_path",
    "launch_spot_demo",
    "run_ddp_demo",
    "run_killed",
    "run_spot_training",
    "run_uninterrupted",
    "start_spot_demo",
    "stress_resume",
    "wait_for_spot_demos",
]
