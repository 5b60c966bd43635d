"""One epoch of word2vec training as plain Python loops (note, topic 1): the reference a reader can
follow for what :func:`~chapter20.word2vec.skipgram_training.train_word2vec` runs on a CPU.

The trainer draws an epoch's pairs with vectorised tensor ops (``chapter20.word2vec.sampling``)
and steps them in the C loop of ``kernels.c`` (``chapter20.word2vec.fused``), chunk after chunk.
:func:`train_epoch_reference` does the same, word by word: subsampling, the dynamic window, the
pairs of each sentence, then for each pair its noise words and the reference step of
``chapter20.word2vec.pair_updates`` at the linearly decaying learning rate. It takes the same
random numbers from the same generators (a coin per word and a reach per kept word from the
pair generator; a seed per chunk from the noise generator, expanded by :func:`kernel_noise`,
the C loop's SplitMix64 stream written in Python), so the two runs apply the same updates and
part only by float32 rounding (``chapter20.word2vec.equivalence.loop_equals_trainer``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from chapter20.core.checks import check_int
from chapter20.word2vec.pair_updates import hierarchical_pair_step, negative_pair_step
from chapter20.word2vec.sampling import NoiseSampler
from chapter20.word2vec.skipgram_training import FUSED_CHUNK

if TYPE_CHECKING:
    from chapter20.word2vec.corpus import EncodedCorpus
    from chapter20.word2vec.skipgram import SkipGram
    from chapter20.word2vec.skipgram_config import Word2VecConfig

__all__ = ["kernel_noise", "train_epoch_reference"]

_MASK = 2**64 - 1


def _splitmix64(state: int):
    """SplitMix64 (Steele, Lea and Flood 2014), as ``next_random`` in ``kernels.c``."""
    while True:
        state = (state + 0x9E3779B97F4A7C15) & _MASK
        z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        yield z ^ (z >> 31)


def kernel_noise(sampler: NoiseSampler, seed: int, count: int) -> torch.Tensor:
    """The ``count`` noise words (int64) that the C loop draws from ``seed``'s stream, bit for
    bit, in Python: per draw a uniform slot of Walker's alias table and a uniform coin against
    the slot's probability (``sampler``'s tables, :class:`NoiseSampler`)."""
    seed, count = check_int("seed", seed, 0, _MASK), check_int("count", count, 0)
    stream, prob, alias = _splitmix64(seed), sampler.prob.tolist(), sampler.alias.tolist()
    words = []
    for _ in range(count):
        slot = (next(stream) * len(prob)) >> 64  # the high half of a 128-bit product
        coin = (next(stream) >> 11) * 2.0**-53  # 53 random bits: a double in [0, 1)
        words.append(slot if coin < prob[slot] else alias[slot])
    return torch.tensor(words, dtype=torch.int64)


def train_epoch_reference(
    model: SkipGram,
    corpus: EncodedCorpus,
    keep: torch.Tensor,
    config: Word2VecConfig,
    epoch: int,
    pair_generator: torch.Generator,
    noise_generator: torch.Generator,
) -> tuple[float, int]:
    """Epoch ``epoch`` of ``config``'s run on ``model``'s tables, in place, word by word; the
    same updates as the trainer's fused path with one worker, given generators in the same
    states (note, topic 1). ``keep``: each word's keep probability (``keep_probabilities``).
    Returns the epoch's summed loss and its number of pairs; ``ValueError`` for the full
    softmax (no C loop to follow) or an epoch outside the run."""
    epoch = check_int("epoch", epoch, 0, config.epochs - 1)
    if model.objective not in ("negative", "hierarchical"):
        raise ValueError(f"objective must be negative or hierarchical, got {model.objective!r}")
    window, k, chunk = config.window, model.negative, config.batch_size or FUSED_CHUNK
    w_in, w_out, tree = model.input_vectors, model.output_vectors, getattr(model, "tree", None)
    # The epoch's coins and reaches, drawn as the trainer draws them, all at once.
    coin = torch.rand(len(corpus.ids), generator=pair_generator, dtype=torch.float64)
    kept = coin < keep[corpus.ids]  # subsampling: frequent words mostly dropped
    ids, sentence = corpus.ids[kept], corpus.sentence[kept]
    reach = window - torch.randint(0, window, (len(ids),), generator=pair_generator)  # b: 1..window
    lengths = torch.unique_consecutive(sentence, return_counts=True)[1].tolist()
    pairs = []
    for words, reaches in zip(ids.split(lengths), reach.split(lengths)):  # sentence by sentence
        words = words.tolist()
        for i, b in enumerate(reaches.tolist()):  # word i is predicted from b words each side
            for j in range(max(0, i - b), min(len(words), i + b + 1)):
                if j != i:
                    pairs.append((words[j], words[i]))  # (input, output)
    total = 0.0
    for p, (word, output) in enumerate(pairs):
        if p % chunk == 0:  # a new chunk: the rate of its place in the run, a new noise stream
            lr = config.learning_rate(epoch, p / len(pairs))
            if model.objective == "negative":
                seed = int(torch.randint(0, 2**63 - 1, (), generator=noise_generator))
                noise = kernel_noise(model.sampler, seed, k * min(chunk, len(pairs) - p))
        if model.objective == "negative":
            row = noise[(p % chunk) * k : (p % chunk + 1) * k]  # this pair's k noise words
            total += negative_pair_step(w_in, w_out, word, output, row, lr)
        else:  # the output word's Huffman path: its inner nodes (points) and branches (codes)
            points, codes = (torch.as_tensor(a[output, : tree.lengths[output]]).long()
                             for a in (tree.points, tree.codes))  # fmt: skip
            total += hierarchical_pair_step(w_in, w_out, word, points, codes, lr)
    return total, len(pairs)
