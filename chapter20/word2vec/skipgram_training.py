"""Training skip-gram word vectors: :func:`train_word2vec` (note, topic 1), with the settings
of one :class:`~chapter20.word2vec.skipgram_config.Word2VecConfig`.

One training loop for the three objectives: each epoch draws subsampled, dynamic-window pairs
(``chapter20.word2vec.sampling``), the learning rate decays linearly from ``alpha`` to
``min_alpha``, and a :class:`~chapter20.word2vec.skipgram.SkipGram` steps by the fused path
(one pair at a time in C, on a CPU) or the plain path (batches of tensor ops, on any device).
``workers`` threads share the weights without locks, as gensim's workers do ("Hogwild"); one
thread draws the next epoch while they train. ``sync`` (an :class:`EpochSync`) is called
between equal parts of every epoch: how ``chapter20.word2vec.data_parallel`` keeps the copies of
several processes together.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from chapter20.core.checks import check_int
from chapter20.core.device import get_device, synchronize
from chapter20.vocab.vocabulary import Vocabulary, build_vocab
from chapter20.word2vec.corpus import EncodedCorpus, _check_sentences, encode_corpus
from chapter20.word2vec.huffman import HuffmanTree
from chapter20.word2vec.objectives import _check_objective
from chapter20.word2vec.sampling import keep_probabilities, skipgram_pairs, skipgram_windows
from chapter20.word2vec.skipgram import SkipGram
from chapter20.word2vec.skipgram_config import Word2VecConfig
from chapter20.word2vec.vectors import TrainStats, WordVectors

__all__ = [
    "FUSED_CHUNK",
    "EpochSync",
    "default_batch_size",
    "run_seeds",
    "train_word2vec",
    "untrained_vectors",
]


#: Pairs per call of the fused kernels: each pair is its own SGD step there, so the size only
#: sets how often Python hands out work and updates the learning rate, as gensim's jobs of
#: 10,000 words do (about 36,000 pairs on the real corpus).
FUSED_CHUNK = 16384


class EpochSync(Protocol):
    """What :func:`train_word2vec` calls between parts of an epoch (its ``sync``; note, topic 2).

    Training calls ``sync(model)`` with the :class:`SkipGram` once before the first epoch (the
    weights it starts from) and then, every epoch being cut into ``segments`` equal runs of
    batches, after each run, once the workers have stopped (e.g. to combine its tables with
    other processes', ``chapter20.word2vec.data_parallel``). ``stream`` offsets the
    seeds of the pair and noise draws, not of the initial weights: processes that start from
    the same weights draw differently.
    """

    segments: int
    stream: int

    def __call__(self, model: SkipGram) -> None: ...


def default_batch_size(
    objective: str,
    device: torch.device | str = "cpu",
    share_negatives: bool = False,
    *,
    fused: bool = False,
) -> int:
    """Pairs per SGD step (note, topic 1). On a CPU, a batch whose temporaries stay in cache
    (a thousand or two pairs); on a GPU, large batches to fill it. The full softmax's
    ``[B, n]`` scores grow with the vocabulary, so it takes fewer. With ``fused`` (the fused
    kernels, one SGD step per pair), the pairs per kernel call, :data:`FUSED_CHUNK`."""
    _check_objective(objective)
    if fused:
        return FUSED_CHUNK
    cuda = torch.device(device).type == "cuda"
    if objective == "negative" and share_negatives:
        return 16384 if cuda else 2048
    sizes = {
        "negative": (1024, 16384),
        "hierarchical": (1024, 4096),
        "softmax": (512, 4096),
    }
    return sizes[objective][cuda]


def train_word2vec(
    sentences: Iterable[Sequence[str]],
    config: Word2VecConfig | None = None,
    *,
    vocab: Vocabulary | None = None,
    tree: HuffmanTree | None = None,
    sync: EpochSync | None = None,
) -> WordVectors:
    """Train skip-gram word vectors on ``sentences`` with ``config``'s settings (note, topic 1;
    a :class:`~chapter20.word2vec.skipgram_config.Word2VecConfig`; None: its defaults, which
    are gensim's).

    ``config.objective`` is ``"negative"`` (``negative`` noise words per pair from
    unigram^0.75), ``"hierarchical"`` (Huffman-tree softmax) or ``"softmax"`` (the full
    softmax). The other settings mean what gensim's ``Word2Vec(sg=1, ...)`` arguments of the
    same name mean; the vocabulary is ``build_vocab(sentences, min_count=config.min_count)``
    unless ``vocab`` is given (then ``min_count`` is not used). Each epoch draws subsampled,
    dynamic-window pairs (:func:`skipgram_pairs`) in corpus order, and the learning rate decays
    linearly from ``alpha`` to ``min_alpha`` over the run. Unlike gensim, sentences longer than
    10,000 words are not truncated. ``tree``: the hierarchical softmax's tree (see
    :class:`SkipGram`).

    Two paths apply word2vec's updates (:class:`SkipGram`):

    - **fused** (on the CPU, by default): the C loop of ``chapter20.word2vec.fused``, one SGD
      step per pair as in word2vec and gensim, for negative sampling with noise per pair and
      the hierarchical softmax; ``batch_size`` pairs per call (:data:`FUSED_CHUNK`);
    - **plain**: batched tensor ops, ``batch_size`` pairs per SGD step
      (:func:`default_batch_size`), on any device. The hierarchical softmax steps whole
      windows there (:meth:`SkipGram.step_windows`: the same updates, computed once per
      window); so does negative sampling with ``share_negatives=True``, which draws the ``k``
      noise words once per window instead of once per pair (no longer gensim's sampling: off
      by default, and plain only).

    ``config.fused``: ``None`` (default): the fused path where it can run (a CPU, a C compiler:
    else the plain path, with a warning if the compiler is missing); ``False``: the plain path;
    ``True``: the same as None, plus a warning if the fused path cannot run. The kernels
    compile in well under a second, once per process, before the clock starts.
    ``stats.fused`` says which path ran.

    ``config.device``: CPU by default, or e.g. ``"cuda"``. ``threads``: torch's CPU threads
    during training (restored afterwards). ``workers > 1`` (CPU only) runs that many Python
    threads on shared weights without locks, as gensim's workers do ("Hogwild"), each taking
    the epoch's next batch from a shared queue when it is free; each then computes with one
    torch thread unless ``threads`` says otherwise.

    ``sync``: an :class:`EpochSync`, called before the first epoch and after each of its
    ``segments`` equal parts of every epoch (between them the workers stop); None: no call, one
    part per epoch.

    Guarantees: with ``workers=1`` the run is deterministic for ``seed`` (bitwise on CPU for a
    fixed ``threads``); with more workers, like gensim's, it is not. The configuration checks
    its own fields; this raises ``ValueError`` naming the argument for an empty corpus, a
    ``min_count`` that removes every word, a corpus with no pair, or ``workers > 1`` off the
    CPU; ``TypeError`` for a string where token lists are expected or a ``config`` that is not
    a ``Word2VecConfig``.
    """
    config = _check_config(config)
    sync = _check_sync(sync)
    sentences = _check_sentences(sentences)
    vocab = _vocabulary(sentences, vocab, config.min_count)
    device = _training_device(config.device, config.workers)
    corpus, keep = _encoded_corpus(sentences, vocab, config.sample, device)
    seeds = run_seeds(config.seed, 0 if sync is None else sync.stream)
    model = _model(config, vocab, seeds[0], device, tree)
    with _torch_threads(config.torch_threads):
        stats = _train(model, corpus, keep, config, seeds, sync)
    vectors = model.input_vectors.cpu().numpy().copy()
    return WordVectors(words=tuple(vocab.words), vectors=vectors, stats=stats)


def untrained_vectors(
    sentences: Iterable[Sequence[str]],
    config: Word2VecConfig | None = None,
    *,
    vocab: Vocabulary | None = None,
) -> WordVectors:
    """The word vectors that ``train_word2vec(sentences, config, vocab=vocab)`` starts from,
    before its first step (note, topic 1): the same vocabulary, the same initial weights (its
    seed's, :func:`run_seeds`), bitwise. What "learned" is measured against: the same model
    under the same evaluation, untrained."""
    config = _check_config(config)
    sentences = _check_sentences(sentences)
    vocab = _vocabulary(sentences, vocab, config.min_count)
    model = _model(config, vocab, run_seeds(config.seed, 0)[0], torch.device("cpu"), None)
    return WordVectors(words=tuple(vocab.words), vectors=model.input_vectors.numpy().copy())


def _model(
    config: Word2VecConfig,
    vocab: Vocabulary,
    seed: int,
    device: torch.device,
    tree: HuffmanTree | None,
) -> SkipGram:
    """The skip-gram model a run of ``config`` trains, from its initial weights (``seed``)."""
    return SkipGram(
        config.objective, vocab.counts, dim=config.dim, negative=config.negative,
        device=device, seed=seed, tree=tree,
    )  # fmt: skip


def _check_config(config: Word2VecConfig | None) -> Word2VecConfig:
    """``config``, or the defaults for None; ``TypeError`` for anything else."""
    if config is None:
        return Word2VecConfig()
    if not isinstance(config, Word2VecConfig):
        raise TypeError(f"config must be a Word2VecConfig, got {type(config).__name__}")
    return config


def run_seeds(seed: int, stream: int) -> list[int]:
    """The seeds of a run's initial weights, pair draws and noise draws (note, topic 1): what
    :func:`train_word2vec` uses for ``config.seed``, so that the same model untrained can be
    built from ``run_seeds(seed, 0)[0]``; ``stream`` (an :class:`EpochSync`'s) changes the last
    two only."""
    seed, stream = check_int("seed", seed, 0), check_int("stream", stream, 0)
    seeds = [int(s) for s in np.random.SeedSequence(seed).generate_state(3)]
    if stream:
        seeds[1:] = [int(s) for s in np.random.SeedSequence([seed, stream]).generate_state(2)]
    return seeds


def _check_sync(sync: EpochSync | None) -> EpochSync | None:
    """``sync`` as :func:`train_word2vec` uses it: callable, ``segments`` >= 1, ``stream`` >= 0."""
    if sync is None:
        return None
    if not callable(sync):
        raise TypeError(f"sync must be callable (an EpochSync), got {type(sync).__name__}")
    check_int("sync.segments", sync.segments, 1)
    check_int("sync.stream", sync.stream, 0)
    return sync


def _vocabulary(
    sentences: Sequence[Sequence[str]], vocab: Vocabulary | None, min_count: int
) -> Vocabulary:
    """``vocab``, or the vocabulary of ``sentences`` (words seen ``min_count`` times) if None."""
    if vocab is None:
        return build_vocab(sentences, min_count=min_count)
    if not isinstance(vocab, Vocabulary):
        raise TypeError(
            f"vocab must be a chapter20.vocab.vocabulary.Vocabulary, got {type(vocab).__name__}"
        )
    return vocab


def _training_device(device: str | None, workers: int) -> torch.device:
    """Where to train: the CPU by default; Hogwild workers only on the CPU."""
    device = torch.device("cpu") if device is None else get_device(str(device))
    if workers > 1 and device.type != "cpu":
        raise ValueError(f"workers > 1 runs on CPU only; got workers={workers} on {device}")
    return device


def _encoded_corpus(
    sentences: Sequence[Sequence[str]], vocab: Vocabulary, sample: float, device: torch.device
) -> tuple[EncodedCorpus, torch.Tensor]:
    """The corpus as ids on ``device`` and each word's probability of being kept (``sample``);
    raises if fewer than two words are in the vocabulary (no pair to train on)."""
    keep = torch.as_tensor(keep_probabilities(vocab.counts, sample), device=device)
    corpus = encode_corpus(sentences, vocab).to(device)
    if len(corpus.ids) < 2:
        raise ValueError("sentences have fewer than two in-vocabulary words: no pairs to train on")
    return corpus, keep


@contextlib.contextmanager
def _torch_threads(count: int | None):
    """torch's CPU threads set to ``count`` (left as they are for None), restored on exit."""
    previous = torch.get_num_threads()
    torch.set_num_threads(previous if count is None else count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _train(
    model: SkipGram,
    corpus: EncodedCorpus,
    keep: torch.Tensor,
    config: Word2VecConfig,
    seeds: list[int],
    sync: EpochSync | None = None,
) -> TrainStats:
    """The epochs of :func:`train_word2vec`, timed: one thread draws the next epoch's pairs
    while ``config.workers`` threads share the batches of this one (``sync`` called after
    each of its parts of an epoch)."""
    device, workers, epochs = model.device, config.workers, config.epochs
    # Compiling the fused kernel (if any) happens here, before the clock starts.
    kernel = _fused_kernel(model, config.share_negatives, config.fused)
    run = _Run(model, corpus, keep, config, kernel, seeds)
    effective = pairs = 0
    losses = []
    if sync is not None:
        sync(model)  # the weights training starts from
    synchronize(device)
    start = time.perf_counter()
    # One thread draws the next epoch's pairs while the others train (epoch after epoch, so
    # the draws are deterministic); `workers` threads share an epoch's batches.
    with run.bar, ThreadPoolExecutor(1) as prefetch, ThreadPoolExecutor(workers) as pool:
        upcoming = prefetch.submit(run.draw)
        for epoch in range(epochs):
            data = upcoming.result()
            if epoch + 1 < epochs:
                upcoming = prefetch.submit(run.draw)
            n_batches = -(-len(data.outputs) // run.per_step)
            parts = 1 if sync is None else sync.segments
            totals = []
            for part in range(parts):
                # The workers take the part's batches in order, each the next one not yet
                # taken when it is free (gensim's job queue): a worker slowed down by other
                # programs takes fewer, and none waits long for the other at the end.
                batch_ids = iter(range(n_batches * part // parts, n_batches * (part + 1) // parts))
                jobs = [
                    pool.submit(run.train_batches, epoch, data, batch_ids, w)
                    for w in range(workers)
                ]
                totals += [job.result() for job in jobs]
                if sync is not None:
                    sync(model)
            effective += data.kept
            pairs += data.pairs
            losses.append(float(sum(totals)) / max(data.pairs, 1))
            run.bar.set_postfix(loss=f"{losses[-1]:.3f}")
    synchronize(device)
    return TrainStats(
        objective=model.objective,
        device=str(device),
        epochs=epochs,
        raw_words=corpus.raw_words * epochs,
        effective_words=effective,
        pairs=pairs,
        seconds=time.perf_counter() - start,
        batch_size=run.batch,
        workers=workers,
        epoch_loss=tuple(losses),
        fused=kernel is not None,
    )


class _Run:
    """What the threads of one training run share: the model and its step (the fused kernel,
    or the plain path's steps with a workspace per worker), the pair generator, a noise
    generator per worker, the batch size, a lock and the progress bar."""

    def __init__(
        self,
        model: SkipGram,
        corpus: EncodedCorpus,
        keep: torch.Tensor,
        config: Word2VecConfig,
        kernel: Callable | None,
        seeds: list[int],
    ):
        device = model.device
        self.model, self.corpus, self.keep, self.config = model, corpus, keep, config
        self.kernel = kernel
        # The plain path steps the hierarchical softmax (and shared noise) by whole windows.
        self.windows = kernel is None and (
            model.objective == "hierarchical" or config.share_negatives
        )
        self.batch = config.batch_size or default_batch_size(
            model.objective, device, config.share_negatives, fused=kernel is not None
        )
        # Whole windows per step: about `batch` pairs (a window holds window + 1 pairs on
        # average).
        self.per_step = (
            max(1, round(self.batch / (config.window + 1))) if self.windows else self.batch
        )
        self.pair_generator = torch.Generator(device=device)
        self.pair_generator.manual_seed(seeds[1])
        # Noise words are drawn batch by batch, each worker from its own generator: a batch's
        # draws stay in cache, and one worker's run is deterministic.
        self.noise_generators = [torch.Generator(device=device) for _ in range(config.workers)]
        for w, generator in enumerate(self.noise_generators):
            generator.manual_seed(seeds[2] + w)
        # A workspace per worker, for the plain path only.
        self.workspaces = [] if kernel else [model.new_workspace() for _ in range(config.workers)]
        self.lock = threading.Lock()
        self.bar = _progress_bar(corpus.raw_words * config.epochs, model.objective,
                                 config.progress)  # fmt: skip

    def draw(self) -> _Epoch:
        """The next epoch's draws: pairs, or windows where the plain path steps by window."""
        corpus, window, keep = self.corpus, self.config.window, self.keep
        if self.windows:
            outputs, contexts, n_pairs, kept = skipgram_windows(
                corpus, window, keep, self.pair_generator, pad=self.model.input_pad
            )
            return _Epoch(outputs, contexts, n_pairs, kept)
        inputs, outputs, kept = skipgram_pairs(corpus, window, keep, self.pair_generator)
        return _Epoch(outputs, inputs, len(inputs), kept)

    def step(
        self, outputs: torch.Tensor, inputs: torch.Tensor, lr: float, worker: int
    ) -> torch.Tensor:
        """Worker ``worker``'s SGD step on one batch; returns its summed loss."""
        model, generator = self.model, self.noise_generators[worker]
        if self.kernel is not None:
            return self.kernel(outputs, inputs, lr, generator)
        workspace = self.workspaces[worker]
        if self.windows:
            noise = None
            if model.objective == "negative":
                noise = model.sampler.sample(len(outputs) * model.negative, generator)
                noise = noise.view(len(outputs), -1)
            return model.step_windows(outputs, inputs, lr, noise, workspace)
        targets = None
        if model.objective == "negative":
            targets = model.noise_targets(outputs, generator)
        return model.step(inputs, outputs, lr, targets, workspace)

    def train_batches(self, epoch: int, data: _Epoch, batch_ids, worker: int) -> torch.Tensor:
        """Worker ``worker``'s share of an epoch: the next batch that no worker has taken, until
        none is left, each at the learning rate of its place in the run; returns the summed
        loss (float64)."""
        n, per_step = len(data.outputs), self.per_step
        total = torch.zeros((), dtype=torch.float64, device=self.model.device)
        while (i := _next_of(batch_ids, self.lock)) is not None:
            lo, hi = i * per_step, min((i + 1) * per_step, n)
            lr = self.config.learning_rate(epoch, lo / n)
            total += self.step(data.outputs[lo:hi], data.inputs[lo:hi], lr, worker)
            with self.lock:
                self.bar.update(self.corpus.raw_words * (hi - lo) / n)
        return total


def _progress_bar(total: int, objective: str, progress: bool):
    """A tqdm bar over the run's raw words (disabled without ``progress``)."""
    if progress:
        from tqdm.auto import tqdm
    else:  # tqdm.auto warns in notebooks without ipywidgets even when the bar is disabled
        from tqdm import tqdm
    return tqdm(total=total, disable=not progress, unit="word", unit_scale=True, desc=objective)


def _fused_kernel(model: SkipGram, share_negatives: bool, fused: bool | None):
    """The model's fused kernel (:meth:`SkipGram.fused_kernel`) when ``fused`` allows it and
    it can run, else None (the plain path). Noise shared by a window has no fused kernel."""
    if fused is False:
        return None
    supported = model.objective == "hierarchical" or (
        model.objective == "negative" and not share_negatives
    )
    kernel = model.fused_kernel() if supported else None  # warns if there is no compiler
    if fused and kernel is None and (not supported or model.device.type != "cpu"):
        warnings.warn(
            f"fused=True: no fused kernel for {model.objective!r} "
            f"{'with shared noise ' if share_negatives else ''}on {model.device}; plain path",
            RuntimeWarning,
            stacklevel=4,
        )
    return kernel


def _next_of(iterator, lock: threading.Lock):
    """The next item of an iterator that several threads share, or None when it is done."""
    with lock:
        return next(iterator, None)


@dataclass(frozen=True)
class _Epoch:
    """One epoch's draws: pairs (``inputs`` = input ids) or windows (``inputs`` = contexts)."""

    outputs: torch.Tensor
    inputs: torch.Tensor
    pairs: int
    kept: int
