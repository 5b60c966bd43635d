"""§20.6 The capstone encoder: what it trains on, how it starts, how it is judged.

:class:`EncoderRecipe` holds every choice of the training *signal* (the techniques of the chapter,
which change how a step runs but not what it learns, are ``chapter20.training.trainer``'s): which
documents, which tokeniser, which model, how its table starts (random, LSA of the training
documents, or the note's word2vec vectors), lexical weighting, and how views are cut.
:func:`build_encoder` turns a recipe into a model, a tokeniser and a :class:`ViewSampler`;
:func:`evaluate_encoder` measures it on the Lee similarity set and on held-out next-sentence
retrieval, with every §20.7 figure (``chapter20.capstone.evaluation``,
``chapter20.capstone.metrics``); :func:`train_encoder` trains it with the one run driver
(``chapter20.training.driver``: the composed step of :data:`RECIPE_TRAINING`, symmetric in-batch
InfoNCE with AdamW, for a :data:`RECIPE_RUN`) and returns the evaluation trajectory. Which
variants of the recipe were tried, and how it was chosen, is notebook 11's recipe search
(``chapter20 bench recipe``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from chapter20.capstone.evaluation import (
    encoder_scorer,
    evaluate_scores,
    heldout_sentence_pairs,
)
from chapter20.capstone.metrics import retrieval_metrics
from chapter20.capstone.views import (
    SOURCES,
    ViewSampler,
    encode_documents,
    idf_weights,
    lsa_word_vectors,
    training_documents,
)
from chapter20.core.checks import check_int, check_real
from chapter20.core.device import set_seed
from chapter20.core.models import TransformerEncoder, WeightedBagEncoder
from chapter20.training.config import TrainConfig
from chapter20.training.driver import Batches, run_training
from chapter20.training.encoder_file import TextEncoder, save_encoder
from chapter20.training.loop import LoopConfig
from chapter20.training.run_config import RunConfig
from chapter20.vocab.tokenizers import TOKENIZERS, build_tokenizer

__all__ = [
    "INITS",
    "MODELS",
    "RECIPE_RUN",
    "RECIPE_TRAINING",
    "EncoderRecipe",
    "EncoderSetup",
    "build_encoder",
    "evaluate_encoder",
    "train_encoder",
]

#: How the embedding table starts.
INITS = ("random", "lsa", "word2vec")
#: The encoders a recipe can train.
MODELS = ("bag", "transformer")
#: The composed step of the recipe (§20.6): symmetric InfoNCE at temperature 0.2, AdamW at 1e-3
#: without weight decay (PyTorch's fused kernel, the same update in one pass over the table), a
#: constant rate. The capstone run adds a warm-up and scales the rate with its batch
#: (``chapter20.capstone.capstone_config.CAPSTONE_TRAINING``); the recipe's studies train
#: without them.
RECIPE_TRAINING = TrainConfig(
    optimizer="adamw_fused", lr=1e-3, weight_decay=0.0, temperature=0.2, symmetric=True
)
#: The recipe's studies' run (§20.6): 512 documents per step, no checkpoints, no progress bar,
#: at the machine's own thread count; each study sets its steps (and batch).
RECIPE_RUN = RunConfig(
    batch=512, training=RECIPE_TRAINING, progress=False, loop=LoopConfig(deterministic=False)
)


@dataclass(frozen=True)
class EncoderRecipe:
    """Every choice of the capstone's training signal (§20.6); checked on creation.

    Data: ``sources`` (of ``chapter20.capstone.views.SOURCES``), ``passage_tokens`` (Wikipedia
    articles are cut into passages of about this many tokens), ``fraction`` (the share of the
    training documents kept; the tokeniser, IDF and LSA are fitted on those alone). Tokens:
    ``tokenizer`` ("word" or "bpe"), ``vocab_size``, ``min_count`` (words). Model: ``model``
    ("bag": the weighted bag of embeddings; "transformer":
    ``chapter20.core.models.TransformerEncoder`` of ``layers`` blocks),
    ``dim``, ``init`` (of :data:`INITS`), ``idf`` (token weights start at the training documents'
    IDF, else uniform), ``learn_weights``. Views: ``min_span``, ``max_span``, ``word_dropout``,
    ``length_power``, ``fixed_views`` (see ``ViewSampler``). ``seed`` fixes everything.
    """

    sources: tuple[str, ...] = SOURCES
    passage_tokens: int = 200
    fraction: float = 1.0
    tokenizer: str = "word"
    vocab_size: int = 30_000
    min_count: int = 2
    model: str = "bag"
    dim: int = 256
    layers: int = 2
    init: str = "lsa"
    idf: bool = True
    learn_weights: bool = True
    min_span: int = 16
    max_span: int = 64
    word_dropout: float = 0.1
    length_power: float = 0.5
    fixed_views: bool = False
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "sources", tuple(self.sources))
        if not self.sources or not set(self.sources) <= set(SOURCES):
            raise ValueError(f"sources must be a non-empty subset of {SOURCES}")
        for name, allowed in (("tokenizer", TOKENIZERS), ("model", MODELS), ("init", INITS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in ("passage_tokens", "min_count", "dim", "layers", "min_span"):
            check_int(name, getattr(self, name), 1)
        check_int("vocab_size", self.vocab_size, 3)
        check_int("max_span", self.max_span, self.min_span)
        check_int("seed", self.seed, 0)
        for name in ("idf", "learn_weights", "fixed_views"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False")
        if self.model == "transformer" and self.idf:
            raise ValueError("idf weighting is a property of the bag model; set idf=False")
        if not 0 <= check_real("word_dropout", self.word_dropout, finite=True) < 1:
            raise ValueError(f"word_dropout must be in [0, 1), got {self.word_dropout}")
        check_real("length_power", self.length_power, minimum=-10.0, maximum=10.0)
        if not 0 < check_real("fraction", self.fraction, finite=True) <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")


@dataclass
class EncoderSetup:
    """A built recipe: the tokeniser, the encoded training documents, the token weights, the
    model (initialised, untrained) and the keyword arguments that rebuild it."""

    recipe: EncoderRecipe
    tokenizer: Any
    documents: list[np.ndarray]
    weights: torch.Tensor
    model: nn.Module
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def sampler(self, batch: int, *, rank: int = 0, world_size: int = 1) -> ViewSampler:
        """The recipe's views of its documents, ``batch`` documents per global step."""
        r = self.recipe
        return ViewSampler(
            self.documents, batch, min_span=r.min_span, max_span=r.max_span,
            word_dropout=r.word_dropout, length_power=r.length_power, seed=r.seed, rank=rank,
            world_size=world_size, fixed_views=r.fixed_views,
        )  # fmt: skip

    def text_encoder(self, model: nn.Module | None = None, device="cpu") -> TextEncoder:
        """Raw texts → unit vectors with the (trained) model; ``model`` defaults to ours."""
        return TextEncoder(model or self.model, self.tokenizer, device)

    def save(self, path, metadata: dict | None = None):
        """Write the encoder file that ``chapter20.training.encoder_file.load_encoder`` reads."""
        meta = {"recipe": asdict(self.recipe), **(metadata or {})}
        return save_encoder(path, self.model, self.tokenizer, self.model_kwargs, meta)


def _token_strings(tokenizer) -> list[str]:
    if hasattr(tokenizer, "words"):
        return ["<pad>", "<unk>", *tokenizer.words]
    vocab = tokenizer._tokenizer.get_vocab()
    return ["<pad>", *sorted(vocab, key=vocab.get)]


def _word2vec_rows(recipe, tokenizer, documents_tokens, table: torch.Tensor) -> torch.Tensor:
    """The note's skip-gram vectors (``chapter20.word2vec.skipgram_training.train_word2vec``)
    for every token of the vocabulary, trained on the training documents; a token it has no
    vector for keeps its random row."""
    from chapter20.word2vec.skipgram_config import Word2VecConfig
    from chapter20.word2vec.skipgram_training import train_word2vec

    if recipe.tokenizer == "bpe":
        encodings = tokenizer._tokenizer.encode_batch([" ".join(d) for d in documents_tokens])
        documents_tokens = [e.tokens for e in encodings]
    config = Word2VecConfig(
        "negative", dim=recipe.dim, min_count=1, epochs=2, seed=recipe.seed, progress=False
    )
    vectors = train_word2vec(documents_tokens, config)
    index = {w: i for i, w in enumerate(vectors.words)}
    found = torch.from_numpy(vectors.vectors)
    rows = table.clone()
    for i, token in enumerate(_token_strings(tokenizer)):
        if i >= 2 and token in index:
            rows[i] = found[index[token]]
    return rows


@functools.lru_cache(maxsize=4)
def _prepared(sources, passage_tokens, fraction, kind, vocab_size, min_count):
    """Documents, tokeniser, ids and IDF weights: the seed-free part of a recipe, kept for the
    next build (seeds and model variants share it)."""
    tokens = training_documents(sources, passage_tokens=passage_tokens, fraction=fraction)
    tokenizer = build_tokenizer(tokens, kind, vocab_size=vocab_size, min_count=min_count)
    documents = encode_documents(tokens, tokenizer)
    return tokens, tokenizer, documents, idf_weights(documents, tokenizer.vocab_size)


@functools.lru_cache(maxsize=4)
def _lsa_rows(sources, passage_tokens, fraction, kind, vocab_size, min_count, dim, seed):
    """The LSA start's rows of a recipe, kept for the next build of the same start (its SVD is
    the costly part of a build; it restores the global random state, so a kept copy is exact)."""
    _, _, documents, weights = _prepared(
        sources, passage_tokens, fraction, kind, vocab_size, min_count
    )
    return lsa_word_vectors(documents, weights, dim, seed=seed)


def build_encoder(recipe: EncoderRecipe = EncoderRecipe()) -> EncoderSetup:
    """Documents, tokeniser, weights and initial model of ``recipe`` (§20.6); seeded."""
    start = time.perf_counter()
    tokens, tokenizer, documents, weights = _prepared(
        recipe.sources, recipe.passage_tokens, recipe.fraction, recipe.tokenizer,
        recipe.vocab_size, recipe.min_count,
    )  # fmt: skip
    vocab = tokenizer.vocab_size
    set_seed(recipe.seed)
    if recipe.model == "bag":
        kwargs = {"vocab_size": vocab, "embedding_dim": recipe.dim,
                  "learn_weights": recipe.learn_weights}  # fmt: skip
        model = WeightedBagEncoder(**kwargs, token_weights=weights if recipe.idf else None)
        table = model.embedding.weight
    else:
        kwargs = {"vocab_size": vocab, "d_model": recipe.dim, "n_layers": recipe.layers,
                  "max_len": recipe.max_span}  # fmt: skip
        model = TransformerEncoder(**kwargs)
        table = model.token_embedding.weight
    if recipe.init != "random":
        if recipe.init == "lsa":
            key = (recipe.sources, recipe.passage_tokens, recipe.fraction, recipe.tokenizer,
                   recipe.vocab_size)  # fmt: skip
            rows = _lsa_rows(*key, recipe.min_count, recipe.dim, recipe.seed)
        else:
            rows = _word2vec_rows(recipe, tokenizer, tokens, table.detach())
        with torch.no_grad():  # keep the table's own scale: the learning rate is tuned to it
            scale = table[2:].norm(dim=1).mean() / rows[2:].norm(dim=1).clamp_min(1e-12).mean()
            table.copy_(rows * scale)
            table[0].zero_()
    return EncoderSetup(recipe, tokenizer, documents, weights, model, kwargs,
                        time.perf_counter() - start)  # fmt: skip


def evaluate_encoder(
    encode: Callable,
    retrieval: tuple[list[str], list[str]] | None = None,
    validation: tuple[list[str], list[str]] | None = None,
) -> dict[str, float]:
    """Every §20.7 figure of an encoder as one flat dict
    (``chapter20.capstone.evaluation.evaluate_scores``): Lee Pearson and Spearman, held-out
    next-sentence recall@1/@10, MRR and NDCG@10 with their chance levels, and alignment,
    uniformity and mean cosine. ``retrieval``: the (anchors, positives) texts, by default every
    test pair of ``heldout_sentence_pairs``; ``validation``: pairs on which choices are made,
    whose recall and MRR come as ``val_recall@1``, ``val_recall@10`` and ``val_mrr``."""
    score = encoder_scorer(encode)
    out = evaluate_scores(score, retrieval or heldout_sentence_pairs(None))
    if validation is not None:
        metrics = retrieval_metrics(score(*validation))
        out.update({f"val_{k}": metrics[k] for k in ("recall@1", "recall@10", "mrr")})
    return out


def train_encoder(
    setup: EncoderSetup,
    run: RunConfig,
    *,
    eval_every: int | None = None,
    retrieval: tuple[list[str], list[str]] | None = None,
    validation: tuple[list[str], list[str]] | None = None,
    evaluate_start: bool = True,
) -> list[dict]:
    """Train ``setup.model`` as ``run`` says (its ``steps`` of ``batch`` documents of the recipe's
    views, its composed step; one process) with the one run driver, evaluating before the first
    step (unless ``evaluate_start`` is False), every ``eval_every`` steps and at the end (§20.6).
    ``run`` is typically :data:`RECIPE_RUN` with its steps. Returns one record per evaluation:
    step, documents seen, seconds of training so far, loss (mean of the last 20 steps),
    :func:`evaluate_encoder`'s figures on ``retrieval`` (and ``validation``), and ``chosen``:
    True on the evaluation whose weights the run ends with (the last, or under ``run``'s early
    stopping the validation-chosen step's, whose weights ``setup.model`` then holds)."""
    if not isinstance(setup, EncoderSetup):
        raise TypeError(f"setup must be an EncoderSetup, got {type(setup).__name__}")
    if not isinstance(run, RunConfig):
        raise TypeError(f"run must be a RunConfig, got {type(run).__name__}")
    check_int("batch", run.batch, 2)
    retrieval = retrieval or heldout_sentence_pairs(None)

    def evaluate(trainer, progress) -> dict:
        scores = evaluate_encoder(setup.text_encoder().encode, retrieval, validation)
        last = progress.losses[-20:]
        loss = float(np.mean(last)) if last else float("nan")
        return {"documents": progress.step * run.batch, "seconds": progress.train_seconds,
                "loss": loss, **scores}  # fmt: skip

    def batches(trainer) -> Batches:
        sampler = setup.sampler(run.batch)
        return Batches(sampler.next_batch, sampler)

    finished = run_training(
        run, lambda: setup.model, batches, evaluate=evaluate, eval_every=eval_every,
        evaluate_start=evaluate_start or not run.steps,
    )  # fmt: skip
    start = [{"step": 0, **finished.summary["start"]}] if finished.summary["start"] else []
    kept = (finished.summary["final"] or {}).get("step")
    return [{**r, "chosen": r["step"] == kept} for r in start + finished.summary["evaluations"]]
