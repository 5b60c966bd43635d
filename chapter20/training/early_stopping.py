"""§20.5 Early stopping, the rule of the one training loop: :class:`EarlyStopping` and the
:class:`EarlyStopper` that applies it.

A run evaluates on pairs it never trains on (the validation split) every few steps. The rule,
fixed before any run: keep the weights of the best ``monitor`` value seen so far, and stop once
``patience`` evaluations in a row have not beaten it by more than ``min_delta``. Every figure a
run then reports is the one at that validation-chosen step (``chapter20.training.driver`` keeps
the best weights and restores them at the end). The same :class:`EarlyStopper` replays the rule
over a recorded curve (``chapter20.capstone.evaluation.early_stopping``), so a study read after
the fact stops where a live run would have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from chapter20.core.checks import check_optional_int, check_real
from chapter20.core.options import option

__all__ = ["EarlyStopper", "EarlyStopping"]


@dataclass(frozen=True)
class EarlyStopping:
    """The early-stopping rule of a run (§20.5); checked on creation. ``patience`` None: off
    (the run trains every step and reports its last)."""

    patience: int | None = option(
        None,
        "stop after N evaluations in a row without a better validation score and keep the "
        "best weights (none: train every step)",
    )
    monitor: str = option(
        "val_mrr", "the evaluation figure early stopping watches (higher: better)"
    )
    min_delta: float = option(0.001, "the least gain that counts as better")

    def __post_init__(self) -> None:
        check_optional_int("patience", self.patience, 1)
        if not isinstance(self.monitor, str):
            raise TypeError(f"monitor must be a str, got {self.monitor!r}")
        if not self.monitor:
            raise ValueError("monitor must name an evaluation figure, got ''")
        check_real("min_delta", self.min_delta, minimum=0.0, maximum=1e6)

    @property
    def enabled(self) -> bool:
        """Whether the rule stops runs (a patience is set)."""
        return self.patience is not None


class EarlyStopper:
    """The state of :class:`EarlyStopping` along one run: the best value and its step, the
    evaluations waited since, and whether the run has stopped. :meth:`observe` takes each
    evaluation in step order; :meth:`state` / :meth:`from_state` carry it through a checkpoint."""

    def __init__(self, rule: EarlyStopping):
        if not isinstance(rule, EarlyStopping):
            raise TypeError(f"rule must be an EarlyStopping, got {type(rule).__name__}")
        self.rule = rule
        self.best_value = -math.inf
        self.best_step: int | None = None
        self.waited = 0
        self.stopped_at: int | None = None

    def observe(self, step: int, record: dict) -> bool:
        """Take the evaluation ``record`` made after ``step`` steps; True when it is the new best
        (keep these weights); a NaN is never better. After ``patience`` evaluations without
        one, :attr:`stopped_at` is set. KeyError naming the figure if the record lacks
        ``monitor``."""
        if self.rule.monitor not in record:
            raise KeyError(
                f"early stopping watches {self.rule.monitor!r}, which the evaluation does not "
                f"give (it gives {sorted(record)})"
            )
        value = float(record[self.rule.monitor])
        if not math.isnan(value) and (
            self.best_step is None or value > self.best_value + self.rule.min_delta
        ):
            self.best_value, self.best_step, self.waited = value, step, 0
            return True
        self.waited += 1
        if self.rule.patience is not None and self.waited >= self.rule.patience:
            self.stopped_at = step
        return False

    @property
    def stopped(self) -> bool:
        """Whether the rule has ended the run."""
        return self.stopped_at is not None

    def state(self) -> dict:
        """What a checkpoint keeps of the rule's progress (plain values)."""
        return {"best_value": self.best_value, "best_step": self.best_step,
                "waited": self.waited, "stopped_at": self.stopped_at}  # fmt: skip

    @classmethod
    def from_state(cls, rule: EarlyStopping, state: dict) -> EarlyStopper:
        """The stopper :meth:`state` described."""
        stopper = cls(rule)
        for key in ("best_value", "best_step", "waited", "stopped_at"):
            setattr(stopper, key, state[key])
        return stopper
