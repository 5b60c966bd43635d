"""§20.6 the scaling studies' run (``chapter20.capstone.scaling``) and what it stands on: a point
refuses bad values, a share of the training text is a nested subset, the rate follows the batch
by the square root, and a short run returns one validation-chosen evaluation."""

from __future__ import annotations

import math

import pytest

from chapter20.capstone import scaling
from chapter20.capstone.baselines import fit_baseline
from chapter20.capstone.evaluation import heldout_sentence_pairs
from chapter20.capstone.hybrid import FUSION_WEIGHTS
from chapter20.capstone.views import training_documents
from chapter20.core.corpora import lee_background
from chapter20.techniques.distributed import scale_lr
from chapter20.training.config import TrainConfig
from chapter20.training.early_stopping import EarlyStopper


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"dim": 0}, "dim"),
        ({"init": "x"}, "init"),
        ({"batch": 1}, "batch"),
        ({"fraction": 0}, "fraction"),
        ({"fraction": 1.5}, "fraction"),
        ({"budget": "x"}, "budget"),
        ({"seed": -1}, "seed"),
        ({"steps": 0}, "steps"),
    ],
)
def test_a_scaling_point_refuses_bad_values_naming_them(kwargs, name):
    with pytest.raises((ValueError, TypeError), match=name):
        scaling.ScalingPoint(**kwargs)


def test_a_point_is_the_recipe_at_its_width_start_share_and_seed():
    point = scaling.ScalingPoint(dim=32, init="lsa", batch=None, fraction=0.5, seed=3)
    recipe = point.recipe()
    assert (recipe.dim, recipe.init, recipe.fraction, recipe.seed) == (32, "lsa", 0.5, 3)


def _subsequence(part: list, whole: list) -> bool:
    """Whether ``part`` is ``whole`` with some entries left out, the rest in the same order."""
    rest = iter(whole)
    return all(any(doc == other for other in rest) for doc in part)


def test_smaller_shares_of_the_training_text_are_nested_subsets_in_order():
    """1/8 of the documents are 1/4 of them with some left out, in the same order, and 1/4 are
    the whole with some left out; each share holds round(fraction × all) documents."""
    everything = training_documents()
    eighth, quarter = training_documents(fraction=1 / 8), training_documents(fraction=1 / 4)
    assert len(eighth) == round(len(everything) / 8) and len(quarter) == round(len(everything) / 4)
    assert _subsequence(eighth, quarter) and _subsequence(quarter, everything)
    assert not _subsequence(quarter, eighth) and not _subsequence(eighth[::-1], quarter)
    with pytest.raises(ValueError, match="fraction"):
        training_documents(fraction=0)


def test_the_rate_follows_the_batch_linearly_or_by_the_square_root():
    """From base batch 512 to 2048 (4×): the square-root rule doubles the rate, the linear rule
    quadruples it; scale_lr says the same, and an unknown rule is refused."""
    sqrt = TrainConfig(lr=1e-3, base_batch=512, lr_scaling="sqrt").for_run(10, 2048)
    linear = TrainConfig(lr=1e-3, base_batch=512, lr_scaling="linear").for_run(10, 2048)
    assert sqrt.peak_lr == pytest.approx(2e-3) and linear.peak_lr == pytest.approx(4e-3)
    assert TrainConfig(lr=1e-3, base_batch=512).lr_scaling == "linear"  # C14's rule by default
    assert scale_lr(1e-3, 512, 128, rule="sqrt") == pytest.approx(5e-4)
    with pytest.raises(ValueError, match="lr_scaling"):
        TrainConfig(lr_scaling="cube")
    with pytest.raises(ValueError, match="rule"):
        scale_lr(1e-3, 512, 2048, rule="cube")


@pytest.fixture(scope="module")
def pairs() -> scaling.HeldOutPairs:
    return scaling.HeldOutPairs(
        test=heldout_sentence_pairs(40), validation=heldout_sentence_pairs(40, split="validation")
    )


def test_a_short_scaling_run_reports_its_validation_chosen_step(pairs):
    """4 steps of 64 documents (dim 16): evaluations at the start and the end, exactly one row
    ``chosen`` — the step §20.5's rule keeps on the rows' validation MRR — at the rate 1e-3 ×
    sqrt(64 / 512). With BM25 given, only the chosen row holds the bucket and fusion figures,
    and the untrained encoder's under ``start_``."""
    assert scaling.SCALING_TRAINING.lr == 1e-3 and scaling.SCALING_TRAINING.base_batch == 512
    lexical = fit_baseline("bm25", [doc for doc in lee_background() if doc])
    point = scaling.ScalingPoint(dim=16, batch=64, steps=4)
    rows = scaling.scaling_run(point, pairs, lexical)
    steps = [row["step"] for row in rows]
    assert steps[0] == 0 and steps[-1] == 4 and steps == sorted(steps)
    assert sum(row["chosen"] for row in rows) == 1
    replay = EarlyStopper(scaling.SCALING_STOPPING)
    for row in rows:
        replay.observe(row["step"], row)
    chosen = next(row for row in rows if row["chosen"])
    assert chosen["step"] == replay.best_step
    for row in rows:
        assert row["lr"] == pytest.approx(1e-3 * math.sqrt(64 / 512))
        assert (row["dim"], row["batch"], row["init"], row["budget"]) == (16, 64, "random", "steps")
        assert 0 <= row["val_mrr"] <= 1 and row["documents"] == row["step"] * 64
    for key in ("hybrid_weight", "hybrid_mrr", "mrr_overlap_0", "start_hybrid_mrr"):
        assert key in chosen and all(key not in row for row in rows if not row["chosen"])
    assert chosen["hybrid_weight"] in FUSION_WEIGHTS


def test_a_documents_budget_sees_as_many_documents_as_the_steps_budget(pairs):
    """At ``budget="documents"`` a batch of 256 runs 4 × 512 / 256 = 8 steps (the documents 4
    steps of 512 see), on a quarter of the training text."""
    point = scaling.ScalingPoint(dim=16, batch=256, fraction=0.25, budget="documents", steps=4)
    rows = scaling.scaling_run(point, pairs)
    assert rows[-1]["step"] == 8 and rows[-1]["documents"] == 4 * 512
    assert rows[0]["documents_trained"] == len(training_documents(fraction=0.25))
    assert sum(row["chosen"] for row in rows) == 1
    with pytest.raises(TypeError, match="point"):
        scaling.scaling_run({"dim": 16}, pairs)
