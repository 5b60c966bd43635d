"""§20.2, §20.6: the pair-training loop the labs share (``train_on_pairs``) and the held-out
quality run of notebooks 02, 03 and 05 (``heldout_run``), ``chapter20.training.pair_training``."""

import pytest
import torch

from chapter20.core.device import set_seed
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.training.config import TrainConfig
from chapter20.training.pair_training import heldout_run, train_on_pairs
from chapter20.training.trainer import Trainer

VOCAB, DIM = 37, 8


# --- the shared loop --------------------------------------------------------------------------


def test_train_on_pairs_lowers_the_loss_and_returns_every_step():
    set_seed(0)
    pairs = torch.randint(1, VOCAB, (2, 64, 5), generator=torch.Generator().manual_seed(0))
    trainer = Trainer(BagOfEmbeddingsEncoder(VOCAB, DIM), TrainConfig(lr=1e-2))
    results = train_on_pairs(trainer, pairs[0], pairs[1], steps=30, batch=16)
    assert len(results) == 30 and all(r.examples == 16 for r in results)
    first, last = sum(r.loss for r in results[:5]), sum(r.loss for r in results[-5:])
    assert last < first


# --- heldout_run: the quality run of notebooks 02, 03 and 05 ----------------------------------


def _identical_pairs(vocab: int = 30, n: int = 64, test: int = 16):
    from chapter20.core.corpora import PairData

    g = torch.Generator().manual_seed(0)
    anchors = torch.randint(1, vocab, (n + test, 5), generator=g)
    positives = anchors.clone()  # a positive is its anchor: recall can reach 1
    return PairData(anchors[:n], positives[:n], anchors[n:], positives[n:], vocab)


def test_heldout_run_is_the_seeded_loop_it_describes():

    data = _identical_pairs()
    config = TrainConfig(lr=0.05, weight_decay=0.0)
    first = heldout_run(data, config, steps=12, batch=16, seed=3, dim=8)
    again = heldout_run(data, config, steps=12, batch=16, seed=3, dim=8)
    other = heldout_run(data, config, steps=12, batch=16, seed=4, dim=8)
    assert first.losses == again.losses and first.recall == again.recall
    assert first.losses != other.losses
    assert len(first.losses) == 12 and set(first.recall) == {1, 10}
    assert first.final_loss == pytest.approx(sum(first.losses[-10:]) / 10)
    assert first.skipped_steps == 0
    assert first.losses[-1] < first.losses[0]  # identical pairs are easy: training must help
    # the weights are those that the same loop through train_on_pairs produces
    set_seed(3)
    model = BagOfEmbeddingsEncoder(30, 8)
    train_on_pairs(Trainer(model, config), data.train_anchors, data.train_positives,
                   steps=12, batch=16, seed=3)  # fmt: skip
    for name, value in model.state_dict().items():
        assert torch.equal(value, first.state[name]), name


def test_heldout_run_scores_recall_in_float32_whatever_trained_it():
    from chapter20.techniques.contrastive import recall_at_k

    data = _identical_pairs()
    run = heldout_run(data, TrainConfig(precision="bf16"), steps=3, batch=16, seed=0, dim=8)
    model = BagOfEmbeddingsEncoder(30, 8)
    model.load_state_dict(run.state)
    assert run.recall == recall_at_k(model, data.test_anchors, data.test_positives)
