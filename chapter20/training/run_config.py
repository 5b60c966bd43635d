"""§20.6 The one run specification: :class:`RunConfig`.

A run is a number of steps of the composed step (``chapter20.training.trainer``) inside the one
resumable loop (``chapter20.training.loop``), executed by ``chapter20.training.driver``. What
every run has is written here once: how many steps of how large a global batch, the seed, where
its files go, whether it shows progress, the step's :class:`~chapter20.training.config.TrainConfig`
(``training``: precision, accumulation or caching, the rate and how it follows the batch, ...),
the loop's :class:`~chapter20.training.loop.LoopConfig` (``loop``: checkpoints, preemption) and
its :class:`~chapter20.training.early_stopping.EarlyStopping` rule (``early_stopping``).

An application is a *preset*: a subclass that sets these defaults and adds the options only it
has (the spot demo's token dropout, the capstone's encoder), and hands the driver its model and
data as factories. The command lines derive their options from the fields
(``chapter20.core.options``), nested configurations included.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chapter20.core.checks import check_int
from chapter20.core.options import option
from chapter20.training.config import TrainConfig
from chapter20.training.early_stopping import EarlyStopping
from chapter20.training.loop import LoopConfig

__all__ = ["CHECKPOINTS", "SUMMARY_FILE", "RunConfig"]

#: The folder of a run's checkpoints and progress log, inside its output directory.
CHECKPOINTS = "checkpoints"
#: The summary a finished run writes into its output directory (rank 0, once).
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class RunConfig:
    """What every training run is (§20.6); each field is checked on creation.

    ``steps`` optimizer steps of ``batch`` examples (global: split evenly over the ranks), the
    weights and the data order seeded by ``seed``. ``output_dir`` holds the checkpoints
    (``checkpoints/``, resumed from on the next launch) and the finished run's ``summary.json``;
    None keeps nothing and resumes nothing. ``progress``: a progress bar on rank 0.
    ``training`` is the composed step as given; :meth:`train_config` completes it for this run
    (the global batch its rate is scaled to, the step where a cosine schedule ends). ``loop``:
    how the run checkpoints and survives being killed. ``early_stopping``: when the run stops
    on its validation score, and that its best weights are the ones it ends with.
    """

    output_dir: str | None = option(
        None, "checkpoints/ and summary.json go here (none: nothing is kept or resumed)"
    )
    steps: int = option(100, "optimizer steps")
    batch: int = option(256, "examples per step, over all ranks")
    seed: int = option(0, "seed of the weights and the data order")
    progress: bool = option(True, "progress bar on rank 0")
    training: TrainConfig = option(
        help="the composed step (chapter20.training.config.TrainConfig)",
        default_factory=TrainConfig,
    )
    loop: LoopConfig = option(
        help="checkpoints and preemption (chapter20.training.loop.LoopConfig)",
        default_factory=LoopConfig,
    )
    early_stopping: EarlyStopping = option(
        help="stop on the validation score (chapter20.training.early_stopping.EarlyStopping)",
        default_factory=EarlyStopping,
    )

    def __post_init__(self) -> None:
        if self.output_dir is not None and (
            not isinstance(self.output_dir, str) or not self.output_dir
        ):
            raise TypeError(f"output_dir must be a non-empty str or None, got {self.output_dir!r}")
        check_int("steps", self.steps, 0)
        check_int("batch", self.batch, 1)
        check_int("seed", self.seed, 0)
        if not isinstance(self.progress, bool):
            raise TypeError(f"progress must be True or False, got {self.progress!r}")
        if not isinstance(self.training, TrainConfig):
            raise TypeError(f"training must be a TrainConfig, got {self.training!r}")
        if not isinstance(self.loop, LoopConfig):
            raise TypeError(f"loop must be a LoopConfig, got {self.loop!r}")
        if not isinstance(self.early_stopping, EarlyStopping):
            raise TypeError(f"early_stopping must be an EarlyStopping, got {self.early_stopping!r}")

    def train_config(self) -> TrainConfig:
        """The composed step of this run (§20.4.1): ``training`` with the run's global batch (to
        which a ``base_batch`` rate is scaled) and, for a cosine schedule without
        ``total_steps``, this run's last step (:meth:`TrainConfig.for_run`)."""
        return self.training.for_run(self.steps, self.batch)

    @property
    def checkpoint_dir(self) -> str | None:
        """Where the training state is saved and resumed from (None: nowhere)."""
        return None if self.output_dir is None else str(Path(self.output_dir) / CHECKPOINTS)

    @property
    def summary_file(self) -> str | None:
        """Where rank 0 writes the finished run's summary (None: nowhere)."""
        return None if self.output_dir is None else str(Path(self.output_dir) / SUMMARY_FILE)
