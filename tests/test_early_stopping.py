"""§20.5 early stopping (``chapter20.training.early_stopping``) and how the one run driver applies
it (``chapter20.training.driver``): the rule alone, a live run that stops on a scripted
validation curve and ends with the best step's weights (bitwise), a run stopped and resumed
around the peak that ends as the uninterrupted one, and the replay of the rule over a recorded
curve (``chapter20.capstone.evaluation.early_stopping``)."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest
import torch

from chapter20.capstone.evaluation import early_stopping as replay_early_stopping
from chapter20.core.corpora import PairData
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.training.driver import Batches, FinishedRun, RunRefused, run_training
from chapter20.training.early_stopping import EarlyStopper, EarlyStopping
from chapter20.training.loop import LoopConfig, StoppedLaunch
from chapter20.training.run_config import RunConfig
from chapter20.training.sampler import ResumableBatchSampler

VOCAB, DIM, ROWS = 50, 8, 96

# --- the rule alone -------------------------------------------------------------------------


def _walk(rule: EarlyStopping, values, steps=None) -> tuple[EarlyStopper, list[bool]]:
    """Feed ``values`` (one evaluation each, at ``steps``) to a fresh stopper until it stops."""
    stopper = EarlyStopper(rule)
    improved = []
    for step, value in zip(steps or range(len(values)), values):
        improved.append(stopper.observe(step, {"val_mrr": value}))
        if stopper.stopped:
            break
    return stopper, improved


def test_a_rising_curve_never_stops():
    """Every evaluation beats the last by more than min_delta: each is the new best and the
    rule never ends the run."""
    stopper, improved = _walk(EarlyStopping(patience=1), [0.1, 0.2, 0.3, 0.4, 0.5])
    assert improved == [True] * 5
    assert not stopper.stopped and stopper.stopped_at is None
    assert stopper.best_step == 4 and stopper.best_value == 0.5 and stopper.waited == 0


@pytest.mark.parametrize("patience", [1, 2, 3])
def test_a_peaked_curve_stops_patience_evaluations_after_the_peak(patience):
    """The curve peaks at its 3rd evaluation (step 20) and falls: the run stops exactly
    ``patience`` evaluations later and keeps the peak as its best step."""
    steps = [0, 10, 20, 30, 40, 50, 60]
    values = [0.1, 0.3, 0.6, 0.5, 0.55, 0.4, 0.3]
    stopper, improved = _walk(EarlyStopping(patience=patience), values, steps)
    assert stopper.best_step == 20 and stopper.best_value == 0.6
    assert stopper.stopped_at == steps[2 + patience]
    assert improved == [True, True, True] + [False] * patience
    assert stopper.waited == patience


def test_a_gain_below_min_delta_does_not_count():
    """With min_delta 0.01, a gain of 0.005 leaves the best where it was and counts as a wait;
    a gain of 0.02 over the best is a new best."""
    rule = EarlyStopping(patience=2, min_delta=0.01)
    stopper = EarlyStopper(rule)
    assert stopper.observe(0, {"val_mrr": 0.5})
    assert not stopper.observe(1, {"val_mrr": 0.505})  # better, but not by min_delta
    assert stopper.best_step == 0 and stopper.best_value == 0.5 and stopper.waited == 1
    assert stopper.observe(2, {"val_mrr": 0.52})
    assert stopper.best_step == 2 and stopper.waited == 0
    # The same gains with min_delta 0 are both new bests.
    plain, improved = _walk(EarlyStopping(patience=2, min_delta=0.0), [0.5, 0.505, 0.52])
    assert improved == [True, True, True] and plain.best_step == 2


def test_the_state_round_trips():
    """A stopper rebuilt from its state continues exactly as the original does."""
    rule = EarlyStopping(patience=3)
    original, _ = _walk(rule, [0.2, 0.4, 0.3])
    copy = EarlyStopper.from_state(rule, original.state())
    assert (
        copy.state()
        == original.state()
        == {
            "best_value": 0.4,
            "best_step": 1,
            "waited": 1,
            "stopped_at": None,
        }
    )
    for step, value in ((3, 0.35), (4, 0.38)):
        assert copy.observe(step, {"val_mrr": value}) == original.observe(step, {"val_mrr": value})
    assert copy.state() == original.state() and copy.stopped_at == 4


def test_a_missing_monitor_is_a_key_error_naming_it():
    stopper = EarlyStopper(EarlyStopping(patience=2, monitor="val_recall@1"))
    with pytest.raises(KeyError, match="val_recall@1"):
        stopper.observe(0, {"val_mrr": 0.5})


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"patience": 0}, "patience"),
        ({"patience": 1.5}, "patience"),
        ({"min_delta": -0.1}, "min_delta"),
        ({"min_delta": math.inf}, "min_delta"),
        ({"monitor": ""}, "monitor"),
        ({"monitor": 3}, "monitor"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(kwargs, name):
    with pytest.raises((ValueError, TypeError), match=name):
        EarlyStopping(**kwargs)


def test_the_rule_is_off_without_a_patience_and_a_stopper_needs_a_rule():
    assert not EarlyStopping().enabled and EarlyStopping(patience=1).enabled
    with pytest.raises(TypeError, match="rule"):
        EarlyStopper({"patience": 2})


# --- the driver -------------------------------------------------------------------------------

#: The scripted validation curve, by step (eval_every 2): the start, a peak at step 2 (the 2nd
#: evaluation), then evaluations that do not beat it by min_delta (0.5005 is within it).
CURVE = {0: 0.1, 2: 0.5, 4: 0.5005, 6: 0.45, 8: 0.9, 10: 0.95, 12: 0.97}
PEAK, STOP = 2, 6  # with patience 2: two evaluations after the peak
RUN = RunConfig(
    steps=12,
    batch=16,
    progress=False,
    loop=LoopConfig(checkpoint_every=2, deterministic=True),
    early_stopping=EarlyStopping(patience=2),
)


def _batches(batch: int) -> Batches:
    ids = torch.randint(1, VOCAB, (2, ROWS, 6), generator=torch.Generator().manual_seed(0))
    data = PairData(ids[0], ids[1], ids[0][:8], ids[1][:8], VOCAB)
    sampler = ResumableBatchSampler(ROWS, batch, seed=0)

    def next_batch():
        idx = sampler.next_batch()
        return data.train_anchors[idx], data.train_positives[idx]

    return Batches(next_batch, sampler)


class _Scripted:
    """An evaluate hook whose ``val_mrr`` comes from :data:`CURVE` by step (so a resumed launch
    sees the same curve) and that keeps a copy of the weights current at each evaluation."""

    def __init__(self):
        self.weights: dict[int, dict[str, torch.Tensor]] = {}
        self.steps: list[int] = []

    def __call__(self, trainer, progress) -> dict:
        state = trainer.module.state_dict()
        self.weights[progress.step] = {k: v.detach().clone() for k, v in state.items()}
        self.steps.append(progress.step)
        return {"val_mrr": CURVE[progress.step]}


def _train(config: RunConfig, evaluate=None, eval_every: int | None = 2):
    return run_training(
        config,
        lambda: BagOfEmbeddingsEncoder(VOCAB, DIM),
        lambda trainer: _batches(config.batch),
        evaluate=evaluate,
        eval_every=eval_every,
    )


def _same_weights(result: FinishedRun, expected: dict[str, torch.Tensor]) -> bool:
    state = result.trainer.module.state_dict()
    return state.keys() == expected.keys() and all(
        torch.equal(state[k], expected[k]) for k in expected
    )


def test_a_run_stops_patience_evaluations_after_the_peak_and_keeps_its_weights():
    """Patience 2, peak at step 2: the run trains to step 6 and no further, reports the step-2
    evaluation as final, and ends with exactly (bitwise) the weights it had at step 2 — not
    those of step 6, where it stopped."""
    hook = _Scripted()
    result = _train(RUN, hook)
    assert isinstance(result, FinishedRun)
    assert result.trainer.steps == STOP and len(result.losses) == STOP
    assert hook.steps == [0, 2, 4, 6]  # nothing evaluated after the stop
    assert result.summary["steps"] == STOP
    assert result.summary["final"] == {"step": PEAK, "val_mrr": CURVE[PEAK]}
    assert result.summary["early_stopping"] == {
        "best_value": CURVE[PEAK],
        "best_step": PEAK,
        "waited": 2,
        "stopped_at": STOP,
    }
    assert _same_weights(result, hook.weights[PEAK])
    assert not _same_weights(result, hook.weights[STOP])  # training did move the weights


def test_the_untrained_start_is_a_candidate():
    """A curve that never beats the start keeps the untrained weights and reports the start
    evaluation (step 0) as final."""

    def falling(trainer, progress):
        return {"val_mrr": 0.5 - 0.01 * progress.step}

    result = _train(replace(RUN, early_stopping=EarlyStopping(patience=1)), falling)
    assert result.trainer.steps == 2
    assert result.summary["final"] == {"step": 0, "val_mrr": 0.5}
    untrained = _train(replace(RUN, steps=0, early_stopping=EarlyStopping()))
    assert result.fingerprint == untrained.fingerprint


def test_without_early_stopping_every_step_trains_and_the_last_evaluation_is_final():
    """The same curve with the rule off: all 12 steps, the step-12 evaluation as final, the
    step-12 weights kept, and no early-stopping state in the summary."""
    hook = _Scripted()
    result = _train(replace(RUN, early_stopping=EarlyStopping()), hook)
    assert result.trainer.steps == 12 and hook.steps == [0, 2, 4, 6, 8, 10, 12]
    assert result.summary["final"] == {"step": 12, "val_mrr": CURVE[12]}
    assert result.summary["early_stopping"] is None
    assert _same_weights(result, hook.weights[12])


def test_early_stopping_needs_an_evaluate_hook_and_eval_every():
    with pytest.raises(RunRefused, match="early stopping"):
        _train(RUN, evaluate=None, eval_every=2)
    with pytest.raises(RunRefused, match="eval_every"):
        _train(RUN, evaluate=_Scripted(), eval_every=None)


def test_a_resumed_run_stops_where_the_uninterrupted_run_stops(tmp_path):
    """A launch killed (``stop_after=5``) after the peak but before the early stop resumes from
    its step-4 checkpoint, which carries the best weights and the rule's progress (one
    evaluation waited): it stops at the same step, keeps the same best step and ends with the
    uninterrupted run's fingerprint. A relaunch of the finished run trains nothing more."""
    clean = _train(replace(RUN, output_dir=str(tmp_path / "clean")), _Scripted())
    resumable = replace(RUN, output_dir=str(tmp_path / "resumed"))
    stopped = _train(replace(resumable, loop=replace(RUN.loop, stop_after=5)), _Scripted())
    assert isinstance(stopped, StoppedLaunch) and stopped.stopped_at == 5
    resumed = _train(resumable, _Scripted())
    assert resumed.summary["resumed_from"] == 4
    assert resumed.trainer.steps == clean.trainer.steps == STOP
    assert resumed.fingerprint == clean.fingerprint
    assert resumed.summary["early_stopping"] == clean.summary["early_stopping"]
    assert resumed.summary["final"] == clean.summary["final"] == {"step": PEAK, "val_mrr": 0.5}
    assert resumed.summary["evaluations"] == clean.summary["evaluations"]

    again_hook = _Scripted()
    again = _train(resumable, again_hook)
    assert again.trainer.steps == STOP and again.losses == ()  # no step trained
    assert again_hook.steps == [0]  # only the start is evaluated, no training evaluation
    assert again.summary["resumed_from"] == STOP
    assert again.fingerprint == clean.fingerprint
    assert again.summary["final"] == clean.summary["final"]


# --- the replay over a recorded curve ---------------------------------------------------------


def test_the_replay_over_a_curve_stops_where_the_live_rule_stops():
    """``capstone.evaluation.early_stopping`` walks each (init, seed) run of a recorded curve
    (rows out of order) with the same EarlyStopper: the scripted curve stops at step 6 with
    step 2 kept, as the live run above; a rising curve runs to its end and saves nothing."""
    rule = EarlyStopping(patience=2)
    rising = {step: 0.1 * (1 + step) for step in CURVE}
    rows = [
        {"init": init, "seed": 0, "step": step, "val_mrr": value, "mrr": 10 * value}
        for init, curve in (("random", CURVE), ("lsa", rising))
        for step, value in curve.items()
    ]
    frame = pd.DataFrame(rows[::-1])
    table = replay_early_stopping(frame, rule, report=("mrr",)).set_index("init")
    live, _ = _walk(rule, list(CURVE.values()), list(CURVE))
    assert table.loc["random", "stop_step"] == live.stopped_at == STOP
    assert table.loc["random", "best_step"] == live.best_step == PEAK
    assert table.loc["random", "mrr_kept"] == pytest.approx(10 * CURVE[PEAK])
    assert table.loc["random", "mrr_end"] == pytest.approx(10 * CURVE[12])
    assert table.loc["random", "saved"] == pytest.approx(1 - STOP / 12)
    assert table.loc["lsa", "stop_step"] == 12 and table.loc["lsa", "best_step"] == 12
    assert table.loc["lsa", "saved"] == 0
    with pytest.raises(ValueError, match="patience"):
        replay_early_stopping(frame, EarlyStopping(), report=("mrr",))
