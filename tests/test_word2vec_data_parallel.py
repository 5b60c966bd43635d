"""Tests for chapter20.word2vec.data_parallel (note, topic 2): ranks that train their own copies
of word2vec's tables on their shards and combine them. A world of one is train_word2vec; two
gloo ranks end with the same tables, combined as the mean or as the summed changes; bad input is
refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.distributed as dist

from chapter20.techniques.distributed import run_local_group
from chapter20.word2vec.data_parallel import RankSync, train_word2vec_data_parallel
from chapter20.word2vec.skipgram_config import Word2VecConfig
from chapter20.word2vec.skipgram_training import train_word2vec

OPTIONS = dict(dim=16, epochs=2, seed=3, progress=False)
CONFIG = Word2VecConfig(**OPTIONS)


@pytest.mark.parametrize("combine", ["sum", "average"])
def test_a_world_of_one_is_train_word2vec_bitwise(lee, combine):
    run = train_word2vec_data_parallel(lee, CONFIG, syncs_per_epoch=4, combine=combine)
    plain = train_word2vec(lee, CONFIG)
    assert np.array_equal(run.vectors.vectors, plain.vectors)  # 4 parts per epoch change nothing
    assert (run.rank, run.world_size, run.syncs) == (0, 1, 2 * 4 * 2)  # 2 tables, 4 × 2 epochs
    assert run.table_bytes == (2 * plain.vectors.size + 2 * 16) * 4  # + each table's zero row


def _two_ranks_reduce():
    """Rank r's tables start at p and move to p + (r + 1) · d; one sync combines them, for each
    way of combining."""
    rank, out = dist.get_rank(), {}
    start = torch.arange(12.0).view(4, 3)
    change = torch.linspace(-1.0, 1.0, 12).view(4, 3)
    for combine in ("sum", "average"):
        sync = RankSync(1, combine)

        class Model:
            _w_in, _w_out = start.clone(), start.clone() * 2

        sync(Model)  # the start
        Model._w_in += (rank + 1) * change
        Model._w_out += (rank + 1) * change
        sync(Model)
        out[combine] = (Model._w_in, Model._w_out, sync.count)
    return out


def test_two_ranks_combine_their_changes_or_their_mean():
    ranks = run_local_group(_two_ranks_reduce, 2)  # one group for both ways: ranks start once
    start = torch.arange(12.0).view(4, 3)
    change = torch.linspace(-1.0, 1.0, 12).view(4, 3)
    # sum: p + 1·d + 2·d; average: p + (1·d + 2·d) / 2
    for combine, factor in (("sum", 3), ("average", 1.5)):
        expected = start + factor * change
        for rank in ranks:
            w_in, w_out, count = rank[combine]
            assert count == 2
            torch.testing.assert_close(w_in, expected)  # float32 rounding of a few additions
            torch.testing.assert_close(w_out, expected + start)
        first, second = ranks[0][combine], ranks[1][combine]
        assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


def _train_on_two_ranks():
    from chapter20.word2vec.corpus import corpus_sentences

    out = {}
    for syncs in (3, 0):
        run = train_word2vec_data_parallel(corpus_sentences("lee"), CONFIG, syncs_per_epoch=syncs)
        out[syncs] = (run.vectors.vectors, run.syncs, run.vectors.stats.raw_words)
    return out


def test_two_ranks_end_with_the_same_vectors_from_their_own_shards(lee):
    first, second = run_local_group(_train_on_two_ranks, 2)
    for syncs in (3, 0):
        (vectors0, count0, raw0), (vectors1, count1, raw1) = first[syncs], second[syncs]
        assert np.array_equal(vectors0, vectors1)  # bit for bit: one reduced sum, broadcast
        assert count0 == count1 == (2 * syncs * 2 if syncs else 1)  # 0: once, at the end
        assert raw0 + raw1 == 2 * sum(map(len, lee))  # each sentence on one rank, every epoch
        assert np.isfinite(vectors0).all() and not np.array_equal(vectors0, 0 * vectors0)
    assert not np.array_equal(first[3][0], first[0][0])  # syncing changes what is learnt


@pytest.mark.parametrize(
    ("kwargs", "exception", "argument"),
    [
        ({"syncs_per_epoch": -1}, ValueError, "syncs_per_epoch"),
        ({"syncs_per_epoch": 1.5}, TypeError, "syncs_per_epoch"),
        ({"combine": "median"}, ValueError, "combine"),
        ({"vocab": None}, TypeError, "vocab"),
        ({"epochs": 0}, ValueError, "epochs"),
        ({"config": {"dim": 8}}, TypeError, "config"),
    ],
)
def test_bad_input_raises_a_clear_error(lee, kwargs, exception, argument):
    fields = {field.name for field in dataclasses.fields(Word2VecConfig)}
    settings = {**OPTIONS, **{k: v for k, v in kwargs.items() if k in fields}}
    call = {k: v for k, v in kwargs.items() if k not in fields}
    with pytest.raises(exception, match=argument):
        train_word2vec_data_parallel(lee, **{"config": Word2VecConfig(**settings), **call})
