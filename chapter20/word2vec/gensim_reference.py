"""gensim's skip-gram as the reference for ours (note, topic 1): one configuration for both
(:class:`~chapter20.word2vec.skipgram_config.Word2VecConfig`, mapped to gensim's arguments by
:func:`~chapter20.word2vec.skipgram_config.gensim_settings`), gensim's trainer returning our
:class:`~chapter20.word2vec.vectors.WordVectors`, and gensim's Huffman tree in our layout.

Notebook 09 and ``python -m chapter20 bench word2vec`` compare our trainers with gensim's C
implementation on the same corpus with the same hyper-parameters (``Word2VecConfig()``). gensim is
the reference only: the package never needs it to train. Words per second, for both: raw corpus
words (every token, out-of-vocabulary ones included, times the epochs; gensim's ``raw_words``)
divided by the seconds of training (vocabulary building excluded for both).
"""

from __future__ import annotations

import time

import numpy as np

from chapter20.vocab.vocabulary import build_vocab
from chapter20.word2vec.huffman import HuffmanTree
from chapter20.word2vec.skipgram_config import Word2VecConfig, gensim_settings
from chapter20.word2vec.vectors import TrainStats, WordVectors

__all__ = [
    "gensim_word2vec",
    "gensim_huffman_tree",
]


def gensim_word2vec(sentences, config: Word2VecConfig | None = None) -> WordVectors:
    """gensim's skip-gram with ``config``'s settings (:func:`gensim_settings`: ``sg=1``;
    ``hs=1, negative=0`` or ``hs=0, negative=k``), as
    :func:`chapter20.word2vec.skipgram_training.train_word2vec` trains with them, timed the same
    way: the ``train()`` call only (note, topic 1). ``stats.pairs`` is 0: gensim does not count
    them. gensim reads neither ``device``, ``batch_size``, ``threads``, ``fused`` nor
    ``share_negatives``."""
    from gensim.models import Word2Vec

    config = Word2VecConfig() if config is None else config
    settings = gensim_settings(config)
    model = Word2Vec(**settings)
    model.build_vocab(sentences)
    start = time.perf_counter()
    effective, raw = model.train(
        sentences, total_examples=model.corpus_count, epochs=settings["epochs"]
    )
    seconds = time.perf_counter() - start
    stats = TrainStats(
        objective=f"gensim {config.objective}",
        device="cpu",
        epochs=config.epochs,
        raw_words=int(raw),
        effective_words=int(effective),
        pairs=0,
        seconds=seconds,
        workers=config.workers,
    )
    return WordVectors(tuple(model.wv.index_to_key), model.wv.vectors.copy(), stats)


def gensim_huffman_tree(sentences, min_count: int = Word2VecConfig.min_count) -> HuffmanTree:
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
