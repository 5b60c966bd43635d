"""Bad input across the public API (ARCHITECTURE.md, "Code"): every public function and constructor
of the library gets the awkward values for each of its numeric parameters — 0, a negative number,
NaN, infinity, a wrong type, a size no machine has — and must answer with a ValueError or TypeError
that names the parameter: never a hang, a silent result or an unrelated exception.

Each callable is called with valid arguments (``BASE``) except the one parameter under test.
A value the parameter legitimately accepts (a seed of 0, no weight decay) is listed in
``ACCEPTS`` and not called. Labs (experiments), result records (returned, not passed in) and
benchmarks that time real training are out of scope; ``OUT_OF_SCOPE`` says which and why.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import pkgutil
import random
import signal
import tempfile
import typing
import warnings

import numpy as np
import pytest
import torch

import chapter20
from chapter20 import cost
from chapter20.core import claims, models
from chapter20.techniques import contrastive
from chapter20.techniques import memory_model as memory
from chapter20.training.config import TrainConfig
from chapter20.word2vec.skipgram import SkipGram
from chapter20.word2vec.skipgram_config import Word2VecConfig

AWKWARD = {
    "zero": 0,
    "negative": -1,
    "nan": math.nan,
    "inf": math.inf,
    "wrong type": "1",
    "huge": 2**64,  # no int64 holds it: no table, batch or count is this large
}


def _encoder():
    from chapter20.core.models import TransformerEncoder

    return TransformerEncoder(50, d_model=16, n_heads=2, n_layers=2, max_len=8, dropout=0.0)


def _linear():
    return torch.nn.Linear(4, 2)


def _pair_trainer():
    from chapter20.core.models import BagOfEmbeddingsEncoder
    from chapter20.training.trainer import Trainer

    return Trainer(BagOfEmbeddingsEncoder(20, 4), TrainConfig())


def _pair_data():
    from chapter20.core.corpora import PairData

    ids = torch.randint(1, 20, (4, 8, 3), generator=torch.Generator().manual_seed(0))
    return PairData(*ids, vocab_size=20)


def _spot_config():
    from chapter20.demos.spot_run import SpotConfig

    return SpotConfig(steps=4, batch=8, vocab=100, dim=8)


def _sgd():
    return torch.optim.SGD(_linear().parameters(), lr=0.1)


def _catalog_config():
    from chapter20.cost.selection import configuration

    return configuration("p4d.24xlarge")


def _plan():
    from chapter20.techniques.memory_model import EncoderShape
    from chapter20.training.memory_plan import plan

    return plan(EncoderShape(1000), TrainConfig(), batch=8, seq_len=16)


def _corpus():
    from chapter20.vocab.vocabulary import build_vocab
    from chapter20.word2vec.corpus import encode_corpus

    sentences = [["a", "b", "c", "a"], ["b", "c", "a"]] * 3
    return encode_corpus(sentences, build_vocab(sentences, min_count=1))


def _noise_sampler():
    from chapter20.word2vec.sampling import NoiseSampler

    return NoiseSampler(np.array([0.5, 0.3, 0.2]))


def _vocab_of(texts):
    from chapter20.vocab.vocabulary import build_vocab

    return build_vocab(texts, min_count=1)


def _epoch_reference_args():
    from chapter20.word2vec.skipgram import SkipGram
    from chapter20.word2vec.skipgram_config import Word2VecConfig

    corpus = _corpus()
    return {
        "model": SkipGram("negative", [4, 4, 3], dim=4, seed=0),
        "corpus": corpus,
        "keep": torch.ones(3, dtype=torch.float64),
        "config": Word2VecConfig(dim=4, epochs=2),
        "epoch": 1,
        "pair_generator": torch.Generator(),
        "noise_generator": torch.Generator(),
    }


def _interactions():
    from chapter20.demos.recommender import Interactions

    pairs = torch.tensor([[0, 0], [1, 1], [2, 2]])
    return Interactions(3, ["a", "b", "c"], pairs, torch.tensor([[0, 1]]), torch.ones(3))


def _two_tower():
    from chapter20.demos.recommender import TwoTower

    return TwoTower(3, 3, 2)


def _loader():
    from chapter20.techniques.distributed import distributed_loader

    return distributed_loader(torch.utils.data.TensorDataset(torch.arange(10)), batch_size=2)


def _batches():
    return [(torch.randn(3, 4), torch.randn(3, 2))]


def _mse(model, batch):
    return (model(batch[0]) - batch[1]).pow(2).mean(dim=1)  # one loss per example


def _with_gradients():
    model = _linear()
    model(torch.randn(3, 4)).sum().backward()
    return model


def _bag():
    from chapter20.core.models import BagOfEmbeddingsEncoder

    return BagOfEmbeddingsEncoder(20, 8)


def _ids():
    return torch.tensor([[1, 2, 3], [4, 5, 6]])


TEXTS = [["the", "cat", "sat"], ["the", "dog", "sat"]] * 5


def _capstone_setup():
    """A tiny built recipe (every Lee document holds "the"), for train_encoder."""
    from chapter20.capstone.recipe import EncoderRecipe, EncoderSetup
    from chapter20.capstone.views import encode_documents, idf_weights
    from chapter20.core.models import WeightedBagEncoder
    from chapter20.vocab.tokenizers import build_tokenizer

    tokenizer = build_tokenizer(TEXTS, min_count=1)
    documents = encode_documents(TEXTS, tokenizer)
    weights = idf_weights(documents, tokenizer.vocab_size)
    model = WeightedBagEncoder(tokenizer.vocab_size, 4)
    recipe = EncoderRecipe(min_span=1, max_span=3)
    return EncoderSetup(recipe, tokenizer, documents, weights, model)


def _run_config(**extra):
    from chapter20.capstone.capstone_config import CapstoneConfig

    return CapstoneConfig(output_dir=_tmp(), dim=8, batch=8, **extra)


@functools.cache
def _bag_of_words():
    """Two Wikipedia articles as bag-of-words rows over 50 words and their PCA to 5 dimensions."""
    from chapter20.vocab.bag_of_words import bag_of_words_data, compress_bag_of_words

    data = bag_of_words_data(50, limit_articles=2, test_fraction=0.2)
    return data, compress_bag_of_words(data, 5)


def _adamw_reference():
    from chapter20.techniques.optimizers import adamw_reference_step

    return adamw_reference_step


def _line(slope: float) -> dict:
    """A doubling fit (capstone.scaling_readings.doubling_fit) of the given slope."""
    return {"intercept": 0.1, "slope": slope, "slope_se": 1e-4, "covariance": np.eye(2) * 1e-8}


def _curves():
    import pandas as pd

    return pd.DataFrame({"init": "lsa", "seed": 0, "step": [0, 10, 20, 30],
                         "val_mrr": [0.1, 0.2, 0.2, 0.2], "mrr": [0.1, 0.2, 0.3, 0.4],
                         "recall@1": 0.1, "lee_pearson": 0.5})  # fmt: skip


#: deep_encoder's arguments, small (techniques.pipeline).
_DEEP = {"vocab_size": 10, "width": 4, "depth": 1, "classes": 2}


def _sparse_rows():
    """A 12 x 5 sparse count matrix, for the compressions' proofs."""
    return (torch.arange(60.0).reshape(12, 5) % 3).to_sparse()


def _count_encode(texts):
    return torch.arange(3.0 * len(texts)).reshape(len(texts), 3) % 5 + 1


# Valid arguments for every callable in scope (the numeric parameters under test included).
BASE: dict[str, typing.Callable[[], dict]] = {
    "techniques.accumulation.example_weights": lambda: {"counts": [3, 2], "rule": "examples"},
    "techniques.accumulation.split_batch": lambda: {"batch": _batches()[0], "micro_batches": 2},
    "techniques.contrastive.recall_at_k": lambda: {
        "model": _bag(),
        "anchors": _ids(),
        "positives": _ids(),
        "ks": (1, 2),
    },
    "core.corpora.pair_data": lambda: {
        "vocab_size": 500,
        "max_len": 8,
        "test_pairs": 10,
        "seed": 0,
    },
    "techniques.sharding.ShardedBagEncoder": lambda: {
        "vocab_size": 20,
        "embedding_dim": 4,
        "output_dim": 3,
        "padding_idx": 0,
        "seed": 0,
    },
    "training.config.TrainConfig": lambda: {
        "lr": 1e-3,
        "weight_decay": 0.01,
        "warmup_steps": 2,
        "schedule": "cosine",
        "total_steps": 10,
        "clip_norm": 1.0,
        "init_scale": 1024.0,
        "micro_batches": 1,
        "chunk_size": 2,
        "temperature": 0.05,
        "activation_checkpointing": "every_k",
        "activation_checkpointing_k": 2,
    },
    "training.trainer.TrainedModule": lambda: {"encoder": _linear(), "learned_temperature": 0.05},
    "techniques.activation_checkpointing.segment_size": lambda: {
        "policy": "every_k",
        "num_layers": 4,
        "k": 2,
    },
    "techniques.activation_checkpointing.apply_checkpointing": lambda: {
        "model": _encoder(),
        "policy": "every_k",
        "k": 1,
    },
    "techniques.activation_checkpointing.predicted_activation_bytes": lambda: {
        "policy": "every_k",
        "num_layers": 4,
        "layer_bytes": 100,
        "boundary_bytes": 10,
        "selective_layer_bytes": 50,
        "other_bytes": 5,
        "k": 2,
    },
    "core.claims.check": lambda: {"claim_id": "C20", "measured": 60.0},
    "core.claims.audit_text": lambda: {
        "frame": claims.audit(),
        "width": 70,
    },
    "techniques.contrastive.info_nce": lambda: {
        "queries": torch.randn(4, 3),
        "keys": torch.randn(4, 3),
        "temperature": 0.05,
    },
    "techniques.contrastive.distributed_info_nce": lambda: {
        "queries": torch.randn(4, 3),
        "keys": torch.randn(4, 3),
        "temperature": 0.05,
    },
    "techniques.contrastive.grad_cache_backward": lambda: {
        "model": _bag(),
        "inputs": (_ids(), _ids()),
        "chunk_size": 1,
        "loss_fn": lambda a, b: contrastive.info_nce(a, b),
    },
    "cost.estimates.Preemption": lambda: {
        "mtbf_hours": 2.0,
        "checkpoint_seconds": 30.0,
        "restart_seconds": 300.0,
    },
    "cost.estimates.Workload": lambda: {
        "name": "w",
        "pairs": 1e6,
        "vocab": 1000,
        "d_model": 64,
        "n_heads": 4,
        "n_layers": 2,
        "seq_len": 16,
        "pairs_per_gpu": 32,
    },
    "cost.selection.cheapest_config": lambda: {
        "target_gpus": 8,
        "budget_per_hour": 50.0,
        "min_gpu_memory_gib": 16.0,
    },
    "cost.selection.configuration": lambda: {"instance": "p4d.24xlarge", "n_instances": 1},
    "cost.fleet_choices.cheapest_fleet": lambda: {"min_gpus": 8, "gpu_model": "A100"},
    "cost.estimates.DataFootprint": lambda: {
        "dataset_gb": 10.0,
        "checkpoint_gb": 1.0,
        "checkpoints_kept": 3,
        "retention_months": 1.0,
        "egress_gb": 0.0,
        "storage_per_gb_month": 0.023,
        "egress_per_gb": 0.09,
    },
    "cost.estimates.cost_breakdown": lambda: {
        "compute_cost": 1000.0,
        "run_hours": 10.0,
        "data": cost.DataFootprint(10.0, 1.0),
        "other": 0.0,
    },
    "cost.estimates.cost_to_train": lambda: {
        "config": _catalog_config(),
        "train_seconds": 3600.0,
        "interval_seconds": 600.0,
    },
    "cost.estimates.data_parallel_efficiency": lambda: {
        "config": _catalog_config(),
        "gradient_bytes": 1e8,
        "step_compute_seconds": 0.3,
        "overlap": 0.5,
        "gpu_link_latency_s": 3e-6,
        "network_latency_s": 2e-5,
    },
    "cost.estimates.mixed_precision_saving": lambda: {"speedup": 1.5},
    "cost.estimates.overhead_vs_interval": lambda: {
        "train_seconds": 3600.0,
        "preemption": cost.Preemption(2, 30, 300),
        "intervals": (60.0, 600.0),
        "n_instances": 1,
    },
    "cost.estimates.spot_savings": lambda: {"train_hours": 10.0},
    "cost.estimates.time_to_train": lambda: {
        "work": 1e6,
        "throughput_per_gpu": 100.0,
        "n_gpus": 8,
        "scaling_efficiency": 0.9,
    },
    "cost.fleet_choices.training_options": lambda: {"gpu_counts": (1, 2), "overlap": 0.0},
    "core.corpora.encode_texts": lambda: {
        "texts": TEXTS,
        "vocabulary": {"the": 1, "cat": 2},
        "max_len": 4,
    },
    "core.corpora.shuffled_batches": lambda: {
        "size": 10,
        "batch": 3,
        "generator": torch.Generator(),
    },
    "core.corpora.train_test_split_articles": lambda: {
        "articles": list(range(10)),
        "test_fraction": 0.2,
        "seed": 0,
    },
    "core.id_streams.uniform_ids": lambda: {"shape": 5, "num_embeddings": 10, "seed": 0},
    "core.corpora.word_vocabulary": lambda: {"texts": TEXTS, "max_size": 5},
    "core.id_streams.zipf_ids": lambda: {"shape": 5, "num_embeddings": 10, "s": 1.1, "seed": 0},
    "core.id_streams.zipf_probabilities": lambda: {"num_embeddings": 10, "s": 1.1},
    "core.id_streams.zipf_counts": lambda: {"num_words": 10, "s": 1.1, "total": 100},
    "core.device.set_seed": lambda: {"seed": 0},
    "core.device.scaled": lambda: {"size": 10, "minimum": 1},
    "techniques.communication_model.ring_allreduce_seconds": lambda: {
        "nbytes": 1e6,
        "world_size": 4,
        "latency": 1e-5,
        "bandwidth": 1e9,
    },
    "techniques.communication_model.ring_allreduce_bytes": lambda: {
        "tensor_bytes": 1024.0, "world_size": 4,
    },
    "techniques.communication_model.hierarchical_allreduce_seconds": lambda: {
        "gradient_bytes": 1e6, "gpus_per_node": 8, "nodes": 2,
        "gpu_link": (3e-6, 3e11), "network": (5e-6, 2.5e10),
    },
    "techniques.communication_model.scaling_efficiency": lambda: {
        "compute_seconds": 0.3, "comm_seconds": 0.1, "overlap": 0.0,
    },
    "techniques.communication_model.scaling_model": lambda: {
        "gradient_bytes": 440e6, "compute_seconds": 0.3, "world_sizes": (8, 16),
        "gpus_per_node": 8, "overlap": 0.0,
    },
    "core.seed_statistics.median_and_range": lambda: {"values": (1.0, 2.0)},
    "core.seed_statistics.timing_spread_ms": lambda: {"seconds": (0.001, 0.002)},
    "core.seed_statistics.range_text": lambda: {"lows": (1.0,), "highs": (2.0,), "decimals": 1},
    "training.pair_training.pair_batches": lambda: {
        "trainer": _pair_trainer(), "anchors": _pair_data().train_anchors,
        "positives": _pair_data().train_positives, "batch": 2, "seed": 0,
    },
    "training.pair_training.PairRunConfig": lambda: {
        "steps": 1, "batch": 2, "seed": 0, "vocab": 20, "dim": 4,
    },
    "training.run_config.RunConfig": lambda: {"steps": 1, "batch": 2, "seed": 0},
    "training.driver.run_training": lambda: {
        "config": __import__("chapter20.training.pair_training", fromlist=["x"]).PairRunConfig(
            steps=1, batch=2, vocab=20, dim=4
        ),
        "model": lambda: models.BagOfEmbeddingsEncoder(20, 4),
        "batches": lambda trainer: __import__(
            "chapter20.training.pair_training", fromlist=["x"]
        ).pair_batches(trainer, *_pair_data()[:2], batch=2, seed=0),
        "eval_every": 1,
    },
    "techniques.allreduce_timing.allreduce_times_on_rank": lambda: {"sizes": (16,), "repeat": 1},
    "techniques.allreduce_timing.wire_bytes_per_call": lambda: {
        "tensor": torch.ones(2), "calls": 1, "repeat": 1,
    },
    "techniques.distributed.run_in_one_group": lambda: {"world": 1, "jobs": {}, "timeout_s": 60.0},
    "techniques.distributed.run_local_group": lambda: {
        "fn": print,
        "world_size": 1,
        "timeout_s": 60.0,
    },
    "techniques.distributed.init_distributed": lambda: {"timeout_s": 60.0},
    "techniques.distributed.distributed_loader": lambda: {
        "dataset": torch.utils.data.TensorDataset(torch.arange(10)),
        "batch_size": 2,
        "seed": 0,
        "num_workers": 0,
    },
    "techniques.distributed.set_epoch": lambda: {"loader": _loader(), "epoch": 1},
    "techniques.distributed.scale_lr": lambda: {"base_lr": 1e-3, "base_batch": 512, "batch": 4096},
    "techniques.distributed.warmup_schedule": lambda: {"optimizer": _sgd(), "warmup_steps": 4},
    "demos.fault_injection.writer_faults": lambda: {"directory": _tmp(), "timeout": 60.0},
    "demos.fault_injection.damaged_newest": lambda: {"directory": _tmp(), "keep_last": 2},
    "demos.fault_injection.two_writers": lambda: {"directory": _tmp(), "timeout": 60.0},
    "demos.elastic_run.elastic_training": lambda: {
        "directory": _tmp(), "steps": 3, "stop_after": 2,
    },
    "demos.elastic_run.resume_at_other_world_size": lambda: {
        "directory": _tmp(), "first": 1, "second": 1, "steps": 3, "stop_after": 2,
    },
    "demos.recommender.passage_interactions": lambda: {
        "passage_tokens": 200, "min_users": 10, "max_user_share": 0.2, "test_share": 0.2,
        "seed": 0,
    },
    "demos.recommender.TwoTower": lambda: {"users": 3, "items": 4, "dim": 2},
    "demos.recommender.sample_negatives": lambda: {
        "count": 2, "items": 3, "k": 1, "generator": torch.Generator(),
    },
    "demos.recommender.heldout_recall": lambda: {
        "model": _two_tower(), "data": _interactions(), "k": 1,
    },
    "demos.recommender.popularity_recall": lambda: {"data": _interactions(), "k": 1},
    "core.measure.format_bytes": lambda: {"n": 1024.0},
    "core.measure.format_difference": lambda: {"max_abs_diff": 1e-7, "tolerance": 1e-6},
    "core.measure.time_fn": lambda: {"fn": lambda: None, "warmup": 1, "repeat": 2},
    "core.measure.time_interleaved": lambda: {"fns": {"a": lambda: None}, "warmup": 1, "repeat": 2},
    "techniques.memory_model.training_state_bytes": lambda: {
        "num_parameters": 1000,
        "num_tensors": 2,
    },
    "techniques.memory_model.EncoderShape": lambda: {
        "vocab_size": 1000,
        "d_model": 64,
        "n_heads": 4,
        "n_layers": 2,
        "d_ff": 128,
        "max_len": 32,
        "output_dim": 16,
    },
    "techniques.memory_model.optimizer_state_bytes_predicted": lambda: {
        "parameter_sizes": [10, 20],
        "optimizer": "adamw",
    },
    "training.memory_plan.plan": lambda: {
        "model": memory.EncoderShape(1000),
        "config": TrainConfig(
            activation_checkpointing="every_k", activation_checkpointing_k=1, micro_batches=2
        ),
        "batch": 8,
        "seq_len": 16,
        "world_size": 2,
        "zero_stage": 1,
        "towers": 2,
        "gpu_bytes": 8e9,
    },
    "training.memory_plan.measure_step_memory": lambda: {
        "shape": memory.EncoderShape(50, 8, 2, 1, max_len=8),
        "config": TrainConfig(),
        "batch": 2,
        "seq_len": 4,
    },
    "training.memory_plan.plan_grid": lambda: {
        "shapes": {"m": (memory.EncoderShape(50, 8, 2, 1, max_len=8), 2, 4)},
        "settings": {"s": TrainConfig()},
        "gpu_bytes": 8e9,
    },
    "training.memory_plan.plan_vs_measured": lambda: {
        "cases": [(memory.EncoderShape(50, 8, 2, 1, max_len=8), TrainConfig(), 2, 4)]
    },
    "techniques.contrastive.logit_matrix_bytes": lambda: {"batch": 8, "bytes_per_element": 4},
    "demos.chaos_launch.chaos_run": lambda: {
        "directory": _tmp(), "run": {"steps": 2, "batch": 4, "checkpoint_every": 1},
        "nproc": 1, "kills": 1,
    },
    "demos.chaos_launch.launch": lambda: {"argv": [], "nproc": 1, "max_restarts": 0},
    "demos.node_launch.two_node_torchrun": lambda: {"steps": 1, "timeout": 1.0},
    "techniques.optimizer_proofs.reference_step_proof": lambda: {
        "steps": 1, "size": 8, "tolerance": 1e-6,
    },
    "techniques.optimizer_proofs.quantisation_proof": lambda: {"size": 4096, "tolerance": 1e-4},
    "techniques.contrastive_proofs.info_nce_proof": lambda: {"batch": 4, "dim": 3, "seed": 0},
    "techniques.contrastive_proofs.grad_cache_reference_proof": lambda: {
        "batch": 4, "chunk_size": 3, "seed": 0,
    },
    "techniques.contrastive_proofs.grad_cache_proof": lambda: {
        "batch": 4, "chunk_size": 3, "dropout": 0.1, "seed": 0,
    },
    "techniques.contrastive_proofs.distributed_proof_on_rank": lambda: {
        "sizes": (2,), "hard": 0, "seed": 0,
    },
    "techniques.contrastive_proofs.distributed_proof": lambda: {"world_sizes": (2,)},
    "techniques.optimizer_proofs.reference_gap": lambda: {
        "reference_step": _adamw_reference(),
        "build": torch.optim.AdamW,
        "start": [torch.zeros(3)],
        "grads": [[torch.ones(3)]],
        "lr": 1e-2,
    },
    "training.early_stopping.EarlyStopping": lambda: {
        "patience": 2, "monitor": "val_mrr", "min_delta": 0.001,
    },
    "capstone.scaling.ScalingPoint": lambda: {
        "dim": 8, "init": "random", "batch": 4, "fraction": 1.0, "seed": 0, "budget": "steps",
        "steps": 2,
    },
    "capstone.scaling_readings.crossing": lambda: {
        "behind": _line(0.02), "ahead": _line(0.01), "draws": 10, "seed": 0,
    },
    "capstone.hybrid.fused_scores": lambda: {
        "encoder": np.eye(3), "lexical": np.eye(3), "weight": 0.5,
    },
    "capstone.hybrid.hybrid_figures": lambda: {
        "encoder": lambda q, c: np.eye(len(q)), "lexical": lambda q, c: np.eye(len(q)),
        "validation": (["a", "b"], ["c", "d"]), "test": (["a", "b"], ["c", "d"]),
        "weights": (0.0, 1.0),
    },
    "capstone.baselines.bm25_scores": lambda: {
        "query_terms": __import__("scipy.sparse", fromlist=["x"]).csr_matrix(np.ones((1, 2))),
        "candidate_counts": __import__("scipy.sparse", fromlist=["x"]).csr_matrix(np.ones((2, 2))),
        "lengths": np.array([2.0, 3.0]), "idf": np.ones(2), "k1": 1.2, "b": 0.75,
    },
    "capstone.baselines.bm25_grid_study": lambda: {
        "documents": TEXTS, "k1s": (1.2,), "bs": (0.75,),
    },
    "capstone.baselines.corpus_documents": lambda: {
        "corpus": "lee_background", "fraction": 1.0,
    },
    "training.memory_plan.parallelism_advice": lambda: {
        "memory_plan": _plan(),
        "gpu_bytes": 8e9,
    },
    "core.show.show_code": lambda: {"obj": _linear().forward, "max_lines": 20},
    "core.measure.machine_busy": lambda: {"seconds": 0.01},
    "core.findings.compare": lambda: {
        "name": "a",
        "value": 2.0,
        "reference_name": "b",
        "reference": 1.0,
        "spread": 0.1,
        "tolerance": 0.02,
    },
    "core.findings.share": lambda: {"name": "a", "part": 1.0, "whole": 2.0},
    "core.models.check_ids": lambda: {"ids": _ids(), "num_embeddings": 10},
    "core.models.BagOfEmbeddingsEncoder": lambda: {
        "vocab_size": 20,
        "embedding_dim": 8,
        "output_dim": 4,
        "padding_idx": 0,
    },
    "core.models.AttentionBlock": lambda: {"d_model": 8, "n_heads": 2, "dropout": 0.1},
    "core.models.FeedForwardBlock": lambda: {"d_model": 8, "d_ff": 16, "dropout": 0.1},
    "core.models.TransformerBlock": lambda: {
        "d_model": 8,
        "n_heads": 2,
        "d_ff": 16,
        "dropout": 0.1,
    },
    "core.models.TransformerEncoder": lambda: {
        "vocab_size": 50,
        "d_model": 8,
        "n_heads": 2,
        "n_layers": 1,
        "d_ff": 16,
        "max_len": 8,
        "dropout": 0.1,
        "output_dim": 4,
        "padding_idx": 0,
    },
    "techniques.optimizers.make_optimizer": lambda: {
        "params": _linear(),
        "kind": "sgd_nesterov",
        "lr": 0.1,
        "weight_decay": 0.01,
        "momentum": 0.9,
    },
    "techniques.optimizers.bitsandbytes_optimizer": lambda: {
        "params": list(_linear().parameters()),
        "kind": "adamw8bit",
        "lr": 0.1,
        "weight_decay": 0.01,
    },
    "word2vec.skipgram_training.run_seeds": lambda: {"seed": 1, "stream": 0},
    "word2vec.equivalence.fused_equals_plain": lambda: {
        "objective": "negative", "pairs": 5, "lr": 0.5, "seed": 7,
    },
    "word2vec.equivalence.reference_equals_fast": lambda: {
        "objective": "softmax", "counts": np.array([5, 3, 2, 1]), "inputs": torch.tensor([0, 1]),
        "outputs": torch.tensor([1, 2]), "lr": 0.025, "scale": 0.2, "seed": 7,
    },
    "techniques.optimizers.sparse_optimizers": lambda: {
        "model": models.BagOfEmbeddingsEncoder(20, 8, sparse=True),
        "lr": 0.1,
        "weight_decay": 0.0,
    },
    "techniques.pipeline.bubble_fraction": lambda: {"stages": 2, "micro_batches": 4},
    "techniques.pipeline.pipeline_p2p_bytes": lambda: {
        "batch": 8,
        "width": 4,
        "stages": 2,
        "element_size": 4,
    },
    "techniques.pipeline.deep_encoder": lambda: {
        "vocab_size": 10,
        "width": 4,
        "depth": 2,
        "classes": 3,
    },
    "techniques.pipeline.split_stages": lambda: {
        "model": torch.nn.Sequential(_linear(), _linear()),
        "stages": 2,
    },
    "techniques.pipeline.pipeline_schedule": lambda: {
        "stage": None,
        "kind": "gpipe",
        "micro_batches": 2,
        "loss_fn": torch.nn.functional.mse_loss,
    },
    "techniques.ddp_hooks.predicted_overlap": lambda: {
        "bucket_bytes": [1_000_000, 2_000_000],
        "backward_seconds": 0.01,
        "world_size": 2,
        "latency": 1e-5,
        "bandwidth": 1e9,
    },
    "techniques.pipeline.schedule_order": lambda: {
        "kind": "1f1b", "stages": 3, "micro_batches": 4, "stage": 1,
    },
    "techniques.pipeline.schedule_grid": lambda: {"kind": "1f1b", "stages": 2, "micro_batches": 4},
    "techniques.parallelism.tensor_parallel_block": lambda: {
        "x": torch.ones(2, 4), "up": torch.nn.Linear(4, 8), "down": torch.nn.Linear(8, 4),
        "shards": 2,
    },
    "techniques.zero.zero1_partition": lambda: {"params": [torch.zeros(3)], "world": 2},
    "techniques.zero.zero1_state_bytes": lambda: {"params": [torch.zeros(3)], "world": 2},
    "techniques.parallelism.TokenizingPairs": lambda: {
        "pairs": [(["a"], ["b"])],
        "vocabulary": {"a": 2},
        "max_len": 4,
    },
    "techniques.parallelism.find_straggler": lambda: {
        "rows": [{"rank": r, "step": 0, "batch": 4, "data_seconds": 0.0, "step_seconds": 0.01,
                  "iteration_seconds": 0.01} for r in (0, 1)],
        "slack_share": 0.2,
    },  # fmt: skip
    "techniques.parallelism.balanced_split": lambda: {
        "rates": [1.0, 2.0], "total": 12, "minimum": 1,
    },
    "core.plotting.new_panels": lambda: {"n": 2, "title": "t"},
    "techniques.precision.gradient_underflow": lambda: {
        "model": _with_gradients(),
        "scales": (1.0, 256.0),
    },
    "techniques.precision.matmul_speedup": lambda: {"size": 8, "repeat": 1, "device": "cpu"},
    "techniques.optimizers.quantise_blockwise": lambda: {
        "values": torch.randn(10), "bits": 4, "block": 4,
    },
    "techniques.optimizers.CoarseStateAdamW": lambda: {
        "params": list(_linear().parameters()), "lr": 0.1, "bits": 4, "block": 8,
    },
    "techniques.sharding.RowPartition": lambda: {"num_embeddings": 10, "world_size": 2},
    "techniques.sharding.ShardedEmbedding": lambda: {
        "num_embeddings": 10,
        "embedding_dim": 4,
        "seed": 0,
    },
    "techniques.sharding.all_to_all_bytes": lambda: {
        "ids": _ids(),
        "num_embeddings": 10,
        "world_size": 2,
        "rank": 0,
        "row_bytes": 16,
    },
    "techniques.sharding.shard_load": lambda: {
        "ids": _ids(),
        "num_embeddings": 10,
        "world_size": 2,
    },
    "training.checkpoints.CheckpointManager": lambda: {"directory": _tmp(), "keep_last": 2},
    "training.preemption.CheckpointSchedule": lambda: {"every_steps": 5, "every_seconds": 60.0},
    "training.sampler.ResumableBatchSampler": lambda: {
        "num_examples": 10,
        "global_batch": 2,
        "seed": 0,
    },
    "training.state.capture_state": lambda: (
        lambda m: {"step": 1, "model": m, "optimizer": torch.optim.SGD(m.parameters(), lr=0.1)}
    )(_linear()),
    "cost.young_daly.PreemptionModel": lambda: {
        "checkpoint_seconds": 30.0,
        "mtbf_seconds": 7200.0,
        "restart_seconds": 60.0,
    },
    "cost.young_daly.expected_wall_time": lambda: dict(_WALL),
    "cost.young_daly.preemption_overhead": lambda: dict(_WALL),
    "cost.young_daly.simulate_wall_time": lambda: {**_WALL, "runs": 10, "seed": 0},
    "cost.young_daly.young_daly_interval": lambda: {
        "checkpoint_seconds": 30.0,
        "mtbf_seconds": 3600.0,
    },
    "demos.spot_run.SpotConfig": lambda: {
        "output_dir": _tmp(),
        "steps": 10,
        "batch": 8,
        "vocab": 100,
        "dim": 8,
        "token_dropout": 0.1,
        "seed": 0,
    },
    "training.loop.LoopConfig": lambda: {
        "checkpoint_every": 5,
        "checkpoint_seconds": 60.0,
        "keep_last": 2,
        "chaos_kills": 0,
        "chaos_seed": 0,
        "step_delay": 0.0,
        "stop_after": 5,
    },
    "training.loop.StoppedLaunch": lambda: {
        "stopped_at": 3,
        "resumed_from": 2,
        "checkpoint_dir": "checkpoints",
    },
    "demos.ddp_run.DemoConfig": lambda: {
        "steps": 4,
        "batch": 8,
        "vocab": 100,
        "dim": 8,
        "seed": 0,
    },
    "demos.resume_stress.run_uninterrupted": lambda: {
        "run": _spot_config(),
        "directory": _tmp(),
        "timeout": 60.0,
    },
    "demos.resume_stress.run_killed": lambda: {
        "run": _spot_config(),
        "directory": _tmp(),
        "kills": 1,
        "rng": random.Random(0),
        "startup_seconds": 2.0,
        "startup_share": 0.2,
        "timeout": 60.0,
    },
    "demos.resume_stress.StressConfig": lambda: {
        "repetitions": 1,
        "kills": 1,
        "kill_seed": 0,
        "startup_share": 0.2,
        "timeout": 60.0,
    },
    "core.device.deterministic_mode": lambda: {"threads": 1},
    "core.device.seeded": lambda: {"seed": 0, "devices": None},
    "demos.spot_run.launch_spot_demo": lambda: {
        "args": ["--help"],
        "nproc": 1,
        "max_restarts": 0,
        "timeout": 60.0,
    },
    "demos.spot_run.start_spot_demo": lambda: {
        "args": ["--help"],
        "nproc": 1,
        "max_restarts": 0,
    },
    "demos.spot_run.wait_for_spot_demos": lambda: {"launches": {}, "timeout": 60.0},
    "vocab.bpe.bpe_table": lambda: {
        "train_texts": TEXTS,
        "heldout_texts": TEXTS,
        "vocab_sizes": (300,),
        "dim": 8,
        "min_frequency": 1,
    },
    "vocab.bpe.train_bpe": lambda: {"texts": TEXTS, "vocab_size": 300, "min_frequency": 1},
    "vocab.bpe.learn_merges": lambda: {
        "word_counts": {"Ġcat": 2, "Ġsat": 3}, "vocab_size": 300, "min_frequency": 1,
    },
    "vocab.bag_of_words.adam_optimizer": lambda: {"model": _linear(), "lr": 0.01},
    "vocab.bag_of_words.bag_of_words_data": lambda: {
        "vocab_size": 50, "test_fraction": 0.2, "seed": 0, "limit_articles": 2,
    },
    "vocab.bag_of_words.compress_bag_of_words": lambda: {
        "data": _bag_of_words()[0], "k": 5, "seed": 0, "niter": 2,
    },
    "vocab.bag_of_words.projection_model": lambda: {
        "kind": "embedding_bag", "data": _bag_of_words()[0], "compressed": None, "out_dim": 4,
        "seed": 0, "device": "cpu",
    },
    "vocab.bag_of_words.projection_accuracy": lambda: {
        "data": _bag_of_words()[0], "compressed": _bag_of_words()[1],
        "variants": ("pca_precomputed",), "out_dim": 4, "epochs": 1, "batch_size": 64,
        "lr": 1e-3, "seed": 0, "device": "cpu",
    },
    "vocab.word_vectors.pca_quality_curve": lambda: {
        "words": [f"w{i}" for i in range(10)], "vectors": np.eye(10, 4), "ks": (2,),
        "score_fn": lambda words, vectors: 0.5, "seed": 0,
    },
    "vocab.autoencoder.train_autoencoder": lambda: {
        "x": torch.rand(16, 6), "k": 2, "epochs": 1, "batch_size": 8, "lr": 1e-3, "seed": 0,
    },
    "vocab.pca.pca_compress": lambda: {
        "x": torch.randn(20, 6),
        "k": 2,
        "seed": 0,
        "niter": 2,
        "oversample": 2,
    },
    "vocab.sparse_input.ProjectionModel": lambda: {
        "kind": "dense_linear",
        "input_dim": 10,
        "out_dim": 4,
        "n_classes": 3,
    },
    "vocab.sparse_input.break_even_out_dim": lambda: {"input_dim": 10_000, "k": 300},
    "vocab.vocabulary.build_vocab": lambda: {"texts": TEXTS, "min_count": 1, "max_size": 10},
    "vocab.vocabulary.pruning_table": lambda: {
        "train_texts": TEXTS,
        "heldout_texts": TEXTS,
        "min_counts": (1, 2),
        "dim": 8,
    },
    "word2vec.skipgram.SkipGram": lambda: {
        "objective": "negative",
        "counts": [5, 3, 2],
        "dim": 4,
        "negative": 2,
        "seed": 1,
    },
    "word2vec.skipgram.step_pair_by_pair": lambda: {
        "model": SkipGram(objective="negative", counts=[5, 3, 2], dim=4, negative=2, seed=1),
        "inputs": torch.tensor([0, 1]),
        "outputs": torch.tensor([1, 2]),
        "lr": 0.025,
    },
    "word2vec.skipgram.Workspace": lambda: {
        "output_rows": 3,
        "input_rows": 3,
        "dim": 4,
        "device": torch.device("cpu"),
    },
    "word2vec.huffman.build_huffman_tree": lambda: {"counts": [5, 3, 2]},
    "word2vec.gensim_reference.gensim_huffman_tree": lambda: {"sentences": TEXTS, "min_count": 1},
    "word2vec.vectors.evaluate_word_pairs": lambda: {
        "words": ["tiger", "cat"],
        "vectors": np.ones((2, 3)),
        "restrict_vocab": 10,
    },
    "word2vec.sampling.keep_probabilities": lambda: {"counts": np.array([5, 3, 2]), "sample": 1e-3},
    "word2vec.sampling.noise_distribution": lambda: {"counts": np.array([5, 3, 2]), "power": 0.75},
    "word2vec.sampling.draw_windows": lambda: {
        "corpus": _corpus(),
        "window": 2,
        "keep": None,
        "generator": torch.Generator(),
    },
    "word2vec.epoch_reference.kernel_noise": lambda: {
        "sampler": _noise_sampler(), "seed": 3, "count": 4,
    },
    "word2vec.epoch_reference.train_epoch_reference": lambda: _epoch_reference_args(),
    "word2vec.equivalence.loop_equals_trainer": lambda: {
        "objective": "negative", "sentences": TEXTS, "vocab": _vocab_of(TEXTS),
        "chunk": 4, "seed": 1,
    },
    "word2vec.sampling.skipgram_pairs": lambda: {
        "corpus": _corpus(),
        "window": 2,
        "keep": None,
        "generator": torch.Generator(),
    },
    "word2vec.sampling.skipgram_windows": lambda: {
        "corpus": _corpus(),
        "window": 2,
        "keep": None,
        "generator": torch.Generator(),
        "pad": 0,
    },
    "core.corpora.wiki_articles": lambda: {"limit": 2},
    "core.corpora.wiki_sentences": lambda: {"limit_articles": 2},
    "core.plotting.new_figure": lambda: {
        "title": "t",
        "xlabel": "x",
        "ylabel": "y",
        "figsize": (4, 3),
    },
    "core.plotting.stacked_memory_bars": lambda: {
        "labels": ["a"],
        "breakdowns": [{"weights": 1e6}],
        "title": "t",
    },
    "training.preemption.PreemptionHandler": lambda: {"signals": (signal.SIGTERM,)},
    "word2vec.skipgram_config.Word2VecConfig": lambda: {
        "dim": 4,
        "window": 2,
        "min_count": 1,
        "negative": 2,
        "sample": 1e-3,
        "epochs": 1,
        "alpha": 0.025,
        "min_alpha": 1e-4,
        "batch_size": 8,
        "seed": 1,
        "workers": 1,
        "threads": 1,
    },
    "word2vec.data_parallel.train_word2vec_data_parallel": lambda: {
        "sentences": TEXTS, "syncs_per_epoch": 2,
        "config": Word2VecConfig(min_count=1, dim=4, epochs=1, progress=False),
    },
    "word2vec.data_parallel.RankSync": lambda: {"syncs": 2},
    "capstone.recipe.EncoderRecipe": lambda: {
        "passage_tokens": 200, "vocab_size": 1000, "min_count": 2, "dim": 8, "layers": 1,
        "min_span": 4, "max_span": 8, "word_dropout": 0.1, "length_power": 0.5, "seed": 0,
    },
    "capstone.recipe.train_encoder": lambda: {
        "setup": _capstone_setup(),
        "run": __import__("chapter20.training.run_config", fromlist=["x"]).RunConfig(
            steps=1, batch=2, progress=False
        ),
        "eval_every": 1, "retrieval": (["the cat", "the dog"], ["cat sat", "dog sat"]),
    },
    "techniques.memory_model.BagShape": lambda: {"vocab_size": 100, "dim": 8},
    "capstone.capstone_config.CapstoneConfig": lambda: {
        "output_dir": _tmp(), "dim": 8, "seed": 0, "steps": 4, "batch": 8,
        "eval_every": 2, "eval_pairs": 10, "plan_gpu_gb": 80.0,
    },
    "capstone.report.cost_projection": lambda: {"gpus": 8},
    "capstone.report.memory_plan": lambda: {
        "config": _run_config(), "model": models.WeightedBagEncoder(50, 8), "world_size": 2,
    },
    "capstone.report.plan_lines": lambda: {
        "memory": _plan(), "projection": __import__("chapter20.capstone.report",
        fromlist=["x"]).cost_projection(), "gpu_gb": 80.0,
    },
    "capstone.evaluation.heldout_sentence_pairs": lambda: {
        "limit": 10,
        "test_fraction": 0.1,
        "validation_fraction": 0.1,
        "seed": 0,
    },
    "capstone.views.article_splits": lambda: {
        "test_fraction": 0.1, "validation_fraction": 0.1, "seed": 0,
    },
    "capstone.metrics.retrieval_metrics": lambda: {"scores": np.eye(3), "ks": (1,), "ndcg_at": 2},
    "capstone.metrics.uniformity": lambda: {"cosines": np.eye(3), "t": 2.0},
    "capstone.baselines.fit_baseline": lambda: {
        "method": "tfidf", "documents": TEXTS, "seed": 0, "lsi_topics": 1, "doc2vec_epochs": 1,
    },
    "capstone.baselines.lsi_size_study": lambda: {"documents": TEXTS, "sizes": (1,)},
    "capstone.baselines.baseline_table": lambda: {
        "corpora": ("lee_background",), "methods": ("tfidf",), "seeds": (0,),
        "retrieval": (["the cat", "the dog"], ["cat sat", "dog sat"]), "doc2vec_epochs": 1,
        "settings": {("tfidf", "lee_background"): {}}, "fraction": 1.0,
    },
    "core.seed_statistics.versus_reference": lambda: {
        "frame": __import__("pandas").DataFrame({"m": ["a", "b"], "r": [0.1, 0.2]}), "by": "m",
        "reference": "a", "column": "r", "chance": 0.01,
    },
    "capstone.evaluation.retrieval_recall": lambda: {
        "encode": _count_encode, "anchors": ["a", "b"], "positives": ["c", "d"], "ks": (1,),
    },
    "core.models.WeightedBagEncoder": lambda: {
        "vocab_size": 20,
        "embedding_dim": 4,
        "padding_idx": 0,
    },
    "capstone.views.ViewSampler": lambda: {
        "documents": [np.arange(1, 9)] * 4, "batch": 2, "min_span": 2, "max_span": 4,
        "word_dropout": 0.1, "length_power": 0.5, "seed": 0, "rank": 0, "world_size": 1,
    },
    "vocab.tokenizers.build_tokenizer": lambda: {
        "documents": TEXTS,
        "vocab_size": 20,
        "min_count": 1,
    },
    "capstone.views.idf_weights": lambda: {
        "documents": [np.arange(1, 5)] * 3, "vocab_size": 10, "offset": 1.0, "floor": 0.05,
    },
    "capstone.views.lsa_word_vectors": lambda: {
        "documents": [np.arange(1, 5), np.arange(2, 7), np.arange(3, 9)],
        "weights": torch.ones(10), "dim": 2, "seed": 0, "iterations": 2,
    },
    "vocab.tokenizers.pad_batch": lambda: {"rows": [np.arange(1, 4)], "length": 4},
    "capstone.views.training_documents": lambda: {
        "sources": ("lee",), "passage_tokens": 50, "test_fraction": 0.1,
        "validation_fraction": 0.1, "seed": 0,
    },
    # The proofs and presets that notebooks 01, 04, 06, 09, 10 and 12 run from the library.
    "techniques.sharding_proofs.batch_ids": lambda: {
        "num_embeddings": 10, "world_size": 2, "rank": 0, "seed": 0,
    },
    "techniques.sharding_proofs.equivalence_on_rank": lambda: {
        "sizes": (3,), "dim": 2, "lr": 0.5, "seed": 0,
    },
    "techniques.sharding_proofs.misuse_on_rank": lambda: {
        "num_embeddings": 10, "dim": 2, "seed": 0,
    },
    "techniques.sharding_proofs.reference_on_rank": lambda: {"sizes": (3,), "dim": 2, "seed": 0},
    "techniques.sharding_proofs.bad_ids_on_rank": lambda: {"num_embeddings": 10, "dim": 2},
    "techniques.sharding_proofs.comm_bytes_on_rank": lambda: {
        "global_batch": 8, "dim": 2, "num_embeddings": 10, "seed": 0,
    },
    "demos.recommender.shuffled_users": lambda: {"data": _interactions(), "seed": 0},
    "demos.recommender.sharded_step_on_rank": lambda: {
        "batch": 4, "negatives": 1, "dim": 2, "seed": 0, "data": _interactions(),
    },
    "techniques.checkpointing_policies.make_encoder": lambda: {
        "layers": 1, "vocab": 10, "d_model": 8, "dropout": 0.0, "seed": 0,
    },
    "techniques.checkpointing_policies.checkpointed": lambda: {
        "model": _encoder(), "policy": "every_k", "k": 1,
    },
    "techniques.checkpointing_policies.encoder_ids": lambda: {
        "batch": 2, "seq_len": 4, "vocab": 10, "seed": 0,
    },
    "techniques.checkpointing_policies.gradient_proof": lambda: {
        "layers": 1, "dropout": 0.1, "batch": 2, "seq_len": 4,
    },
    "techniques.checkpointing_policies.layer_measurements": lambda: {
        "batch": 2, "seq_len": 4, "d_model": 8,
    },
    "techniques.checkpointing_policies.policy_roles": lambda: {"layers": 4},
    "techniques.ddp_practices.unused_search_prediction": lambda: {
        "batch": 2, "model": _DEEP, "repeat": 1,
    },
    "techniques.pipeline.pipeline_batch": lambda: {"batch": 2, "model": _DEEP, "seed": 0},
    "word2vec.equivalence.hs_normalisation_proof": lambda: {
        "n": 10, "dim": 4, "rows": 2, "seed": 0,
    },
    "word2vec.equivalence.gradient_proof": lambda: {"seed": 0},
    "vocab.compression_proofs.pca_proof": lambda: {
        "x": _sparse_rows(), "rows": 10, "k": 2, "seed": 0,
    },
    "vocab.compression_proofs.autoencoder_proof": lambda: {
        "x": _sparse_rows(), "rows": 10, "k": 2, "epochs": 1, "seed": 0,
    },
}  # fmt: skip

_WALL = {
    "work_seconds": 3600.0,
    "interval_seconds": 600.0,
    "model": cost.PreemptionModel(
        checkpoint_seconds=30.0, mtbf_seconds=7200.0, restart_seconds=60.0
    ),
}

# Awkward values a parameter legitimately takes (not called: they are valid input).
_ZERO = {"zero"}
ACCEPTS: dict[str, set[str]] = {
    **{
        name: _ZERO
        for name in (
            "capstone.recipe.EncoderRecipe.seed",
            "demos.recommender.passage_interactions.seed",
            "demos.recommender.sample_negatives.count",
            "techniques.pipeline.schedule_order.stage",
            "capstone.recipe.EncoderRecipe.word_dropout",
            "capstone.capstone_config.CapstoneConfig.seed",
            "capstone.baselines.baseline_table.seeds",
            "capstone.baselines.fit_baseline.seed",
            "capstone.evaluation.heldout_sentence_pairs.seed",
            "training.early_stopping.EarlyStopping.min_delta",
            "capstone.scaling.ScalingPoint.seed",
            "capstone.scaling_readings.crossing.seed",
            "capstone.hybrid.fused_scores.weight",
            "capstone.baselines.bm25_scores.k1",
            "capstone.baselines.bm25_scores.b",
            "capstone.baselines.bm25_grid_study.k1s",
            "capstone.baselines.bm25_grid_study.bs",
            "capstone.baselines.fit_baseline.bm25_k1",
            "capstone.baselines.fit_baseline.bm25_b",
            "capstone.hybrid.hybrid_figures.weights",
            "demos.chaos_launch.chaos_run.kills",
            "demos.chaos_launch.launch.max_restarts",
            "techniques.contrastive_proofs.distributed_proof_on_rank.hard",
            "techniques.contrastive_proofs.distributed_proof_on_rank.seed",
            "techniques.contrastive_proofs.grad_cache_proof.dropout",
            "techniques.contrastive_proofs.grad_cache_proof.seed",
            "techniques.contrastive_proofs.grad_cache_reference_proof.seed",
            "techniques.contrastive_proofs.info_nce_proof.seed",
            "techniques.optimizer_proofs.quantisation_proof.tolerance",
            "techniques.optimizer_proofs.reference_step_proof.tolerance",
            "capstone.evaluation.heldout_sentence_pairs.validation_fraction",
            "capstone.views.article_splits.seed",
            "capstone.views.article_splits.validation_fraction",
            "capstone.views.training_documents.validation_fraction",
            "core.models.WeightedBagEncoder.padding_idx",
            "capstone.views.ViewSampler.word_dropout",
            "capstone.views.ViewSampler.seed",
            "capstone.views.ViewSampler.rank",
            "capstone.views.lsa_word_vectors.seed",
            "capstone.views.lsa_word_vectors.iterations",
            "capstone.views.training_documents.seed",
            "techniques.activation_checkpointing.predicted_activation_bytes.layer_bytes",
            "core.corpora.pair_data.seed",
            "techniques.distributed.warmup_schedule.warmup_steps",
            "techniques.memory_model.optimizer_state_bytes_predicted.state_32bit",
            "techniques.sharding.ShardedBagEncoder.padding_idx",
            "techniques.sharding.ShardedBagEncoder.seed",
            "demos.resume_stress.run_killed.kills",
            "demos.resume_stress.run_killed.startup_seconds",
            "demos.resume_stress.run_killed.startup_share",
            "demos.resume_stress.StressConfig.kills",
            "demos.resume_stress.StressConfig.kill_seed",
            "demos.resume_stress.StressConfig.startup_share",
            "training.config.TrainConfig.weight_decay",
            "training.config.TrainConfig.warmup_steps",
            "techniques.activation_checkpointing.predicted_activation_bytes.boundary_bytes",
            "techniques.activation_checkpointing.predicted_activation_bytes.selective_layer_bytes",
            "techniques.activation_checkpointing.predicted_activation_bytes.other_bytes",
            "core.claims.check.measured",
            "cost.estimates.Preemption.restart_seconds",
            "cost.estimates.DataFootprint.dataset_gb",
            "cost.estimates.DataFootprint.checkpoint_gb",
            "cost.estimates.DataFootprint.checkpoints_kept",
            "cost.estimates.DataFootprint.retention_months",
            "cost.estimates.DataFootprint.egress_gb",
            "cost.estimates.DataFootprint.storage_per_gb_month",
            "cost.estimates.DataFootprint.egress_per_gb",
            "cost.estimates.cost_breakdown.other",
            "cost.estimates.data_parallel_efficiency.overlap",
            "cost.estimates.data_parallel_efficiency.gpu_link_latency_s",
            "cost.estimates.data_parallel_efficiency.network_latency_s",
            "cost.fleet_choices.training_options.overlap",
            "core.corpora.train_test_split_articles.seed",
            "core.id_streams.uniform_ids.shape",
            "core.id_streams.uniform_ids.seed",
            "core.id_streams.zipf_ids.shape",
            "core.id_streams.zipf_ids.s",
            "core.id_streams.zipf_ids.seed",
            "core.id_streams.zipf_probabilities.s",
            "core.device.set_seed.seed",
            "core.device.seeded.seed",
            "techniques.distributed.distributed_loader.seed",
            "techniques.distributed.distributed_loader.num_workers",
            "techniques.distributed.set_epoch.epoch",
            "core.measure.format_bytes.n",
            "core.measure.format_difference.max_abs_diff",
            "core.measure.format_difference.tolerance",
            "techniques.memory_model.optimizer_state_bytes_predicted.parameter_sizes",
            "core.measure.time_fn.warmup",
            "core.measure.time_interleaved.warmup",
            "training.memory_plan.plan.zero_stage",
            "techniques.memory_model.training_state_bytes.num_parameters",
            "techniques.memory_model.training_state_bytes.num_tensors",
            "core.models.AttentionBlock.dropout",
            "core.models.FeedForwardBlock.dropout",
            "core.models.TransformerBlock.dropout",
            "core.models.TransformerEncoder.dropout",
            "core.models.BagOfEmbeddingsEncoder.padding_idx",
            "core.models.TransformerEncoder.padding_idx",
            "techniques.optimizers.make_optimizer.weight_decay",
            "techniques.optimizers.make_optimizer.momentum",
            "techniques.optimizers.bitsandbytes_optimizer.weight_decay",
            "word2vec.skipgram_training.run_seeds.seed",
            "word2vec.skipgram_training.run_seeds.stream",
            "techniques.optimizers.sparse_optimizers.weight_decay",
            "techniques.ddp_hooks.predicted_overlap.bucket_bytes",
            "techniques.ddp_hooks.predicted_overlap.backward_seconds",
            "techniques.ddp_hooks.predicted_overlap.latency",
            "techniques.parallelism.balanced_split.minimum",
            "core.plotting.stacked_memory_bars.breakdowns",
            "techniques.sharding.ShardedEmbedding.seed",
            "techniques.sharding.all_to_all_bytes.rank",
            "techniques.sharding.all_to_all_bytes.row_bytes",
            "techniques.communication_model.ring_allreduce_bytes.tensor_bytes",
            "techniques.communication_model.ring_allreduce_seconds.nbytes",
            "techniques.communication_model.ring_allreduce_seconds.latency",
            "techniques.communication_model.hierarchical_allreduce_seconds.gradient_bytes",
            "techniques.communication_model.scaling_efficiency.comm_seconds",
            "techniques.communication_model.scaling_efficiency.overlap",
            "techniques.communication_model.scaling_model.gradient_bytes",
            "techniques.communication_model.scaling_model.overlap",
            "core.seed_statistics.range_text.decimals",
            "training.pair_training.pair_batches.seed",
            "training.pair_training.PairRunConfig.steps",
            "training.pair_training.PairRunConfig.seed",
            "training.run_config.RunConfig.steps",
            "training.run_config.RunConfig.seed",
            "training.sampler.ResumableBatchSampler.seed",
            "training.state.capture_state.step",
            "cost.young_daly.PreemptionModel.checkpoint_seconds",
            "cost.young_daly.PreemptionModel.restart_seconds",
            "cost.young_daly.expected_wall_time.work_seconds",
            "cost.young_daly.simulate_wall_time.work_seconds",
            "cost.young_daly.simulate_wall_time.seed",
            "demos.spot_run.SpotConfig.token_dropout",
            "demos.spot_run.SpotConfig.seed",
            "training.loop.LoopConfig.chaos_kills",
            "training.loop.LoopConfig.chaos_seed",
            "training.loop.LoopConfig.step_delay",
            "demos.ddp_run.DemoConfig.seed",
            "demos.spot_run.launch_spot_demo.max_restarts",
            "demos.spot_run.start_spot_demo.max_restarts",
            "vocab.bpe.bpe_table.min_frequency",
            "vocab.pca.pca_compress.seed",
            "vocab.bag_of_words.bag_of_words_data.seed",
            "vocab.bag_of_words.compress_bag_of_words.seed",
            "vocab.bag_of_words.compress_bag_of_words.niter",
            "vocab.bag_of_words.projection_model.seed",
            "vocab.bag_of_words.projection_accuracy.seed",
            "vocab.word_vectors.pca_quality_curve.seed",
            "word2vec.equivalence.fused_equals_plain.seed",
            "word2vec.equivalence.reference_equals_fast.seed",
            "word2vec.equivalence.loop_equals_trainer.seed",
            "word2vec.epoch_reference.kernel_noise.seed",
            "word2vec.epoch_reference.kernel_noise.count",
            "word2vec.epoch_reference.train_epoch_reference.epoch",
            "core.id_streams.zipf_counts.s",
            "vocab.autoencoder.train_autoencoder.seed",
            "vocab.pca.pca_compress.niter",
            "vocab.pca.pca_compress.oversample",
            "vocab.bpe.train_bpe.min_frequency",
            "vocab.bpe.learn_merges.min_frequency",
            "word2vec.skipgram.SkipGram.seed",
            "word2vec.skipgram.Workspace.output_rows",
            "word2vec.skipgram.Workspace.input_rows",
            "word2vec.sampling.keep_probabilities.sample",
            "word2vec.sampling.noise_distribution.power",
            "word2vec.sampling.skipgram_windows.pad",
            "word2vec.skipgram_config.Word2VecConfig.sample",
            "word2vec.skipgram_config.Word2VecConfig.min_alpha",
            "word2vec.skipgram_config.Word2VecConfig.seed",
            "word2vec.data_parallel.train_word2vec_data_parallel.syncs_per_epoch",
            "word2vec.data_parallel.RankSync.syncs",
            "word2vec.equivalence.hs_normalisation_proof.seed",
            "word2vec.equivalence.gradient_proof.seed",
            "vocab.compression_proofs.pca_proof.seed",
            "vocab.compression_proofs.autoencoder_proof.seed",
            "techniques.pipeline.pipeline_batch.seed",
            "techniques.checkpointing_policies.make_encoder.dropout",
            "techniques.checkpointing_policies.make_encoder.seed",
            "techniques.checkpointing_policies.encoder_ids.seed",
            "techniques.checkpointing_policies.gradient_proof.dropout",
            "techniques.sharding_proofs.batch_ids.rank",
            "techniques.sharding_proofs.batch_ids.seed",
            "techniques.sharding_proofs.equivalence_on_rank.seed",
            "techniques.sharding_proofs.misuse_on_rank.seed",
            "techniques.sharding_proofs.reference_on_rank.seed",
            "techniques.sharding_proofs.comm_bytes_on_rank.seed",
            "demos.recommender.shuffled_users.seed",
            "demos.recommender.sharded_step_on_rank.seed",
        )
    },
    # Negative values are valid too: a negative length power favours short documents, a
    # negative IDF offset raises every weight.
    "capstone.recipe.EncoderRecipe.length_power": {"zero", "negative"},
    "capstone.views.ViewSampler.length_power": {"zero", "negative"},
    "capstone.views.idf_weights.offset": {"zero", "negative"},
    # A measured value may be negative (a difference, a loss of accuracy).
    "core.claims.check.measured": {"zero", "negative"},
    # A size difference may be negative; a failed comparison's difference is NaN or infinite
    # and prints as ✗, which is the proof's answer, not a silent one.
    "core.measure.format_bytes.n": {"zero", "negative"},
    # No spread or tolerance is a valid choice; a share may be nothing, or negative (printed so).
    "core.findings.compare.spread": {"zero"},
    "core.findings.compare.tolerance": {"zero"},
    "core.findings.share.part": {"zero", "negative"},
    # a rate over no time is infinite; a range may start below zero and end at infinity
    "core.seed_statistics.median_and_range.values": {"zero", "inf"},
    "core.seed_statistics.timing_spread_ms.seconds": {"zero", "inf"},
    "core.seed_statistics.range_text.lows": {"zero", "negative"},
    "core.seed_statistics.range_text.highs": {"inf"},
    "core.measure.format_difference.max_abs_diff": {"zero", "nan", "inf"},
    # a launch may wait as long as it needs: a huge timeout is a real launch, not a wrong value
    "demos.node_launch.two_node_torchrun.timeout": {"huge"},
}

# Public callables with numeric parameters that this test does not call, and why.
OUT_OF_SCOPE = {
    "techniques.sharding_proofs.listing_lookup_done_right": "a teaching reference: the chapter's "
    "replicated lookup (listing L1) with its two faults fixed, shown in notebook 01 and proven "
    "equal to ShardedEmbedding (its one check, ids in range, is one of the fixes it shows)",
    "demos.recommender.train_recommender": "real training of the two-tower recommender on its "
    "interactions (notebook 01): it checks its arguments, but a huge epochs is a run that never "
    "ends rather than a wrong value",
    "cost.throughput.measure_throughput": "a benchmark: times real training steps of a "
    "6-layer encoder",
    "cost.plots.plot_pareto": "draws computed frames; its numbers are results, not parameters",
    "cost.plots.plot_spot_overhead": "draws computed frames; its numbers are results, not "
    "parameters",
    "cost.plots.plot_spot_discounts": "draws a computed frame; claimed is the chapter's range, "
    "shaded as it is",
    "word2vec.vectors.WordVectors": "a result record that train_word2vec returns",
    "core.device.DeterministicMode": "built by deterministic_mode, which checks its thread count",
    "techniques.contrastive.info_nce_reference": "a teaching reference: the loss in its essential "
    "lines, shown in notebook 02 and proven equal to the checked info_nce (checks would hide the "
    "lines it shows)",
    "techniques.contrastive.grad_cache_reference": "a teaching reference: gradient caching's two "
    "passes alone, shown in notebook 02 and proven equal to the checked grad_cache_backward "
    "(checks would hide the lines it shows)",
    "techniques.optimizers.adamw_reference_step": "a teaching reference: AdamW's update in its "
    "essential lines, shown in notebook 05 and proven equal to torch.optim.AdamW (checks would "
    "hide the lines it shows)",
    "techniques.optimizers.sgd_nesterov_reference_step": "a teaching reference: SGD with Nesterov "
    "momentum in its essential lines, shown in notebook 05 and proven equal to torch.optim.SGD "
    "(checks would hide the lines it shows)",
    "techniques.optimizers.quantise_dynamic": "a teaching reference: block-wise quantisation in "
    "its essential lines, shown in notebook 05 and proven against bitsandbytes (checks would hide "
    "the lines it shows)",
    "techniques.optimizers.dequantise_dynamic": "a teaching reference: block-wise dequantisation "
    "in its essential lines, shown in notebook 05 and proven against bitsandbytes (checks would "
    "hide the lines it shows)",
    "word2vec.pair_updates.softmax_pair_step": "a teaching reference: one pair's full-softmax "
    "update in its essential lines, shown in notebook 09 and proven equal to the checked trainer "
    "(checks would hide the lines it shows)",
    "word2vec.pair_updates.negative_pair_step": "a teaching reference: one pair's "
    "negative-sampling update in its essential lines, shown in notebook 09 and proven equal to the "
    "checked C loop (checks would hide the lines it shows)",
    "word2vec.pair_updates.hierarchical_pair_step": "a teaching reference: one pair's "
    "hierarchical-softmax update in its essential lines, shown in notebook 09 and proven equal to "
    "the checked C loop (checks would hide the lines it shows)",
    "word2vec.trainers.train": "real training of word vectors on a corpus; its settings are "
    "Word2VecConfig's, whose checks tests/test_word2vec*.py cover",
    "word2vec.trainers.softmax_at_equal_time": "real training for a time budget; its settings are "
    "Word2VecConfig's",
    "word2vec.trainers.score_run": "builds a result row from trained vectors; its numbers are "
    "results, not parameters",
    "training.pair_training.heldout_run": "real training through the one run driver; its "
    "numbers are its PairRunConfig's, whose checks are called here",
    "training.loop.resumable_loop": "its only int is in a callback's signature (after_step); "
    "the numbers it reads come from a checked LoopConfig",
    "training.driver.RunTracker": "the driver's own state of a run, built by run_training from "
    "its checked RunConfig and eval_every",
    "capstone.scaling.scaling_run": "real training of one scaling point through the one run "
    "driver; its numbers are its ScalingPoint's, whose checks are called here",
}

# How an awkward value is put into a parameter that holds several numbers.
WRAP = {
    "core.plotting.new_figure.figsize": lambda value: (value, 3.0),
    "core.plotting.stacked_memory_bars.breakdowns": lambda value: [{"weights": value}],
}


# One directory for every case's files, removed when the test process ends (a directory per
# case under it, so no case sees another's checkpoints).
_TMP_ROOT = tempfile.TemporaryDirectory(prefix="chapter20-bad-input-")


def _tmp() -> str:
    return tempfile.mkdtemp(dir=_TMP_ROOT.name)


#: Folders of experiments and entry points, not library API.
_NOT_LIBRARY = ("labs", "cli", "scripts")


@functools.cache
def _public_callables() -> dict[str, typing.Callable]:
    """Every public function and class of the library, keyed by where it is defined, dotted
    below chapter20 (``techniques.accumulation.split_batch``)."""
    found = {}
    for info in pkgutil.walk_packages(chapter20.__path__, "chapter20."):
        relative = info.name.removeprefix("chapter20.")
        if info.ispkg or relative.startswith(_NOT_LIBRARY) or relative == "core.checks":
            continue  # labs are experiments; checks are the argument checkers themselves
        if relative.split(".")[-1].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        names = getattr(module, "__all__", None) or [
            n for n in vars(module) if not n.startswith("_")
        ]
        for name in names:
            # Built on first access (PEP 562): pipeline.TimedStage, which takes PipelineStage's
            # arguments; resolving it would import torch.distributed.pipelining while collecting.
            if name not in vars(module):
                continue
            obj = getattr(module, name)
            if getattr(obj, "__module__", None) != module.__name__:
                continue  # re-exported: keyed where it is defined
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                found[f"{relative}.{name}"] = obj
    return found


def _is_record(obj) -> bool:
    """A dataclass a function returns (all fields required, no checks of its own)."""
    import dataclasses

    return (
        dataclasses.is_dataclass(obj) and "__post_init__" not in vars(obj) and inspect.isclass(obj)
    )


_NUMERIC = ("int", "float")


def _numeric_parameters(obj) -> list[tuple[str, bool]]:
    """(name, is a sequence of numbers) for each numeric parameter of ``obj``; the kind
    (``int`` or ``float``) is found by :func:`_is_integer`."""
    out = []
    try:
        signature = inspect.signature(obj)
    except ValueError:  # a class implemented in C
        return out
    for p in signature.parameters.values():
        text = str(p.annotation)
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or "bool" == text:
            continue
        if text.startswith(("dict", "Mapping")):
            continue  # a mapping (a vocabulary, an index): not a number
        numeric = any(t in text for t in _NUMERIC) or type(p.default) in (int, float)
        if not numeric:
            continue
        sequence = any(s in text for s in ("Sequence", "Iterable", "tuple[", "list["))
        out.append((p.name, sequence))
    return out


def _cases():
    """One case per numeric parameter of each callable in scope: (qualified name, parameter,
    whether it holds a sequence, the awkward values it must reject)."""
    cases = []
    for qualified, obj in sorted(_public_callables().items()):
        parameters = _numeric_parameters(obj)
        if not parameters or qualified in OUT_OF_SCOPE:
            continue
        if qualified not in BASE and _is_record(obj):
            continue
        for name, sequence in parameters:
            accepted = ACCEPTS.get(f"{qualified}.{name}", set())  # valid values: not called
            labels = tuple(label for label in AWKWARD if label not in accepted)
            if labels:
                cases.append(
                    pytest.param(qualified, name, sequence, labels, id=f"{qualified}-{name}")
                )
    return cases


CASES = _cases()


def test_every_callable_with_numeric_parameters_is_in_scope_or_excused():
    """A new public function fails here until it has valid arguments in BASE (or a reason)."""
    called = {case.values[0] for case in CASES}
    assert sorted(called - set(BASE)) == []
    assert sorted(set(BASE) - called) == []  # no stale entries


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang


def _is_integer(obj, name: str) -> bool:
    """A count, size or index (annotated int, not float)."""
    annotation = str(inspect.signature(obj).parameters[name].annotation)
    default = inspect.signature(obj).parameters[name].default
    if "float" in annotation:
        return False
    return "int" in annotation or type(default) is int


def _rejection_failure(qualified: str, name: str, sequence: bool, label: str) -> str | None:
    """None when ``qualified`` rejects the awkward value ``label`` in ``name`` with the
    parameter's name (or, for a huge real number, returns a result); otherwise what went wrong."""
    obj = _public_callables()[qualified]
    may_return = label == "huge" and not _is_integer(obj, name)
    kwargs = BASE[qualified]()
    value = AWKWARD[label]
    wrap = WRAP.get(f"{qualified}.{name}", (lambda v: (v,)) if sequence else (lambda v: v))
    kwargs[name] = wrap(value)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, 20.0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an overflow warning is a silent NaN on its way
            obj(**kwargs)
    except (ValueError, TypeError) as exc:
        if name not in str(exc):
            return f"{label}: {type(exc).__name__} does not name {name!r}: {exc}"
    except _Hang:
        return f"{label}: {qualified}({name}={value!r}) ran for 20 s instead of rejecting it"
    except Exception as exc:
        unrelated = type(exc).__name__
        return f"{label}: {qualified}({name}={value!r}) raised an unrelated {unrelated}: {exc}"
    else:
        if not may_return:
            return f"{label}: {qualified}({name}={value!r}) returned silently"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return None


@pytest.mark.parametrize("qualified, name, sequence, labels", CASES)
def test_awkward_values_are_rejected_with_the_parameters_name(qualified, name, sequence, labels):
    """Each awkward value (``AWKWARD``, less those in ``ACCEPTS``), in a fresh call with valid
    other arguments: rejected with the parameter's name; a huge real number (1.8e19 seconds,
    dollars) may instead give a result, but never an overflow, a hang or another exception.
    One test per parameter; the failure lists every value that went wrong."""
    failures = [_rejection_failure(qualified, name, sequence, label) for label in labels]
    failures = [f for f in failures if f is not None]
    assert not failures, "\n".join(failures)
