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
- ``equivalence``: the fast paths (the C loop, the batched step) against the plain step and the
  few-line references, pair after pair;
- ``data_parallel``: :func:`train_word2vec_data_parallel`, ranks of a process group that each
  train a copy on their share of the corpus and combine the copies every part of an epoch;
- ``gensim_reference``: gensim's trainer and tree, with the same configuration, as the
  reference;
- ``trainers``: ours and gensim's trainers by name (:func:`train`), a run scored as a row
  (:func:`score_run`), the full softmax given a time budget.

Everything public is importable from ``chapter20.word2vec``; inside the package, and elsewhere
in the library, import from the module that defines it.
"""

from chapter20.word2vec.corpus import (
    CORPORA,
    EncodedCorpus,
    corpus_sentences,
    encode_corpus,
)
from chapter20.word2vec.data_parallel import (
    COMBINE,
    DataParallelRun,
    RankSync,
    train_word2vec_data_parallel,
)
from chapter20.word2vec.equivalence import (
    fused_equals_plain,
    reference_equals_fast,
)
from chapter20.word2vec.fused import (
    MAX_EXP,
    FusedKernels,
    compiler_available,
    load_kernels,
)
from chapter20.word2vec.gensim_reference import (
    gensim_huffman_tree,
    gensim_word2vec,
)
from chapter20.word2vec.huffman import (
    HuffmanTree,
    build_huffman_tree,
)
from chapter20.word2vec.objectives import (
    OBJECTIVES,
    ObjectiveGrads,
    full_softmax_grads,
    hierarchical_softmax_grads,
    hierarchical_softmax_log_probs,
    negative_sampling_grads,
)
from chapter20.word2vec.pair_updates import (
    hierarchical_pair_step,
    negative_pair_step,
    softmax_pair_step,
)
from chapter20.word2vec.sampling import (
    NoiseSampler,
    keep_probabilities,
    noise_distribution,
    skipgram_pairs,
    skipgram_windows,
)
from chapter20.word2vec.skipgram import (
    SkipGram,
    Workspace,
    step_pair_by_pair,
)
from chapter20.word2vec.skipgram_config import (
    Word2VecConfig,
    gensim_settings,
)
from chapter20.word2vec.skipgram_training import (
    FUSED_CHUNK,
    EpochSync,
    default_batch_size,
    run_seeds,
    train_word2vec,
    untrained_vectors,
)
from chapter20.word2vec.trainers import (
    COMPARISON,
    TRAINERS,
    score_run,
    softmax_at_equal_time,
    train,
)
from chapter20.word2vec.vectors import (
    PairEvaluation,
    TrainStats,
    WordVectors,
    evaluate_word_pairs,
)

__all__ = [
    "COMBINE",
    "COMPARISON",
    "CORPORA",
    "DataParallelRun",
    "EpochSync",
    "EncodedCorpus",
    "FUSED_CHUNK",
    "FusedKernels",
    "HuffmanTree",
    "MAX_EXP",
    "NoiseSampler",
    "OBJECTIVES",
    "ObjectiveGrads",
    "PairEvaluation",
    "RankSync",
    "SkipGram",
    "TRAINERS",
    "TrainStats",
    "WordVectors",
    "Word2VecConfig",
    "Workspace",
    "build_huffman_tree",
    "compiler_available",
    "corpus_sentences",
    "default_batch_size",
    "encode_corpus",
    "evaluate_word_pairs",
    "full_softmax_grads",
    "fused_equals_plain",
    "gensim_huffman_tree",
    "gensim_settings",
    "gensim_word2vec",
    "hierarchical_pair_step",
    "hierarchical_softmax_grads",
    "hierarchical_softmax_log_probs",
    "keep_probabilities",
    "load_kernels",
    "negative_pair_step",
    "negative_sampling_grads",
    "noise_distribution",
    "reference_equals_fast",
    "run_seeds",
    "score_run",
    "skipgram_pairs",
    "skipgram_windows",
    "softmax_at_equal_time",
    "softmax_pair_step",
    "step_pair_by_pair",
    "train",
    "train_word2vec",
    "train_word2vec_data_parallel",
    "untrained_vectors",
]
