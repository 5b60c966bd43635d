"""§20.6 The one run driver: a :class:`~chapter20.training.run_config.RunConfig` executed by the
one resumable loop.

Every application that trains an encoder — the labs' short runs on pairs, the DDP demo, the spot
demo, the capstone and its recipe studies — is a preset of ``RunConfig`` plus the factories and
hooks it hands :func:`run_training`:

- ``model()`` builds the model, right after ``set_seed(config.seed)`` (inside
  ``deterministic_mode`` when the loop is deterministic, so a start that computes something,
  such as an SVD, is the same in every launch);
- ``batches(trainer)`` gives this rank's data as :class:`Batches`: the next batch, and the
  sampler whose position a checkpoint saves;
- ``announce(trainer)`` runs once before training (a memory plan, a line on what will run);
- ``evaluate(trainer, progress)`` scores the model before training, every ``eval_every`` steps
  and after the last step (None on a rank that does not score); the records are saved in the
  checkpoints, so a resumed run keeps the evaluations made before a kill;
- ``summarize(finished)`` adds what only the application measures to the summary before it is
  written (once, by rank 0, to ``summary.json`` in the output directory).

With ``config.early_stopping`` on (a patience), the evaluations are the run's validation: the
driver keeps the weights of the best ``monitor`` value, ends the run once ``patience``
evaluations in a row bring none better (``chapter20.training.early_stopping``; the decision is
rank 0's, sent to every rank), and restores those weights before the summary — whose
``final`` evaluation, fingerprint and model are then the validation-chosen step's. The best
weights and the rule's progress travel in the checkpoints.

The driver builds the :class:`~chapter20.training.trainer.Trainer` (every technique of the step
is a field of ``config.training``), shows a progress bar on rank 0, trains through
:func:`~chapter20.training.loop.resumable_loop`, and returns a :class:`FinishedRun` — or the
:class:`~chapter20.training.loop.StoppedLaunch` of a launch that ``loop.stop_after`` ended.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.checks import check_optional_int
from chapter20.core.device import deterministic_mode, set_seed
from chapter20.techniques.distributed import distributed, group_rank_and_size
from chapter20.training.early_stopping import EarlyStopper
from chapter20.training.loop import StoppedLaunch, resumable_loop
from chapter20.training.run_config import RunConfig
from chapter20.training.state import parameter_fingerprint
from chapter20.training.trainer import StepResult, Trainer

__all__ = [
    "Batches",
    "FinishedRun",
    "RunProgress",
    "RunRefused",
    "RunTracker",
    "run_on_this_rank",
    "run_training",
]


class RunRefused(ValueError):
    """A run that :func:`run_training` refused before its first step, on every rank and before
    any collective (a batch the ranks cannot share, a technique the model cannot take, data that
    cannot be resumed): a command line reports it in one line, without a traceback."""


@dataclass(frozen=True)
class Batches:
    """A run's data on this rank (§20.6): ``next_batch()`` returns this rank's part of the next
    global batch, on the trainer's device; ``sampler`` is what a checkpoint saves of the data
    position (``state_dict`` / ``load_state_dict``), None for an order that cannot be resumed —
    which only a run that keeps no checkpoints may use."""

    next_batch: Callable[[], Any]
    sampler: Any = None

    def __post_init__(self) -> None:
        if not callable(self.next_batch):
            raise TypeError(f"next_batch must be callable, got {type(self.next_batch).__name__}")


@dataclass(frozen=True)
class RunProgress:
    """Where a run is when it is evaluated: after ``step`` steps (0: before the first), the
    ``losses`` of this launch's steps so far, and the seconds this launch has spent training."""

    step: int
    losses: tuple[float, ...]
    train_seconds: float


@dataclass(frozen=True)
class FinishedRun:
    """A launch that reached ``config.steps`` (§20.6), as :func:`run_training` returns it.

    ``summary`` is the JSON-ready record of the run, the same on every rank: the parameter
    ``fingerprint`` (equal to an uninterrupted run's with the same configuration and process
    count), the ``steps`` reached, the step it ``resumed_from`` (0: from scratch), the rate, the
    training seconds and throughput of this launch, the checkpoint saves' seconds, the untrained
    ``start`` and the ``evaluations`` (with the ``final`` one), the configuration, and what the
    application's ``summarize`` added. Rank 0 wrote it to ``summary_file`` (None elsewhere, or
    without an output directory). ``trainer`` and this launch's step ``losses`` are for the
    caller in this process."""

    summary: dict[str, Any]
    summary_file: str | None
    trainer: Trainer = field(repr=False, compare=False)
    losses: tuple[float, ...] = ()

    @property
    def fingerprint(self) -> str:
        """The parameter fingerprint of the trained model (``parameter_fingerprint``)."""
        return self.summary["fingerprint"]


def _check_hooks(model, batches, hooks: dict[str, Any]) -> None:
    for name, given in (("model", model), ("batches", batches)):
        if not callable(given):
            raise TypeError(f"{name} must be callable, got {type(given).__name__}")
    for name, given in hooks.items():
        if given is not None and not callable(given):
            raise TypeError(f"{name} must be callable or None, got {type(given).__name__}")


def run_training(
    config: RunConfig,
    model: Callable[[], nn.Module],
    batches: Callable[[Trainer], Batches],
    *,
    device: torch.device | str | None = None,
    loss: Callable[[nn.Module, Any], torch.Tensor] | None = None,
    optimizer: Callable[[nn.Module], torch.optim.Optimizer] | None = None,
    announce: Callable[[Trainer], None] | None = None,
    evaluate: Callable[[Trainer, RunProgress], dict | None] | None = None,
    eval_every: int | None = None,
    evaluate_start: bool = True,
    summarize: Callable[[FinishedRun], None] | None = None,
) -> FinishedRun | StoppedLaunch:
    """Run ``config`` from the newest checkpoint in its output directory to ``config.steps``
    (§20.6); every rank of the current process group calls it. See the module docstring for the
    factories and hooks. ``loss`` (one loss per example) replaces InfoNCE, ``optimizer(model)``
    the configured optimizer (a deliberately harmful variant, for a positive control).
    ``config.steps == 0`` trains nothing: the summary is the untrained model's.

    :class:`RunRefused` (a ValueError) before any collective for a run that cannot start: a
    ``config.batch`` that does not split evenly over the ranks, a technique the model cannot
    take, a run that keeps checkpoints on data that cannot be resumed."""
    if not isinstance(config, RunConfig):
        raise TypeError(f"config must be a RunConfig, got {type(config).__name__}")
    hooks = {"loss": loss, "optimizer": optimizer, "announce": announce, "evaluate": evaluate,
             "summarize": summarize}  # fmt: skip
    _check_hooks(model, batches, hooks)
    eval_every = check_optional_int("eval_every", eval_every, 1)
    rank = group_rank_and_size()[0]
    if config.early_stopping.enabled and (evaluate is None or eval_every is None):
        raise RunRefused(
            "early stopping (a patience) needs evaluations: an evaluate hook and eval_every"
        )
    try:
        trainer, data = _set_up(config, model, batches, device, loss, optimizer)
    except ValueError as exc:
        raise RunRefused(str(exc)) from exc
    if announce is not None:
        announce(trainer)
    tracker = RunTracker(config, trainer, evaluate, eval_every)
    if evaluate is not None and evaluate_start:
        tracker.start = evaluate(trainer, RunProgress(0, (), 0.0))
        if tracker.stopper is not None:  # the untrained weights are a candidate too
            tracker.judge(0, tracker.start)
    began = tracker.last = time.perf_counter()
    resumed_from, save_seconds = 0, []
    if config.steps:
        try:
            run = resumable_loop(
                trainer, data.sampler, data.next_batch, config.loop, steps=config.steps,
                directory=config.checkpoint_dir, after_step=tracker, extra_state=tracker.state,
                on_restore=tracker.restore, finished=tracker.stopped,
            )  # fmt: skip
        finally:
            tracker.close()
        if run.stopped:
            return StoppedLaunch.from_loop(run, config.checkpoint_dir)
        resumed_from, save_seconds = run.resumed_from, run.save_seconds
    tracker.restore_best()
    summary = _summary(config, trainer, tracker, resumed_from, save_seconds)
    summary["wall_seconds_this_launch"] = time.perf_counter() - began
    finished = FinishedRun(summary, None, trainer, tuple(tracker.losses))
    if summarize is not None:
        summarize(finished)
    if rank != 0 or config.summary_file is None:
        return finished
    path = Path(config.summary_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=1, default=str))
    return FinishedRun(summary, str(path), trainer, finished.losses)


def _set_up(config: RunConfig, model, batches, device, loss, optimizer) -> tuple[Trainer, Batches]:
    """The seeded model, its trainer and this rank's data; ValueError for what cannot run."""
    world = group_rank_and_size()[1]
    if config.batch % world:
        raise ValueError(
            f"batch ({config.batch}) must be a multiple of the world size {world}, so that every "
            "rank holds the same number of examples"
        )
    with deterministic_mode(enabled=config.loop.deterministic):
        set_seed(config.seed)
        module = model().to(torch.device(device or "cpu"))
    given = optimizer(module) if optimizer is not None else None
    trainer = Trainer(module, config.train_config(), loss=loss, optimizer=given)
    data = batches(trainer)
    if not isinstance(data, Batches):
        raise TypeError(f"batches must return Batches, got {type(data).__name__}")
    if config.checkpoint_dir is not None and data.sampler is None:
        raise ValueError("a run that keeps checkpoints needs a data order that can be resumed")
    if config.early_stopping.enabled and trainer.config.sharded_table and world > 1:
        raise ValueError(
            "early stopping keeps the best weights of one process; a table sharded over "
            f"{world} ranks spreads them: turn off sharded_table or early stopping"
        )
    return trainer, data


def run_on_this_rank(
    prog: str, run: Callable[[torch.device], FinishedRun | StoppedLaunch],
    lines: Callable[[FinishedRun], list[str]],
) -> FinishedRun | StoppedLaunch:  # fmt: skip
    """A run's command line on this process (§20.4: every rank of a ``torchrun`` launch, or a
    process alone): ``run(device)`` inside the process group, then rank 0 prints ``lines`` of
    the finished run, or where a ``--stop-after`` launch stopped and how to resume. A run refused
    before its first step (:class:`RunRefused`, on every rank before any collective) ends the
    program as a refused option does: ``PROG: error: MESSAGE`` on stderr, exit status 2; any
    other error keeps its traceback. Every DDP object is collected before the group ends (gloo
    threads that outlive them abort the process)."""
    with distributed() as ctx:
        try:
            result = run(ctx.device)
        except RunRefused as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        gc.collect()
        if ctx.world_size > 1:
            dist.barrier()
    shown = (
        (lines(result) if isinstance(result, FinishedRun) else result.lines())
        if ctx.is_main
        else []
    )
    if shown:
        print("\n".join(shown), flush=True)
    return result


class RunTracker:
    """What the driver keeps while a run trains, as the loop's ``after_step``: rank 0's progress
    bar (tqdm: loss, pairs/s), the training seconds of this launch (evaluations and the bar
    excluded), the step losses, the periodic evaluations, and early stopping (the best weights,
    and when to stop); the checkpoints carry the evaluations and the rule's progress."""

    def __init__(self, config: RunConfig, trainer: Trainer, evaluate, eval_every: int | None):
        self.config, self.trainer = config, trainer
        self.evaluate, self.eval_every = evaluate, eval_every
        self.start: dict | None = None
        self.evaluations: list[dict] = []
        self.losses: list[float] = []
        self.bar = None
        self.last = time.perf_counter()
        self.train_seconds = 0.0
        rule = config.early_stopping
        self.stopper = EarlyStopper(rule) if rule.enabled else None
        self.best_weights: dict[str, torch.Tensor] | None = None

    def restore(self, extra: dict) -> None:
        self.evaluations = json.loads(extra.get("evaluations", "[]"))
        if self.stopper is not None and "early_stopping" in extra:
            rule = self.config.early_stopping
            self.stopper = EarlyStopper.from_state(rule, json.loads(extra["early_stopping"]))
            self.best_weights = extra["best_weights"]

    def state(self) -> dict:
        state = {"evaluations": json.dumps(self.evaluations)}
        if self.stopper is not None and self.best_weights is not None:
            state.update(early_stopping=json.dumps(self.stopper.state()),
                         best_weights=self.best_weights)  # fmt: skip
        return state

    def stopped(self) -> bool:
        """Whether early stopping has ended the run (the same answer on every rank)."""
        return self.stopper is not None and self.stopper.stopped

    def __call__(self, step: int, result: StepResult) -> None:
        now = time.perf_counter()
        self.train_seconds += now - self.last
        self.losses.append(result.loss)
        if self.trainer.rank == 0 and self.config.progress:
            self._show(step, result)
        due = self.eval_every is not None and step % self.eval_every == 0
        if self.evaluate is not None and (due or step == self.config.steps):
            progress = RunProgress(step, tuple(self.losses), self.train_seconds)
            record = self.evaluate(self.trainer, progress)
            if record is not None:
                self.evaluations.append({"step": step, **record})
                if self.bar is not None:
                    self.bar.write(_evaluation_line(self.evaluations[-1]))
            if self.stopper is not None:
                self.judge(step, record)
        self.last = time.perf_counter()

    def judge(self, step: int, record: dict | None) -> None:
        """Rank 0 judges the evaluation; every rank keeps the best weights and stops alike."""
        decision = self.stopper.state()
        if self.trainer.rank == 0:
            self.stopper.observe(step, record or {})
            decision = self.stopper.state()
        if self.trainer.world_size > 1:
            sent = [decision]
            dist.broadcast_object_list(sent, src=0, group=self.trainer.group)
            decision = sent[0]
        self.stopper = EarlyStopper.from_state(self.config.early_stopping, decision)
        if decision["best_step"] == step:
            state = self.trainer.module.state_dict()
            self.best_weights = {name: value.detach().clone() for name, value in state.items()}

    def restore_best(self) -> None:
        """Load the best weights early stopping kept (nothing without the rule)."""
        if self.best_weights is not None:
            self.trainer.module.load_state_dict(self.best_weights)

    def _show(self, step: int, result: StepResult) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(
                total=self.config.steps, initial=step - 1, desc="train", file=sys.stderr,
                dynamic_ncols=True,
            )  # fmt: skip
        rate = self.config.batch * len(self.losses) / max(self.train_seconds, 1e-9)
        self.bar.set_postfix(loss=f"{result.loss:.3f}", pairs_s=f"{rate:,.0f}", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _evaluation_line(record: dict) -> str:
    """One evaluation under the progress bar: the step and every figure of the record."""
    figures = ", ".join(
        f"{name} {value:.3f}" for name, value in record.items()
        if name != "step" and isinstance(value, float)
    )  # fmt: skip
    return f"step {record['step']}: {figures}"


def _final_evaluation(tracker: RunTracker) -> dict | None:
    """The evaluation the run reports: the last one, or, under early stopping, the best step's
    (the weights the run ends with)."""
    if not tracker.evaluations:
        return None
    if tracker.stopper is None or tracker.stopper.best_step is None:
        return tracker.evaluations[-1]
    best = tracker.stopper.best_step
    if best == 0:  # the untrained weights were the best (None: not evaluated in this launch)
        return {"step": 0, **tracker.start} if tracker.start is not None else None
    return next(e for e in tracker.evaluations if e["step"] == best)


def _summary(config: RunConfig, trainer: Trainer, tracker: RunTracker, resumed_from: int,
             save_seconds: list[float]) -> dict[str, Any]:  # fmt: skip
    """The JSON-ready record of a finished launch, the same on every rank (but the seconds)."""
    seconds, steps_here = tracker.train_seconds, len(tracker.losses)
    return {
        "fingerprint": parameter_fingerprint(trainer.module),
        "resumed_from": resumed_from,
        "steps": trainer.steps,
        "world_size": trainer.world_size,
        "precision": trainer.precision,
        "lr": trainer.config.peak_lr,
        "train_seconds_this_launch": seconds,
        "pairs_per_second": config.batch * steps_here / max(seconds, 1e-9) if steps_here else None,
        "checkpoint_seconds": save_seconds,
        "start": tracker.start,
        "evaluations": tracker.evaluations,
        "final": _final_evaluation(tracker),
        "early_stopping": None if tracker.stopper is None else tracker.stopper.state(),
        "config": asdict(config),
    }
