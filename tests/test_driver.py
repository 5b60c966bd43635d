"""§20.6 the one run driver (``chapter20.training.driver``) and the techniques that became fields
of the composed step with it: the rate scaled to the run's batch, gradient compression and ZeRO
stage 1, each proven against its plain reference, alone and on 2 gloo ranks."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from chapter20.core.corpora import PairData
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.techniques.distributed import run_local_group
from chapter20.training.config import TrainConfig
from chapter20.training.driver import Batches, FinishedRun, run_training
from chapter20.training.loop import LoopConfig, StoppedLaunch
from chapter20.training.run_config import RunConfig
from chapter20.training.sampler import ResumableBatchSampler

VOCAB, DIM, ROWS = 50, 8, 96


def _pairs() -> PairData:
    ids = torch.randint(1, VOCAB, (2, ROWS, 6), generator=torch.Generator().manual_seed(0))
    return PairData(ids[0], ids[1], ids[0][:8], ids[1][:8], VOCAB)


def _batches(trainer, batch: int, deal: str = "slices") -> Batches:
    data = _pairs()
    sampler = ResumableBatchSampler(ROWS, batch, seed=0, deal=deal)

    def next_batch():
        idx = sampler.next_batch()
        return data.train_anchors[idx], data.train_positives[idx]

    return Batches(next_batch, sampler)


def _train(config: RunConfig, **hooks):
    return run_training(
        config,
        lambda: BagOfEmbeddingsEncoder(VOCAB, DIM),
        lambda trainer: _batches(trainer, config.batch),
        **hooks,
    )


def _weights(result: FinishedRun) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in result.trainer.module.state_dict().items()}


FAST = RunConfig(steps=6, batch=16, progress=False, loop=LoopConfig(checkpoint_every=2))


def test_a_stopped_launch_resumes_to_the_uninterrupted_run_with_its_evaluations(tmp_path):
    """The driver's contract: a launch that ``stop_after`` ends returns a StoppedLaunch and
    writes no summary; the next launch resumes from the last checkpoint, keeps the evaluations
    made before the stop, and ends bitwise where an uninterrupted run ends."""

    def evaluate(trainer, progress):
        return {"loss": progress.losses[-1] if progress.losses else None}

    hooks = {"evaluate": evaluate, "eval_every": 2}
    clean = _train(replace(FAST, output_dir=str(tmp_path / "clean")), **hooks)
    stopped_run = replace(FAST, output_dir=str(tmp_path / "b"))
    stopped = _train(replace(stopped_run, loop=replace(FAST.loop, stop_after=5)), **hooks)
    assert isinstance(stopped, StoppedLaunch) and stopped.stopped_at == 5
    assert not (tmp_path / "b" / "summary.json").exists()
    resumed = _train(stopped_run, **hooks)
    assert resumed.fingerprint == clean.fingerprint
    assert resumed.summary["resumed_from"] == 4
    assert [e["step"] for e in resumed.summary["evaluations"]] == [2, 4, 6]
    assert resumed.summary["evaluations"][:2] == clean.summary["evaluations"][:2]
    on_file = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert on_file["fingerprint"] == clean.fingerprint and on_file["steps"] == 6


def test_an_untrained_run_takes_no_step_and_checkpoints_need_a_resumable_order(tmp_path):
    untrained = _train(replace(FAST, steps=0))
    assert untrained.summary["steps"] == 0 and untrained.losses == ()
    with pytest.raises(ValueError, match="resumed"):
        run_training(
            replace(FAST, output_dir=str(tmp_path)),
            lambda: BagOfEmbeddingsEncoder(VOCAB, DIM),
            lambda trainer: Batches(lambda: None),  # no sampler: cannot be resumed
        )
    with pytest.raises(TypeError, match="batches must return Batches"):
        run_training(FAST, lambda: BagOfEmbeddingsEncoder(VOCAB, DIM), lambda trainer: None)


def test_the_rate_follows_the_runs_batch_from_base_batch():
    """§20.4.1 linear scaling as a field of the step: lr at base_batch, the run's global batch
    from its configuration; the optimizer runs at the scaled rate after the warm-up."""
    training = TrainConfig(lr=1e-3, base_batch=8, warmup_steps=2)
    run = replace(FAST, batch=32, training=training)
    assert run.train_config().peak_lr == pytest.approx(4e-3)
    result = _train(run)
    assert result.summary["lr"] == pytest.approx(4e-3)
    assert result.trainer.optimizer.param_groups[0]["lr"] == pytest.approx(4e-3)
    with pytest.raises(ValueError, match="for_run"):
        _ = training.peak_lr  # a step outside a run does not know the batch to scale to
    assert replace(run, steps=12).train_config().global_batch == 32


def test_zero1_and_compression_are_refused_where_they_cannot_apply():
    with pytest.raises(ValueError, match="zero1 shards the state of"):
        TrainConfig(zero1=True, optimizer="adamw8bit")
    with pytest.raises(ValueError, match="sharded_table"):
        TrainConfig(zero1=True, sharded_table=True)
    with pytest.raises(ValueError, match="gradient_compression"):
        TrainConfig(gradient_compression="int8")


def _on_rank(directory: str) -> dict:
    """On each of 2 gloo ranks: the plain DDP run; the same with ZeRO-1, uninterrupted and
    stopped then resumed (its state gathered on rank 0 for the checkpoint); the same with fp16
    gradient all-reduces."""
    base = replace(FAST, batch=16, training=TrainConfig(lr=1e-2))
    zero = replace(base, training=replace(base.training, zero1=True))
    fp16 = replace(base, training=replace(base.training, gradient_compression="fp16"))
    plain = _train(base)
    zero_run = _train(zero)
    resumable = replace(zero, output_dir=f"{directory}/zero")
    _train(replace(resumable, loop=replace(zero.loop, stop_after=3)))
    zero_resumed = _train(resumable)
    compressed = _train(fp16)
    inner = type(zero_run.trainer.optimizer.optim).__name__
    return {
        "plain": _weights(plain),
        "zero": _weights(zero_run),
        "zero_fingerprints": (zero_run.fingerprint, zero_resumed.fingerprint),
        "zero_inner": inner,
        "sent": (
            plain.trainer.communication.sent_bytes,
            compressed.trainer.communication.sent_bytes,
        ),
        "fp16": _weights(compressed),
    }


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    directory = str(tmp_path_factory.mktemp("driver"))
    return run_local_group(_on_rank, 2, (directory,), timeout_s=600)


def test_zero1_takes_the_plain_update_and_resumes_bit_for_bit(two_ranks):
    """ZeRO stage 1 as a field of the step: each rank steps its share of AdamW's state and
    broadcasts the parameters; the replicas equal plain DDP's (float32 rounding: the same
    update, the moments summed in the same order, tolerance 1e-6), and a run stopped and
    resumed from a checkpoint (the state gathered on rank 0) ends bitwise where it would."""
    for rank in two_ranks:
        assert rank["zero_inner"] == "AdamW"
        assert rank["zero_fingerprints"][0] == rank["zero_fingerprints"][1]
        for name, value in rank["plain"].items():
            torch.testing.assert_close(rank["zero"][name], value, rtol=0, atol=1e-6)
    assert two_ranks[0]["zero"].keys() == two_ranks[1]["zero"].keys()


def test_gradient_compression_halves_the_bytes_and_stays_close(two_ranks):
    """fp16 all-reduces as a field of the step: half the bytes of the fp32 all-reduce, the same
    training within fp16 rounding of the gradients."""
    for rank in two_ranks:
        plain_bytes, fp16_bytes = rank["sent"]
        assert fp16_bytes * 2 == plain_bytes > 0
        for name, value in rank["plain"].items():
            torch.testing.assert_close(rank["fp16"][name], value, rtol=0, atol=1e-3)
