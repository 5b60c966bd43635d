"""§20.2, §20.6: the shared contrastive model's run (``PairRunConfig``) and the held-out quality
run of notebooks 02, 03 and 05 (``heldout_run``), ``chapter20.training.pair_training``, on the
one run driver."""

import pytest
import torch

from chapter20.core.corpora import shuffled_batches
from chapter20.core.device import set_seed
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.training.config import TrainConfig
from chapter20.training.pair_training import PairRunConfig, heldout_run
from chapter20.training.trainer import Trainer


def _identical_pairs(vocab: int = 30, n: int = 64, test: int = 16):
    from chapter20.core.corpora import PairData

    g = torch.Generator().manual_seed(0)
    anchors = torch.randint(1, vocab, (n + test, 5), generator=g)
    positives = anchors.clone()  # a positive is its anchor: recall can reach 1
    return PairData(anchors[:n], positives[:n], anchors[n:], positives[n:], vocab)


def _run(**fields) -> PairRunConfig:
    return PairRunConfig(vocab=30, dim=8, **fields)


def test_heldout_run_is_the_seeded_loop_it_describes():
    """The driver's run equals a plain loop written here: the same seed, model, batches and
    steps give bitwise the same weights and losses (no checkpoint, no deterministic mode)."""
    data = _identical_pairs()
    config = TrainConfig(lr=0.05, weight_decay=0.0)
    first = heldout_run(_run(steps=12, batch=16, seed=3, training=config), data)
    again = heldout_run(_run(steps=12, batch=16, seed=3, training=config), data)
    other = heldout_run(_run(steps=12, batch=16, seed=4, training=config), data)
    assert first.losses == again.losses and first.recall == again.recall
    assert first.losses != other.losses
    assert len(first.losses) == 12 and set(first.recall) == {1, 10}
    assert first.final_loss == pytest.approx(sum(first.losses[-10:]) / 10)
    assert first.skipped_steps == 0
    assert first.losses[-1] < first.losses[0]  # identical pairs are easy: training must help
    set_seed(3)
    model = BagOfEmbeddingsEncoder(30, 8)
    trainer = Trainer(model, config)
    batches = shuffled_batches(64, 16, torch.Generator().manual_seed(3))
    losses = []
    for _ in range(12):
        ids = next(batches)
        losses.append(trainer.step((data.train_anchors[ids], data.train_positives[ids])).loss)
    assert losses == first.losses
    for name, value in model.state_dict().items():
        assert torch.equal(value, first.state[name]), name


def test_heldout_run_scores_recall_in_float32_whatever_trained_it():
    from chapter20.techniques.contrastive import recall_at_k

    data = _identical_pairs()
    run = heldout_run(_run(steps=3, batch=16, training=TrainConfig(precision="bf16")), data)
    model = BagOfEmbeddingsEncoder(30, 8)
    model.load_state_dict(run.state)
    assert run.recall == recall_at_k(model, data.test_anchors, data.test_positives)


def test_heldout_run_refuses_data_of_another_vocabulary_and_an_untrained_run_takes_no_step():
    data = _identical_pairs()
    with pytest.raises(ValueError, match="vocabulary"):
        heldout_run(PairRunConfig(vocab=31, dim=8, steps=1, batch=4), data)
    untrained = heldout_run(_run(steps=0, batch=16), data)
    assert untrained.losses == [] and untrained.skipped_steps == 0
    set_seed(0)
    assert all(
        torch.equal(value, untrained.state[name])
        for name, value in BagOfEmbeddingsEncoder(30, 8).state_dict().items()
    )
