"""Note, topic 3: vocabularies and what to do about their size, and the tokenisers a saved encoder
carries.

- ``vocabulary``: word counts, pruning rare words, the OOV rate and the matrix it saves (C29);
- ``bpe``: byte-level BPE subwords, an exact round trip with no unknown token (C30); how merges
  are learnt and applied, in a few lines tested equal to ``tokenizers``;
- ``pca``: PCA compression of dense or sparse inputs (C28);
- ``autoencoder``: a small autoencoder, the alternative to PCA for a sparse input;
- ``sparse_input``: the ways a learned layer reads a sparse bag-of-words row, directly or through
  a fixed PCA projection (C28);
- ``bag_of_words``: the note's PCA example as a pipeline: sentences as bag-of-words rows, their
  PCA compression, and a classifier of their article trained on each variant (C28);
- ``word_vectors``: word vectors composed from BPE subwords' (C30), and compressed by PCA and
  scored at each size (C28);
- ``tokenizers``: word and subword tokenisers that travel with an encoder (§20.6).

Everything public is importable from ``chapter20.vocab``; inside the package, import from the
submodule.
"""

from chapter20.vocab.autoencoder import (
    AutoencoderResult,
    train_autoencoder,
)
from chapter20.vocab.bag_of_words import (
    BagOfWordsData,
    CompressedInput,
    adam_optimizer,
    bag_of_words_data,
    check_variants,
    classifier_step,
    compress_bag_of_words,
    projection_accuracy,
    projection_model,
)
from chapter20.vocab.bpe import (
    BPE_UNK,
    BPETokenizer,
    apply_merges,
    bpe_table,
    learn_merges,
    normalize_text,
    train_bpe,
)
from chapter20.vocab.pca import (
    PCAResult,
    pca_compress,
)
from chapter20.vocab.sparse_input import (
    VARIANTS,
    BagOfWordsBatches,
    ProjectionModel,
    break_even_out_dim,
)
from chapter20.vocab.tokenizers import (
    TOKENIZERS,
    SubwordTokenizer,
    Tokenizer,
    WordTokenizer,
    build_tokenizer,
    pad_batch,
    tokenizer_from_spec,
)
from chapter20.vocab.vocabulary import (
    Vocabulary,
    build_vocab,
    count_words,
    element_bytes,
    pruning_table,
)
from chapter20.vocab.word_vectors import (
    compose_word_vectors,
    pca_quality_curve,
)

__all__ = [
    "AutoencoderResult",
    "BPETokenizer",
    "BPE_UNK",
    "BagOfWordsBatches",
    "BagOfWordsData",
    "CompressedInput",
    "PCAResult",
    "ProjectionModel",
    "SubwordTokenizer",
    "TOKENIZERS",
    "Tokenizer",
    "VARIANTS",
    "Vocabulary",
    "WordTokenizer",
    "adam_optimizer",
    "apply_merges",
    "bag_of_words_data",
    "bpe_table",
    "break_even_out_dim",
    "build_tokenizer",
    "build_vocab",
    "check_variants",
    "classifier_step",
    "compose_word_vectors",
    "compress_bag_of_words",
    "count_words",
    "element_bytes",
    "learn_merges",
    "normalize_text",
    "pad_batch",
    "pca_compress",
    "pca_quality_curve",
    "projection_accuracy",
    "projection_model",
    "pruning_table",
    "tokenizer_from_spec",
    "train_autoencoder",
    "train_bpe",
]
