"""Tests for chapter20.vocab.bag_of_words (note, topic 3; C28): sentences as bag-of-words rows,
their PCA compression, and the article classifier trained on each variant."""

import numpy as np
import pytest
import torch

from chapter20.core import corpora as data
from chapter20.vocab.bag_of_words import (
    adam_optimizer,
    bag_of_words_data,
    check_variants,
    classifier_step,
    projection_accuracy,
    projection_model,
)


def test_bag_of_words_data(bag_of_words):
    data_, _ = bag_of_words
    assert data_.input_dim == 300 and data_.n_classes == 3
    assert data_.train.shape[0] == len(data_.train_labels)
    assert data_.train.shape[0] + data_.test.shape[0] == sum(len(a) for a in data.wiki_sentences(3))
    with pytest.warns(UserWarning, match="distinct words"):
        small = bag_of_words_data(100_000, limit_articles=3, test_fraction=0.2)
    assert len(small.vocab) > 300


def test_projection_accuracy_online_equals_precomputed(bag_of_words):
    frame = projection_accuracy(
        *bag_of_words,
        variants=("pca_online", "pca_precomputed"),
        epochs=1,
        batch_size=128,
        device="cpu",
    )
    online, pre = frame.itertuples()
    assert online.test_accuracy == pre.test_accuracy
    assert online.train_loss == pytest.approx(pre.train_loss, rel=1e-4)
    assert 0 < online.chance_accuracy < 1


def test_a_classifier_step_is_one_adam_step_on_the_cross_entropy(bag_of_words):
    data_, compressed = bag_of_words
    rows = np.arange(8)
    labels = data_.train_labels[torch.from_numpy(rows)]
    model = projection_model("pca_precomputed", data_, compressed, 4, 0, "cpu")
    twin = projection_model("pca_precomputed", data_, compressed, 4, 0, "cpu")  # same seed
    inputs = (compressed.train_z[torch.from_numpy(rows)],)
    loss = classifier_step(model, adam_optimizer(model, 0.01), inputs, labels)
    expected = torch.nn.functional.cross_entropy(twin(*inputs), labels)
    assert torch.equal(loss, expected.detach()) and not loss.requires_grad
    expected.backward()
    torch.optim.Adam(twin.parameters(), lr=0.01).step()
    for mine, theirs in zip(model.parameters(), twin.parameters()):
        assert torch.equal(mine, theirs)  # the same ops in the same order: bitwise


def test_variants_and_optimizers_are_checked(bag_of_words):
    data_, compressed = bag_of_words
    assert check_variants(("embedding_bag",), None) == ["embedding_bag"]
    with pytest.raises(ValueError, match="variants"):
        check_variants(("nope",), compressed)
    with pytest.raises(ValueError, match="pca variants need compressed"):
        check_variants(("pca_online",), None)
    with pytest.raises(ValueError, match="sparse gradients"):
        projection_accuracy(data_, compressed, variants=("embedding_bag_sparse",))
    with pytest.raises(ValueError, match="lr"):
        adam_optimizer(torch.nn.Linear(2, 2), 0.0)
