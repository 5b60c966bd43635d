"""Note, topic 1: skip-gram word vectors trained three ways: full softmax, negative sampling,
hierarchical softmax; on a CPU at gensim's speed (a fused per-pair C kernel) or on a GPU.

A skip-gram model predicts the words around each word. Scoring the prediction with a softmax over
the whole vocabulary costs O(n) per (word, context) pair; word2vec avoids it in two ways:

- **negative sampling**: push the true context up and ``k`` noise words, drawn from the unigram
  distribution raised to 0.75, down: O(k) per pair;
- **hierarchical softmax**: a Huffman tree over the vocabulary; a word's probability is the
  product of binary decisions on the path from the root to its leaf: O(log n) per pair, and
  frequent words, with short codes, are the cheapest.

The three objectives share one vocabulary (``chapter20.vocab.vocabulary.build_vocab``), one pair
generator (gensim's dynamic window and frequent-word subsampling) and one training loop with
linear learning-rate decay from ``alpha`` to ``min_alpha``. The loop steps by one of two paths,
with no autograd: the plain path is hand-written, vectorised SGD in PyTorch (a batch's scores as
row-wise dot products, the sigmoid coefficients, row updates scattered with ``index_add_``) on
CPU or CUDA; on a CPU, the fused path applies the same update one pair at a time in a small C
loop, as word2vec does, tested equal to the plain step on one pair at a time.

The modules, bottom up:

- ``corpus``: the real corpus (:func:`corpus_sentences`) and its encoding as vocabulary ids;
- ``sampling``: what an epoch draws: subsampling, dynamic windows (pairs or whole windows),
  noise words (:class:`NoiseSampler`);
- ``huffman``: the Huffman tree of the hierarchical softmax;
- ``objectives``: the three objectives' losses and exact gradients (public so that the tests
  compare them with autograd);
- ``pair_updates``: the update of one pair, for each objective, in a few lines: the reference
  the fast paths are proven equal to;
- ``skipgram_config``: :class:`Word2VecConfig`, every setting of a training run, and
  :func:`gensim_settings`, the same settings as gensim's arguments;
- ``skipgram``: :class:`SkipGram`, the model's two tables and its vectorised SGD steps;
- ``fused`` (+ ``kernels.c``): the same step, fused into one C loop per pair;
- ``vectors``: :class:`WordVectors` and :func:`evaluate_word_pairs` (WordSim-353 / SimLex-999,
  gensim's way);
- ``skipgram_training``: :func:`train_word2vec`, the training loop and its Hogwild workers, and
  :func:`untrained_vectors`, the vectors a run starts from;
- ``epoch_reference``: one epoch of that loop as plain Python loops around the few-line
  updates (:func:`train_epoch_reference`), with the C loop's noise draw in Python;
- ``equivalence``: the fast paths (the C loop, the batched step) against the plain step and the
  few-line references, pair after pair, and the Python epoch against the trainer's;
- ``data_parallel``: :func:`train_word2vec_data_parallel`, ranks of a process group that each
  train a copy on their share of the corpus and combine the copies every part of an epoch;
- ``gensim_reference``: gensim's trainer and tree, with the same configuration, as the
  reference;
- ``trainers``: ours and gensim's trainers by name (:func:`train`), a run scored as a row
  (:func:`score_run`), the full softmax given a time budget.

Everything public is importable from ``chapter20.word2vec``, and imported only when used
(``chapter20.core.facade``); inside the package, and elsewhere in the library, import from the
module that defines it.
"""

from chapter20.core.facade import lazy_exports

__all__, __getattr__ = lazy_exports(__name__)
