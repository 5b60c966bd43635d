"""§20.6 The composed training step and everything a run needs around it.

- ``config``, ``trainer``: :class:`TrainConfig` and :class:`Trainer` — one step composing every
  technique; ``memory_plan``: the planner of one step of a ``TrainConfig``;
- ``run_config``, ``driver``: :class:`RunConfig`, the one run specification, and
  :func:`run_training`, the one driver that executes it (every application is a preset);
- ``loop``: the one resumable training loop the driver runs;
- ``state``, ``sampler``, ``checkpoints``, ``sharded_checkpoint``, ``preemption``: the saved
  training state (§20.5.2), written atomically, resumed bit for bit;
- ``encoder_file``: the trained encoder as one file, ``load_encoder(path).encode(texts)``;
- ``pair_training``: the shared contrastive model's run (:class:`PairRunConfig`) and the
  held-out quality run ``heldout_run`` (§20.2).

Every public name of these modules is importable from here, and imported only when used
(``chapter20.core.facade``: a launch does not pay for what it does not use)::

    from chapter20.training import TrainConfig, Trainer, load_encoder
"""

from chapter20.core.facade import lazy_exports

__all__, __getattr__ = lazy_exports(__name__)
