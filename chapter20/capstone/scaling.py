"""§20.6 What scale buys: one run of the scaling studies, and the rule every such run follows.

A point of a study (:class:`ScalingPoint`) is the capstone encoder at one width, start, batch,
share of the training text and seed. :func:`scaling_run` trains it with the one run driver
(``chapter20.capstone.recipe.train_encoder``) under one rule, fixed before any run:

- evaluate on the validation pairs every :data:`EVAL_DOCUMENTS` documents seen (25 steps of
  512), and stop by :data:`SCALING_STOPPING` (§20.5's early stopping: patience 4 evaluations,
  a gain of at least 0.001 MRR), keeping the best weights;
- at most ``steps`` steps (:data:`SCALING_STEPS` unless the study says), or, at
  ``budget="documents"``, as many documents as that many steps of 512 (equal documents seen);
- the rate 1e-3 at 512 documents, scaled to the batch by its square root (Adam's rule;
  ``TrainConfig.lr_scaling``).

Every figure a point reports is the one at its validation-chosen step, next to its untrained
start. With the tuned BM25 given, the run also measures the encoder per word-overlap bucket and
fused with BM25 (``chapter20.capstone.hybrid``), both untrained and at the chosen step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from chapter20.capstone.baselines import Baseline
from chapter20.capstone.evaluation import encoder_scorer
from chapter20.capstone.hybrid import (
    bucket_metrics,
    hybrid_figures,
    overlap_buckets,
    shared_content_words,
)
from chapter20.capstone.recipe import (
    INITS,
    RECIPE_RUN,
    RECIPE_TRAINING,
    EncoderRecipe,
    build_encoder,
    train_encoder,
)
from chapter20.core.checks import check_int, check_real
from chapter20.training.early_stopping import EarlyStopping

__all__ = [
    "BUDGETS",
    "EVAL_DOCUMENTS",
    "SCALING_STEPS",
    "SCALING_STOPPING",
    "SCALING_TRAINING",
    "HeldOutPairs",
    "ScalingPoint",
    "scaling_run",
]

#: The early-stopping rule of every scaling run, fixed before any was measured.
SCALING_STOPPING = EarlyStopping(patience=4, monitor="val_mrr", min_delta=0.001)
#: Documents seen between two evaluations (25 steps of 512).
EVAL_DOCUMENTS = 12_800
#: The most steps a run takes (at ``budget="steps"``), and at 512 documents the most documents
#: one sees (at ``budget="documents"``).
SCALING_STEPS = 400
#: The two budgets of the batch study: equal steps, or equal documents seen.
BUDGETS = ("steps", "documents")
#: The step of every scaling run: the recipe's, its rate 1e-3 at 512 documents scaled to the
#: batch by the square root.
SCALING_TRAINING = replace(RECIPE_TRAINING, base_batch=512, lr_scaling="sqrt")


@dataclass(frozen=True)
class HeldOutPairs:
    """The held-out pairs a run is judged on: ``test`` (reported) and ``validation`` (where the
    step, the fusion weight and every setting are chosen), each (anchors, positives)."""

    test: tuple[list[str], list[str]]
    validation: tuple[list[str], list[str]]


@dataclass(frozen=True)
class ScalingPoint:
    """One run of a scaling study (§20.6): the bag encoder of width ``dim`` from the ``init``
    start, ``batch`` documents per step (None: every training document), trained on
    ``fraction`` of the training documents, seeded by ``seed``, for the ``budget`` of
    :data:`BUDGETS`: at most ``steps`` steps, or as many documents as ``steps`` steps of 512."""

    dim: int = 256
    init: str = "random"
    batch: int | None = 512
    fraction: float = 1.0
    seed: int = 0
    budget: str = "steps"
    steps: int = SCALING_STEPS

    def __post_init__(self) -> None:
        check_int("dim", self.dim, 1)
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")
        if self.batch is not None:
            check_int("batch", self.batch, 2)
        if not 0 < check_real("fraction", self.fraction, finite=True) <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")
        check_int("seed", self.seed, 0)
        if self.budget not in BUDGETS:
            raise ValueError(f"budget must be one of {BUDGETS}, got {self.budget!r}")
        check_int("steps", self.steps, 1)

    def recipe(self) -> EncoderRecipe:
        """The capstone recipe at this point's width, start, share of the text and seed."""
        return EncoderRecipe(dim=self.dim, init=self.init, fraction=self.fraction, seed=self.seed)


def _run_for(point: ScalingPoint, batch: int):
    """The run of ``point`` at its resolved ``batch``, and how often it evaluates."""
    budget = point.steps
    if point.budget == "documents":
        budget = max(1, round(point.steps * 512 / batch))
    run = replace(
        RECIPE_RUN, steps=budget, batch=batch, seed=point.seed, training=SCALING_TRAINING,
        early_stopping=SCALING_STOPPING,
    )  # fmt: skip
    return run, max(1, round(EVAL_DOCUMENTS / batch))


def _lexical_readings(setup, pairs: HeldOutPairs, lexical: Baseline, prefix: str) -> dict:
    """The encoder of ``setup`` as it is now, per word-overlap bucket (test MRR) and fused with
    ``lexical``, each figure's name led by ``prefix``."""
    score = encoder_scorer(setup.text_encoder().encode)
    out = {f"{prefix}{k}": v for k, v in hybrid_figures(score, lexical.score, pairs.validation,
                                                         pairs.test).items()}  # fmt: skip
    buckets = overlap_buckets(shared_content_words(*pairs.test))
    for row in bucket_metrics(score(*pairs.test), buckets):
        out[f"{prefix}mrr_overlap_{row['bucket']}"] = row["mrr"]
    return out


def scaling_run(
    point: ScalingPoint, pairs: HeldOutPairs, lexical: Baseline | None = None
) -> list[dict]:
    """Train ``point`` by the scaling rule (module docstring) and return its evaluations, one
    dict per evaluation: the point's fields (the batch resolved), the rate, the step, documents
    seen, seconds, loss, every figure on the test pairs and the validation pairs, and
    ``chosen`` on the validation-chosen step. With ``lexical`` (the tuned BM25 of the same
    text), the chosen row also holds the per-bucket MRR and the fusion's figures, and the
    untrained encoder's under ``start_``."""
    if not isinstance(point, ScalingPoint):
        raise TypeError(f"point must be a ScalingPoint, got {type(point).__name__}")
    setup = build_encoder(point.recipe())
    batch = point.batch or len(setup.documents)
    run, eval_every = _run_for(point, batch)
    start = _lexical_readings(setup, pairs, lexical, "start_") if lexical is not None else {}
    records = train_encoder(
        setup, run, eval_every=eval_every, retrieval=pairs.test, validation=pairs.validation
    )
    fields = {**asdict(point), "batch": batch, "lr": run.train_config().peak_lr,
              "documents_trained": len(setup.documents)}  # fmt: skip
    rows = [{**fields, **record} for record in records]
    if lexical is not None:
        chosen = next(i for i, row in enumerate(rows) if row["chosen"])
        rows[chosen].update(start, **_lexical_readings(setup, pairs, lexical, ""))
    return rows
