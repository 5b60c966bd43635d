"""§20.4 and §20.5.2 The demos: applications of the composed step, at the capstone's rank.

- ``ddp_run``: §20.4 the DDP demo (:class:`DemoConfig`, :func:`run_ddp_demo`), a preset of the
  shared contrastive model's run on the one run driver;
- ``spot_run``: §20.5.2 the spot demo, which survives preemption bit for bit
  (:class:`SpotConfig`, :func:`run_spot_training`, launches under torchrun);
- ``resume_stress``: §20.5.2 the stress test of bitwise resume (:class:`StressConfig`,
  :func:`stress_resume`), which kills spot demo launches from outside;
- ``fault_writer``: notebook 07's checkpoint writers that a fault strikes for real;
  ``fault_injection``: the faults of its matrix injected, and what the next run finds;
  ``elastic_run``: a sharded run resumed at another world size; ``chaos_launch``: notebook 07's
  chaos run (a SIGKILL and torchrun's restart) beside the same run uninterrupted;
- ``node_launch``: §20.4 the DDP demo launched as two torchrun "nodes" on localhost;
- ``recommender``: §20.1's two-tower recommender with sampled negatives.

``ddp_run``, ``spot_run`` and ``resume_stress`` each carry their command line (``main(argv)``),
run as ``python -m chapter20.demos.<name>`` (or ``torchrun --module``) or through
``chapter20/scripts/``. Every other public name is importable from here, and imported only when
used (``chapter20.core.facade``), so ``python -m`` runs each module once::

    from chapter20.demos import SpotConfig, run_spot_training
"""

from chapter20.core.facade import lazy_exports

__all__, __getattr__ = lazy_exports(__name__)
