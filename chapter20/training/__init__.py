"""§20.6 The composed training step and everything a run needs around it.

- ``trainer``: :class:`TrainConfig` and :class:`Trainer` — one step composing every technique;
- ``state``, ``sampler``, ``checkpoints``, ``sharded_checkpoint``, ``preemption``: the saved
  training state (§20.5.2), written atomically, resumed bit for bit;
- ``loop``: the one resumable training loop (the demos of ``chapter20.demos`` run it);
- ``encoder_file``: the trained encoder as one file, ``load_encoder(path).encode(texts)``;
- ``pair_training``: ``train_on_pairs`` and the held-out quality run ``heldout_run`` (§20.2).

The names readers use most are importable from here::

    from chapter20.training import TrainConfig, Trainer, load_encoder
"""

from chapter20.training.config import TrainConfig
from chapter20.training.encoder_file import TextEncoder, load_encoder, save_encoder
from chapter20.training.loop import StoppedLaunch
from chapter20.training.pair_training import HeldoutRun, heldout_run, train_on_pairs
from chapter20.training.trainer import StepResult, TrainedModule, Trainer

__all__ = [
    "HeldoutRun",
    "StepResult",
    "StoppedLaunch",
    "TextEncoder",
    "TrainConfig",
    "TrainedModule",
    "Trainer",
    "heldout_run",
    "load_encoder",
    "save_encoder",
    "train_on_pairs",
]
