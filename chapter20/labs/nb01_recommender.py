"""§20.1 embedding tables for recommender ids, on real interactions: the study of notebook 01,
section 8.

The two-tower recommender, its interactions (passages of the packaged corpora as users, the
words they hold as items), its training, the positive control (users shuffled,
``shuffled_users``) and the proof of its tables row-sharded over a group
(``sharded_step_on_rank``) are ``chapter20.demos.recommender``. Here: its held-out recall over
seeds beside the same tables untrained and the positive control, and the committed record of
that study.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from chapter20.core.device import set_seed
from chapter20.demos.recommender import (
    Interactions,
    TwoTower,
    heldout_recall,
    passage_interactions,
    shuffled_users,
    train_recommender,
)
from chapter20.labs.common import UNTRAINED

__all__ = [
    "recommender_runs",
    "TRAINED",
    "CONTROL",
    "RECOMMENDER_STUDY",
    "recommender_study",
    "recommender_benchmark",
]


def recommender_runs(
    data: Interactions, seeds: tuple[int, ...] = (0, 1, 2), k: int = 10, **options
) -> pd.DataFrame:
    """``train_recommender`` once per seed: held-out recall@k, first and final loss."""
    return pd.DataFrame(
        [{"seed": seed, **_trained(data, data, seed, k, options)} for seed in seeds]
    )


def _trained(train_on: Interactions, data: Interactions, seed: int, k: int, options) -> dict:
    """``train_recommender`` on ``train_on``: the held-out recall@k on ``data``'s held-out
    interactions, the first loss and the mean of the last 10."""
    model, losses = train_recommender(train_on, seed=seed, **options)
    return {f"recall@{k}": heldout_recall(model, data, k), "first_loss": losses[0],
            "final_loss": float(np.mean(losses[-10:]))}  # fmt: skip


#: The names of the rows of :func:`recommender_study`: the trained tables and the positive
#: control, trained on interactions whose users are shuffled (nothing to learn about a user).
TRAINED, CONTROL = "two towers", "two towers, users shuffled (control)"
#: The committed record of :func:`recommender_benchmark`.
RECOMMENDER_STUDY = "recommender_recall.csv"


def recommender_study(
    data: Interactions, seeds: tuple[int, ...] = (0, 1, 2), k: int = 10, **options
) -> pd.DataFrame:
    """Per seed, held-out recall@k of the two tables untrained (the same seed's initial
    weights), trained (:func:`train_recommender`) and trained on :func:`shuffled_users` (the
    control); every model is scored on ``data``'s own held-out interactions (§20.1)."""
    rows = []
    for seed in seeds:
        set_seed(seed)  # as train_recommender does before building its model
        untrained = TwoTower(data.users, data.num_items, options.get("dim", 32))
        rows.append(
            {"model": UNTRAINED, "seed": seed, f"recall@{k}": heldout_recall(untrained, data, k)}
        )
        for name, train_on in ((TRAINED, data), (CONTROL, shuffled_users(data, seed))):
            rows.append({"model": name, "seed": seed, **_trained(train_on, data, seed, k, options)})
    return pd.DataFrame(rows)


def recommender_benchmark(out: str = "") -> None:
    """``chapter20 bench recommender``: :func:`recommender_study` on :func:`passage_interactions`
    (three seeds, the default training); with ``out`` written as the record
    ``data/recommender_recall.csv`` that notebook 01 judges the tables on."""
    from chapter20.core.study_record import study_output, write_study

    frame = recommender_study(passage_interactions())
    print(frame.round(4).to_string(index=False))
    if study_output(out):
        print("written:", write_study(frame, study_output(out), "chapter20 bench recommender"))
