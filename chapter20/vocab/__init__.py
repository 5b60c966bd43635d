"""Note, topic 3: vocabularies (counts, pruning), byte-level BPE, PCA compression, and the
tokenisers a saved encoder carries. Everything public is importable from ``chapter20.vocab``.
"""

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
    BPE_UNK,
    BPETokenizer,
    PCAResult,
    Vocabulary,
    bpe_table,
    build_vocab,
    normalize_text,
    pca_compress,
    pruning_table,
    train_bpe,
)

__all__ = [
    "BPETokenizer",
    "BPE_UNK",
    "PCAResult",
    "SubwordTokenizer",
    "TOKENIZERS",
    "Tokenizer",
    "Vocabulary",
    "WordTokenizer",
    "bpe_table",
    "build_tokenizer",
    "build_vocab",
    "normalize_text",
    "pad_batch",
    "pca_compress",
    "pruning_table",
    "tokenizer_from_spec",
    "train_bpe",
]
