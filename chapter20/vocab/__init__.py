"""Note, topic 3: vocabularies and what to do about their size, and the tokenisers a saved encoder
carries.

- ``vocabulary``: word counts, pruning rare words, the OOV rate and the matrix it saves (C29);
- ``bpe``: byte-level BPE subwords, an exact round trip with no unknown token (C30); how merges
  are learnt and applied, in a few lines tested equal to ``tokenizers``;
- ``pca``: PCA compression of dense or sparse inputs (C28);
- ``autoencoder``: a small autoencoder, the alternative to PCA for a sparse input;
- ``compression_proofs``: both compressions of a sparse input proven (the randomized sparse PCA
  against the exact one, the autoencoder's bound);
- ``sparse_input``: the ways a learned layer reads a sparse bag-of-words row, directly or through
  a fixed PCA projection (C28);
- ``bag_of_words``: the note's PCA example as a pipeline: sentences as bag-of-words rows, their
  PCA compression, and a classifier of their article trained on each variant (C28);
- ``word_vectors``: word vectors composed from BPE subwords' (C30), and compressed by PCA and
  scored at each size (C28);
- ``tokenizers``: word and subword tokenisers that travel with an encoder (§20.6).

Everything public is importable from ``chapter20.vocab``, and imported only when used
(``chapter20.core.facade``); inside the package, import from the submodule.
"""

from chapter20.core.facade import lazy_exports

__all__, __getattr__ = lazy_exports(__name__)
