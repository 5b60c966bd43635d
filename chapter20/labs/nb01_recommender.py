"""§20.1 embedding tables for recommender ids, on real interactions: the study of notebook 01,
section 8.

The two-tower recommender, its interactions (passages of the packaged corpora as users, the
words they hold as items) and its training are ``chapter20.demos.recommender``. Here: its
held-out recall over seeds beside the same tables untrained and the positive control (users
shuffled, :func:`shuffled_users`), the committed record of that study, and
:func:`sharded_step_on_rank`, which proves one step of both tables row-sharded over a group
(``ShardedEmbedding``, ``per_rank`` inputs) equal to the plain tables.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from chapter20.core.checks import check_int
from chapter20.core.device import set_seed
from chapter20.demos.recommender import (
    Interactions,
    TwoTower,
    heldout_recall,
    passage_interactions,
    sample_negatives,
    train_recommender,
)
from chapter20.labs.common import UNTRAINED
from chapter20.techniques.distributed import group_rank_and_size
from chapter20.techniques.sharding import ShardedEmbedding

__all__ = [
    "recommender_runs",
    "TRAINED",
    "CONTROL",
    "RECOMMENDER_STUDY",
    "shuffled_users",
    "recommender_study",
    "recommender_benchmark",
    "sharded_step_on_rank",
]


def recommender_runs(
    data: Interactions, seeds: tuple[int, ...] = (0, 1, 2), k: int = 10, **options
) -> pd.DataFrame:
    """``train_recommender`` once per seed: held-out recall@k, first and final loss."""
    rows = []
    for seed in seeds:
        model, losses = train_recommender(data, seed=seed, **options)
        recall = heldout_recall(model, data, k)
        final = float(np.mean(losses[-10:]))
        rows.append({"seed": seed, f"recall@{k}": recall, "first_loss": losses[0],
                     "final_loss": final})  # fmt: skip
    return pd.DataFrame(rows)


def sharded_step_on_rank(
    batch: int = 512,
    negatives: int = 5,
    dim: int = 16,
    seed: int = 0,
    data: Interactions | None = None,
):
    """On every rank of a group: one SGD step of the two-tower model on a batch of real
    interactions (:func:`passage_interactions`), once with both tables row-sharded over the
    group (``ShardedEmbedding``, ``per_rank`` inputs: each rank holds its share of the batch)
    and once with plain tables on the whole batch in this process. Returns the loss of each
    and the largest difference of the two tables after the step (the sharded tables gathered);
    float32 rounding, since the ranks sum the gradients in another order. ``data``: the
    interactions already built by the caller (else each rank builds them)."""
    rank, world = group_rank_and_size()
    data = passage_interactions() if data is None else data
    generator = torch.Generator().manual_seed(seed)
    rows = data.train[torch.randint(0, len(data.train), (batch,), generator=generator)]
    sampled = sample_negatives(batch, data.num_items, negatives, generator)
    set_seed(seed)
    plain = TwoTower(data.users, data.num_items, dim)
    full = {name: t.weight.detach().clone() for name, t in (("users", plain.users),
                                                            ("items", plain.items))}  # fmt: skip

    def sharded_table(name, rows_, width):
        return ShardedEmbedding.from_full_weight(full[name], inputs="per_rank")

    sharded = TwoTower(data.users, data.num_items, dim, table=sharded_table)
    with torch.no_grad():  # undo the constructor's scaling: both start from ``full``
        sharded.users.weight.copy_(full["users"][sharded.users.row_ids()])
        sharded.items.weight.copy_(full["items"][sharded.items.row_ids()])
    mine = torch.arange(batch).tensor_split(world)[rank]
    losses = {}
    for name, model, part in (("sharded", sharded, mine), ("plain", plain, torch.arange(batch))):
        loss = model(rows[part, 0], rows[part, 1], sampled[part]).sum() / batch
        loss.backward()
        torch.optim.SGD(model.parameters(), lr=1.0).step()
        losses[name] = float(loss.detach())
    if world > 1:
        box = torch.tensor([losses["sharded"]])
        torch.distributed.all_reduce(box)
        losses["sharded"] = float(box)
    with torch.no_grad():
        gap = max(
            float((sharded.users.full_weight() - plain.users.weight).abs().max()),
            float((sharded.items.full_weight() - plain.items.weight).abs().max()),
        )
    return {"rank": rank, "loss_sharded": losses["sharded"], "loss_plain": losses["plain"],
            "max_weight_diff": gap, "users": data.users, "items": data.num_items}  # fmt: skip


#: The names of the rows of :func:`recommender_study`: the trained tables and the positive
#: control, trained on interactions whose users are shuffled (nothing to learn about a user).
TRAINED, CONTROL = "two towers", "two towers, users shuffled (control)"
#: The committed record of :func:`recommender_benchmark`.
RECOMMENDER_STUDY = "recommender_recall.csv"


def shuffled_users(data: Interactions, seed: int = 0) -> Interactions:
    """``data`` with the users of its training interactions permuted (seeded): the items and
    their popularity stay, the link from a user to its items is gone. Trained on these, the
    tables can learn popularity but nothing about a user: the positive control of §20.1's
    recommender, which held-out recall must tell from the real run."""
    generator = torch.Generator().manual_seed(check_int("seed", seed, 0))
    train = data.train.clone()
    train[:, 0] = train[torch.randperm(len(train), generator=generator), 0]
    return replace(data, train=train)


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
            model, losses = train_recommender(train_on, seed=seed, **options)
            recall = heldout_recall(model, data, k)
            final = float(np.mean(losses[-10:]))
            rows.append({"model": name, "seed": seed, f"recall@{k}": recall,
                         "first_loss": losses[0], "final_loss": final})  # fmt: skip
    return pd.DataFrame(rows)


def recommender_benchmark(out: str = "") -> None:
    """``chapter20 bench recommender``: :func:`recommender_study` on :func:`passage_interactions`
    (three seeds, the default training); with ``out`` written as the record
    ``data/recommender_recall.csv`` that notebook 01 judges the tables on."""
    from chapter20.labs.common import study_output, write_study

    frame = recommender_study(passage_interactions())
    print(frame.round(4).to_string(index=False))
    if study_output(out):
        print("written:", write_study(frame, study_output(out), "chapter20 bench recommender"))
