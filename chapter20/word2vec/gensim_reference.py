"""gensim's skip-gram as the reference for ours (note, topic 1): one set of settings for both,
gensim's trainer returning our :class:`~chapter20.word2vec.vectors.WordVectors`, and gensim's
Huffman tree in our layout.

Notebook 09 and ``python -m chapter20 bench word2vec`` compare our trainers with gensim's C
implementation on the same corpus with the same hyper-parameters (:data:`SETTINGS`). gensim is
the reference only: the package never needs it to train. Words per second, for both: raw corpus
words (every token, out-of-vocabulary ones included, times the epochs; gensim's ``raw_words``)
divided by the seconds of training (vocabulary building excluded for both).
"""

from __future__ import annotations

import time

import numpy as np

from chapter20.vocab.vocabulary import build_vocab
from chapter20.word2vec.huffman import HuffmanTree
from chapter20.word2vec.vectors import TrainStats, WordVectors

__all__ = [
    "SETTINGS",
    "gensim_word2vec",
    "gensim_huffman_tree",
]


#: The hyper-parameters the comparisons give our trainers and gensim's (skip-gram throughout):
#: the defaults of :func:`~chapter20.word2vec.trainer.train_word2vec` and of gensim's
#: ``Word2Vec`` alike.
SETTINGS = {
    "dim": 100,
    "window": 5,
    "min_count": 5,
    "negative": 5,
    "sample": 1e-3,
    "epochs": 5,
    "alpha": 0.025,
    "min_alpha": 1e-4,
}


def gensim_word2vec(
    sentences,
    objective: str = "negative",
    *,
    dim: int = 100,
    window: int = 5,
    min_count: int = 5,
    negative: int = 5,
    sample: float = 1e-3,
    epochs: int = 5,
    alpha: float = 0.025,
    min_alpha: float = 1e-4,
    seed: int = 1,
    workers: int = 2,
) -> WordVectors:
    """gensim's skip-gram (``sg=1``; ``hs=1, negative=0`` or ``hs=0, negative=k``) with the
    same settings as :func:`chapter20.word2vec.trainer.train_word2vec`, timed the same way: the
    ``train()`` call only (note, topic 1). ``stats.pairs`` is 0: gensim does not count them."""
    from gensim.models import Word2Vec

    if objective not in ("negative", "hierarchical"):
        raise ValueError(
            f"objective must be 'negative' or 'hierarchical' for gensim, got {objective!r}"
        )
    hs = objective == "hierarchical"
    model = Word2Vec(
        sg=1,
        vector_size=dim,
        window=window,
        min_count=min_count,
        sample=sample,
        hs=int(hs),
        negative=0 if hs else negative,
        alpha=alpha,
        min_alpha=min_alpha,
        seed=seed,
        workers=workers,
    )
    model.build_vocab(sentences)
    start = time.perf_counter()
    effective, raw = model.train(sentences, total_examples=model.corpus_count, epochs=epochs)
    seconds = time.perf_counter() - start
    stats = TrainStats(
        objective=f"gensim {objective}",
        device="cpu",
        epochs=epochs,
        raw_words=int(raw),
        effective_words=int(effective),
        pairs=0,
        seconds=seconds,
        workers=workers,
    )
    return WordVectors(tuple(model.wv.index_to_key), model.wv.vectors.copy(), stats)


def gensim_huffman_tree(sentences, min_count: int = 5) -> HuffmanTree:
    """gensim's Huffman tree for ``sentences``, laid out for our vocabulary's word order
    (``build_vocab(sentences, min_count=min_count)``; note, topic 1). Both trees are optimal;
    they differ where words have equal counts, which each breaks its own way, and that changes
    which rare words share inner nodes. Training ours on gensim's tree compares the two trainers
    with the tree held fixed (``bench word2vec``)."""
    from gensim.models import Word2Vec

    words = build_vocab(sentences, min_count=min_count).words
    model = Word2Vec(sg=1, hs=1, negative=0, min_count=min_count)
    model.build_vocab(sentences)
    paths = [(model.wv.get_vecattr(w, "code"), model.wv.get_vecattr(w, "point")) for w in words]
    lengths = np.array([len(code) for code, _ in paths], dtype=np.int64)
    codes = np.zeros((len(words), lengths.max(initial=0)), dtype=np.int8)
    points = np.zeros(codes.shape, dtype=np.int32)
    for i, (code, point) in enumerate(paths):
        codes[i, : len(code)], points[i, : len(point)] = code, point
    return HuffmanTree(codes=codes, points=points, lengths=lengths)
