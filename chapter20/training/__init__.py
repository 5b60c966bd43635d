"""§20.6 The composed training step and everything a run needs around it.

- ``trainer``: :class:`TrainConfig` and :class:`Trainer` — one step composing every technique;
- ``state``, ``sampler``, ``checkpoints``, ``sharded_checkpoint``, ``preemption``: the saved
  training state (§20.5.2), written atomically, resumed bit for bit;
- ``loop``: the one resumable training loop; ``resume_stress``: kills it at random and checks;
- ``encoder_file``: the trained encoder as one file, ``load_encoder(path).encode(texts)``.

The names readers use most are importable from here::

    from chapter20.training import TrainConfig, Trainer, load_encoder
"""

from chapter20.training.config import TrainConfig
from chapter20.training.encoder_file import TextEncoder, load_encoder, save_encoder
from chapter20.training.loop import StoppedLaunch
from chapter20.training.trainer import StepResult, TrainedModule, Trainer

__all__ = [
    "StepResult",
    "StoppedLaunch",
    "TextEncoder",
    "TrainConfig",
    "TrainedModule",
    "Trainer",
    "load_encoder",
    "save_encoder",
]
