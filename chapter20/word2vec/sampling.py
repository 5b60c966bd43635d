"""What one epoch of skip-gram draws from a corpus (note, topic 1): frequent-word subsampling
(:func:`keep_probabilities`, gensim's formula), dynamic windows as (input, output) pairs
(:func:`skipgram_pairs`) or grouped by predicted word (:func:`skipgram_windows`), and negative
sampling's noise words (:func:`noise_distribution`, unigram^0.75, drawn by
:class:`NoiseSampler` in O(1) each). Vectorised, on the corpus's device, deterministic for a
seeded generator.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from chapter20.core.checks import check_int, check_real
from chapter20.word2vec.corpus import EncodedCorpus

__all__ = [
    "NoiseSampler",
    "draw_windows",
    "keep_probabilities",
    "noise_distribution",
    "skipgram_pairs",
    "skipgram_windows",
]


def keep_probabilities(counts: np.ndarray, sample: float) -> np.ndarray:
    """Probability of keeping each occurrence of a word, gensim's formula (note, topic 1).

    With ``t = sample * counts.sum()``, a word seen ``c`` times is kept with probability
    ``min(1, (sqrt(c / t) + 1) * t / c)``: words rarer than ``t`` are always kept, very frequent
    words ("the", "of") mostly dropped. ``sample = 0`` keeps everything.
    """
    # A threshold share of the corpus: 1 already keeps every word; more is no subsampling.
    sample = check_real("sample", sample, minimum=0, maximum=1)
    counts = np.asarray(counts, dtype=np.float64)
    if sample == 0:
        return np.ones_like(counts)
    threshold = sample * counts.sum() if sample < 1 else sample * (3 + math.sqrt(5)) / 2
    return np.minimum(1.0, (np.sqrt(counts / threshold) + 1) * threshold / counts)


def draw_windows(
    corpus: EncodedCorpus,
    window: int,
    keep: torch.Tensor | None,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The random part of an epoch (note, topic 1): subsample (one uniform draw per word, kept
    below ``keep[id]``; ``None``: no draw, all kept), draw every kept word's reach
    ``b ~ U{1..window}``, and mark its valid context slots. Returns the kept ids,
    ``valid [n, 2 * window]`` (slot ``c`` is offset ``offsets[c]``, valid where
    ``|offsets[c]| <= b`` and both words lie in one sentence) and ``offsets``. Both
    :func:`skipgram_pairs` and :func:`skipgram_windows` read their epoch from it, so they hold
    the same pairs for the same generator state."""
    window = check_int("window", window, 1)
    ids, sentence = corpus.ids, corpus.sentence
    device = ids.device
    if keep is not None:
        draw = torch.rand(len(ids), generator=generator, device=device, dtype=torch.float64)
        kept = draw < keep.index_select(0, ids)
        ids, sentence = ids.masked_select(kept), sentence.masked_select(kept)
    n = len(ids)
    reach = window - torch.randint(0, window, (n,), generator=generator, device=device)
    offsets = list(range(-window, 0)) + list(range(1, window + 1))
    # valid[i, c]: position i predicts from position i + offsets[c]; row-major = corpus order.
    valid = torch.zeros((n, len(offsets)), dtype=torch.bool, device=device)
    for col, d in enumerate(offsets):
        step = abs(d)
        if step >= n:
            continue
        if d < 0:
            valid[step:, col] = (reach[step:] >= step) & (sentence[step:] == sentence[:-step])
        else:
            valid[:-step, col] = (reach[:-step] >= step) & (sentence[:-step] == sentence[step:])
    return ids, valid, torch.tensor(offsets, dtype=torch.int64, device=device)


def skipgram_pairs(
    corpus: EncodedCorpus,
    window: int,
    keep: torch.Tensor | None,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One epoch of skip-gram pairs, vectorised, on the corpus's device (note, topic 1).

    Returns ``(inputs, outputs, kept)``. As in gensim: each occurrence is kept with
    probability ``keep[id]`` (frequent-word subsampling), then every kept word at position
    ``i`` draws its window ``b ~ U{1..window}`` and is predicted from each kept word ``j`` of
    its sentence with ``0 < |i - j| <= b``: ``inputs[p]`` is the word at ``j`` (its input
    vector is used), ``outputs[p]`` the word at ``i``. Pairs come in corpus order (by ``i``,
    then ``j``); ``kept`` is the number of kept words (gensim's "effective words").
    Deterministic for the state of ``generator``.
    """
    ids, valid, offsets = draw_windows(corpus, window, keep, generator)
    rows, cols = valid.nonzero(as_tuple=True)
    return (
        ids.index_select(0, rows + offsets.index_select(0, cols)),
        ids.index_select(0, rows),
        len(ids),
    )


def skipgram_windows(
    corpus: EncodedCorpus,
    window: int,
    keep: torch.Tensor | None,
    generator: torch.Generator,
    pad: int,
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """The same epoch as :func:`skipgram_pairs`, grouped by predicted word (note, topic 1).

    Returns ``(outputs, contexts, pairs, kept)``: ``outputs [G]`` the words that have at least
    one context, in corpus order, and ``contexts [G, 2 * window]`` their context words, with
    ``pad`` in unused slots. For the same generator state the windows hold exactly the pairs
    :func:`skipgram_pairs` returns (tested); ``pairs`` counts them.
    """
    pad = check_int("pad", pad, 0)
    ids, valid, offsets = draw_windows(corpus, window, keep, generator)
    rows = valid.any(1).nonzero().squeeze(1)
    valid = valid.index_select(0, rows)
    positions = (rows.unsqueeze(1) + offsets.unsqueeze(0)).clamp_(0, max(len(ids) - 1, 0))
    contexts = torch.where(valid, ids[positions], torch.full_like(positions, pad))
    return ids.index_select(0, rows), contexts, int(valid.sum()), len(ids)


def noise_distribution(counts: np.ndarray, power: float = 0.75) -> np.ndarray:
    """Negative-sampling noise: ``counts ** power``, normalised (note, topic 1; word2vec's 0.75)."""
    power = check_real("power", power, finite=True, minimum=0)
    with np.errstate(over="ignore"):
        weights = np.asarray(counts, dtype=np.float64) ** power
    if not np.all(np.isfinite(weights)):
        raise ValueError(f"power={power:g} overflows counts ** power; word2vec uses 0.75")
    return weights / weights.sum()


class NoiseSampler:
    """Draws noise words from a fixed distribution in O(1) each, on any device (note, topic 1).

    Walker's alias method: one uniform slot and one uniform number per draw, then a comparison,
    so a batch of draws is a few vectorised tensor ops whatever the vocabulary size. Exact up
    to float64 rounding of the table (built in NumPy, deterministic); draws are deterministic
    for a seeded generator.
    """

    def __init__(self, probabilities: np.ndarray, device: torch.device | str = "cpu"):
        p = np.asarray(probabilities, dtype=np.float64)
        if p.ndim != 1 or len(p) == 0 or not np.all(p >= 0) or not p.sum() > 0:
            raise ValueError("probabilities must be a non-empty 1-D array of non-negative numbers")
        n = len(p)
        scaled = p * (n / p.sum())
        prob = np.ones(n)
        alias = np.arange(n)
        small = np.flatnonzero(scaled < 1.0).tolist()
        large = np.flatnonzero(scaled >= 1.0).tolist()
        while small and large:
            s, g = small.pop(), large.pop()
            prob[s], alias[s] = scaled[s], g
            scaled[g] -= 1.0 - scaled[s]
            (small if scaled[g] < 1.0 else large).append(g)
        self.size = n
        self.probabilities = p / p.sum()
        self.prob = torch.tensor(prob, dtype=torch.float64, device=device)
        self.alias = torch.tensor(alias, dtype=torch.int64, device=device)

    def sample(self, count: int, generator: torch.Generator) -> torch.Tensor:
        """``count`` draws (int64) on the sampler's device."""
        device = self.prob.device
        slot = torch.randint(0, self.size, (count,), generator=generator, device=device)
        u = torch.rand(count, generator=generator, device=device, dtype=torch.float64)
        return torch.where(
            u < self.prob.index_select(0, slot), slot, self.alias.index_select(0, slot)
        )
