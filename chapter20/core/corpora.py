"""Data for every section: real text from gensim's test data, word pairs, next-sentence pairs (the
synthetic id streams are ``chapter20.core.id_streams``).

Everything here is local: the text corpora and the word-similarity sets are files inside gensim's
test data (``gensim.test.utils.datapath``); nothing is downloaded. Tokenised corpora are cached
outside the repository (``chapter20.core.paths.cache_dir``), keyed by the source file and by
``_CACHE_VERSION``, so a change of the processing code never serves stale tokens.
"""

from __future__ import annotations

import bz2
import functools
import gzip
import hashlib
import importlib.util
import json
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import torch

from chapter20.core.checks import check_int, check_real
from chapter20.core.paths import cache_dir

# pandas costs every torchrun worker half a second to import; only word_similarity needs it.
if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "ARTICLE_MIN_TOKENS",
    "PAD_ID",
    "PairData",
    "SENTENCE_MIN_TOKENS",
    "UNKNOWN_ID",
    "cache_dir",
    "encode_texts",
    "LEE_PAIRS",
    "lee_background",
    "lee_documents",
    "lee_human_similarity",
    "next_sentence_pairs",
    "pair_data",
    "shuffled_batches",
    "train_test_split_articles",
    "wiki_articles",
    "wiki_sentences",
    "wiki_tokens",
    "word_similarity",
    "word_similarity_path",
    "word_vocabulary",
]

# Bump whenever the tokenisation below changes: it is part of every cache key.
_CACHE_VERSION = 1

WIKI_FILE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
LEE_FILE = "lee_background.cor"
LEE_TEST_FILE = "lee.cor"
LEE_SIMILARITY_FILE = "similarities0-1.txt"
#: Documents of the Lee similarity set and the pairs among them (50 · 49 / 2).
LEE_DOCUMENTS, LEE_PAIRS = 50, 1225


def datapath(name: str) -> str:
    """Path of ``name`` in gensim's test data: the path ``gensim.test.utils.datapath`` gives,
    found without importing gensim (two seconds of CPU that every rank reading a corpus would
    pay only to learn a path)."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("gensim is needed for its test data: pip install gensim")
    return str(Path(spec.origin).parent / "test" / "test_data" / name)


# Same threshold as gensim's WikiCorpus (ARTICLE_MIN_WORDS = 50): shorter pages are stubs,
# disambiguation pages or redirects. Counted after short sentences are dropped.
ARTICLE_MIN_TOKENS = 50
# Fragments under 3 tokens are headings, list items and captions left over by filter_wiki.
SENTENCE_MIN_TOKENS = 3
# A sentence ends at . ! ? followed by whitespace, or at a paragraph break (blank line).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n")

# name -> (file in gensim's test data, documented score range)
_SIMILARITY_SETS = {
    "wordsim353": ("wordsim353.tsv", (0.0, 10.0)),
    "simlex999": ("simlex999.txt", (0.0, 10.0)),
}

T = TypeVar("T")
_cache_warned = False


# --- validation -----------------------------------------------------------------------------


def _check_limit(name: str, value: int | None) -> int | None:
    return None if value is None else check_int(name, value, 1)


# --- cache ----------------------------------------------------------------------------------


def _warn_uncached(exc: OSError) -> None:
    global _cache_warned
    if not _cache_warned:
        _cache_warned = True
        warnings.warn(
            f"chapter20 cache unavailable ({exc}); tokenising without a cache. "
            "Set CHAPTER20_CACHE to a writable directory to cache results.",
            RuntimeWarning,
            stacklevel=4,
        )


def _cache_file(source: str, kind: str, suffix: str, extra: str = "") -> Path | None:
    """The cache file of ``kind`` derived from ``source`` (its name, size and mtime, the
    processing version and ``extra`` in the key), or None (warned once) without a cache."""
    stat = os.stat(source)
    key = f"{Path(source).name}|{stat.st_size}|{stat.st_mtime_ns}|{_CACHE_VERSION}{extra}"
    try:
        return cache_dir() / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:16]}{suffix}"
    except OSError as exc:
        _warn_uncached(exc)
        return None


def _store(path: Path, write: Callable[[object], None]) -> None:
    """Write a cache file atomically (a temporary file in its folder, then a rename)."""
    tmp = None
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
            tmp = f.name
            write(f)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
        _warn_uncached(exc)


def _write_json_gz(result: object) -> Callable[[object], None]:
    def write(f: object) -> None:
        # Level 6: a third of level 9's write time for a 3% larger file.
        # One write of the whole text: json.dump's many small writes cost the gzip stream 2x.
        with gzip.open(f, "wt", encoding="utf-8", compresslevel=6) as gz:
            gz.write(json.dumps(result))

    return write


def _cached(source: str, kind: str, build: Callable[[], T]) -> T:
    """Load ``build()``'s JSON-able result from the cache, or build it and store it atomically."""
    path = _cache_file(source, kind, ".json.gz")
    if path is None:
        return build()
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        pass
    except (OSError, ValueError, EOFError) as exc:
        warnings.warn(f"unreadable cache file {path} ({exc}); rebuilding it", stacklevel=3)
    result = build()
    _store(path, _write_json_gz(result))
    return result


def _cached_tensors(
    source: str, kind: str, extra: str, build: Callable[[], dict[str, torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """Like :func:`_cached` for a dict of tensors (``torch.save``; loaded ``weights_only``)."""
    path = _cache_file(source, kind, ".pt", extra)
    if path is None:
        return build()
    try:
        return torch.load(path, weights_only=True)
    except FileNotFoundError:
        pass
    except (OSError, RuntimeError, EOFError, ValueError) as exc:
        warnings.warn(f"unreadable cache file {path} ({exc}); rebuilding it", stacklevel=3)
    result = build()
    _store(path, lambda f: torch.save(result, f))
    return result


# --- real text ------------------------------------------------------------------------------


def _parse_wiki() -> list[list[list[str]]]:
    """Parse the Wikipedia sample into articles of sentences of tokens (uncached)."""
    articles = []
    from gensim.corpora.wikicorpus import IGNORED_NAMESPACES, extract_pages, filter_wiki, tokenize

    with bz2.open(datapath(WIKI_FILE)) as f:
        # Namespace "0" = articles; gensim's WikiCorpus uses the same filters.
        for title, text, _pageid in extract_pages(f, filter_namespaces=("0",)):
            if text.lstrip()[:9].lower() == "#redirect" or any(
                title.startswith(ns + ":") for ns in IGNORED_NAMESPACES
            ):
                continue
            sentences = [tokenize(part) for part in _SENTENCE_END.split(filter_wiki(text))]
            sentences = [s for s in sentences if len(s) >= SENTENCE_MIN_TOKENS]
            if sum(map(len, sentences)) >= ARTICLE_MIN_TOKENS:
                articles.append(sentences)
    return articles


def wiki_sentences(limit_articles: int | None = None) -> list[list[list[str]]]:
    """Return the Wikipedia sample as articles → sentences → lowercase tokens.

    Shared data for §20.1–§20.5 and the efficiency note (word2vec, pruning, BPE). Source: the
    shortened English Wikipedia dump shipped with gensim (106 articles, ~447K tokens). Markup
    is removed by gensim's ``filter_wiki`` and tokens come from gensim's wiki ``tokenize``
    (alphabetic, 2–15 characters, lowercase). Redirects and non-article namespaces are skipped;
    sentences (split at ``. ! ?`` + whitespace or at blank lines) with fewer than
    ``SENTENCE_MIN_TOKENS`` tokens are dropped, then articles with fewer than
    ``ARTICLE_MIN_TOKENS`` tokens. Deterministic, in dump order; cached (see :func:`cache_dir`).
    ``limit_articles`` (an int >= 1) keeps the first articles; asking for more than exist warns.
    """
    limit = _check_limit("limit_articles", limit_articles)
    articles = _cached(datapath(WIKI_FILE), "wiki_sentences", _parse_wiki)
    if limit is not None and limit > len(articles):
        warnings.warn(
            f"limit_articles={limit} but the Wikipedia sample has only {len(articles)} articles",
            stacklevel=2,
        )
    return articles[:limit]


def wiki_articles(limit: int | None = None) -> list[list[str]]:
    """Return the Wikipedia sample as one token list per article.

    Shared data for §20.1–§20.5 and the efficiency note. Each article is exactly the
    concatenation of its sentences from :func:`wiki_sentences` (same filters, same order).
    """
    _check_limit("limit", limit)
    return [[tok for sentence in article for tok in sentence] for article in wiki_sentences(limit)]


def wiki_tokens() -> list[str]:
    """Return every token of the Wikipedia sample in article order, as one flat list.

    Shared data for §20.1–§20.5 and the efficiency note (vocabulary counts, pruning, BPE).
    Equal to the concatenation of :func:`wiki_articles`.
    """
    return [tok for article in wiki_articles() for tok in article]


def _parse_lee() -> list[list[str]]:
    from gensim.utils import simple_preprocess

    lines = Path(datapath(LEE_FILE)).read_text(encoding="utf-8").splitlines()
    return [simple_preprocess(line) for line in lines]


def lee_background() -> list[list[str]]:
    """Return the Lee background corpus: one token list per document (300 news documents).

    Shared data for §20.1–§20.5 and the efficiency note: a small corpus for quick word2vec
    runs. One document per line of gensim's ``lee_background.cor``, tokenised with gensim's
    ``simple_preprocess`` (lowercase, 2–15 characters, no accent stripping). Cached.
    """
    return _cached(datapath(LEE_FILE), "lee_background", _parse_lee)


def lee_documents() -> list[str]:
    """Return the 50 news documents of the Lee similarity set (§20.7 evaluation), raw text.

    One document per line of gensim's ``lee.cor`` (Lee, Pincombe & Welsh 2005), untokenised:
    an encoder under test tokenises them itself. None of them is in :func:`lee_background`
    (the tests check it), so a model trained on the background corpus is judged on unseen text.
    """
    # The file is Latin-1 (a pound sign is byte 0xa3), as gensim's own Lee tutorials read it.
    lines = Path(datapath(LEE_TEST_FILE)).read_text(encoding="latin-1").splitlines()
    documents = [line.strip() for line in lines if line.strip()]
    if len(documents) != LEE_DOCUMENTS:
        raise ValueError(
            f"{LEE_TEST_FILE} has {len(documents)} documents, {LEE_DOCUMENTS} expected"
        )
    return documents


def lee_human_similarity() -> np.ndarray:
    """Return the averaged human similarity judgments of the Lee set: ``[50, 50]`` float64.

    Gensim's ``similarities0-1.txt`` stores the upper triangle (diagonal 1, zeros below); the
    matrix returned is made symmetric. Scores are in [0, 1] (each the mean of about ten raters'
    1–5 ratings, rescaled). Pair ``(i, j)`` of documents ``lee_documents()[i]`` and ``[j]``.
    """
    rows = Path(datapath(LEE_SIMILARITY_FILE)).read_text(encoding="utf-8").split("\n")
    matrix = np.array([[float(x) for x in row.split()] for row in rows if row.strip()])
    if matrix.shape != (LEE_DOCUMENTS, LEE_DOCUMENTS):
        raise ValueError(f"{LEE_SIMILARITY_FILE} holds a {matrix.shape} matrix, 50 x 50 expected")
    upper = np.triu(matrix)
    return upper + np.triu(upper, 1).T


# --- word similarity ------------------------------------------------------------------------


def word_similarity_path(name: str) -> str:
    """Return the path of a word-similarity set, for gensim's ``evaluate_word_pairs``.

    Shared data for the efficiency note (embedding quality after pruning, fp16, PCA).
    ``name`` is ``"wordsim353"`` or ``"simlex999"``; anything else raises ``ValueError``.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, one of {sorted(_SIMILARITY_SETS)}")
    if name not in _SIMILARITY_SETS:
        raise ValueError(f"name must be one of {sorted(_SIMILARITY_SETS)}, got {name!r}")
    return datapath(_SIMILARITY_SETS[name][0])


def word_similarity(name: str) -> pd.DataFrame:
    """Return a word-similarity set as a DataFrame with columns ``word1, word2, score``.

    Shared data for the efficiency note (embedding quality after pruning, fp16, PCA). Lines
    are read exactly as gensim's ``KeyedVectors.evaluate_word_pairs`` reads them (``#``
    comments skipped, tab-separated, lines without three fields or a numeric score skipped),
    so the rows are the pairs gensim scores. Words are lowercased; scores are floats in
    0–10 for both sets. WordSim-353 gives 353 rows (``money``–``cash`` appears twice, as in
    the original set); SimLex-999 gives 999.
    """
    path = word_similarity_path(name)
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line or line.startswith("#"):
                continue
            try:
                word1, word2, score = line.split("\t")
                rows.append((word1.lower(), word2.lower(), float(score)))
            except (ValueError, TypeError):
                continue
    import pandas as pd

    return pd.DataFrame(rows, columns=["word1", "word2", "score"])


# --- text pairs for contrastive training ----------------------------------------------------

PAD_ID, UNKNOWN_ID = 0, 1


def next_sentence_pairs(articles: Sequence[Sequence[Sequence[str]]]) -> list[tuple[list, list]]:
    """(sentence, next sentence) pairs of each article, in order: sentences 0-1, 2-3, 4-5, ...
    (§20.1, §20.2.1).

    The positive pairs of the contrastive experiments: a sentence and its successor share topic
    words more than two random sentences do. Pairs do not overlap, so no sentence is both one
    pair's query and another pair's key (it would be its own best match, a false negative).
    ``articles`` as from :func:`wiki_sentences`.
    """
    return [
        (article[i], article[i + 1]) for article in articles for i in range(0, len(article) - 1, 2)
    ]


def word_vocabulary(texts: Sequence[Sequence[str]], max_size: int) -> dict[str, int]:
    """Word → id for the ``max_size - 2`` most frequent words of ``texts`` (ties broken by first
    appearance); id ``PAD_ID`` (0) is padding and ``UNKNOWN_ID`` (1) every other word."""
    max_size = check_int("max_size", max_size, 3)
    counts: dict[str, int] = {}
    for text in texts:
        for word in text:
            counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts, key=lambda w: -counts[w])[: max_size - 2]
    return {word: i + 2 for i, word in enumerate(ranked)}


def encode_texts(
    texts: Sequence[Sequence[str]], vocabulary: dict[str, int], max_len: int
) -> torch.Tensor:
    """``[len(texts), max_len]`` int64 ids: each text's first ``max_len`` words, unknown words as
    ``UNKNOWN_ID``, padded with ``PAD_ID``. An empty text raises ValueError (it would encode to
    padding only)."""
    max_len = check_int("max_len", max_len, 1)
    ids = torch.full((len(texts), max_len), PAD_ID, dtype=torch.int64)
    for row, text in enumerate(texts):
        if not text:
            raise ValueError(f"texts[{row}] is empty; every text needs at least one word")
        words = [vocabulary.get(word, UNKNOWN_ID) for word in text[:max_len]]
        ids[row, : len(words)] = torch.tensor(words)
    return ids


def shuffled_batches(size: int, batch: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Index batches of ``batch`` rows out of ``size``, epoch after epoch without end, each epoch
    a fresh permutation from ``generator`` (§20.2). The last incomplete batch of an epoch is
    dropped: a short batch has fewer in-batch negatives and spikes a contrastive loss. The
    arguments are checked when it is called, not at the first batch."""
    size, batch = check_int("size", size, 1), check_int("batch", batch, 1)
    if batch > size:
        raise ValueError(f"batch must be <= size ({size}), got {batch}")

    def batches() -> Iterator[torch.Tensor]:
        while True:
            order = torch.randperm(size, generator=generator)
            yield from order[: size - size % batch].split(batch)

    return batches()


# --- splits ---------------------------------------------------------------------------------


def train_test_split_articles(
    articles: Sequence[T], test_fraction: float = 0.1, *, seed: int = 0
) -> tuple[list[T], list[T]]:
    """Split articles (whole articles, never tokens) into ``(train, test)`` lists.

    Shared data for §20.1–§20.5 and the efficiency note (held-out evaluation). The test side
    holds ``round(test_fraction * len(articles))`` articles chosen by a seeded permutation;
    both sides keep the original order. Deterministic for ``seed``. Requires
    ``0 < test_fraction < 1`` and at least one article on each side, else ``ValueError``.
    """
    if isinstance(articles, str) or not isinstance(articles, Sequence):
        raise TypeError(f"articles must be a sequence of articles, got {type(articles).__name__}")
    fraction = check_real("test_fraction", test_fraction)
    if not 0 < fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    rng = np.random.default_rng(check_int("seed", seed, 0))
    n_test = round(fraction * len(articles))
    if not 1 <= n_test <= len(articles) - 1:
        raise ValueError(
            f"test_fraction={test_fraction} of {len(articles)} articles gives {n_test} test "
            "articles; need at least one article on each side"
        )
    test_idx = set(rng.permutation(len(articles))[:n_test].tolist())
    train = [a for i, a in enumerate(articles) if i not in test_idx]
    test = [a for i, a in enumerate(articles) if i in test_idx]
    return train, test


# --- the shared next-sentence pairs ---------------------------------------------------------


@dataclass(frozen=True)
class PairData:
    """Encoded (sentence, next sentence) pairs: train from 90% of the articles, test from the
    held-out 10% (whole articles, so no test sentence was seen in training)."""

    train_anchors: torch.Tensor
    train_positives: torch.Tensor
    test_anchors: torch.Tensor
    test_positives: torch.Tensor
    vocab_size: int

    def truncated(self, seq_len: int) -> PairData:
        """These pairs with every sentence cut to its first ``seq_len`` tokens (§20.2.2 quality
        runs: 16 tokens keep a CPU's fp16 runs short; most sentences of the sample are about
        that long)."""
        seq_len = check_int("seq_len", seq_len, 1)
        return PairData(
            *(getattr(self, side)[:, :seq_len] for side in
              ("train_anchors", "train_positives", "test_anchors", "test_positives")),
            vocab_size=self.vocab_size,
        )  # fmt: skip


def pair_data(
    vocab_size: int = 10_000, max_len: int = 32, test_pairs: int = 2_000, seed: int = 0
) -> PairData:
    """Next-sentence pairs of the Wikipedia sample (§20.1, §20.2), ids from a vocabulary of the
    training side: the data of every contrastive experiment, the demos and the tests."""
    vocab_size = check_int("vocab_size", vocab_size, 3)
    max_len = check_int("max_len", max_len, 1)
    test_pairs = check_int("test_pairs", test_pairs, 1)
    seed = check_int("seed", seed, 0)
    kept = _pair_data_built(vocab_size, max_len, test_pairs, seed)
    return PairData(
        kept.train_anchors.clone(),
        kept.train_positives.clone(),
        kept.test_anchors.clone(),
        kept.test_positives.clone(),
        kept.vocab_size,
    )


@functools.lru_cache(maxsize=4)
def _pair_data_built(vocab_size: int, max_len: int, test_pairs: int, seed: int) -> PairData:
    """:func:`pair_data`'s tensors, built once per process for each argument tuple and kept in
    the cache folder (every torchrun worker and rank asks for the same pairs: reading them back
    takes milliseconds, building them seconds); callers get clones, so an in-place change never
    reaches the next caller."""

    def build() -> dict[str, torch.Tensor]:
        train_articles, test_articles = train_test_split_articles(wiki_sentences(), 0.1, seed=seed)
        train, test = next_sentence_pairs(train_articles), next_sentence_pairs(test_articles)
        test = test[:test_pairs]
        vocabulary = word_vocabulary([s for pair in train for s in pair], vocab_size)

        def encode(pairs: list, side: int) -> torch.Tensor:
            return encode_texts([pair[side] for pair in pairs], vocabulary, max_len)

        sides = ("train_anchors", "train_positives", "test_anchors", "test_positives")
        parts = (encode(train, 0), encode(train, 1), encode(test, 0), encode(test, 1))
        return dict(zip(sides, parts, strict=True))

    extra = f"|pairs {vocab_size} {max_len} {test_pairs} {seed}"
    tensors = _cached_tensors(datapath(WIKI_FILE), "pair_data", extra, build)
    return PairData(**tensors, vocab_size=vocab_size)
