"""The real corpus and its encoding as vocabulary ids (note, topic 1).

:func:`corpus_sentences` gives the corpus every trainer here (and gensim, in the comparisons)
learns from, as token lists; :func:`encode_corpus` turns token lists into an
:class:`EncodedCorpus` of vocabulary ids, dropping unknown words before any windowing, as
gensim does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from chapter20.core.corpora import lee_background, wiki_sentences
from chapter20.vocab.vocabulary import Vocabulary

__all__ = [
    "CORPORA",
    "EncodedCorpus",
    "corpus_sentences",
    "encode_corpus",
]


#: The real corpora :func:`corpus_sentences` knows.
CORPORA = ("wiki", "lee", "wiki+lee")


def corpus_sentences(name: str = "wiki+lee") -> list[list[str]]:
    """The real corpus as a flat list of token lists (note, topic 1).

    ``"wiki"``: every sentence of the Wikipedia sample in gensim's test data
    (``data.wiki_sentences``, ~22K sentences, ~447K tokens); ``"lee"``: the 300 documents of
    ``lee_background.cor`` (~58K tokens); ``"wiki+lee"``: both, Wikipedia first. Windows never
    cross a list boundary, for our trainers and gensim's alike.
    """
    if name not in CORPORA:
        raise ValueError(f"name must be one of {CORPORA}, got {name!r}")
    out: list[list[str]] = []
    if name in ("wiki", "wiki+lee"):
        out.extend(sentence for article in wiki_sentences() for sentence in article)
    if name in ("lee", "wiki+lee"):
        out.extend(lee_background())
    return out


def _check_sentences(sentences: Iterable[Sequence[str]]) -> list[Sequence[str]]:
    if isinstance(sentences, (str, bytes)):
        raise TypeError("sentences must be an iterable of token lists, not a string")
    sentences = list(sentences)
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)):
            raise TypeError(
                f"sentences[{i}] is a string; sentences must be token lists (list of str)"
            )
    if not any(len(s) for s in sentences):
        raise ValueError("sentences is empty: the corpus has no tokens to train on")
    return sentences


@dataclass(frozen=True)
class EncodedCorpus:
    """A corpus as vocabulary ids, on one device (note, topic 1).

    ``ids`` (int64): the in-vocabulary words in corpus order (unknown words are dropped before
    any windowing, as gensim drops them); ``sentence`` (int64): the sentence of each id;
    ``raw_words``: tokens before dropping, the count gensim reports as raw words.
    """

    ids: torch.Tensor
    sentence: torch.Tensor
    raw_words: int

    def to(self, device: torch.device | str) -> EncodedCorpus:
        return EncodedCorpus(self.ids.to(device), self.sentence.to(device), self.raw_words)


def encode_corpus(sentences: Sequence[Sequence[str]], vocab: Vocabulary) -> EncodedCorpus:
    """Encode ``sentences`` with ``vocab`` (note, topic 1): unknown words are dropped."""
    encoded = [vocab.encode(s, drop_unknown=True) for s in sentences]
    lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    ids = np.concatenate(encoded) if encoded else np.zeros(0, dtype=np.int64)
    sentence = np.repeat(np.arange(len(encoded), dtype=np.int64), lengths)
    raw = int(sum(len(s) for s in sentences))
    return EncodedCorpus(torch.from_numpy(ids), torch.from_numpy(sentence), raw)
