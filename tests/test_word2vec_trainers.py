"""Tests for chapter20.word2vec.trainers (note, topic 1): a trainer's name sets the objective, the
path and the noise draws of a configuration, and nothing else; bad names are refused."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from chapter20.word2vec.skipgram_config import Word2VecConfig
from chapter20.word2vec.skipgram_training import train_word2vec
from chapter20.word2vec.trainers import COMPARISON, TRAINERS, train

CONFIG = Word2VecConfig(dim=8, epochs=1, seed=2, workers=1)


@pytest.mark.parametrize(
    "trainer, settings",
    [
        ("ours negative-plain", {"objective": "negative", "fused": False}),
        ("ours negative-shared", {"objective": "negative", "share_negatives": True}),
        ("ours hierarchical", {"objective": "hierarchical"}),
    ],
)
def test_a_name_sets_the_objective_and_the_path_of_the_configuration(lee, trainer, settings):
    ours = train(trainer, lee, CONFIG)
    plain = train_word2vec(lee, replace(CONFIG, progress=False, **settings))
    assert np.array_equal(ours.vectors, plain.vectors)  # bitwise: the same run


def test_the_full_softmax_trains_with_one_worker_and_the_comparisons_on_two(lee):
    assert COMPARISON.workers == 2 and COMPARISON == replace(Word2VecConfig(), workers=2)
    softmax = train("ours softmax", lee[:50], replace(CONFIG, workers=2))
    assert softmax.stats.workers == 1


def test_a_trainer_outside_the_list_is_refused(lee):
    assert "ours negative" in TRAINERS
    for name in ("ours negative-other", "theirs negative"):
        with pytest.raises(ValueError, match="trainer must be one of"):
            train(name, lee, CONFIG)
    with pytest.raises(TypeError, match="config"):
        train("ours negative", lee, {"dim": 8})
