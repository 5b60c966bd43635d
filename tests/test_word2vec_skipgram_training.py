"""Tests for chapter20.word2vec.skipgram_training and its configuration,
chapter20.word2vec.skipgram_config (note, topic 1): training is deterministic for a seed, lowers
the loss, reports what it did, runs Hogwild workers, and rejects bad input; the configuration is
gensim's, mapped to gensim's arguments, and derives a command line; on a GPU it matches gensim's
quality."""

from __future__ import annotations

import numpy as np
import pytest

from chapter20.vocab.vocabulary import build_vocab
from chapter20.word2vec.corpus import corpus_sentences
from chapter20.word2vec.skipgram_config import Word2VecConfig, gensim_settings
from chapter20.word2vec.skipgram_training import train_word2vec, untrained_vectors
from chapter20.word2vec.vectors import evaluate_word_pairs


def test_training_is_deterministic_for_a_seed_on_cpu(lee):
    options = dict(dim=16, epochs=1, progress=False, threads=2, fused=False)
    first = train_word2vec(lee, Word2VecConfig("negative", seed=3, **options))
    again = train_word2vec(lee, Word2VecConfig("negative", seed=3, **options))
    other = train_word2vec(lee, Word2VecConfig("negative", seed=4, **options))
    assert np.array_equal(first.vectors, again.vectors)  # bitwise
    assert not np.array_equal(first.vectors, other.vectors)
    hs = train_word2vec(lee, Word2VecConfig("hierarchical", seed=3, **options))
    assert np.array_equal(
        hs.vectors, train_word2vec(lee, Word2VecConfig("hierarchical", seed=3, **options)).vectors
    )


@pytest.mark.parametrize("objective", ["negative", "hierarchical", "softmax"])
def test_training_lowers_the_loss_and_reports_what_it_did(lee, objective):
    # A third of the corpus at a higher rate: the full softmax costs O(vocabulary) per pair, and
    # on 100 documents (655 words) every objective still lowers its loss clearly in its 2nd epoch.
    docs = lee[:100]
    options = dict(dim=16, epochs=2, alpha=0.1, seed=1, progress=False, fused=False)
    wv = train_word2vec(docs, Word2VecConfig(objective, **options))
    stats = wv.stats
    assert stats.epoch_loss[1] < stats.epoch_loss[0] - 0.02
    assert np.isfinite(wv.vectors).all()
    assert stats.raw_words == 2 * sum(map(len, docs))
    assert 0 < stats.effective_words < stats.raw_words
    assert stats.pairs > stats.effective_words
    assert stats.words_per_second > 0
    assert wv.words == build_vocab(docs, min_count=5).words


@pytest.mark.parametrize("share", [False, True])
def test_hogwild_workers_train_as_well(lee, share):
    options = dict(dim=16, epochs=2, seed=1, progress=False, share_negatives=share, fused=False)
    wv = train_word2vec(lee, Word2VecConfig("negative", workers=2, **options))
    assert wv.stats.workers == 2
    assert np.isfinite(wv.vectors).all()
    assert wv.stats.epoch_loss[1] < wv.stats.epoch_loss[0]
    single = train_word2vec(lee, Word2VecConfig("negative", **options))
    assert single.stats.pairs == wv.stats.pairs  # the same draws, shared between the workers


class _Sync:
    """An EpochSync that records when it is called."""

    def __init__(self, segments=1, stream=0):
        self.segments, self.stream, self.calls = segments, stream, []

    def __call__(self, model):
        self.calls.append(float(model.input_vectors.abs().sum()))


@pytest.mark.parametrize("objective", ["negative", "hierarchical"])
def test_untrained_vectors_are_where_training_starts_bitwise(lee, objective):
    config = Word2VecConfig(objective, dim=8, epochs=1, seed=5, progress=False)
    starts = []

    class FirstCall:  # an EpochSync that keeps the weights it is first called with
        segments, stream = 1, 0

        def __call__(self, model):
            if not starts:
                starts.append(model.input_vectors.clone().numpy())

    trained = train_word2vec(lee, config, sync=FirstCall())
    start = untrained_vectors(lee, config)
    assert start.words == trained.words and start.stats is None
    assert np.array_equal(start.vectors, starts[0])  # bitwise
    assert not np.array_equal(start.vectors, trained.vectors)
    other = untrained_vectors(lee, Word2VecConfig(objective, dim=8, seed=6))
    assert not np.array_equal(start.vectors, other.vectors)


def test_sync_is_called_at_the_start_and_after_each_part_of_every_epoch(lee):
    sync = _Sync(segments=3, stream=0)
    config = Word2VecConfig("negative", dim=8, epochs=2, seed=2, progress=False)
    run = train_word2vec(lee, config, sync=sync)
    assert len(sync.calls) == 1 + 3 * 2 and len(set(sync.calls)) == len(sync.calls)  # it trains
    assert np.array_equal(run.vectors, train_word2vec(lee, config).vectors)
    other = train_word2vec(lee, config, sync=_Sync(stream=1))
    assert not np.array_equal(run.vectors, other.vectors)  # another stream draws other pairs


@pytest.mark.parametrize(
    ("kwargs", "exception", "argument"),
    [
        ({"sentences": []}, ValueError, "sentences"),
        ({"sentences": [[], []]}, ValueError, "sentences"),
        ({"sentences": "a text, not token lists"}, TypeError, "sentences"),
        ({"sentences": ["a b", "c d"]}, TypeError, "sentences"),
        ({"min_count": 10**6}, ValueError, "min_count"),
        ({"negative": 0}, ValueError, "negative"),
        ({"negative": -3}, ValueError, "negative"),
        ({"window": 0}, ValueError, "window"),
        ({"dim": 0}, ValueError, "dim"),
        ({"epochs": 0}, ValueError, "epochs"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"workers": 0}, ValueError, "workers"),
        ({"sample": -1.0}, ValueError, "sample"),
        ({"alpha": 0.0}, ValueError, "alpha"),
        ({"min_alpha": 1.0}, ValueError, "min_alpha"),
        ({"objective": "sampled"}, ValueError, "objective"),
        ({"window": 2.5}, TypeError, "window"),
        ({"sync": object()}, TypeError, "sync"),
        ({"sync": _Sync(segments=0)}, ValueError, "sync.segments"),
        ({"sync": _Sync(stream=-1)}, ValueError, "sync.stream"),
        ({"threads": 0}, ValueError, "threads"),
        ({"seed": -1}, ValueError, "seed"),
        ({"fused": "yes"}, TypeError, "fused"),
        ({"progress": 1}, TypeError, "progress"),
        ({"device": 0}, TypeError, "device"),
        ({"config": {"dim": 8}}, TypeError, "config"),
    ],
)
def test_bad_input_raises_a_clear_error(lee, kwargs, exception, argument):
    # The configuration refuses its own fields when it is made; the trainer, the rest.
    call = {"sentences": lee[:20], "progress": False, "epochs": 1, **kwargs}
    outside = {k: call.pop(k) for k in ("sentences", "sync", "config") if k in call}
    with pytest.raises(exception, match=argument):
        train_word2vec(config=outside.pop("config", None) or Word2VecConfig(**call), **outside)


def test_the_defaults_are_gensims_and_map_to_gensims_arguments():
    from gensim.models import Word2Vec

    config = Word2VecConfig()
    settings = gensim_settings(config)
    assert settings == {
        "sg": 1, "vector_size": 100, "window": 5, "min_count": 5, "sample": 1e-3, "hs": 0,
        "negative": 5, "epochs": 5, "alpha": 0.025, "min_alpha": 1e-4, "seed": 1, "workers": 1,
    }  # fmt: skip
    model = Word2Vec(**settings)  # gensim takes every argument, and keeps them
    assert (model.vector_size, model.window, model.negative, model.epochs) == (100, 5, 5, 5)
    hs = gensim_settings(Word2VecConfig("hierarchical", negative=7))
    assert (hs["hs"], hs["negative"]) == (1, 0)
    with pytest.raises(ValueError, match="objective"):
        gensim_settings(Word2VecConfig("softmax"))


def test_a_command_line_derives_its_options_from_the_configuration(capsys):
    import argparse

    from chapter20.core.options import add_options, parse_config

    parser = argparse.ArgumentParser(prog="w2v")
    add_options(parser, Word2VecConfig)
    config, _ = parse_config(
        parser, Word2VecConfig, ["--objective", "hierarchical", "--dim", "16", "--no-progress"]
    )
    assert config == Word2VecConfig("hierarchical", dim=16, progress=False)
    with pytest.raises(SystemExit) as exit_:
        parse_config(parser, Word2VecConfig, ["--min-alpha", "0.5"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "w2v: error: min_alpha must be in [0, alpha=0.025], got 0.5\n"


@pytest.mark.cuda
def test_cuda_training_matches_gensim_quality():
    """On a GPU: the same run as the benchmark; vectors finite, ρ within 0.05 of gensim's."""
    from gensim.models import Word2Vec

    corpus = corpus_sentences("wiki+lee")
    settings = dict(window=5, min_count=5, negative=5, sample=1e-3, epochs=5)
    config = Word2VecConfig("negative", dim=100, seed=1, device="cuda", progress=False, **settings)
    ours = train_word2vec(corpus, config)
    assert ours.stats.device.startswith("cuda")
    assert np.isfinite(ours.vectors).all()
    model = Word2Vec(corpus, sg=1, vector_size=100, hs=0, workers=4, seed=1, **settings)
    theirs = evaluate_word_pairs(model.wv.index_to_key, model.wv.vectors, "wordsim353")
    assert abs(ours.evaluate_word_pairs("wordsim353").spearman - theirs.spearman) < 0.05
    config = Word2VecConfig("hierarchical", seed=1, device="cuda", progress=False, **settings)
    hs = train_word2vec(corpus, config)
    assert np.isfinite(hs.vectors).all() and hs.evaluate_word_pairs("wordsim353").spearman > 0.3
