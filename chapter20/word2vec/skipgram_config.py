"""The one configuration of skip-gram training: :class:`Word2VecConfig` (note, topic 1).

Every setting of :func:`chapter20.word2vec.skipgram_training.train_word2vec` is a field here,
checked on creation, with its help text: the trainer, the data-parallel run
(``chapter20.word2vec.data_parallel``) and gensim's reference trainer read it
(:func:`gensim_settings` maps it to gensim's arguments), and a command line that trains word2vec
derives its options from these fields (``chapter20.core.options``). The defaults are gensim's
``Word2Vec(sg=1)`` defaults, so the comparisons of notebook 09 run both with
``Word2VecConfig()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from chapter20.core.checks import check_int, check_optional_int, check_real
from chapter20.core.options import option
from chapter20.word2vec.objectives import OBJECTIVES, _check_objective
from chapter20.word2vec.sampling import keep_probabilities

__all__ = ["Word2VecConfig", "gensim_settings"]


@dataclass(frozen=True)
class Word2VecConfig:
    """Every setting of skip-gram training (note, topic 1); each field is checked on creation,
    and an error names the field.

    - the model: ``objective`` (negative sampling with ``negative`` noise words per pair, the
      hierarchical softmax, or the full softmax), ``dim``;
    - the data: ``window`` (gensim's dynamic window), ``min_count`` (the vocabulary's pruning;
      not read when the trainer is given a vocabulary), ``sample`` (frequent-word subsampling);
    - the schedule: ``epochs``, a learning rate decaying linearly from ``alpha`` to
      ``min_alpha``, ``batch_size`` (pairs per step; None: ``default_batch_size``), ``seed``;
    - where and how it runs: ``device`` (None: the CPU), ``workers`` (Hogwild threads, CPU
      only), ``threads`` (torch's CPU threads; None: one per worker when there are several,
      else torch's own), ``share_negatives`` (noise drawn once per window: plain path only),
      ``fused`` (None: the C kernel where it can run; False: the plain path; True: as None,
      with a warning if it cannot run), ``progress`` (a progress bar).
    """

    objective: str = option("negative", "the training objective", choices=OBJECTIVES)
    dim: int = option(100, "vector dimensions")
    window: int = option(5, "largest distance from a word to its context words")
    min_count: int = option(5, "keep words seen at least this often")
    negative: int = option(5, "noise words per pair (negative sampling)")
    sample: float = option(1e-3, "subsampling threshold of frequent words (0: none)")
    epochs: int = option(5, "passes over the corpus")
    alpha: float = option(0.025, "initial learning rate, in (0, 1]")
    min_alpha: float = option(1e-4, "final learning rate, in [0, alpha]")
    batch_size: int | None = option(None, "pairs per step (none: the path's default)")
    seed: int = option(1, "seed of the initial weights and of the draws")
    device: str | None = option(None, "where to train, e.g. cuda (none: the CPU)")
    workers: int = option(1, "Hogwild threads on shared weights (CPU only)")
    threads: int | None = option(None, "torch's CPU threads while training")
    share_negatives: bool = option(False, "draw noise once per window (plain path only)")
    fused: bool | None = option(None, "the fused C kernel (none: where it can run)")
    progress: bool = option(True, "show a progress bar")

    def __post_init__(self) -> None:
        _check_objective(self.objective)
        for name in ("dim", "window", "min_count", "negative", "epochs", "workers"):
            check_int(name, getattr(self, name), 1)
        check_int("seed", self.seed, 0)
        check_optional_int("batch_size", self.batch_size, 1)
        check_optional_int("threads", self.threads, 1)
        alpha = check_real("alpha", self.alpha, finite=True)
        min_alpha = check_real("min_alpha", self.min_alpha, finite=True)
        if not 0 < alpha <= 1:  # SGD on word vectors diverges long before a rate of 1
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if not 0 <= min_alpha <= alpha:
            raise ValueError(f"min_alpha must be in [0, alpha={alpha}], got {min_alpha}")
        keep_probabilities(np.ones(1), self.sample)  # raises, naming sample, for a bad one
        for name in ("share_negatives", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.fused is not None and not isinstance(self.fused, bool):
            raise TypeError(f"fused must be None, True or False, got {self.fused!r}")
        if isinstance(self.device, torch.device):  # kept as text: hashable, and a CLI value
            object.__setattr__(self, "device", str(self.device))
        if self.device is not None and not isinstance(self.device, str):
            raise TypeError(f"device must be None or a device name, got {self.device!r}")

    @property
    def torch_threads(self) -> int | None:
        """torch's CPU threads for the run: ``threads``; else one for each Hogwild worker when
        there are several; else None (as many as torch has)."""
        if self.threads is None and self.workers > 1:
            return 1
        return self.threads

    def learning_rate(self, epoch: int, done: float) -> float:
        """The rate after ``epoch`` epochs and a share ``done`` of the next: linear decay from
        ``alpha`` to ``min_alpha`` over the run."""
        return self.alpha - (self.alpha - self.min_alpha) * (epoch + done) / self.epochs


def gensim_settings(config: Word2VecConfig) -> dict[str, Any]:
    """gensim's ``Word2Vec`` keyword arguments for ``config`` (note, topic 1): skip-gram
    (``sg=1``), ``hs=1, negative=0`` for the hierarchical softmax or ``hs=0, negative=k`` for
    negative sampling, and the same vector size, window, pruning, subsampling, epochs, learning
    rates, seed and workers. gensim has no full softmax: ``ValueError`` for it."""
    if config.objective not in ("negative", "hierarchical"):
        raise ValueError(
            f"objective must be 'negative' or 'hierarchical' for gensim, got {config.objective!r}"
        )
    hs = config.objective == "hierarchical"
    return {
        "sg": 1,
        "vector_size": config.dim,
        "window": config.window,
        "min_count": config.min_count,
        "sample": config.sample,
        "hs": int(hs),
        "negative": 0 if hs else config.negative,
        "epochs": config.epochs,
        "alpha": config.alpha,
        "min_alpha": config.min_alpha,
        "seed": config.seed,
        "workers": config.workers,
    }
