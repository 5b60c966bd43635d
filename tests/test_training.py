"""§20.6 chapter20.training.trainer: the composed step, proven in the pairs a user would combine,
each against its plain reference.

Tolerances, and why:
- fp32 (reordered sums: chunks, micro-batches, ranks): 1e-5 absolute on gradients and weights of
  order 1 (float32 rounding, carried through a few Adam steps in the multi-step cases).
- bf16 / fp16 autocast (the same ops on another batch shape round differently): 1% of the
  largest gradient.
- Checkpointing and gradient caching both replay the RNG: the same masks, bitwise gradients.
"""

import copy
import math
import warnings
from dataclasses import replace

import pytest
import torch
from torch import nn

from chapter20.core.device import set_seed
from chapter20.core.models import BagOfEmbeddingsEncoder, TransformerEncoder, WeightedBagEncoder
from chapter20.techniques.distributed import group_rank_and_size, run_local_group
from chapter20.techniques.sharding import ShardedBagEncoder
from chapter20.training.checkpoints import CheckpointManager
from chapter20.training.config import TrainConfig
from chapter20.training.sampler import ResumableBatchSampler
from chapter20.training.state import parameter_fingerprint
from chapter20.training.trainer import StepResult, Trainer

ATOL = 1e-5
VOCAB, DIM, GLOBAL_BATCH, STEPS = 37, 8, 13, 3  # 37 rows, 13 pairs: uneven on 2 and 3 ranks


def _grads(module: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def _largest(grads: dict) -> float:
    return max(float(g.abs().max()) for g in grads.values())


def _transformer(dropout: float = 0.0, seed: int = 0) -> TransformerEncoder:
    set_seed(seed)
    return TransformerEncoder(300, d_model=32, n_heads=4, n_layers=3, max_len=16, dropout=dropout)


def _pairs(rows: int = 22, seed: int = 1) -> tuple[torch.Tensor, ...]:
    return tuple(
        torch.randint(1, 300, (3, rows, 16), generator=torch.Generator().manual_seed(seed))
    )


def _first_step_grads(model: nn.Module, config: TrainConfig, batch, **kwargs) -> dict:
    """The gradients of the trainer's first step (left in .grad, unscaled), keyed by position and
    short name: checkpointing regroups the layers, not the order of their parameters."""
    trainer = Trainer(copy.deepcopy(model), config, **kwargs)
    torch.manual_seed(5)
    trainer.step(batch)
    return {
        f"{i}:{name.split('.')[-1]}": p.grad.detach().clone()
        for i, (name, p) in enumerate(trainer.module.named_parameters())
        if p.grad is not None
    }


def _mse(model: nn.Module, batch) -> torch.Tensor:
    inputs, targets = batch
    return ((model(inputs) - targets) ** 2).mean(dim=1)


# --- the configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(optimizer="adam"), ValueError, "optimizer must be one of"),
        (dict(lr=0), ValueError, "lr must be"),
        (dict(lr=float("nan")), ValueError, "lr must be finite"),
        (dict(lr="1e-3"), TypeError, "lr must be a real number"),
        (dict(weight_decay=-1.0), ValueError, "weight_decay"),
        (dict(warmup_steps=-1), ValueError, "warmup_steps"),
        (dict(warmup_steps=2.5), TypeError, "warmup_steps"),
        (dict(schedule="linear"), ValueError, "schedule must be one of"),
        (dict(clip_norm=0.0), ValueError, "clip_norm"),
        (dict(precision="fp8"), ValueError, "precision must be"),
        (dict(init_scale=float("inf")), ValueError, "init_scale"),
        (dict(micro_batches=0), ValueError, "micro_batches"),
        (dict(chunk_size=0), ValueError, "chunk_size"),
        (dict(chunk_size=4, micro_batches=2), ValueError, "not both"),
        (dict(temperature=-0.1), ValueError, "temperature"),
        (dict(learn_temperature=1), TypeError, "learn_temperature must be True or False"),
        (dict(sharded_table="yes"), TypeError, "sharded_table must be True or False"),
        (dict(activation_checkpointing="always"), ValueError, "checkpointing must be one of"),
        (dict(activation_checkpointing="every_k"), ValueError, "activation_checkpointing_k"),
        (dict(activation_checkpointing_k=2), ValueError, "activation_checkpointing_k"),
    ],
)
def test_every_field_is_checked_with_a_message_naming_it(kwargs, error, match):
    with pytest.raises(error, match=match):
        TrainConfig(**kwargs)


def test_which_rule_applies_to_which_loss_is_enforced():
    model = BagOfEmbeddingsEncoder(VOCAB, DIM)
    with pytest.raises(ValueError, match="splits InfoNCE's negatives.*chunk_size"):
        Trainer(model, TrainConfig(micro_batches=2))
    with pytest.raises(ValueError, match="chunk_size .* needs the contrastive loss"):
        Trainer(nn.Linear(2, 2), TrainConfig(chunk_size=4), loss=_mse)
    with pytest.raises(ValueError, match="learn_temperature needs the contrastive loss"):
        Trainer(nn.Linear(2, 2), TrainConfig(learn_temperature=True), loss=_mse)
    with pytest.raises(TypeError, match="plain encoder"):
        Trainer(nn.parallel.DistributedDataParallel.__new__(nn.parallel.DistributedDataParallel))
    with pytest.raises(TypeError, match="config must be a TrainConfig"):
        Trainer(model, {"lr": 1e-3})


def test_bad_batches_raise_clear_errors():
    trainer = Trainer(BagOfEmbeddingsEncoder(VOCAB, DIM))
    ids = torch.randint(1, VOCAB, (4, 5))
    with pytest.raises(ValueError, match="same number of rows"):
        trainer.step((ids, ids[:3]))
    with pytest.raises(ValueError, match="a contrastive batch is"):
        trainer.step(ids)
    regression = Trainer(nn.Linear(3, 2), loss=lambda m, b: _mse(m, b).mean())
    with pytest.raises(ValueError, match="one loss per example"):
        regression.step((torch.randn(4, 3), torch.randn(4, 2)))


# --- precision x accumulation, precision x gradient caching ---------------------------------


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_accumulation_over_uneven_micro_batches_equals_the_whole_batch(precision):
    set_seed(0)
    model = nn.Sequential(nn.Linear(6, 32), nn.GELU(), nn.Linear(32, 3))
    x, y = torch.randn(16, 6), torch.randn(16, 3)
    config = TrainConfig(precision=precision, clip_norm=1.0)
    whole = _first_step_grads(model, config, (x, y), loss=_mse)
    micro = list(zip(x.split([7, 3, 5, 1]), y.split([7, 3, 5, 1])))
    accumulated = _first_step_grads(model, config, micro, loss=_mse)
    tolerance = ATOL if precision == "fp32" else 1e-2 * _largest(whole)
    assert _max_diff(accumulated, whole) <= tolerance
    split = _first_step_grads(
        model, TrainConfig(precision=precision, micro_batches=3), (x, y), loss=_mse
    )
    assert _max_diff(split, whole) <= tolerance


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_gradient_caching_equals_the_whole_batch(precision):
    model, batch = _transformer(), _pairs()
    whole = _first_step_grads(model, TrainConfig(precision=precision), batch)
    cached = _first_step_grads(model, TrainConfig(precision=precision, chunk_size=5), batch)
    tolerance = ATOL if precision == "fp32" else 1e-2 * _largest(whole)
    assert _max_diff(cached, whole) <= tolerance


def test_a_learned_temperature_gets_the_same_gradient_with_caching():
    model, batch = _transformer(), _pairs()
    config = TrainConfig(learn_temperature=True, symmetric=True, temperature=0.07)
    whole = _first_step_grads(model, config, batch)
    cached = _first_step_grads(model, TrainConfig(**{**config.__dict__, "chunk_size": 4}), batch)
    (temperature,) = [g for name, g in whole.items() if name.endswith(":log_temperature")]
    assert abs(float(temperature)) > 1e-3
    assert _max_diff(cached, whole) <= ATOL


def test_checkpointing_with_gradient_caching_and_dropout_equals_caching_alone():
    # Both replay the RNG of the first forward, so every recomputation draws the same masks.
    model, batch = _transformer(dropout=0.2), _pairs()
    plain = _first_step_grads(model, TrainConfig(chunk_size=5), batch)
    for policy, k in (("every_layer", None), ("every_k", 2), ("sqrt", None), ("selective", None)):
        config = TrainConfig(
            chunk_size=5, activation_checkpointing=policy, activation_checkpointing_k=k
        )
        assert _max_diff(_first_step_grads(model, config, batch), plain) == 0, policy


def test_fp16_overflow_skips_the_step_and_the_schedule():
    trainer = Trainer(
        _transformer(), TrainConfig(precision="fp16", init_scale=2.0**40, warmup_steps=4)
    )
    before = [p.detach().clone() for p in trainer.module.parameters()]
    result = trainer.step(_pairs()[:2])
    assert isinstance(result, StepResult)
    assert result.skipped and result.scale == 2.0**40 and not math.isfinite(result.grad_norm)
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.module.parameters()))
    assert trainer.scheduler.last_epoch == 0 and trainer.scaler.get_scale() < 2.0**40
    for _ in range(30):
        result = trainer.step(_pairs()[:2])
    assert not result.skipped and math.isfinite(result.loss) and trainer.skipped_steps >= 1


def test_bf16_non_finite_gradients_are_skipped_without_a_scaler():
    trainer = Trainer(
        nn.Linear(3, 2), TrainConfig(precision="bf16"), loss=lambda m, b: _mse(m, b) * math.inf
    )
    weight = trainer.module.encoder.weight.detach().clone()
    result = trainer.step((torch.randn(4, 3), torch.randn(4, 2)))
    assert result.skipped and trainer.skipped_steps == 1 and trainer.scaler is None
    assert torch.equal(weight, trainer.module.encoder.weight)


def test_clipping_reports_the_norm_before_and_clips_to_clip_norm():
    trainer = Trainer(nn.Linear(3, 2), TrainConfig(clip_norm=1e-3), loss=_mse)
    result = trainer.step((torch.randn(8, 3) * 10, torch.randn(8, 2)))
    after = torch.nn.utils.get_total_norm([p.grad for p in trainer.module.parameters()])
    assert result.grad_norm > 1e-2 and float(after) == pytest.approx(1e-3, rel=1e-4)


# --- optimizer state and schedule ------------------------------------------------------------


def test_8bit_state_with_32bit_tables_follows_the_warmup_on_every_part():
    set_seed(0)
    model = nn.Sequential(nn.Embedding(5_000, 16), nn.Linear(16, 512))

    def loss(m, ids):
        return m(ids).pow(2).mean(dim=1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bitsandbytes' notices about optional kernels
        config = TrainConfig(
            optimizer="adamw8bit", lr=1e-2, warmup_steps=4, schedule="cosine", total_steps=10
        )
        trainer = Trainer(model, config, loss=loss)
        rates = []
        for _ in range(10):
            rates.append([g["lr"] for g in trainer.optimizer.param_groups])
            trainer.step(torch.randint(0, 5_000, (8,)))
    expected = [1e-2 * (s + 1) / 4 for s in range(4)]
    expected += [1e-2 * 0.5 * (1 + math.cos(math.pi * (s - 4) / 6)) for s in range(4, 10)]
    assert [r[0] for r in rates] == pytest.approx(expected)
    assert all(len(set(r)) == 1 for r in rates)  # every group follows the schedule
    assert isinstance(trainer.optimizer, torch.optim.Optimizer)
    state = trainer.optimizer.state
    assert state[model[0].weight]["state1"].dtype == torch.float32  # the table: 32-bit
    assert state[model[1].weight]["state1"].dtype == torch.uint8  # the dense layer: 8-bit


def test_the_temperature_is_never_decayed_and_its_group_is_kept():
    trainer = Trainer(_transformer(), TrainConfig(learn_temperature=True, weight_decay=0.1))
    groups = trainer.optimizer.param_groups
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert groups[1]["params"] == [trainer.module.log_temperature]


# --- full state: resumed == uninterrupted ----------------------------------------------------


def _composed_run(directory, steps: int, stop_after: int | None = None) -> str:
    """A composed run (bf16, gradient caching, learned temperature, 8-bit state with a 32-bit
    table, warm-up, clipping) that resumes from ``directory``; returns the fingerprint."""
    set_seed(0)
    model = BagOfEmbeddingsEncoder(VOCAB, DIM)
    config = TrainConfig(
        precision="bf16",
        chunk_size=3,
        learn_temperature=True,
        optimizer="adamw8bit",
        warmup_steps=3,
        clip_norm=1.0,
        lr=1e-2,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(model, config)
    pairs = torch.randint(1, VOCAB, (2, 40, 5), generator=torch.Generator().manual_seed(3))
    sampler = ResumableBatchSampler(40, 8, seed=0)
    manager = CheckpointManager(directory, keep_last=2)
    state = manager.load_latest()
    if state is not None:
        trainer.restore_state(state, sampler)
    while trainer.steps < steps:
        ids = sampler.next_batch()
        noise = torch.rand(8, 5) < 0.2  # from the global RNG, which the checkpoint restores
        trainer.step((pairs[0][ids].masked_fill(noise, 0).clamp_min(1), pairs[1][ids]))
        manager.save(trainer.capture_state(sampler))
        if stop_after is not None and trainer.steps == stop_after:
            return ""
    return parameter_fingerprint(trainer.module)


def test_the_composed_trainer_resumes_bitwise(tmp_path):
    uninterrupted = _composed_run(tmp_path / "a", steps=8)
    _composed_run(tmp_path / "b", steps=8, stop_after=3)
    _composed_run(tmp_path / "b", steps=8, stop_after=5)
    assert _composed_run(tmp_path / "b", steps=8) == uninterrupted


# --- distributed: one process == W ranks ----------------------------------------------------


def _contrastive_case(chunk_size) -> dict:
    """3 steps of cross-rank InfoNCE with hard negatives and a learned temperature on this
    rank's slice of each global batch; a world of one trains on the whole batch."""
    rank, world = group_rank_and_size()
    set_seed(0)
    config = TrainConfig(
        chunk_size=chunk_size, learn_temperature=True, clip_norm=5.0, lr=1e-2, weight_decay=0.0
    )
    trainer = Trainer(BagOfEmbeddingsEncoder(VOCAB, DIM), config)
    generator = torch.Generator().manual_seed(7)
    losses = []
    for _ in range(STEPS):
        anchors, positives = torch.randint(1, VOCAB, (2, GLOBAL_BATCH, 5), generator=generator)
        negatives = torch.randint(1, VOCAB, (6, 5), generator=generator)  # nobody's positive
        batch = (anchors, positives, negatives)
        losses.append(trainer.step(tuple(t.tensor_split(world)[rank] for t in batch)).loss)
    wrapped = type(trainer.model).__name__
    return {"state": trainer.module.state_dict(), "losses": losses, "wrapped": wrapped}


def _sharded_case(chunk_size=None) -> dict:
    """3 AdamW steps, clipped, of the hybrid model: a per-rank sharded table (37 rows, range
    partition) + a DDP projection; a world of one holds every row (the same logical table at
    every world size: a row's initial value depends on its id and the seed only)."""
    rank, world = group_rank_and_size()
    set_seed(0)
    model = ShardedBagEncoder(VOCAB, DIM)
    config = TrainConfig(lr=1e-2, clip_norm=0.5, chunk_size=chunk_size, weight_decay=0.01)
    trainer = Trainer(model, config)
    generator = torch.Generator().manual_seed(11)
    for _ in range(STEPS):
        anchors, positives = torch.randint(1, VOCAB, (2, 12, 5), generator=generator)
        trainer.step((anchors.tensor_split(world)[rank], positives.tensor_split(world)[rank]))
    table = model.table.full_weight()
    return {"table": table.detach(), "projection": model.projection.state_dict()}


def _sharded_by_config_case(sharded: bool) -> dict:
    """3 clipped AdamW steps of the weighted bag, its pooling recomputed, on this rank's slice of
    each global batch; ``sharded``: the trainer splits the table's rows over the ranks
    (``TrainConfig.sharded_table``). Returns the trainer's plain model (the table gathered)."""
    rank, world = group_rank_and_size()
    set_seed(0)
    config = TrainConfig(lr=1e-2, clip_norm=0.5, sharded_table=sharded,
                         activation_checkpointing="every_layer")  # fmt: skip
    trainer = Trainer(WeightedBagEncoder(VOCAB, DIM), config)
    generator = torch.Generator().manual_seed(11)
    for _ in range(STEPS):
        anchors, positives = torch.randint(1, VOCAB, (2, 12, 5), generator=generator)
        trainer.step((anchors.tensor_split(world)[rank], positives.tensor_split(world)[rank]))
    plain = trainer.plain_model()  # a collective: every rank calls it
    kinds = [type(m).__name__ for m in plain.modules()]
    return {"state": plain.state_dict(), "kinds": kinds, "pooling": plain.checkpoint_pooling}


def _accumulation_case() -> dict:
    rank, world = group_rank_and_size()
    set_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    trainer = Trainer(model, TrainConfig(lr=1e-2, micro_batches=2, clip_norm=1.0), loss=_mse)
    generator = torch.Generator().manual_seed(3)
    for _ in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 4, generator=generator)
        y = torch.randn(GLOBAL_BATCH, 2, generator=generator)
        trainer.step((x.tensor_split(world)[rank], y.tensor_split(world)[rank]))
    return {"state": model.state_dict()}


def _wholesale_ddp(vocab: int) -> str:
    """DDP around the whole hybrid model: the error it raises (at construction or forward)."""
    try:
        ddp = nn.parallel.DistributedDataParallel(ShardedBagEncoder(vocab, DIM))
        ddp(torch.randint(1, vocab, (4, 5)))
    except RuntimeError as error:
        return str(error)
    return "no error"


def _uneven_chunks() -> str:
    rank, world = group_rank_and_size()
    trainer = Trainer(ShardedBagEncoder(VOCAB, DIM), TrainConfig(chunk_size=3))
    rows = 7 if rank == 0 else 5
    try:
        trainer.step(tuple(torch.randint(1, VOCAB, (2, rows, 5))))
    except ValueError as error:
        return str(error)
    return "no error"


def _all_cases() -> dict:
    return {
        "contrastive": _contrastive_case(None),
        "cached": _contrastive_case(4),
        "sharded": _sharded_case(),
        "sharded_cached": _sharded_case(chunk_size=2),
        "sharded_by_config": _sharded_by_config_case(True),
        "accumulation": _accumulation_case(),
        "uneven_chunks": _uneven_chunks(),
        # 36 rows: equal shards on 2 and 3 ranks, so DDP itself cannot notice; 37: unequal
        # shards, which DDP's shape check refuses on the ranks that differ from rank 0 — the
        # others then lose their peers: last, since it ends the group.
        "wholesale": _wholesale_ddp(36),
        "wholesale_unequal": _wholesale_ddp(37),
    }


@pytest.fixture(scope="module")
def worlds():
    single = {
        "contrastive": _contrastive_case(None),
        "cached": _contrastive_case(4),
        "sharded": _sharded_case(),
        "sharded_by_config": _sharded_by_config_case(False),
        "accumulation": _accumulation_case(),
    }
    return single, {w: run_local_group(_all_cases, w, timeout_s=240) for w in (2, 3)}


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("case", ["contrastive", "cached"])
def test_cross_rank_negatives_under_ddp_equal_one_process(worlds, world, case):
    single, groups = worlds
    expected = single[case]
    for result in groups[world]:
        got = result[case]
        assert got["wrapped"] == "DistributedDataParallel"
        for name, value in expected["state"].items():  # the temperature included
            torch.testing.assert_close(got["state"][name], value, rtol=0, atol=ATOL)
        assert got["losses"] == pytest.approx(expected["losses"], rel=1e-5)


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("case", ["sharded", "sharded_cached"])
def test_a_sharded_table_beside_ddp_equals_one_process(worlds, world, case):
    single, groups = worlds
    expected = single["sharded"]
    for result in groups[world]:
        got = result[case]
        torch.testing.assert_close(got["table"], expected["table"], rtol=0, atol=ATOL)
        for name, value in expected["projection"].items():
            torch.testing.assert_close(got["projection"][name], value, rtol=0, atol=ATOL)


@pytest.mark.parametrize("world", [2, 3])
def test_the_table_the_trainer_shards_trains_as_one_process_and_plain_model_gathers_it(
    worlds, world
):
    """``TrainConfig.sharded_table`` on 2 and 3 ranks: the plain model (the rows gathered,
    recomputation off) equals one process's unsharded training (float32 rounding: ATOL)."""
    single, groups = worlds
    expected = single["sharded_by_config"]
    assert expected["kinds"] == ["WeightedBagEncoder", "Embedding"] and not expected["pooling"]
    for result in groups[world]:
        got = result["sharded_by_config"]
        assert got["kinds"] == expected["kinds"] and not got["pooling"]
        assert list(got["state"]) == list(expected["state"])
        for name, value in expected["state"].items():
            torch.testing.assert_close(got["state"][name], value, rtol=0, atol=ATOL)


def test_plain_model_undoes_every_transform_of_the_step_and_leaves_the_trainer_as_it_is():
    model = _transformer()
    names = list(model.state_dict())
    config = TrainConfig(activation_checkpointing="every_k", activation_checkpointing_k=2)
    trainer = Trainer(model, config)
    trainer.step(_pairs()[:2])
    plain = trainer.plain_model()
    assert type(plain) is TransformerEncoder and list(plain.state_dict()) == names
    assert [type(layer).__name__ for layer in plain.layers] == ["TransformerBlock"] * 3
    assert type(trainer.encoder.layers[0]).__name__ == "CheckpointedSegment"  # still trained so
    for copied, trained in zip(plain.parameters(), model.parameters(), strict=True):
        assert copied is not trained and torch.equal(copied, trained)  # bitwise: a copy
    set_seed(0)
    bag = WeightedBagEncoder(VOCAB, DIM)
    trainer = Trainer(bag, TrainConfig(sharded_table=True))  # a world of one: one shard
    assert type(bag.embedding).__name__ == "ShardedEmbedding"
    plain = trainer.plain_model()
    assert type(plain.embedding) is nn.Embedding
    assert torch.equal(plain.embedding.weight, bag.embedding.weight)


def test_a_table_the_trainer_cannot_shard_is_refused_before_anything_changes():
    transformer = _transformer()  # its token table has a padding row
    with pytest.raises(ValueError, match="token_embedding.*padding_idx"):
        Trainer(transformer, TrainConfig(sharded_table=True))
    assert type(transformer.position_embedding) is nn.Embedding  # nothing was replaced
    with pytest.raises(ValueError, match="nn.Embedding tables"):
        Trainer(BagOfEmbeddingsEncoder(VOCAB, DIM), TrainConfig(sharded_table=True))


@pytest.mark.parametrize("world", [2, 3])
def test_accumulation_under_ddp_with_uneven_ranks_equals_one_process(worlds, world):
    single, groups = worlds
    for result in groups[world]:
        for name, value in single["accumulation"]["state"].items():
            torch.testing.assert_close(
                result["accumulation"]["state"][name], value, rtol=0, atol=ATOL
            )


def test_a_sharded_table_wrapped_wholesale_in_ddp_raises_instead_of_training_wrong(worlds):
    _, groups = worlds
    for results in groups.values():
        assert all("must be ignored by DDP" in r["wholesale"] for r in results)
        assert all(r["wholesale_unequal"] != "no error" for r in results)  # DDP's shape check


def test_ranks_running_different_numbers_of_chunks_fail_together_with_a_clear_error(worlds):
    _, groups = worlds
    for results in groups.values():
        assert all("as many forward passes per step" in r["uneven_chunks"] for r in results)


def test_a_cosine_schedule_without_total_steps_ends_at_the_runs_last_step():
    """§20.4.1 ``--schedule cosine`` needs no ``--total-steps``: a run's configuration fills it
    with its ``steps`` (``TrainConfig.for_run``); a Trainer given none refuses to guess."""
    cosine = TrainConfig(schedule="cosine", warmup_steps=2)
    assert cosine.total_steps is None
    assert cosine.for_run(30, 8).total_steps == 30
    assert TrainConfig(schedule="cosine", total_steps=50).for_run(30, 8).total_steps == 50
    assert TrainConfig().for_run(30, 8) == replace(TrainConfig(), global_batch=8)
    assert cosine.for_run(0, 8).total_steps is None  # an untrained run has no last step
    with pytest.raises(ValueError, match="needs total_steps"):
        Trainer(BagOfEmbeddingsEncoder(20, 4), cosine)
    with pytest.raises(ValueError, match="steps"):
        cosine.for_run(-1, 8)
