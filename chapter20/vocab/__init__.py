"""Note, topic 3: vocabularies and what to do about their size, and the tokenisers a saved encoder
carries.

- ``vocabulary``: word counts, pruning rare words, the OOV rate and the matrix it saves (C29);
- ``bpe``: byte-level BPE subwords, an exact round trip with no unknown token (C30); how merges
  are learnt and applied, in a few lines tested equal to ``tokenizers``;
- ``pca``: PCA compression of dense or sparse inputs (C28);
- ``autoencoder``: a small autoencoder, the alternative to PCA for a sparse input;
- ``sparse_input``: the ways a learned layer reads a sparse bag-of-words row, directly or through
  a fixed PCA projection (C28);
- ``tokenizers``: word and subword tokenisers that travel with an encoder (§20.6).

Everything public is importable from ``chapter20.vocab``; inside the package, import from the
submodule.
"""

from chapter20.vocab.autoencoder import (
    AutoencoderResult,
    train_autoencoder,
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

__all__ = [
    "AutoencoderResult",
    "BPETokenizer",
    "BPE_UNK",
    "BagOfWordsBatches",
    "PCAResult",
    "ProjectionModel",
    "SubwordTokenizer",
    "TOKENIZERS",
    "Tokenizer",
    "VARIANTS",
    "Vocabulary",
    "WordTokenizer",
    "apply_merges",
    "bpe_table",
    "break_even_out_dim",
    "build_tokenizer",
    "build_vocab",
    "count_words",
    "element_bytes",
    "learn_merges",
    "normalize_text",
    "pad_batch",
    "pca_compress",
    "pruning_table",
    "tokenizer_from_spec",
    "train_autoencoder",
    "train_bpe",
]
