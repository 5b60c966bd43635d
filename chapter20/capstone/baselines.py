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
- ``"bm25"``: BM25 as retrieval systems run it (Lucene's): an IDF that is never negative,
  ``ln(1 + (N - df + 0.5) / (df + 0.5))`` from the corpus's document frequencies, binary query
  terms, each candidate's term frequency saturated by ``k1`` and its length normalised by ``b``
  against the mean length of the searched candidates; ``k1`` and ``b`` chosen on the
  validation pairs (:func:`bm25_grid_study`). Proven equal to an independent implementation
  (``bm25s``, method "lucene") in ``tests/test_baselines.py``;
- ``"bm25_gensim"``: gensim's ``OkapiBM25Model`` at its defaults (k1 = 1.5, b = 0.75, its own
  IDF, which is negative for a word in more than half the documents), binary query terms: what
  a library default costs beside the tuned one.

The two BM25 rank, they do not measure similarity: they have no Lee score and no geometry.
TF-IDF's weighting is chosen on the validation pairs too, among gensim's SMART schemes
(:data:`TFIDF_SCHEMES`), as LSI's size is.

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
from chapter20.core.checks import check_int, check_real
from chapter20.core.corpora import lee_background

__all__ = [
    "BASELINES",
    "CORPORA",
    "DOC2VEC_EPOCHS",
    "LSI_SIZES",
    "BM25_B",
    "BM25_K1",
    "TFIDF_SCHEMES",
    "Baseline",
    "bm25_grid_study",
    "bm25_scores",
    "baseline_name",
    "baseline_table",
    "chosen_settings",
    "CHOICE_STUDIES",
    "corpus_documents",
    "fit_baseline",
    "lsi_size_study",
    "tfidf_scheme_study",
]

#: The classic baselines (:func:`fit_baseline`).
BASELINES = ("tfidf", "lsi", "doc2vec", "bm25", "bm25_gensim")
#: TF-IDF's weightings (gensim's SMART notation: term frequency, document frequency, norm):
#: raw counts (gensim's default), log counts and binary presence, each with IDF (log2 N/df) and
#: cosine normalisation.
TFIDF_SCHEMES = ("nfc", "lfc", "bfc")
#: The grid BM25's ``k1`` (term-frequency saturation) and ``b`` (length normalisation) are
#: chosen from on the validation pairs; Lucene's defaults (1.2, 0.75) are in it.
BM25_K1 = (0.3, 0.6, 0.9, 1.2, 1.5, 2.0)
BM25_B = (0.25, 0.5, 0.75, 1.0)
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
    scores are cosine similarities (``cosine``: Lee and the geometry are defined), its
    ``settings`` (the keyword arguments of :func:`fit_baseline` that fit it again) and the
    seconds its fit took."""

    method: str
    corpus: str
    score: Scorer
    cosine: bool
    settings: dict = field(default_factory=dict)
    seconds: float = 0.0


def baseline_name(method: str, settings: Mapping | None = None) -> str:
    """A baseline's name for tables, with the settings that distinguish it (§20.7)."""
    settings = settings or {}
    if method == "lsi" and "lsi_topics" in settings:
        return f"LSI-{settings['lsi_topics']}"
    if method == "tfidf" and "tfidf_scheme" in settings:
        return f"TF-IDF ({settings['tfidf_scheme']})"
    if method == "bm25" and "bm25_k1" in settings:
        return f"BM25 (k1 {settings['bm25_k1']:g}, b {settings['bm25_b']:g})"
    names = {"lsi": "LSI", "tfidf": "TF-IDF", "bm25": "BM25", "doc2vec": "Doc2Vec",
             "bm25_gensim": "BM25 (gensim default)"}  # fmt: skip
    return names.get(method, method)


def corpus_documents(corpus: str, fraction: float = 1.0) -> list[list[str]]:
    """The token lists of a corpus of :data:`CORPORA`: ``lee_background``'s 300 documents, or
    the capstone encoder's training documents (the default recipe's; ``fraction`` of them, as
    ``chapter20.capstone.views.training_documents`` takes it)."""
    if corpus not in CORPORA:
        raise ValueError(f"corpus must be one of {CORPORA}, got {corpus!r}")
    if not 0 < check_real("fraction", fraction, finite=True) <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if corpus == "lee_background":
        return [doc for doc in lee_background() if doc]
    return training_documents(fraction=fraction)


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
    """A corpus's gensim ``Dictionary`` and ``TfidfModel`` (SMART ``scheme``), and texts as
    sparse rows."""

    def __init__(self, documents: list[list[str]], scheme: str = "nfc"):
        from gensim.corpora import Dictionary
        from gensim.models import TfidfModel

        self.dictionary = Dictionary(documents)
        self.tfidf = TfidfModel(dictionary=self.dictionary, smartirs=scheme)

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


def _bm25_gensim(bags: _Bags) -> Scorer:
    from gensim.models import OkapiBM25Model

    model = OkapiBM25Model(dictionary=bags.dictionary)

    def score(queries: list[str], candidates: list[str]) -> np.ndarray:
        index = bags.similarity_index(
            [model[b] for b in bags.bows(_tokens(candidates))], normalize=False
        )
        binary = [[(term, 1.0) for term, _ in b] for b in bags.bows(_tokens(queries))]
        return np.asarray(index[binary], np.float64)

    return score


def _term_matrix(bags: _Bags, tokens: list[list[str]]):
    """Term counts ``[n, vocabulary]`` (SciPy CSR) of texts, the corpus's words only."""
    from scipy.sparse import csr_matrix

    rows, cols, counts = [], [], []
    for i, bow in enumerate(bags.bows(tokens)):
        for j, count in bow:
            rows.append(i), cols.append(j), counts.append(count)
    return csr_matrix((counts, (rows, cols)), shape=(len(tokens), len(bags.dictionary)))


def bm25_scores(
    query_terms, candidate_counts, lengths: np.ndarray, idf: np.ndarray, k1: float, b: float
) -> np.ndarray:
    """Lucene's BM25 of every query against every candidate (§20.7), ``[n, m]`` float64:
    ``sum over the query's terms t of idf[t] * tf / (tf + k1 * (1 - b + b * length / mean
    length))``. ``query_terms`` ``[n, V]`` (1 where the query holds the term: binary query
    terms), ``candidate_counts`` ``[m, V]`` term counts (SciPy sparse), ``lengths`` the
    candidates' lengths in tokens, ``idf`` ``[V]``. The mean length is the candidates'."""
    check_real("k1", k1, minimum=0.0, maximum=100.0)
    check_real("b", b, minimum=0.0, maximum=1.0)
    counts = candidate_counts.tocoo()
    norm = k1 * (1.0 - b + b * lengths / lengths.mean())
    saturated = counts.data / (counts.data + norm[counts.row])
    from scipy.sparse import csr_matrix

    weights = csr_matrix((saturated * idf[counts.col], (counts.row, counts.col)), counts.shape)
    return np.asarray((query_terms @ weights.T).todense(), dtype=np.float64)


def _bm25(bags: _Bags, k1: float, b: float) -> Scorer:
    """Lucene's BM25 with the corpus's document frequencies (:func:`bm25_scores`)."""
    n = bags.dictionary.num_docs
    df = np.array([bags.dictionary.dfs.get(j, 0) for j in range(len(bags.dictionary))], float)
    idf = np.log1p((n - df + 0.5) / (df + 0.5))

    def score(queries: list[str], candidates: list[str]) -> np.ndarray:
        tokens = _tokens(candidates)
        lengths = np.array([max(len(t), 1) for t in tokens], dtype=np.float64)
        query_terms = _term_matrix(bags, _tokens(queries)).sign()
        return bm25_scores(query_terms, _term_matrix(bags, tokens), lengths, idf, k1, b)

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
    tfidf_scheme: str = "nfc",
    bm25_k1: float = 1.2,
    bm25_b: float = 0.75,
) -> Baseline:
    """``method`` (of :data:`BASELINES`) fitted on ``documents`` (token lists; ``corpus`` names
    them), seeded by ``seed`` where it draws (Doc2Vec), as a :class:`Baseline` (§20.7).
    ``lsi_topics``: LSI's size; ``doc2vec_epochs``: Doc2Vec's passes; ``tfidf_scheme``: TF-IDF's
    weighting (of :data:`TFIDF_SCHEMES`; LSI decomposes gensim's default); ``bm25_k1``,
    ``bm25_b``: BM25's saturation and length normalisation."""
    if method not in BASELINES:
        raise ValueError(f"method must be one of {BASELINES}, got {method!r}")
    if isinstance(documents, (str, bytes)) or not documents:
        raise ValueError("documents must be a non-empty list of token lists")
    if tfidf_scheme not in TFIDF_SCHEMES:
        raise ValueError(f"tfidf_scheme must be one of {TFIDF_SCHEMES}, got {tfidf_scheme!r}")
    seed = check_int("seed", seed, 0, 2**32 - 1)
    lsi_topics = check_int("lsi_topics", lsi_topics, 1, 100_000)
    doc2vec_epochs = check_int("doc2vec_epochs", doc2vec_epochs, 1, 10_000)
    check_real("bm25_k1", bm25_k1, minimum=0.0, maximum=100.0)
    check_real("bm25_b", bm25_b, minimum=0.0, maximum=1.0)
    start = time.perf_counter()
    settings: dict = {}
    if method == "doc2vec":
        score, settings = (
            _doc2vec(documents, seed, doc2vec_epochs),
            {"doc2vec_epochs": doc2vec_epochs},
        )
    elif method == "tfidf":
        score, settings = _tfidf(_Bags(documents, tfidf_scheme)), {"tfidf_scheme": tfidf_scheme}
    elif method == "bm25":
        score = _bm25(_Bags(documents), bm25_k1, bm25_b)
        settings = {"bm25_k1": bm25_k1, "bm25_b": bm25_b}
    elif method == "bm25_gensim":
        score = _bm25_gensim(_Bags(documents))
    else:
        bags = _Bags(documents)
        score = _lsi(bags, _lsi_loadings(bags, documents, lsi_topics))
        settings = {"lsi_topics": lsi_topics}
    cosine = not method.startswith("bm25")
    return Baseline(method, corpus, score, cosine, settings, time.perf_counter() - start)


def _validation_choice(rows: list[dict]) -> pd.DataFrame:
    """A setting study's rows (settings, recall@1, recall@10 and MRR on the validation pairs),
    with ``chosen`` True on the first row of the highest MRR (the grids list the simpler setting
    first)."""
    frame = pd.DataFrame(rows)
    frame["chosen"] = False
    frame.loc[frame["mrr"].idxmax(), "chosen"] = True
    return frame


def _validation_figures(score: Scorer, pairs) -> dict:
    metrics = retrieval_metrics(score(*pairs))
    return {m: metrics[m] for m in ("recall@1", "recall@10", "mrr")}


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
    pairs = heldout_sentence_pairs(None, split="validation")
    return _validation_choice(
        [{"topics": k, **_validation_figures(_lsi(bags, loadings[:, :k]), pairs)} for k in sizes]
    )


def tfidf_scheme_study(
    documents: list[list[str]], schemes: Sequence[str] = TFIDF_SCHEMES
) -> pd.DataFrame:
    """TF-IDF of ``documents`` under each SMART scheme of ``schemes``, scored on the validation
    pairs: one row per scheme, ``chosen`` on the highest MRR (§20.7)."""
    pairs = heldout_sentence_pairs(None, split="validation")
    return _validation_choice(
        [{"scheme": s, **_validation_figures(_tfidf(_Bags(documents, s)), pairs)} for s in schemes]
    )


def bm25_grid_study(
    documents: list[list[str]], k1s: Sequence[float] = BM25_K1, bs: Sequence[float] = BM25_B
) -> pd.DataFrame:
    """Lucene's BM25 with the document frequencies of ``documents`` at every ``k1`` × ``b`` of
    the grid, scored on the validation pairs: one row per setting, ``chosen`` on the highest
    MRR (§20.7). The texts are tokenised once; only the weighting changes."""
    for name, values, top in (("k1s", k1s, 100.0), ("bs", bs, 1.0)):
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise TypeError(f"{name} must be a non-empty sequence of numbers, got {values!r}")
        for value in values:
            check_real(name, value, minimum=0.0, maximum=top)
    bags = _Bags(documents)
    anchors, positives = heldout_sentence_pairs(None, split="validation")
    rows = []
    for k1 in k1s:
        for b in bs:
            figures = _validation_figures(_bm25(bags, k1, b), (anchors, positives))
            rows.append({"k1": k1, "b": b, **figures})
    return _validation_choice(rows)


#: Each tuned method's study on the validation pairs, and the keyword arguments of
#: :func:`fit_baseline` its chosen row gives.
CHOICE_STUDIES = {
    "lsi": (lsi_size_study, lambda row: {"lsi_topics": int(row["topics"])}),
    "tfidf": (tfidf_scheme_study, lambda row: {"tfidf_scheme": str(row["scheme"])}),
    "bm25": (bm25_grid_study, lambda row: {"bm25_k1": float(row["k1"]), "bm25_b": float(row["b"])}),
}


def chosen_settings(method: str, documents: list[list[str]], study: pd.DataFrame | None = None):
    """``fit_baseline``'s keyword arguments for ``method`` chosen on the validation pairs by its
    study of :data:`CHOICE_STUDIES` (``study``: one already run; LSI's size, TF-IDF's scheme,
    BM25's k1 and b); none for the methods that are not tuned."""
    if method not in CHOICE_STUDIES:
        return {}
    run, arguments = CHOICE_STUDIES[method]
    study = run(documents) if study is None else study
    return arguments(study.loc[study["chosen"].astype(bool)].iloc[0])


def baseline_table(
    corpora: Sequence[str] = CORPORA,
    methods: Sequence[str] = BASELINES,
    *,
    seeds: Sequence[int] = (0,),
    retrieval: tuple[list[str], list[str]] | None = None,
    settings: Mapping[tuple[str, str], dict] | None = None,
    doc2vec_epochs: int | None = None,
    fraction: float = 1.0,
) -> pd.DataFrame:
    """Every baseline of ``methods`` fitted on every corpus of ``corpora`` (the training text at
    ``fraction`` of its documents), for each seed, measured now (§20.7): one row per (method,
    corpus, seed) with every figure of ``chapter20.capstone.evaluation.evaluate_scores`` on Lee
    and on ``retrieval`` (default: the test pairs), the settings and the fit's seconds. Each
    method's settings per (method, corpus) come from ``settings``, else are chosen on the
    validation pairs (:func:`chosen_settings`: LSI's size, TF-IDF's scheme, BM25's k1 and b);
    Doc2Vec passes ``doc2vec_epochs`` times over its corpus, else :data:`DOC2VEC_EPOCHS`'.
    Only Doc2Vec draws: the others are measured once per corpus and their row repeated for each
    seed."""
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise TypeError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
    seeds = [check_int("seeds", s, 0, 2**32 - 1) for s in seeds]
    if doc2vec_epochs is not None:
        doc2vec_epochs = check_int("doc2vec_epochs", doc2vec_epochs, 1, 10_000)
    given = dict(settings or {})
    if not 0 < check_real("fraction", fraction, finite=True) <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    retrieval = retrieval or heldout_sentence_pairs(None)
    rows = []
    for corpus in corpora:
        documents = corpus_documents(corpus, fraction)
        for method in methods:
            chosen = given.get((method, corpus))
            if chosen is None:
                chosen = chosen_settings(method, documents)
            for i, seed in enumerate(seeds):
                if method != "doc2vec" and i:
                    rows.append({**rows[-1], "seed": seed})
                    continue
                epochs = {"doc2vec_epochs": doc2vec_epochs or DOC2VEC_EPOCHS[corpus]}
                model = fit_baseline(method, documents, corpus=corpus, seed=seed,
                                     **{**epochs, **chosen})  # fmt: skip
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
