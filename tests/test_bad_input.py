"""Bad input across the public API (DESIGN.md, "Code"): every public function and constructor of
the library gets the awkward values for each of its numeric parameters — 0, a negative number,
NaN, infinity, a wrong type, a size no machine has — and must answer with a ValueError or
TypeError that names the parameter: never a hang, a silent result or an unrelated exception.

Each callable is called with valid arguments (``BASE``) except the one parameter under test.
A value the parameter legitimately accepts (a seed of 0, no weight decay) is listed in
``ACCEPTS`` and not called. Labs (experiments), result records (returned, not passed in) and
benchmarks that time real training are out of scope; ``OUT_OF_SCOPE`` says which and why.
"""

from __future__ import annotations

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
from chapter20 import claims, contrastive, cost, memory, models

AWKWARD = {
    "zero": 0,
    "negative": -1,
    "nan": math.nan,
    "inf": math.inf,
    "wrong type": "1",
    "huge": 2**64,  # no int64 holds it: no table, batch or count is this large
}


def _encoder():
    from chapter20.models import TransformerEncoder

    return TransformerEncoder(50, d_model=16, n_heads=2, n_layers=2, max_len=8, dropout=0.0)


def _linear():
    return torch.nn.Linear(4, 2)


def _pair_data():
    from chapter20.data import PairData

    ids = torch.randint(1, 20, (4, 8, 3), generator=torch.Generator().manual_seed(0))
    return PairData(*ids, vocab_size=20)


def _sgd():
    return torch.optim.SGD(_linear().parameters(), lr=0.1)


def _catalog_config():
    from chapter20.cost import configuration

    return configuration("p4d.24xlarge")


def _plan():
    from chapter20.memory import EncoderShape, plan

    return plan(EncoderShape(1000), batch=8, seq_len=16)


def _corpus():
    from chapter20.vocab import build_vocab
    from chapter20.word2vec import encode_corpus

    sentences = [["a", "b", "c", "a"], ["b", "c", "a"]] * 3
    return encode_corpus(sentences, build_vocab(sentences, min_count=1))


def _loader():
    from chapter20.distributed import distributed_loader

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
    from chapter20.models import BagOfEmbeddingsEncoder

    return BagOfEmbeddingsEncoder(20, 8)


def _ids():
    return torch.tensor([[1, 2, 3], [4, 5, 6]])


TEXTS = [["the", "cat", "sat"], ["the", "dog", "sat"]] * 5


def _capstone_setup():
    """A tiny built recipe (every Lee document holds "the"), for train_encoder."""
    from chapter20.capstone import EncoderRecipe, EncoderSetup
    from chapter20.models import WeightedBagEncoder
    from chapter20.views import build_tokenizer, encode_documents, idf_weights

    tokenizer = build_tokenizer(TEXTS, min_count=1)
    documents = encode_documents(TEXTS, tokenizer)
    weights = idf_weights(documents, tokenizer.vocab_size)
    model = WeightedBagEncoder(tokenizer.vocab_size, 4)
    recipe = EncoderRecipe(min_span=1, max_span=3)
    return EncoderSetup(recipe, tokenizer, documents, weights, model)


def _run_config(**extra):
    from chapter20.capstone_run import RunConfig

    return RunConfig(output_dir=_tmp(), dim=8, batch=8, **extra)


def _count_encode(texts):
    return torch.arange(3.0 * len(texts)).reshape(len(texts), 3) % 5 + 1


# Valid arguments for every callable in scope (the numeric parameters under test included).
BASE: dict[str, typing.Callable[[], dict]] = {
    "accumulation.example_weights": lambda: {"counts": [3, 2], "rule": "examples"},
    "accumulation.split_batch": lambda: {"batch": _batches()[0], "micro_batches": 2},
    "contrastive.recall_at_k": lambda: {
        "model": _bag(),
        "anchors": _ids(),
        "positives": _ids(),
        "ks": (1, 2),
    },
    "data.pair_data": lambda: {"vocab_size": 500, "max_len": 8, "test_pairs": 10, "seed": 0},
    "sharding.ShardedBagEncoder": lambda: {
        "vocab_size": 20,
        "embedding_dim": 4,
        "output_dim": 3,
        "padding_idx": 0,
        "seed": 0,
    },
    "training.TrainConfig": lambda: {
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
        "checkpointing": "every_k",
        "checkpointing_k": 2,
    },
    "training.planned_step": lambda: {
        "shape": memory.EncoderShape(1000), "config": chapter20.training.TrainConfig(chunk_size=4),
        "batch": 8, "seq_len": 16, "device": "cpu",
    },
    "training.TrainedModule": lambda: {"encoder": _linear(), "learned_temperature": 0.05},
    "training.train_on_pairs": lambda: {
        "trainer": __import__("chapter20.training", fromlist=["Trainer"]).Trainer(_bag()),
        "anchors": torch.randint(1, 20, (8, 3)),
        "positives": torch.randint(1, 20, (8, 3)),
        "steps": 1,
        "batch": 4,
        "seed": 0,
    },
    "training.heldout_run": lambda: {
        "data": _pair_data(), "config": chapter20.training.TrainConfig(), "steps": 1, "batch": 4,
        "seed": 0, "dim": 4,
    },
    "checkpointing.segment_size": lambda: {"policy": "every_k", "num_layers": 4, "k": 2},
    "checkpointing.apply_checkpointing": lambda: {"model": _encoder(), "policy": "every_k", "k": 1},
    "checkpointing.predicted_activation_bytes": lambda: {
        "policy": "every_k",
        "num_layers": 4,
        "layer_bytes": 100,
        "boundary_bytes": 10,
        "selective_layer_bytes": 50,
        "other_bytes": 5,
        "k": 2,
    },
    "claims.check": lambda: {"claim_id": "C20", "measured": 60.0},
    "claims.audit_text": lambda: {
        "frame": claims.audit(),
        "width": 70,
    },
    "contrastive.info_nce": lambda: {
        "queries": torch.randn(4, 3),
        "keys": torch.randn(4, 3),
        "temperature": 0.05,
    },
    "contrastive.distributed_info_nce": lambda: {
        "queries": torch.randn(4, 3),
        "keys": torch.randn(4, 3),
        "temperature": 0.05,
    },
    "contrastive.grad_cache_backward": lambda: {
        "model": _bag(),
        "inputs": (_ids(), _ids()),
        "chunk_size": 1,
        "loss_fn": lambda a, b: contrastive.info_nce(a, b),
    },
    "cost.Preemption": lambda: {
        "mtbf_hours": 2.0,
        "checkpoint_seconds": 30.0,
        "restart_seconds": 300.0,
    },
    "cost.Workload": lambda: {
        "name": "w",
        "pairs": 1e6,
        "vocab": 1000,
        "d_model": 64,
        "n_heads": 4,
        "n_layers": 2,
        "seq_len": 16,
        "pairs_per_gpu": 32,
    },
    "cost.cheapest_config": lambda: {
        "target_gpus": 8,
        "budget_per_hour": 50.0,
        "min_gpu_memory_gb": 16.0,
    },
    "cost.configuration": lambda: {"instance": "p4d.24xlarge", "n_instances": 1},
    "cost.cost_breakdown": lambda: {
        "compute_cost": 1000.0,
        "run_hours": 10.0,
        "dataset_gb": 10.0,
        "checkpoint_gb": 1.0,
        "checkpoints_kept": 3,
        "retention_months": 1.0,
        "egress_gb": 0.0,
        "other": 0.0,
        "storage_per_gb_month": 0.023,
        "egress_per_gb": 0.09,
    },
    "cost.cost_to_train": lambda: {
        "config": _catalog_config(),
        "train_seconds": 3600.0,
        "interval_seconds": 600.0,
    },
    "cost.data_parallel_efficiency": lambda: {
        "config": _catalog_config(),
        "gradient_bytes": 1e8,
        "step_compute_seconds": 0.3,
        "overlap": 0.5,
        "gpu_link_latency_s": 3e-6,
        "network_latency_s": 2e-5,
    },
    "cost.mixed_precision_saving": lambda: {"speedup": 1.5},
    "cost.overhead_vs_interval": lambda: {
        "train_seconds": 3600.0,
        "preemption": cost.Preemption(2, 30, 300),
        "intervals": (60.0, 600.0),
        "n_instances": 1,
    },
    "cost.spot_savings": lambda: {"train_hours": 10.0},
    "cost.time_to_train": lambda: {
        "work": 1e6,
        "throughput_per_gpu": 100.0,
        "n_gpus": 8,
        "scaling_efficiency": 0.9,
    },
    "cost.training_options": lambda: {"gpu_counts": (1, 2), "overlap": 0.0},
    "data.encode_texts": lambda: {"texts": TEXTS, "vocabulary": {"the": 1, "cat": 2}, "max_len": 4},
    "data.shuffled_batches": lambda: {"size": 10, "batch": 3, "generator": torch.Generator()},
    "data.train_test_split_articles": lambda: {
        "articles": list(range(10)),
        "test_fraction": 0.2,
        "seed": 0,
    },
    "data.uniform_ids": lambda: {"shape": 5, "num_embeddings": 10, "seed": 0},
    "data.word_vocabulary": lambda: {"texts": TEXTS, "max_size": 5},
    "data.zipf_ids": lambda: {"shape": 5, "num_embeddings": 10, "s": 1.1, "seed": 0},
    "data.zipf_probabilities": lambda: {"num_embeddings": 10, "s": 1.1},
    "device.set_seed": lambda: {"seed": 0},
    "device.scaled": lambda: {"size": 10, "minimum": 1},
    "distributed.ring_allreduce_seconds": lambda: {
        "nbytes": 1e6,
        "world_size": 4,
        "latency": 1e-5,
        "bandwidth": 1e9,
    },
    "distributed.allreduce_times_on_rank": lambda: {"sizes": (16,), "repeat": 1},
    "distributed.run_local_group": lambda: {"fn": print, "world_size": 1, "timeout_s": 60.0},
    "distributed.init_distributed": lambda: {"timeout_s": 60.0},
    "distributed.distributed_loader": lambda: {
        "dataset": torch.utils.data.TensorDataset(torch.arange(10)),
        "batch_size": 2,
        "seed": 0,
        "num_workers": 0,
    },
    "distributed.set_epoch": lambda: {"loader": _loader(), "epoch": 1},
    "distributed.scale_lr": lambda: {"base_lr": 1e-3, "base_batch": 512, "batch": 4096},
    "distributed.warmup_schedule": lambda: {"optimizer": _sgd(), "warmup_steps": 4},
    "measure.format_bytes": lambda: {"n": 1024.0},
    "measure.format_difference": lambda: {"max_abs_diff": 1e-7, "tolerance": 1e-6},
    "measure.time_fn": lambda: {"fn": lambda: None, "warmup": 1, "repeat": 2},
    "measure.time_interleaved": lambda: {"fns": {"a": lambda: None}, "warmup": 1, "repeat": 2},
    "memory.training_state_bytes": lambda: {"num_parameters": 1000, "num_tensors": 2},
    "memory.EncoderShape": lambda: {
        "vocab_size": 1000,
        "d_model": 64,
        "n_heads": 4,
        "n_layers": 2,
        "d_ff": 128,
        "max_len": 32,
        "output_dim": 16,
    },
    "memory.optimizer_state_bytes_predicted": lambda: {
        "parameter_sizes": [10, 20],
        "optimizer": "adamw",
    },
    "memory.plan": lambda: {
        "model": memory.EncoderShape(1000),
        "batch": 8,
        "seq_len": 16,
        "checkpointing": "every_k",
        "k": 1,
        "micro_batches": 2,
        "world_size": 2,
        "zero_stage": 1,
        "towers": 2,
        "gpu_bytes": 8e9,
    },
    "memory.parallelism_advice": lambda: {"memory_plan": _plan(), "gpu_bytes": 8e9},
    "models.check_ids": lambda: {"ids": _ids(), "num_embeddings": 10},
    "models.BagOfEmbeddingsEncoder": lambda: {
        "vocab_size": 20,
        "embedding_dim": 8,
        "output_dim": 4,
        "padding_idx": 0,
    },
    "models.AttentionBlock": lambda: {"d_model": 8, "n_heads": 2, "dropout": 0.1},
    "models.FeedForwardBlock": lambda: {"d_model": 8, "d_ff": 16, "dropout": 0.1},
    "models.TransformerBlock": lambda: {"d_model": 8, "n_heads": 2, "d_ff": 16, "dropout": 0.1},
    "models.TransformerEncoder": lambda: {
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
    "optimizers.make_optimizer": lambda: {
        "params": _linear(),
        "kind": "sgd_nesterov",
        "lr": 0.1,
        "weight_decay": 0.01,
        "momentum": 0.9,
    },
    "optimizers.sparse_optimizers": lambda: {
        "model": models.BagOfEmbeddingsEncoder(20, 8, sparse=True),
        "lr": 0.1,
        "weight_decay": 0.0,
    },
    "overview.step_anatomy": lambda: {
        "vocab_size": 100,
        "embedding_dim": 8,
        "batch_size": 4,
        "tokens_per_example": 3,
        "seed": 0,
    },
    "parallelism.bubble_fraction": lambda: {"stages": 2, "micro_batches": 4},
    "parallelism.pipeline_p2p_bytes": lambda: {
        "batch": 8,
        "width": 4,
        "stages": 2,
        "element_size": 4,
    },
    "parallelism.deep_encoder": lambda: {"vocab_size": 10, "width": 4, "depth": 2, "classes": 3},
    "parallelism.split_stages": lambda: {
        "model": torch.nn.Sequential(_linear(), _linear()),
        "stages": 2,
    },
    "parallelism.pipeline_schedule": lambda: {
        "stage": None,
        "kind": "gpipe",
        "micro_batches": 2,
        "loss_fn": torch.nn.functional.mse_loss,
    },
    "parallelism.predicted_overlap": lambda: {
        "bucket_bytes": [1_000_000, 2_000_000],
        "backward_seconds": 0.01,
        "world_size": 2,
        "latency": 1e-5,
        "bandwidth": 1e9,
    },
    "parallelism.TokenizingPairs": lambda: {
        "pairs": [(["a"], ["b"])],
        "vocabulary": {"a": 2},
        "max_len": 4,
    },
    "plotting.new_panels": lambda: {"n": 2, "title": "t"},
    "precision.gradient_underflow": lambda: {"model": _with_gradients(), "scales": (1.0, 256.0)},
    "sharding.RowPartition": lambda: {"num_embeddings": 10, "world_size": 2},
    "sharding.ShardedEmbedding": lambda: {"num_embeddings": 10, "embedding_dim": 4, "seed": 0},
    "sharding.ring_all_reduce_bytes": lambda: {"tensor_bytes": 1024.0, "world_size": 4},
    "sharding.all_to_all_bytes": lambda: {
        "ids": _ids(),
        "num_embeddings": 10,
        "world_size": 2,
        "rank": 0,
        "row_bytes": 16,
    },
    "sharding.shard_load": lambda: {"ids": _ids(), "num_embeddings": 10, "world_size": 2},
    "spot.CheckpointManager": lambda: {"directory": _tmp(), "keep_last": 2},
    "spot.CheckpointSchedule": lambda: {"every_steps": 5, "every_seconds": 60.0},
    "spot.ResumableBatchSampler": lambda: {"num_examples": 10, "global_batch": 2, "seed": 0},
    "spot.capture_state": lambda: (
        lambda m: {"step": 1, "model": m, "optimizer": torch.optim.SGD(m.parameters(), lr=0.1)}
    )(_linear()),
    "spot.expected_wall_time": lambda: dict(_WALL),
    "spot.preemption_overhead": lambda: dict(_WALL),
    "spot.simulate_wall_time": lambda: {**_WALL, "runs": 10, "seed": 0},
    "spot.young_daly_interval": lambda: {"checkpoint_seconds": 30.0, "mtbf_seconds": 3600.0},
    "spot_training.SpotConfig": lambda: {
        "checkpoint_dir": _tmp(),
        "steps": 10,
        "global_batch": 8,
        "vocab": 100,
        "dim": 8,
        "lr": 0.01,
        "warmup": 2,
        "token_dropout": 0.1,
        "seed": 0,
        "checkpoint_every": 5,
        "checkpoint_seconds": 60.0,
        "keep_last": 2,
        "chaos_kills": 0,
        "chaos_seed": 0,
        "step_delay": 0.0,
        "stop_after": 5,
    },
    "spot_stress.run_uninterrupted": lambda: {"args": [], "directory": _tmp(), "timeout": 60.0},
    "spot_stress.run_killed": lambda: {
        "args": [],
        "directory": _tmp(),
        "steps": 10,
        "kills": 1,
        "rng": random.Random(0),
        "startup_seconds": 2.0,
        "startup_share": 0.2,
        "timeout": 60.0,
    },
    "spot_stress.stress_resume": lambda: {
        "repetitions": 1,
        "steps": 10,
        "kills": 1,
        "seed": 0,
        "startup_share": 0.2,
        "timeout": 60.0,
    },
    "device.deterministic_mode": lambda: {"threads": 1},
    "spot_training.launch_spot_demo": lambda: {
        "args": ["--help"],
        "nproc": 1,
        "max_restarts": 0,
        "timeout": 60.0,
    },
    "spot_training.start_spot_demo": lambda: {
        "args": ["--help"],
        "nproc": 1,
        "max_restarts": 0,
    },
    "spot_training.wait_for_spot_demos": lambda: {"launches": {}, "timeout": 60.0},
    "vocab.bpe_table": lambda: {
        "train_texts": TEXTS,
        "heldout_texts": TEXTS,
        "vocab_sizes": (300,),
        "dim": 8,
        "min_frequency": 1,
    },
    "vocab.build_vocab": lambda: {"texts": TEXTS, "min_count": 1, "max_size": 10},
    "vocab.pca_compress": lambda: {
        "x": torch.randn(20, 6),
        "k": 2,
        "seed": 0,
        "niter": 2,
        "oversample": 2,
    },
    "vocab.pruning_table": lambda: {
        "train_texts": TEXTS,
        "heldout_texts": TEXTS,
        "min_counts": (1, 2),
        "dim": 8,
    },
    "vocab.train_bpe": lambda: {"texts": TEXTS, "vocab_size": 300, "min_frequency": 1},
    "word2vec.SkipGram": lambda: {
        "objective": "negative",
        "counts": [5, 3, 2],
        "dim": 4,
        "negative": 2,
        "seed": 1,
    },
    "word2vec.Workspace": lambda: {
        "output_rows": 3,
        "input_rows": 3,
        "dim": 4,
        "device": torch.device("cpu"),
    },
    "word2vec.build_huffman_tree": lambda: {"counts": [5, 3, 2]},
    "word2vec.evaluate_word_pairs": lambda: {
        "words": ["tiger", "cat"],
        "vectors": np.ones((2, 3)),
        "restrict_vocab": 10,
    },
    "word2vec.keep_probabilities": lambda: {"counts": np.array([5, 3, 2]), "sample": 1e-3},
    "word2vec.noise_distribution": lambda: {"counts": np.array([5, 3, 2]), "power": 0.75},
    "word2vec.skipgram_pairs": lambda: {
        "corpus": _corpus(),
        "window": 2,
        "keep": None,
        "generator": torch.Generator(),
    },
    "word2vec.skipgram_windows": lambda: {
        "corpus": _corpus(),
        "window": 2,
        "keep": None,
        "generator": torch.Generator(),
        "pad": 0,
    },
    "data.wiki_articles": lambda: {"limit": 2},
    "data.wiki_sentences": lambda: {"limit_articles": 2},
    "plotting.new_figure": lambda: {"title": "t", "xlabel": "x", "ylabel": "y", "figsize": (4, 3)},
    "plotting.stacked_memory_bars": lambda: {
        "labels": ["a"],
        "breakdowns": [{"weights": 1e6}],
        "title": "t",
    },
    "spot.PreemptionHandler": lambda: {"signals": (signal.SIGTERM,)},
    "word2vec.train_word2vec": lambda: {
        "sentences": TEXTS,
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
    "capstone.EncoderRecipe": lambda: {
        "passage_tokens": 200, "vocab_size": 1000, "min_count": 2, "dim": 8, "layers": 1,
        "min_span": 4, "max_span": 8, "word_dropout": 0.1, "length_power": 0.5, "seed": 0,
    },
    "capstone.train_encoder": lambda: {
        "setup": _capstone_setup(), "steps": 1, "batch": 2, "lr": 1e-3, "temperature": 0.2,
        "eval_every": 1, "retrieval": (["the cat", "the dog"], ["cat sat", "dog sat"]),
    },
    "capstone.recipe_config": lambda: {"lr": 1e-3, "temperature": 0.2},
    "memory.BagShape": lambda: {"vocab_size": 100, "dim": 8},
    "capstone_run.RunConfig": lambda: {
        "output_dir": _tmp(), "dim": 8, "seed": 0, "steps": 4, "batch": 8, "lr": 1e-3,
        "base_batch": 8, "warmup": 0, "temperature": 0.2, "chunk_size": 4, "eval_every": 2,
        "eval_pairs": 10, "checkpoint_every": 2, "checkpoint_seconds": 60.0, "keep_last": 2,
        "chaos_kills": 0, "chaos_seed": 0, "step_delay": 0.0, "stop_after": 2,
        "plan_gpu_gb": 80.0,
    },
    "capstone_run.cost_projection": lambda: {"gpus": 8},
    "capstone_run.memory_plan": lambda: {
        "config": _run_config(), "model": models.WeightedBagEncoder(50, 8), "world_size": 2,
    },
    "capstone_run.plan_lines": lambda: {
        "memory": _plan(), "projection": __import__("chapter20.capstone_run",
        fromlist=["x"]).cost_projection(), "gpu_gb": 80.0,
    },
    "evaluation.baseline_scores": lambda: {"seeds": (0,)},
    "evaluation.heldout_sentence_pairs": lambda: {"limit": 10, "test_fraction": 0.1, "seed": 0},
    "evaluation.versus_reference": lambda: {
        "frame": __import__("pandas").DataFrame({"m": ["a", "b"], "r": [0.1, 0.2]}), "by": "m",
        "reference": "a", "column": "r", "chance": 0.01,
    },
    "evaluation.lee_baseline": lambda: {"method": "tfidf", "seed": 0, "lsi_topics": 20},
    "evaluation.retrieval_recall": lambda: {
        "encode": _count_encode, "anchors": ["a", "b"], "positives": ["c", "d"], "ks": (1,),
    },
    "models.WeightedBagEncoder": lambda: {"vocab_size": 20, "embedding_dim": 4, "padding_idx": 0},
    "views.ViewSampler": lambda: {
        "documents": [np.arange(1, 9)] * 4, "batch": 2, "min_span": 2, "max_span": 4,
        "word_dropout": 0.1, "length_power": 0.5, "seed": 0, "rank": 0, "world_size": 1,
    },
    "views.build_tokenizer": lambda: {"documents": TEXTS, "vocab_size": 20, "min_count": 1},
    "views.idf_weights": lambda: {
        "documents": [np.arange(1, 5)] * 3, "vocab_size": 10, "offset": 1.0, "floor": 0.05,
    },
    "views.lsa_word_vectors": lambda: {
        "documents": [np.arange(1, 5), np.arange(2, 7), np.arange(3, 9)],
        "weights": torch.ones(10), "dim": 2, "seed": 0, "iterations": 2,
    },
    "views.pad_batch": lambda: {"rows": [np.arange(1, 4)], "length": 4},
    "views.training_documents": lambda: {
        "sources": ("lee",), "passage_tokens": 50, "test_fraction": 0.1, "seed": 0,
    },
}  # fmt: skip

_WALL = {
    "work_seconds": 3600.0,
    "interval_seconds": 600.0,
    "checkpoint_seconds": 30.0,
    "mtbf_seconds": 7200.0,
    "restart_seconds": 60.0,
}

# Awkward values a parameter legitimately takes (not called: they are valid input).
_ZERO = {"zero"}
ACCEPTS: dict[str, set[str]] = {
    **{
        name: _ZERO
        for name in (
            "capstone.EncoderRecipe.seed",
            "capstone.EncoderRecipe.word_dropout",
            "capstone.train_encoder.steps",
            "capstone_run.RunConfig.seed",
            "capstone_run.RunConfig.warmup",
            "capstone_run.RunConfig.chaos_kills",
            "capstone_run.RunConfig.chaos_seed",
            "capstone_run.RunConfig.step_delay",
            "evaluation.baseline_scores.seeds",
            "evaluation.heldout_sentence_pairs.seed",
            "evaluation.lee_baseline.seed",
            "models.WeightedBagEncoder.padding_idx",
            "views.ViewSampler.word_dropout",
            "views.ViewSampler.seed",
            "views.ViewSampler.rank",
            "views.lsa_word_vectors.seed",
            "views.lsa_word_vectors.iterations",
            "views.training_documents.seed",
            "checkpointing.predicted_activation_bytes.layer_bytes",
            "data.pair_data.seed",
            "distributed.warmup_schedule.warmup_steps",
            "memory.optimizer_state_bytes_predicted.state_32bit",
            "sharding.ShardedBagEncoder.padding_idx",
            "sharding.ShardedBagEncoder.seed",
            "spot_stress.run_killed.kills",
            "spot_stress.run_killed.startup_seconds",
            "spot_stress.run_killed.startup_share",
            "spot_stress.stress_resume.kills",
            "spot_stress.stress_resume.seed",
            "spot_stress.stress_resume.startup_share",
            "training.TrainConfig.weight_decay",
            "training.TrainConfig.warmup_steps",
            "training.train_on_pairs.seed",
            "training.heldout_run.seed",
            "checkpointing.predicted_activation_bytes.boundary_bytes",
            "checkpointing.predicted_activation_bytes.selective_layer_bytes",
            "checkpointing.predicted_activation_bytes.other_bytes",
            "claims.check.measured",
            "cost.Preemption.restart_seconds",
            "cost.cost_breakdown.dataset_gb",
            "cost.cost_breakdown.checkpoint_gb",
            "cost.cost_breakdown.checkpoints_kept",
            "cost.cost_breakdown.retention_months",
            "cost.cost_breakdown.egress_gb",
            "cost.cost_breakdown.other",
            "cost.cost_breakdown.storage_per_gb_month",
            "cost.cost_breakdown.egress_per_gb",
            "cost.data_parallel_efficiency.overlap",
            "cost.data_parallel_efficiency.gpu_link_latency_s",
            "cost.data_parallel_efficiency.network_latency_s",
            "cost.training_options.overlap",
            "data.train_test_split_articles.seed",
            "data.uniform_ids.shape",
            "data.uniform_ids.seed",
            "data.zipf_ids.shape",
            "data.zipf_ids.s",
            "data.zipf_ids.seed",
            "data.zipf_probabilities.s",
            "device.set_seed.seed",
            "distributed.distributed_loader.seed",
            "distributed.distributed_loader.num_workers",
            "distributed.set_epoch.epoch",
            "measure.format_bytes.n",
            "measure.format_difference.max_abs_diff",
            "measure.format_difference.tolerance",
            "memory.optimizer_state_bytes_predicted.parameter_sizes",
            "measure.time_fn.warmup",
            "measure.time_interleaved.warmup",
            "memory.plan.zero_stage",
            "memory.training_state_bytes.num_parameters",
            "memory.training_state_bytes.num_tensors",
            "models.AttentionBlock.dropout",
            "models.FeedForwardBlock.dropout",
            "models.TransformerBlock.dropout",
            "models.TransformerEncoder.dropout",
            "models.BagOfEmbeddingsEncoder.padding_idx",
            "models.TransformerEncoder.padding_idx",
            "optimizers.make_optimizer.weight_decay",
            "optimizers.make_optimizer.momentum",
            "optimizers.sparse_optimizers.weight_decay",
            "overview.step_anatomy.seed",
            "parallelism.predicted_overlap.bucket_bytes",
            "parallelism.predicted_overlap.backward_seconds",
            "parallelism.predicted_overlap.latency",
            "plotting.stacked_memory_bars.breakdowns",
            "sharding.ShardedEmbedding.seed",
            "sharding.all_to_all_bytes.rank",
            "sharding.all_to_all_bytes.row_bytes",
            "sharding.ring_all_reduce_bytes.tensor_bytes",
            "distributed.ring_allreduce_seconds.nbytes",
            "distributed.ring_allreduce_seconds.latency",
            "spot.ResumableBatchSampler.seed",
            "spot.capture_state.step",
            "spot.expected_wall_time.work_seconds",
            "spot.expected_wall_time.checkpoint_seconds",
            "spot.expected_wall_time.restart_seconds",
            "spot.preemption_overhead.checkpoint_seconds",
            "spot.preemption_overhead.restart_seconds",
            "spot.simulate_wall_time.work_seconds",
            "spot.simulate_wall_time.checkpoint_seconds",
            "spot.simulate_wall_time.restart_seconds",
            "spot.simulate_wall_time.seed",
            "spot_training.SpotConfig.token_dropout",
            "spot_training.SpotConfig.seed",
            "spot_training.SpotConfig.chaos_kills",
            "spot_training.SpotConfig.chaos_seed",
            "spot_training.SpotConfig.step_delay",
            "spot_training.launch_spot_demo.max_restarts",
            "spot_training.start_spot_demo.max_restarts",
            "vocab.bpe_table.min_frequency",
            "vocab.pca_compress.seed",
            "vocab.pca_compress.niter",
            "vocab.pca_compress.oversample",
            "vocab.train_bpe.min_frequency",
            "word2vec.SkipGram.seed",
            "word2vec.Workspace.output_rows",
            "word2vec.Workspace.input_rows",
            "word2vec.keep_probabilities.sample",
            "word2vec.noise_distribution.power",
            "word2vec.skipgram_windows.pad",
            "word2vec.train_word2vec.sample",
            "word2vec.train_word2vec.min_alpha",
            "word2vec.train_word2vec.seed",
        )
    },
    # Negative values are valid too: a negative length power favours short documents, a
    # negative IDF offset raises every weight.
    "capstone.EncoderRecipe.length_power": {"zero", "negative"},
    "views.ViewSampler.length_power": {"zero", "negative"},
    "views.idf_weights.offset": {"zero", "negative"},
    # A measured value may be negative (a difference, a loss of accuracy).
    "claims.check.measured": {"zero", "negative"},
    # A size difference may be negative; a failed comparison's difference is NaN or infinite
    # and prints as ✗, which is the proof's answer, not a silent one.
    "measure.format_bytes.n": {"zero", "negative"},
    "measure.format_difference.max_abs_diff": {"zero", "nan", "inf"},
}

# Public callables with numeric parameters that this test does not call, and why.
OUT_OF_SCOPE = {
    "training.measure_throughput": "a benchmark: times real training steps of a 6-layer encoder",
    "overview.benchmark": "a benchmark entry point: prints timings of real steps",
    "cost.plot_pareto": "draws computed frames; its numbers are results, not parameters",
    "cost.plot_spot_overhead": "draws computed frames; its numbers are results, not parameters",
    "word2vec.WordVectors": "a result record that train_word2vec returns",
    "device.DeterministicMode": "built by deterministic_mode, which checks its thread count",
    "spot_training.resumable_loop": "its only int is in a callback's signature (after_step); "
    "the numbers it reads come from a checked SpotConfig or RunConfig",
    "parallelism.zero_adamw": "needs a process group (without one: RuntimeError); it checks lr "
    "and weight_decay itself and runs on gloo ranks in tests/test_parallelism.py",
}

# How an awkward value is put into a parameter that holds several numbers.
WRAP = {
    "plotting.new_figure.figsize": lambda value: (value, 3.0),
    "plotting.stacked_memory_bars.breakdowns": lambda value: [{"weights": value}],
}


# One directory for every case's files, removed when the test process ends (a directory per
# case under it, so no case sees another's checkpoints).
_TMP_ROOT = tempfile.TemporaryDirectory(prefix="chapter20-bad-input-")


def _tmp() -> str:
    return tempfile.mkdtemp(dir=_TMP_ROOT.name)


def _public_callables() -> dict[str, typing.Callable]:
    found = {}
    for info in pkgutil.iter_modules(chapter20.__path__):
        if info.name.startswith("_") or info.name.endswith("_lab") or info.name == "checks":
            continue  # labs are experiments; checks are the argument checkers themselves
        module = importlib.import_module(f"chapter20.{info.name}")
        names = getattr(module, "__all__", None)
        if names is None:
            names = [
                n
                for n, v in vars(module).items()
                if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
            ]
        for name in names:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                found[f"{info.name}.{name}"] = obj
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
    cases = []
    for qualified, obj in sorted(_public_callables().items()):
        parameters = _numeric_parameters(obj)
        if not parameters or qualified in OUT_OF_SCOPE:
            continue
        if qualified not in BASE and _is_record(obj):
            continue
        for name, sequence in parameters:
            for label in AWKWARD:
                if label in ACCEPTS.get(f"{qualified}.{name}", set()):
                    continue  # a valid value for this parameter
                cases.append(
                    pytest.param(qualified, name, label, sequence, id=f"{qualified}-{name}-{label}")
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


@pytest.mark.parametrize("qualified, name, label, sequence", CASES)
def test_awkward_value_is_rejected_with_the_parameters_name(qualified, name, label, sequence):
    """Rejected with the parameter's name; a huge real number (1.8e19 seconds, dollars) may
    instead give a result, but never an overflow, a hang or another exception."""
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
        assert name in str(exc), f"{type(exc).__name__} does not name {name!r}: {exc}"
    except _Hang:
        pytest.fail(f"{qualified}({name}={value!r}) ran for 20 s instead of rejecting it")
    except Exception as exc:
        pytest.fail(
            f"{qualified}({name}={value!r}) raised an unrelated {type(exc).__name__}: {exc}"
        )
    else:
        if not may_return:
            pytest.fail(f"{qualified}({name}={value!r}) returned silently")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
