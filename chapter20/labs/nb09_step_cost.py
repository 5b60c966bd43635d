"""The note on efficient embedding training, topic 1, timed: sections 2 and 3 of notebook 09.

The time of one SGD step of each objective as the vocabulary grows (O(n), O(log n), O(k)), the
hierarchical softmax's path per pair, and where the time of one negative-sampling step goes
(``torch.profiler``), next to the fused kernel's. The proofs these sections print first (the
Huffman tree's guarantees, the hand-written gradients against autograd, the hierarchical
softmax's probabilities summing to 1) are ``chapter20.word2vec.equivalence``.
"""

from __future__ import annotations

import contextlib
import math
import os
import time

import numpy as np
import pandas as pd
import torch

from chapter20.core.device import get_device
from chapter20.core.findings import compare
from chapter20.core.id_streams import zipf_counts, zipf_ids
from chapter20.core.measure import time_fn
from chapter20.core.seed_statistics import range_text
from chapter20.vocab.vocabulary import build_vocab
from chapter20.word2vec.corpus import corpus_sentences, encode_corpus
from chapter20.word2vec.huffman import build_huffman_tree
from chapter20.word2vec.objectives import (
    OBJECTIVES,
)
from chapter20.word2vec.sampling import keep_probabilities, skipgram_pairs
from chapter20.word2vec.skipgram import SkipGram
from chapter20.word2vec.skipgram_config import Word2VecConfig

__all__ = [
    "step_time_vs_vocab",
    "step_time_table",
    "path_length_vs_vocab",
    "growth_findings",
    "PROFILE_CATEGORIES",
    "profile_step",
    "profile_findings",
]


# --- cost per step vs vocabulary size ---------------------------------------------------------


def step_time_vs_vocab(
    sizes: tuple[int, ...] = (10**3, 10**4, 10**5, 10**6),
    objectives: tuple[str, ...] = OBJECTIVES,
    *,
    batch: int = 1024,
    softmax_cells: int = 2**22,
    dim: int = Word2VecConfig.dim,
    negative: int = Word2VecConfig.negative,
    s: float = 1.1,
    repeat: int = 9,
    device: torch.device | str | None = None,
    threads: int | None = 1,
    seed: int = 0,
) -> pd.DataFrame:
    """Median time of one SGD step per objective and vocabulary size (note, topic 1; C24, C25).

    A synthetic Zipf(``s``) vocabulary of each size; a batch of (input, output) pairs drawn
    from the same law, ``batch`` pairs for the sampled objectives and at most
    ``softmax_cells / n`` for the full softmax (whose ``[B, n]`` scores would not fit
    otherwise), so compare ``us_per_pair``. Negative sampling draws its noise words inside the
    step. ``us_per_pair`` is the median over the repeats, ``us_min`` and ``us_max`` their
    fastest and slowest (the project's one spread, ``chapter20.core.seed_statistics``);
    ``mean_code_bits``: the hierarchical softmax's average path length for these pairs.
    ``threads``: torch CPU threads while timing (1 by default: a second thread shared with
    other work blurs sub-millisecond steps more than it speeds them up).
    """
    device = torch.device("cpu") if device is None else get_device(str(device))
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _step_times(
            sizes, objectives, batch, softmax_cells, dim, negative, s, repeat, device, seed
        )
    finally:
        torch.set_num_threads(previous)


def _step_times(sizes, objectives, batch, softmax_cells, dim, negative, s, repeat, device, seed):
    records = []
    for n in sizes:
        counts = zipf_counts(n, s)
        for objective in objectives:
            b = batch if objective != "softmax" else max(8, min(batch, softmax_cells // n))
            model = SkipGram(
                objective, counts, dim=dim, negative=negative, device=device, seed=seed
            )
            gen = torch.Generator(device=device).manual_seed(seed)
            model.output_vectors.normal_(0, 0.1, generator=gen)
            inputs = zipf_ids(b, n, s=s, seed=seed).to(device)
            outputs = zipf_ids(b, n, s=s, seed=seed + 1).to(device)
            timing = time_fn(
                lambda m=model, i=inputs, o=outputs: m.step(i, o, 1e-4),
                warmup=2,
                repeat=repeat if objective != "softmax" else max(3, repeat // 3),
                device=device,
            )
            code_bits = (
                float(model.tree.lengths[outputs.cpu().numpy()].mean())
                if objective == "hierarchical"
                else float("nan")
            )
            records.append(
                {
                    "vocab": n,
                    "objective": objective,
                    "batch": b,
                    "seconds": timing.median,
                    "us_per_pair": timing.median / b * 1e6,
                    "us_min": timing.min / b * 1e6,
                    "us_max": timing.max / b * 1e6,
                    "mean_code_bits": code_bits,
                }
            )
            del model
    return pd.DataFrame(records)


def step_time_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`step_time_vs_vocab`'s times per pair as a table to read: one row per vocabulary
    size, one column per objective, ``"median (min–max)"`` in µs over the repeats."""
    spread = range_text(frame.us_min, frame.us_max, 2)
    text = frame.assign(shown=[f"{m:.2f} ({r})" for m, r in zip(frame.us_per_pair, spread)])
    return text.pivot(index="vocab", columns="objective", values="shown")


def path_length_vs_vocab(
    sizes: tuple[int, ...] = (10**3, 10**4, 10**5, 10**6),
    *,
    batch: int = 1024,
    s: float = 1.1,
    seed: int = 0,
) -> pd.DataFrame:
    """The work of one hierarchical-softmax pair as the vocabulary grows (note, topic 1; C25):
    for a Zipf(``s``) vocabulary of each size, the inner nodes the step evaluates for each pair
    of a batch — one dot product and one row update each, the path of the output word in
    :func:`build_huffman_tree`'s tree — counted on the output words of
    :func:`step_time_vs_vocab`'s batch (the same draws), next to ``log2_n``, the entropy of
    the words (the least any code can average), the longest path and ``per_log2_n``, the mean
    path over log₂ n (1: a balanced tree)."""
    records = []
    for n in sizes:
        counts = zipf_counts(n, s)
        tree = build_huffman_tree(counts)
        outputs = zipf_ids(batch, n, s=s, seed=seed + 1).numpy()
        p = counts / counts.sum()
        path = float(tree.lengths[outputs].mean())
        records.append({
            "vocab": n, "mean_path": path, "log2_n": math.log2(n),
            "entropy_bits": float(-(p * np.log2(p)).sum()), "longest_path": tree.max_depth,
            "per_log2_n": path / math.log2(n),
        })  # fmt: skip
    return pd.DataFrame(records)


def growth_findings(summary: pd.DataFrame, paths: pd.DataFrame, steps: pd.DataFrame) -> list[str]:
    """Notebook 09, section 3: the growth of the time per pair from the smallest to the largest
    vocabulary, hierarchical softmax's next to negative sampling's and the full softmax's next
    to the hierarchical softmax's (``summary``: ``nb09_word2vec.scaling_summary``), and the
    growth of the hierarchical softmax's nodes per pair next to log2 n's (``paths``:
    :func:`path_length_vs_vocab`): three lines printed by ``core.findings.compare``. Two time
    growths count as indistinguishable within the wider of their ranges, each from the
    repeats' min–max at both ends (``steps``: :func:`step_time_vs_vocab`)."""
    growth = summary.set_index("objective").growth
    ranges = _growth_ranges(steps)
    first, last = paths.iloc[0], paths.iloc[-1]
    return [
        compare("hierarchical softmax's time per pair, growth", growth["hierarchical"],
                "negative sampling's", growth["negative"], unit="×",
                spread=max(ranges["hierarchical"], ranges["negative"])),
        compare("full softmax's time per pair, growth", growth["softmax"],
                "the hierarchical softmax's", growth["hierarchical"], unit="×",
                spread=max(ranges["softmax"], ranges["hierarchical"])),
        compare("hierarchical softmax's nodes per pair, growth", last.mean_path / first.mean_path,
                "log₂ n's", last.log2_n / first.log2_n, unit="×"),
    ]  # fmt: skip


def _growth_ranges(steps: pd.DataFrame) -> dict[str, float]:
    """Per objective, the width of the growth's range: slowest at the largest vocabulary over
    fastest at the smallest, minus fastest at the largest over slowest at the smallest."""
    ranges = {}
    for objective, group in steps.groupby("objective", sort=False):
        group = group.sort_values("vocab")
        small, large = group.iloc[0], group.iloc[-1]
        ranges[objective] = large.us_max / small.us_min - large.us_min / small.us_max
    return ranges


# --- where the time of one training step goes ------------------------------------------------

#: The profile's categories, and the aten ops (self time) that make each one up: the plain
#: negative-sampling step (``SkipGram.step``) is gathers, row-wise products and sums, sigmoid
#: terms, the step cap's per-row sums, and the scatter into the tables.
PROFILE_CATEGORIES = {
    "gather rows": ("aten::index_select", "aten::index"),
    "dot products and row arithmetic": (
        "aten::mul", "aten::mul_", "aten::sum", "aten::bmm", "aten::linalg_vector_norm",
        "aten::pow_", "aten::square_",
    ),
    "sigmoid and loss": (
        "aten::sigmoid", "aten::log_sigmoid_forward", "aten::sub", "aten::rsub", "aten::neg",
        "aten::dot",
    ),
    "scatter rows": ("aten::scatter_add_",),
    "step cap (per-row sums)": (
        "aten::index_add_", "aten::index_fill_", "aten::clamp", "aten::div", "aten::ones_like",
    ),
}  # fmt: skip


@contextlib.contextmanager
def _native_stderr_silenced():
    """File descriptor 2 sent to the null device for the block: the profiler's C++ library
    writes a ``USDT ... profiler_start`` / ``profiler_stop`` line there on every run, which
    says nothing to a reader. Python's own ``sys.stderr`` (warnings, tracebacks) is untouched
    where it is not fd 2 (a notebook), and restored in any case."""
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def profile_step(
    corpus: str = "wiki+lee",
    steps: int = 200,
    *,
    batch: int = 1024,
    config: Word2VecConfig | None = None,
    fused: bool = True,
    encoded: tuple | None = None,
) -> pd.DataFrame:
    """Where one epoch's time goes, per pair, for negative sampling on one CPU thread
    (``config``'s settings): sampling the pairs (subsampling, windows), drawing the noise words,
    and the plain step's ops by category (``PROFILE_CATEGORIES``, from ``torch.profiler``'s self
    times over ``steps`` batches of real pairs); "Python and dispatch" is the steps' wall time
    minus their ops' time. With ``fused``, a last row times the compiled fused kernel
    (``chapter20.word2vec.fused``) on the same batches, when it can run. The profiler adds a
    little time per op, so the plain rows are slightly pessimistic. ``encoded``: the corpus
    already read, ``(vocab, encode_corpus(sentences, vocab))`` with ``config``'s ``min_count``,
    so that it is not read twice. ``config``: the settings and seed (None: ``Word2VecConfig()``,
    the comparisons' settings, gensim's defaults)."""
    from torch.profiler import ProfilerActivity, profile

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        settings = Word2VecConfig() if config is None else config
        seed = settings.seed
        if encoded is None:
            sentences = corpus_sentences(corpus)
            vocab = build_vocab(sentences, min_count=settings.min_count)
            encoded = (vocab, encode_corpus(sentences, vocab))
        vocab, encoded = encoded
        keep = torch.as_tensor(keep_probabilities(vocab.counts, settings.sample))
        gen = torch.Generator().manual_seed(seed)
        start = time.perf_counter()
        inputs, outputs, _ = skipgram_pairs(encoded, settings.window, keep, gen)
        pair_seconds = time.perf_counter() - start
        model = SkipGram(
            "negative", vocab.counts, dim=settings.dim, negative=settings.negative, seed=seed
        )
        steps = min(steps, len(inputs) // batch)
        batches = [(inputs[i * batch : (i + 1) * batch], outputs[i * batch : (i + 1) * batch])
                   for i in range(steps)]  # fmt: skip
        start = time.perf_counter()
        noise = [model.noise_targets(out, gen) for _, out in batches]
        noise_seconds = time.perf_counter() - start
        for (inp, out), targets in zip(batches[:5], noise[:5]):  # warm-up
            model.step(inp, out, 1e-3, targets)
        with _native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            for (inp, out), targets in zip(batches, noise):
                model.step(inp, out, 1e-3, targets)
            step_seconds = time.perf_counter() - start
        self_us = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
        kernel_seconds = _fused_seconds(model, batches, batch, seed) if fused else None
    finally:
        torch.set_num_threads(previous)
    pairs = steps * batch
    rows = {
        "sample pairs (subsampling, windows)": pair_seconds / len(inputs) * 1e6,
        "draw noise words": noise_seconds / pairs * 1e6,
    }
    for category, ops in PROFILE_CATEGORIES.items():
        rows[category] = sum(self_us.get(op, 0.0) for op in ops) / pairs
    counted = sum(self_us.values()) / pairs
    rows["other ops"] = counted - sum(list(rows.values())[2:])
    rows["Python and dispatch"] = max(0.0, step_seconds / pairs * 1e6 - counted)
    frame = pd.DataFrame({"part": list(rows), "us_per_pair": list(rows.values())})
    frame["share_%"] = 100 * frame.us_per_pair / frame.us_per_pair.sum()
    frame["path"] = "plain"
    if kernel_seconds is not None:
        per_pair = kernel_seconds / pairs * 1e6
        fused_row = {"part": "C loop (whole step, noise draws inside)", "path": "fused",
                     "us_per_pair": per_pair, "share_%": float("nan")}  # fmt: skip
        frame = pd.concat([frame, pd.DataFrame([fused_row])], ignore_index=True)
    return frame


def profile_findings(profile: pd.DataFrame) -> list[str]:
    """Notebook 09, section 3: the C loop's time per pair (noise draws inside) next to the plain
    step's with its noise draws (every plain row of :func:`profile_step` but sampling the
    pairs), one line printed by ``core.findings.compare``; no line when the C loop did not
    run."""
    sampling = profile.part.str.startswith("sample pairs")
    plain = profile[(profile.path == "plain") & ~sampling].us_per_pair.sum()
    fused = profile[profile.path == "fused"].us_per_pair
    if not len(fused):
        return []
    return [
        compare("C loop (noise draws inside)", fused.iloc[0], "plain step with its noise draws",
                plain, quantity="time", unit="µs per pair")
    ]  # fmt: skip


def _fused_seconds(model, batches, batch, seed) -> float | None:
    """Wall time of the fused kernel on ``batches`` (noise drawn inside, as in training)."""
    kernel = model.fused_kernel()
    if kernel is None:
        return None
    gen = torch.Generator().manual_seed(seed)
    for inp, out in batches[:5]:
        kernel(out, inp, 1e-3, gen)
    start = time.perf_counter()
    for inp, out in batches:
        kernel(out, inp, 1e-3, gen)
    return time.perf_counter() - start
