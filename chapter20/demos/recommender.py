"""§20.1 embedding tables for recommender ids, on real interactions: the two-tower recommender of
notebook 01, section 8 (an application of the chapter's tables with a loop of its own: a user table
and an item table, not an encoder of pairs).

No rating or click data set ships with this companion, so the interactions come from a packaged
corpus, turned into co-occurrence (:func:`passage_interactions`): every **passage** of the
Wikipedia sample (consecutive runs of ``passage_tokens`` tokens of an article) and every
``lee_background`` news document is a *user*, and every word it contains is an *item* it
"interacted with" — implicit feedback, as clicks are. Function words, which every passage holds,
and words too rare to learn are left out. For each user a share of its items is held out; the
model must rank them above the items the user never had, from the items it kept
(:func:`heldout_recall`, beside :func:`popularity_recall`, the baseline of the most popular
items).

The model is the two-tower form of §20.1's tables (:class:`TwoTower`): a user table and an item
table, the score is their dot product, and each training interaction is scored against
``negatives`` items sampled uniformly (:func:`sample_negatives`; a sampled softmax: the full
softmax over every item is what sampling avoids), trained with Adam by
:func:`train_recommender`. Either table can be a ``ShardedEmbedding`` (``table=``), rows split
over the ranks of a group: :func:`sharded_step_on_rank` proves one step of both tables sharded
equal to the plain tables'. :func:`shuffled_users` is the positive control: the same
interactions with the link from a user to its items broken.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from chapter20.core.checks import check_int, check_positive, check_real
from chapter20.core.corpora import lee_background, wiki_articles
from chapter20.core.device import set_seed
from chapter20.techniques.distributed import group_rank_and_size
from chapter20.techniques.sharding import ShardedEmbedding

__all__ = [
    "Interactions",
    "passage_interactions",
    "TwoTower",
    "sample_negatives",
    "train_recommender",
    "heldout_recall",
    "popularity_recall",
    "shuffled_users",
    "sharded_step_on_rank",
]


@dataclass(frozen=True)
class Interactions:
    """Implicit feedback: ``train`` and ``test`` are ``[n, 2]`` (user, item) rows, distinct
    pairs, disjoint; ``items`` names each item id (a word); ``popularity`` counts each item's
    training users."""

    users: int
    items: list[str]
    train: torch.Tensor
    test: torch.Tensor
    popularity: torch.Tensor

    @property
    def num_items(self) -> int:
        return len(self.items)


def _passages(passage_tokens: int) -> list[list[str]]:
    passages = []
    for article in wiki_articles():
        for start in range(0, len(article) - passage_tokens // 2, passage_tokens):
            passages.append(article[start : start + passage_tokens])
    return passages + [list(doc) for doc in lee_background()]


def passage_interactions(
    passage_tokens: int = 200,
    min_users: int = 10,
    max_user_share: float = 0.2,
    test_share: float = 0.2,
    seed: int = 0,
) -> Interactions:
    """Users = passages of ``passage_tokens`` tokens of the Wikipedia sample's articles and the
    ``lee_background`` documents; items = words held by at least ``min_users`` users and at
    most ``max_user_share`` of them (function words excluded); one interaction per distinct
    (user, word). A random ``test_share`` of each user's items (users with at least 5) is held
    out, seeded by ``seed``."""
    passage_tokens = check_int("passage_tokens", passage_tokens, 10)
    min_users = check_int("min_users", min_users, 1)
    check_real("max_user_share", max_user_share, minimum=0, maximum=1)
    check_real("test_share", test_share, minimum=0, maximum=1, exclusive=True)
    if max_user_share == 0:
        raise ValueError("max_user_share must be in (0, 1], got 0")
    seed = check_int("seed", seed, 0)
    users = [sorted(set(p)) for p in _passages(passage_tokens)]
    held = Counter(word for words in users for word in words)
    kept = sorted(w for w, n in held.items() if min_users <= n <= max_user_share * len(users))
    index = {word: i for i, word in enumerate(kept)}
    rng = np.random.default_rng(seed)
    train, test = [], []
    for user, words in enumerate(users):
        items = [index[w] for w in words if w in index]
        rng.shuffle(items)
        cut = int(round(test_share * len(items))) if len(items) >= 5 else 0
        test += [(user, item) for item in items[:cut]]
        train += [(user, item) for item in items[cut:]]
    train_t, test_t = torch.tensor(train), torch.tensor(test)
    popularity = torch.bincount(train_t[:, 1], minlength=len(kept))
    return Interactions(len(users), kept, train_t, test_t, popularity)


class TwoTower(nn.Module):
    """A user table and an item table (§20.1) scored by dot product; ``forward`` gives each
    (user, positive item) its sampled-softmax loss against ``[n, k]`` sampled negative items.
    ``table(name, rows, dim)`` builds each table ("users", "items"; ``nn.Embedding`` by default,
    a ``ShardedEmbedding`` to split the rows over ranks)."""

    def __init__(self, users: int, items: int, dim: int = 32, table=None):
        super().__init__()
        users, items = check_int("users", users, 1), check_int("items", items, 1)
        dim = check_int("dim", dim, 1)
        make = table or (lambda name, rows, width: nn.Embedding(rows, width))
        self.users = make("users", users, dim)
        self.items = make("items", items, dim)
        with torch.no_grad():
            for weight in (self.users.weight, self.items.weight):
                weight.mul_(0.1)  # small scores at the start: a softmax that is not saturated

    def forward(self, users: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor):
        u = self.users(users)
        items = self.items(torch.cat([positives.unsqueeze(1), negatives], dim=1))
        logits = (items * u.unsqueeze(1)).sum(-1)  # [n, 1 + k]: the positive first
        return F.cross_entropy(logits, logits.new_zeros(len(users), dtype=torch.long),
                               reduction="none")  # fmt: skip

    @torch.no_grad()
    def scores(self, users: torch.Tensor) -> torch.Tensor:
        """Every item's score for each of ``users`` (plain tables)."""
        return self.users.weight[users] @ self.items.weight.T


def sample_negatives(count: int, items: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """``[count, k]`` item ids drawn uniformly (§20.1, sampled negatives)."""
    count, items = check_int("count", count, 0), check_int("items", items, 1)
    k = check_int("k", k, 1)
    return torch.randint(0, items, (count, k), generator=generator)


def train_recommender(
    data: Interactions,
    *,
    dim: int = 32,
    epochs: float = 4.0,
    batch: int = 2048,
    negatives: int = 20,
    lr: float = 1e-2,
    seed: int = 0,
) -> tuple[TwoTower, list[float]]:
    """Train a :class:`TwoTower` on ``data.train`` with Adam for ``epochs`` passes of batches
    of ``batch`` interactions, each against ``negatives`` sampled items; returns the model and
    the loss of every step."""
    epochs, lr = check_positive("epochs", epochs), check_positive("lr", lr)
    batch, negatives = check_int("batch", batch, 1), check_int("negatives", negatives, 1)
    set_seed(check_int("seed", seed, 0))
    model = TwoTower(data.users, data.num_items, dim)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed + 1)
    steps = max(1, int(epochs * len(data.train) / batch))
    losses = []
    for _ in range(steps):
        rows = data.train[torch.randint(0, len(data.train), (batch,), generator=generator)]
        sampled = sample_negatives(batch, data.num_items, negatives, generator)
        loss = model(rows[:, 0], rows[:, 1], sampled).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return model, losses


def _recall(scores_of, data: Interactions, k: int) -> float:
    """Share of held-out (user, item) pairs whose item ranks in the user's top ``k`` among the
    items the user did not have in training."""
    hits = 0
    test = data.test
    for start in range(0, data.users, 512):
        users = torch.arange(start, min(start + 512, data.users))
        scores = scores_of(users).clone()
        mine = data.train[(data.train[:, 0] >= start) & (data.train[:, 0] < users[-1] + 1)]
        scores[mine[:, 0] - start, mine[:, 1]] = -torch.inf  # the user's own training items
        rows = test[(test[:, 0] >= start) & (test[:, 0] < users[-1] + 1)]
        own = scores[rows[:, 0] - start, rows[:, 1]]
        better = (scores[rows[:, 0] - start] > own.unsqueeze(1)).sum(dim=1)
        hits += int((better < k).sum())
    return hits / len(test)


def heldout_recall(model: TwoTower, data: Interactions, k: int = 10) -> float:
    """Recall@k of the held-out interactions under ``model``'s scores (§20.1)."""
    return _recall(model.scores, data, check_int("k", k, 1))


def popularity_recall(data: Interactions, k: int = 10) -> float:
    """Recall@k of the baseline that recommends every user the items most users had (§20.1)."""
    k = check_int("k", k, 1)
    popular = data.popularity.float()
    return _recall(lambda users: popular.expand(len(users), -1), data, k)


def shuffled_users(data: Interactions, seed: int = 0) -> Interactions:
    """``data`` with the users of its training interactions permuted (seeded): the items and
    their popularity stay, the link from a user to its items is gone. Trained on these, the
    tables can learn popularity but nothing about a user: the positive control of §20.1's
    recommender, which held-out recall must tell from the real run."""
    generator = torch.Generator().manual_seed(check_int("seed", seed, 0))
    train = data.train.clone()
    train[:, 0] = train[torch.randperm(len(train), generator=generator), 0]
    return replace(data, train=train)


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
    batch, negatives = check_int("batch", batch, 1), check_int("negatives", negatives, 1)
    dim, seed = check_int("dim", dim, 1), check_int("seed", seed, 0)
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
