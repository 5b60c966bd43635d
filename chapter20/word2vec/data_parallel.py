"""Data-parallel word2vec across processes (the note, topic 2; §20.4): each rank trains its own
copy of the tables on its share of the corpus, and the ranks combine their copies every few
thousand pairs.

Hogwild (``Word2VecConfig(workers=...)``) needs the threads to share one model's memory. Ranks
on other processes, or other machines, share nothing: each keeps both tables (input vectors and
output vectors), trains on every ``world_size``-th sentence, and after each
``1 / syncs_per_epoch`` of an epoch the ranks combine their tables with one all-reduce per
table — ``2 × words × dim × 4`` bytes per rank per sync, whatever the number of pairs between
syncs. How they combine (``combine``):

- ``"sum"`` (default): every rank's change since the last sync is applied to all copies,
  ``w ← w_sync + Σ_r (w_r − w_sync)``: what Hogwild threads do to a shared table, so each pair
  still moves the weights by one learning-rate step;
- ``"average"``: the copies are replaced by their mean (model averaging, "local SGD"): each
  pair's step is divided by the number of ranks, like a learning rate ``world_size`` times
  smaller (the linear scaling rule of §20.4.1 says to raise ``alpha`` to compensate).

Between syncs the copies drift apart; with ``syncs_per_epoch=0`` they are combined once, at the
end, from copies that never saw each other's updates — which throws away what the two learned,
since word vectors trained apart are only defined up to a rotation (notebook 09 measures it).

Without a process group it runs as a world of one. Guarantees (tested): with one rank the run
is ``train_word2vec``'s (bitwise, one worker);
after every sync, and at the end, every rank holds the same tables (bit for bit: the reduced
sum is computed once and broadcast); the combined table is the mean, or the summed changes, of
the ranks' tables.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from chapter20.core.checks import check_int
from chapter20.techniques.distributed import group_rank_and_size
from chapter20.vocab.vocabulary import build_vocab
from chapter20.word2vec.corpus import _check_sentences
from chapter20.word2vec.skipgram import SkipGram
from chapter20.word2vec.skipgram_config import Word2VecConfig
from chapter20.word2vec.skipgram_training import train_word2vec
from chapter20.word2vec.vectors import WordVectors

__all__ = [
    "COMBINE",
    "DataParallelRun",
    "RankSync",
    "train_word2vec_data_parallel",
]

#: How :class:`RankSync` combines the ranks' tables.
COMBINE = ("sum", "average")


class RankSync:
    """The :class:`~chapter20.word2vec.skipgram_training.EpochSync` of data-parallel word2vec (note,
    topic 2): after each of ``segments`` parts of an epoch, one all-reduce per table of the
    :class:`SkipGram` combines the copies of every rank of ``group`` (``combine``: see the
    module). ``syncs == 0`` combines nothing during training (one part per epoch).
    ``seconds`` and ``count`` add up the time spent in the syncs and their number;
    ``table_bytes`` is what one sync all-reduces (both tables, as the model holds them)."""

    def __init__(self, syncs: int, combine: str = "sum", group: dist.ProcessGroup | None = None):
        self.syncs = check_int("syncs_per_epoch", syncs, 0)
        if combine not in COMBINE:
            raise ValueError(f"combine must be one of {COMBINE}, got {combine!r}")
        self.combine, self.group = combine, group
        self.rank, self.world_size = group_rank_and_size(group)
        self.segments, self.stream = max(1, self.syncs), self.rank
        self.seconds, self.count, self.table_bytes = 0.0, 0, 0
        self._start: dict[str, torch.Tensor] | None = None

    def __call__(self, model: SkipGram) -> None:
        tables = {"input": model._w_in, "output": model._w_out}
        self.table_bytes = sum(table.nbytes for table in tables.values())
        if self._start is None:  # before the first epoch: the weights every rank starts from
            sum_mode = self.combine == "sum"
            self._start = {name: t.clone() for name, t in tables.items()} if sum_mode else {}
        elif self.syncs:
            for name, table in tables.items():
                self.reduce(table, name)

    def reduce(self, table: torch.Tensor, name: str) -> None:
        """Combine ``table`` (in place; the first rows of the model's ``name`` table, "input"
        or "output") with the same table of every other rank."""
        start = time.perf_counter()
        if self.world_size == 1:
            pass  # a world of one (no process group): the combination of one copy is itself
        elif self.combine == "sum":
            # What each rank contributes: its change since the last sync (or the start).
            previous = self._start[name][: len(table)]
            table.sub_(previous)
            dist.all_reduce(table, group=self.group)
            table.add_(previous)
            previous.copy_(table)
        else:
            dist.all_reduce(table, group=self.group)
            table.div_(self.world_size)
        self.seconds += time.perf_counter() - start
        self.count += 1


@dataclass(frozen=True)
class DataParallelRun:
    """One rank's result of :func:`train_word2vec_data_parallel` (note, topic 2): the combined
    ``vectors`` (the same on every rank; their ``stats`` count this rank's shard, so
    ``stats.words_per_second`` is the rank's speed), the rank and world size, the syncs'
    ``count`` and ``sync_seconds`` (inside the training time) and ``table_bytes`` (what one
    sync during training all-reduces per rank: both tables)."""

    vectors: WordVectors
    rank: int
    world_size: int
    syncs: int
    sync_seconds: float
    table_bytes: int


def train_word2vec_data_parallel(
    sentences: Iterable[Sequence[str]],
    config: Word2VecConfig | None = None,
    *,
    syncs_per_epoch: int = 8,
    combine: str = "sum",
    group: dist.ProcessGroup | None = None,
) -> DataParallelRun:
    """Train word2vec on every rank of ``group`` (default: the initialised process group)
    together (note, topic 2; see the module): the vocabulary of all ``sentences`` (the same on
    every rank), rank ``r`` training on sentences ``r, r + W, r + 2W, ...`` from the same
    initial weights, its pair and noise draws its own, combined ``syncs_per_epoch`` times per
    epoch (``combine``: ``"sum"`` or ``"average"``; 0: once, after the last epoch).

    ``config``: every rank's settings (a :class:`Word2VecConfig`; None: its defaults), as
    :func:`~chapter20.word2vec.skipgram_training.train_word2vec` reads them. Call it on every
    rank with the same arguments: each sync is a collective.
    """
    config = Word2VecConfig() if config is None else config
    if not isinstance(config, Word2VecConfig):
        raise TypeError(f"config must be a Word2VecConfig, got {type(config).__name__}")
    sync = RankSync(syncs_per_epoch, combine, group)
    sentences = _check_sentences(sentences)
    vocab = build_vocab(sentences, min_count=config.min_count)
    shard = sentences[sync.rank :: sync.world_size]
    vectors = train_word2vec(shard, config, vocab=vocab, sync=sync)
    if sync.syncs == 0:  # combined once, at the end: the input vectors are what is returned
        sync.reduce(torch.from_numpy(vectors.vectors), "input")
    return DataParallelRun(
        vectors, sync.rank, sync.world_size, sync.count, sync.seconds, sync.table_bytes
    )
