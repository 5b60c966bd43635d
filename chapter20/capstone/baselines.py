"""§20.7 Classic baselines, fitted on a stated corpus: TF-IDF, LSI, Doc2Vec and BM25.

An encoder's score means little alone: it is read against what classic methods reach **on the
same text**. Each baseline here is fitted on a list of token lists and becomes a scorer
``score(queries, candidates) -> [n, m]`` (``chapter20.capstone.evaluation.evaluate_scores``
measures it like the encoder):

- ``"tfidf"``: gensim's ``TfidfModel`` (log2 IDF, L2-normalised rows) over the corpus's
  ``Dictionary``; cosine of the sparse vectors (``SparseMatrixSimilarity``);
- ``"lsi"``: latent semantic indexing, the top ``lsi_topics`` singular vectors of the corpus's
  TF-IDF matrix; a text's vector is its TF-IDF row projected on them, the projection gensim's
  ``LsiModel`` computes (``tests/test_baselines.py`` checks the two agree). Here the SVD is
  exact, through the documents' Gram matrix: seconds, where gensim's stochastic SVD takes
  half a minute on the training text, and one decomposition serves every size. The size is
  chosen on the validation pairs (:func:`lsi_size_study`), never on Lee;
- ``"doc2vec"``: gensim's ``Doc2Vec`` (PV-DBOW, 100 dimensions, ``min_count=2``, one worker so
  that the seed fixes it), texts' vectors from ``infer_vector``;
- ``"bm25"``: gensim's ``OkapiBM25Model`` (k1 = 1.5, b = 0.75) for the candidates, binary
  query terms, as gensim's documentation scores a query. A ranking function, not a
  similarity: it has no Lee score and no geometry.

Corpora (:data:`CORPORA`): ``"lee_background"`` (300 news documents, the classic setting of the
Lee benchmark) and ``"training text"``, exactly the documents the capstone encoder trains on
(``chapter20.capstone.views.training_documents``). Queries and candidates are tokenised as the
encoder's word tokeniser does (gensim's ``simple_preprocess``).
"""

from __future__ import annotations

import contextlib
import functools
import time
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from chapter20.capstone.evaluation import evaluate_scores, heldout_sentence_pairs
from chapter20.capstone.metrics import retrieval_metrics
from chapter20.capstone.views import training_documents
from chapter20.core.checks import check_int
from chapter20.core.corpora import lee_background

__all__ = [
    "BASELINES",
    "CORPORA",
    "DOC2VEC_EPOCHS",
    "LSI_SIZES",
    "Baseline",
    "baseline_table",
    "chosen_lsi_topics",
    "corpus_documents",
    "fit_baseline",
    "lsi_size_study",
]

#: The classic baselines (:func:`fit_baseline`).
BASELINES = ("tfidf", "lsi", "doc2vec", "bm25")
#: The corpora a baseline is fitted on (:func:`corpus_documents`).
CORPORA = ("lee_background", "training text")
#: Doc2Vec's passes over each corpus: 40 over the 300 short ``lee_background`` documents (as
#: gensim's Lee tutorial), 20 over the training text, six times larger, which needs fewer.
DOC2VEC_EPOCHS = {"lee_background": 40, "training text": 20}
#: The LSI sizes :func:`lsi_size_study` chooses from (capped at the corpus's rank).
LSI_SIZES = (50, 100, 200, 400, 800)

Scorer = Callable[[list[str], list[str]], np.ndarray]


@dataclass(frozen=True)
class Baseline:
    """A fitted baseline (§20.7): its ``score(queries, candidates) -> [n, m]``, whether the
    scores are cosine similarities (``cosine``: Lee and the geometry are defined), its settings
    and the seconds its fit took."""

    method: str
    corpus: str
    score: Scorer
    cosine: bool
    settings: dict = field(default_factory=dict)
    seconds: float = 0.0


def corpus_documents(corpus: str) -> list[list[str]]:
    """The token lists of a corpus of :data:`CORPORA`: ``lee_background``'s 300 documents, or
    the capstone encoder's training documents (the default recipe's)."""
    if corpus not in CORPORA:
        raise ValueError(f"corpus must be one of {CORPORA}, got {corpus!r}")
    if corpus == "lee_background":
        return [doc for doc in lee_background() if doc]
    return training_documents()


def _tokens(texts: Sequence[str]) -> list[list[str]]:
    from gensim.utils import simple_preprocess

    return [simple_preprocess(text) for text in texts]


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1; a zero row (a text with no known word) stays 0, so it ties with
    every candidate and is never credited."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def _dense_scorer(vectors: Callable[[list[str]], np.ndarray]) -> Scorer:
    def score(queries: list[str], candidates: list[str]) -> np.ndarray:
        return _unit(vectors(queries)) @ _unit(vectors(candidates)).T

    return score


class _Bags:
    """A corpus's gensim ``Dictionary`` and ``TfidfModel``, and texts as sparse rows."""

    def __init__(self, documents: list[list[str]]):
        from gensim.corpora import Dictionary
        from gensim.models import TfidfModel

        self.dictionary = Dictionary(documents)
        self.tfidf = TfidfModel(dictionary=self.dictionary)

    def bows(self, tokens: list[list[str]]) -> list:
        return [self.dictionary.doc2bow(t) for t in tokens]

    def tfidf_rows(self, tokens: list[list[str]]) -> torch.Tensor:
        """TF-IDF rows ``[n, vocabulary]`` as a sparse COO tensor (float64)."""
        rows, cols, values = [], [], []
        for i, bow in enumerate(self.bows(tokens)):
            for j, value in self.tfidf[bow]:
                rows.append(i), cols.append(j), values.append(value)
        return torch.sparse_coo_tensor(
            torch.tensor([rows, cols], dtype=torch.int64).reshape(2, -1),
            torch.tensor(values, dtype=torch.float64),
            (len(tokens), len(self.dictionary)),
            check_invariants=True,
        ).coalesce()

    def similarity_index(self, vectors: list, *, normalize: bool = True):
        from gensim.similarities import SparseMatrixSimilarity

        return SparseMatrixSimilarity(
            vectors,
            num_features=len(self.dictionary),
            normalize_queries=normalize,
            normalize_documents=normalize,
        )


def _tfidf(bags: _Bags) -> Scorer:
    def score(queries: list[str], candidates: list[str]) -> np.ndarray:
        index = bags.similarity_index([bags.tfidf[b] for b in bags.bows(_tokens(candidates))])
        return np.asarray(index[[bags.tfidf[b] for b in bags.bows(_tokens(queries))]], np.float64)

    return score


def _bm25(bags: _Bags) -> Scorer:
    from gensim.models import OkapiBM25Model

    model = OkapiBM25Model(dictionary=bags.dictionary)

    def score(queries: list[str], candidates: list[str]) -> np.ndarray:
        index = bags.similarity_index(
            [model[b] for b in bags.bows(_tokens(candidates))], normalize=False
        )
        binary = [[(term, 1.0) for term, _ in b] for b in bags.bows(_tokens(queries))]
        return np.asarray(index[binary], np.float64)

    return score


def _lsi_loadings(bags: _Bags, documents: list[list[str]], topics: int) -> torch.Tensor:
    """The corpus's top ``topics`` term loadings ``[vocabulary, topics]``: the right singular
    vectors of its TF-IDF matrix ``M`` (documents × terms), exactly, from the eigenvectors of
    the small Gram matrix ``M Mᵀ`` (documents × documents): ``V = Mᵀ U / σ``. Deterministic;
    one decomposition gives every size."""
    matrix = bags.tfidf_rows(documents)
    rank = min(matrix.shape)
    if topics > rank:
        raise ValueError(f"lsi_topics must be <= {rank} (the corpus's rank), got {topics}")
    with warnings.catch_warnings():  # the sparse product runs through CSR kernels, which
        # announce their "beta" status on every call; the product itself is exact
        warnings.filterwarnings("ignore", "Sparse CSR tensor support", UserWarning)
        gram = torch.sparse.mm(matrix, matrix.t().coalesce()).to_dense()
    eigenvalues, eigenvectors = torch.linalg.eigh(gram)  # ascending
    order = torch.argsort(eigenvalues, descending=True)[:topics]
    sigma = eigenvalues[order].clamp_min(0).sqrt()
    if not bool((sigma > 1e-9 * sigma[0]).all()):
        raise ValueError(f"lsi_topics={topics} exceeds the corpus's numerical rank")
    return torch.sparse.mm(matrix.t().coalesce(), eigenvectors[:, order]) / sigma


def _lsi(bags: _Bags, loadings: torch.Tensor) -> Scorer:
    def vectors(texts: list[str]) -> np.ndarray:
        return torch.sparse.mm(bags.tfidf_rows(_tokens(texts)), loadings).numpy()

    return _dense_scorer(vectors)


def _stable_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


@contextlib.contextmanager
def _reproducible_inference():
    """gensim starts each inferred vector from a hash of the text with Python's ``hash``, which
    is salted per process (``PYTHONHASHSEED``): the same text and seed give another vector in
    every process. Inside this block the start comes from a stable hash (CRC-32) instead."""
    from gensim.models import doc2vec
    from gensim.models.keyedvectors import pseudorandom_weak_vector

    original = doc2vec.pseudorandom_weak_vector
    doc2vec.pseudorandom_weak_vector = functools.partial(
        pseudorandom_weak_vector, hashfxn=_stable_hash
    )
    try:
        yield
    finally:
        doc2vec.pseudorandom_weak_vector = original


def _doc2vec(documents: list[list[str]], seed: int, epochs: int) -> Scorer:
    from gensim.models.doc2vec import Doc2Vec, TaggedDocument

    tagged = [TaggedDocument(doc, [i]) for i, doc in enumerate(documents)]
    model = Doc2Vec(tagged, dm=0, vector_size=100, min_count=2, epochs=epochs, workers=1, seed=seed,
                    hashfxn=_stable_hash)  # fmt: skip

    def vectors(texts: list[str]) -> np.ndarray:
        model.random.seed(seed)  # infer_vector draws from the model's RNG: same text, same vector
        with _reproducible_inference():
            inferred = [model.infer_vector(t) for t in _tokens(texts)]
        return np.stack(inferred).astype(np.float64)

    return _dense_scorer(vectors)


def fit_baseline(
    method: str,
    documents: list[list[str]],
    *,
    corpus: str = "",
    seed: int = 0,
    lsi_topics: int = 200,
    doc2vec_epochs: int = 40,
) -> Baseline:
    """``method`` (of :data:`BASELINES`) fitted on ``documents`` (token lists; ``corpus`` names
    them), seeded by ``seed`` where it draws (Doc2Vec), as a
    :class:`Baseline` (§20.7). ``lsi_topics``: LSI's size; ``doc2vec_epochs``: Doc2Vec's passes."""
    if method not in BASELINES:
        raise ValueError(f"method must be one of {BASELINES}, got {method!r}")
    if isinstance(documents, (str, bytes)) or not documents:
        raise ValueError("documents must be a non-empty list of token lists")
    seed = check_int("seed", seed, 0, 2**32 - 1)
    lsi_topics = check_int("lsi_topics", lsi_topics, 1, 100_000)
    doc2vec_epochs = check_int("doc2vec_epochs", doc2vec_epochs, 1, 10_000)
    start = time.perf_counter()
    settings: dict = {}
    if method == "doc2vec":
        score = _doc2vec(documents, seed, doc2vec_epochs)
        settings = {"epochs": doc2vec_epochs}
    else:
        bags = _Bags(documents)
        if method == "tfidf":
            score = _tfidf(bags)
        elif method == "bm25":
            score = _bm25(bags)
        else:
            score = _lsi(bags, _lsi_loadings(bags, documents, lsi_topics))
            settings = {"topics": lsi_topics}
    return Baseline(method, corpus, score, method != "bm25", settings, time.perf_counter() - start)


def lsi_size_study(documents: list[list[str]], sizes: Sequence[int] = LSI_SIZES) -> pd.DataFrame:
    """LSI of ``documents`` at each of ``sizes`` (those above the corpus's rank dropped), scored
    on the **validation** next-sentence pairs (``heldout_sentence_pairs(split="validation")``):
    one row per size with recall@1, recall@10 and MRR, and ``chosen`` True on the size of the
    highest MRR (§20.7: LSI's size is chosen there, not on Lee or on the test pairs). One
    decomposition; a smaller size is its leading columns."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or not sizes:
        raise TypeError(f"sizes must be a non-empty sequence of ints, got {sizes!r}")
    sizes = sorted({check_int("sizes", k, 1, 100_000) for k in sizes})
    bags = _Bags(documents)
    rank = min(len(documents), len(bags.dictionary))
    sizes = [k for k in sizes if k <= rank] or [rank]
    loadings = _lsi_loadings(bags, documents, sizes[-1])
    anchors, positives = heldout_sentence_pairs(None, split="validation")
    rows = []
    for k in sizes:
        metrics = retrieval_metrics(_lsi(bags, loadings[:, :k])(anchors, positives))
        rows.append({"topics": k, **{m: metrics[m] for m in ("recall@1", "recall@10", "mrr")}})
    frame = pd.DataFrame(rows)
    frame["chosen"] = frame["mrr"] == frame["mrr"].max()
    frame.loc[frame["chosen"].cumsum() > 1, "chosen"] = False  # a tie: the smaller size
    return frame


def chosen_lsi_topics(study: pd.DataFrame) -> int:
    """The size :func:`lsi_size_study` chose."""
    return int(study.loc[study["chosen"], "topics"].iloc[0])


def baseline_table(
    corpora: Sequence[str] = CORPORA,
    methods: Sequence[str] = BASELINES,
    *,
    seeds: Sequence[int] = (0,),
    retrieval: tuple[list[str], list[str]] | None = None,
    lsi_topics: Mapping[str, int] | None = None,
    doc2vec_epochs: int | None = None,
) -> pd.DataFrame:
    """Every baseline of ``methods`` fitted on every corpus of ``corpora``, for each seed,
    measured now (§20.7): one row per (method, corpus, seed) with every figure of
    ``chapter20.capstone.evaluation.evaluate_scores`` on Lee and on ``retrieval`` (default: the
    test pairs), the settings and the fit's seconds. LSI's size per corpus comes from
    ``lsi_topics``, else from :func:`lsi_size_study` on the validation pairs; Doc2Vec passes
    ``doc2vec_epochs`` times over its corpus, else :data:`DOC2VEC_EPOCHS`'. TF-IDF, LSI and
    BM25 draw nothing: they are measured once per corpus and their row repeated for each seed
    (Doc2Vec is fitted per seed)."""
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise TypeError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
    seeds = [check_int("seeds", s, 0, 2**32 - 1) for s in seeds]
    if doc2vec_epochs is not None:
        doc2vec_epochs = check_int("doc2vec_epochs", doc2vec_epochs, 1, 10_000)
    sizes = dict(lsi_topics or {})
    retrieval = retrieval or heldout_sentence_pairs(None)
    rows = []
    for corpus in corpora:
        documents = corpus_documents(corpus)
        for method in methods:
            if method == "lsi" and corpus not in sizes:
                sizes[corpus] = chosen_lsi_topics(lsi_size_study(documents))
            for i, seed in enumerate(seeds):
                if method != "doc2vec" and i:
                    rows.append({**rows[-1], "seed": seed})
                    continue
                model = fit_baseline(
                    method,
                    documents,
                    corpus=corpus,
                    seed=seed,
                    lsi_topics=sizes.get(corpus, 1),
                    doc2vec_epochs=doc2vec_epochs or DOC2VEC_EPOCHS[corpus],
                )
                rows.append(
                    {
                        "method": method,
                        "corpus": corpus,
                        "seed": seed,
                        "settings": model.settings,
                        "seconds": model.seconds,
                        **evaluate_scores(model.score, retrieval, cosine=model.cosine),
                    }
                )
    return pd.DataFrame(rows)
