"""Tests for chapter20.word2vec.skipgram (note, topic 1): Huffman codes, the three objectives'
gradients,
the pair generator, the trainer, and word-pair evaluation against gensim."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from chapter20.core.corpora import word_similarity_path, zipf_probabilities
from chapter20.vocab.vocabulary import build_vocab
from chapter20.word2vec.fused import compiler_available, load_kernels
from chapter20.word2vec.skipgram import (
    FUSED_CHUNK,
    MAX_EXP,
    NoiseSampler,
    SkipGram,
    WordVectors,
    build_huffman_tree,
    corpus_sentences,
    encode_corpus,
    evaluate_word_pairs,
    full_softmax_grads,
    hierarchical_softmax_grads,
    hierarchical_softmax_log_probs,
    keep_probabilities,
    negative_sampling_grads,
    noise_distribution,
    skipgram_pairs,
    skipgram_windows,
    train_word2vec,
)


@pytest.fixture(scope="module")
def lee():
    return corpus_sentences("lee")


def zipf_counts(n: int, s: float = 1.1, total: int = 10**6) -> np.ndarray:
    return np.maximum(1, np.round(zipf_probabilities(n, s) * total)).astype(np.int64)


# --- Huffman tree ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000])
def test_huffman_codes_are_prefix_free_and_frequent_words_are_short(n):
    counts = zipf_counts(n)
    tree = build_huffman_tree(counts)
    codes = [tree.code(w) for w in range(n)]
    if n == 1:
        assert codes == [""]
        return
    assert len(set(codes)) == n
    ordered = sorted(codes)
    # In sorted order a code that is a prefix of another sits right before one it prefixes.
    assert not any(b.startswith(a) for a, b in zip(ordered, ordered[1:]))
    for a in range(n):
        for b in range(n):
            if counts[a] > counts[b]:
                assert tree.lengths[a] <= tree.lengths[b]
    # Kraft equality: a full binary tree's leaves use up the whole code space.
    assert math.isclose(sum(2.0**-tree.lengths), 1.0)
    # A path visits n - 1 distinct inner nodes at most, the root (n - 2) first.
    assert np.all(tree.points[:, 0] == n - 2)
    assert tree.points[tree.mask].max() == n - 2 and tree.points[tree.mask].min() >= 0


@pytest.mark.parametrize("s", [0.0, 0.8, 1.1, 2.0])
def test_huffman_mean_code_length_is_within_one_bit_of_the_entropy(s):
    counts = zipf_counts(5000, s)
    p = counts / counts.sum()
    entropy = float(-(p * np.log2(p)).sum())
    mean = build_huffman_tree(counts).mean_code_length(counts)
    assert entropy <= mean < entropy + 1


def test_huffman_tree_is_as_short_as_gensims(lee):
    from gensim.models import Word2Vec

    model = Word2Vec(sg=1, hs=1, negative=0, min_count=5, vector_size=8, seed=1)
    model.build_vocab(lee)
    vocab = build_vocab(lee, min_count=5)
    # The same words and counts; gensim orders ties by last appearance, build_vocab by first.
    counts = np.array([model.wv.get_vecattr(w, "count") for w in range(len(model.wv))])
    assert dict(zip(model.wv.index_to_key, counts)) == dict(zip(vocab.words, vocab.counts))
    tree = build_huffman_tree(counts)
    theirs = np.array([len(model.wv.get_vecattr(w, "code")) for w in range(len(counts))])
    # Both optimal: the same total code length, exactly (ties may fall differently).
    assert int((counts * tree.lengths).sum()) == int((counts * theirs).sum())
    assert (
        tree.points.max()
        == len(counts) - 2
        == max(max(model.wv.get_vecattr(w, "point")) for w in range(len(counts)))
    )


def test_huffman_tree_of_a_million_words_is_quick_and_compact():
    import time

    start = time.perf_counter()
    tree = build_huffman_tree(zipf_counts(10**6, total=10**9))
    assert time.perf_counter() - start < 30  # a few seconds; a guard against quadratic code
    assert tree.codes.dtype == np.int8 and tree.points.dtype == np.int32
    assert tree.codes.nbytes + tree.points.nbytes < 10**6 * 5 * 64


@pytest.mark.parametrize("n", [1, 2, 3, 17, 500])
def test_huffman_tree_equals_the_heap_built_tree(n):
    """The two-queue build pops what a heap of (count, index) items pops (gensim's way, ties by
    index): the same codes for every word, bitwise; small counts make many ties."""
    import heapq

    rng = np.random.default_rng(n)
    for counts in (rng.integers(1, 4, n), rng.integers(1, 10**6, n)):
        parent, bit = np.full(2 * n - 1, -1), np.zeros(2 * n - 1, dtype=int)
        heap = [(int(c), i) for i, c in enumerate(counts)]
        heapq.heapify(heap)
        for node in range(n, 2 * n - 1):
            (count_a, a), (count_b, b) = heapq.heappop(heap), heapq.heappop(heap)
            parent[a] = parent[b] = node
            bit[b] = 1
            heapq.heappush(heap, (count_a + count_b, node))
        tree = build_huffman_tree(counts)
        for word in range(n):
            code, node = "", word
            while parent[node] >= 0:
                code, node = str(bit[node]) + code, parent[node]
            assert tree.code(word) == code


def test_huffman_rejects_bad_counts():
    with pytest.raises(ValueError, match="counts"):
        build_huffman_tree([])
    with pytest.raises(ValueError, match="counts"):
        build_huffman_tree([3, 0, 1])


# --- the objectives: probabilities and gradients ---------------------------------------------


def test_hierarchical_softmax_probabilities_sum_to_one():
    gen = torch.Generator().manual_seed(0)
    counts = zipf_counts(300)
    tree = build_huffman_tree(counts)
    nodes = torch.randn(len(counts) - 1, 16, generator=gen, dtype=torch.float64)
    inputs = torch.randn(5, 16, generator=gen, dtype=torch.float64)
    probs = hierarchical_softmax_log_probs(inputs, nodes, tree).exp()
    # float64: the sum is exact up to rounding of 300 terms.
    assert torch.allclose(probs.sum(1), torch.ones(5, dtype=torch.float64), atol=1e-12)
    assert probs.min() > 0


def _autograd(loss_fn, *tensors):
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    loss = loss_fn(*leaves)
    loss.backward()
    return loss.detach(), [leaf.grad for leaf in leaves]


def test_negative_sampling_grads_match_autograd():
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(7, 12, generator=gen, dtype=torch.float64)
    u = torch.randn(7, 6, 12, generator=gen, dtype=torch.float64)
    weight = torch.ones(7, 6, dtype=torch.float64)
    weight[2, 3] = weight[5, 1] = 0.0  # noise words equal to the true word are skipped

    def loss_fn(h, u):
        scores = (u * h.unsqueeze(1)).sum(-1)
        terms = torch.cat([-torch.log(torch.sigmoid(scores[:, :1])),
                           -torch.log(torch.sigmoid(-scores[:, 1:]))], dim=1)  # fmt: skip
        return (terms * weight).sum()

    loss, (grad_h, grad_u) = _autograd(loss_fn, h, u)
    ours = negative_sampling_grads(h, u, weight)
    # float64 on both sides: agreement to rounding (1e-12).
    assert torch.allclose(ours.loss, loss, atol=1e-12)
    assert torch.allclose(ours.grad_input, grad_h, atol=1e-12)
    assert torch.allclose(ours.grad_output, grad_u, atol=1e-12)
    assert ours.grad_output[2, 3].abs().max() == 0


def test_hierarchical_softmax_grads_match_autograd_and_the_word_probability():
    gen = torch.Generator().manual_seed(2)
    counts = zipf_counts(50)
    tree = build_huffman_tree(counts)
    node_weights = torch.randn(49, 10, generator=gen, dtype=torch.float64)
    h = torch.randn(4, 10, generator=gen, dtype=torch.float64)
    words = torch.tensor([0, 7, 31, 49])
    mask = torch.as_tensor(tree.mask)[words]
    rows = torch.repeat_interleave(torch.as_tensor(tree.lengths)[words])
    points = torch.as_tensor(tree.points)[words][mask]
    codes = torch.as_tensor(tree.codes)[words][mask]

    def loss_fn(h_rows, nodes):
        scores = (h_rows * nodes).sum(-1)
        return -torch.log(
            torch.where(codes == 0, torch.sigmoid(scores), 1 - torch.sigmoid(scores))
        ).sum()

    loss, (grad_h, grad_n) = _autograd(loss_fn, h[rows], node_weights[points])
    ours = hierarchical_softmax_grads(h[rows], node_weights[points], codes)
    assert torch.allclose(ours.loss, loss, atol=1e-12)
    assert torch.allclose(ours.grad_input, grad_h, atol=1e-12)
    assert torch.allclose(ours.grad_output, grad_n, atol=1e-12)
    # The summed path loss is -log P(word | h) of the whole-vocabulary distribution.
    log_probs = hierarchical_softmax_log_probs(h, node_weights, tree)
    assert torch.allclose(ours.loss, -log_probs[torch.arange(4), words].sum(), atol=1e-12)


def test_full_softmax_equals_cross_entropy_and_autograd():
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(6, 8, generator=gen, dtype=torch.float64)
    w = torch.randn(40, 8, generator=gen, dtype=torch.float64)
    targets = torch.tensor([0, 5, 5, 39, 12, 1])

    def loss_fn(h, w):
        return torch.nn.functional.cross_entropy(h @ w.T, targets, reduction="sum")

    loss, (grad_h, grad_w) = _autograd(loss_fn, h, w)
    ours = full_softmax_grads(h, w, targets)
    assert torch.allclose(ours.loss, loss, atol=1e-12)
    assert torch.allclose(ours.grad_input, grad_h, atol=1e-12)
    assert torch.allclose(ours.grad_output, grad_w, atol=1e-12)


# --- the training step is the gradients, applied ----------------------------------------------


def _small_model(objective, n=60, dim=8, seed=0):
    model = SkipGram(objective, zipf_counts(n), dim=dim, negative=4, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    model.input_vectors.copy_(torch.randn(model.input_vectors.shape, generator=gen) * 0.3)
    model.output_vectors.copy_(torch.randn(model.output_vectors.shape, generator=gen) * 0.3)
    inputs = torch.randint(0, n, (32,), generator=gen)
    outputs = torch.randint(0, n, (32,), generator=gen)
    return model, inputs, outputs


@pytest.mark.parametrize("objective", ["negative", "hierarchical", "softmax"])
def test_step_applies_the_objectives_gradients(objective):
    model, inputs, outputs = _small_model(objective)
    lr = 1e-3  # small enough that no row's step is capped, and no score is beyond MAX_EXP
    w_in, w_out = model.input_vectors.clone(), model.output_vectors.clone()
    h = w_in[inputs]
    targets = None
    if objective == "negative":
        targets = model.noise_targets(outputs, torch.Generator().manual_seed(5))
        ids, weight = targets
        g = negative_sampling_grads(h, w_out[ids], weight)
        w_out.index_add_(0, ids.reshape(-1), -lr * g.grad_output.reshape(-1, w_out.shape[1]))
        w_in.index_add_(0, inputs, -lr * g.grad_input)
    elif objective == "hierarchical":
        tree = model.tree
        mask = torch.as_tensor(tree.mask)[outputs]
        rows = torch.repeat_interleave(torch.as_tensor(tree.lengths)[outputs])
        points = torch.as_tensor(tree.points)[outputs][mask]
        codes = torch.as_tensor(tree.codes)[outputs][mask]
        g = hierarchical_softmax_grads(h[rows], w_out[points], codes)
        assert (h[rows] * w_out[points]).sum(-1).abs().max() < MAX_EXP
        w_out.index_add_(0, points, -lr * g.grad_output)
        w_in.index_add_(0, inputs[rows], -lr * g.grad_input)
    else:
        g = full_softmax_grads(h, w_out, outputs)
        w_out -= lr * g.grad_output
        w_in.index_add_(0, inputs, -lr * g.grad_input)
    loss = model.step(inputs, outputs, lr, targets)
    # float32 and a different summation order: agreement to float32 rounding.
    assert torch.allclose(loss, g.loss, rtol=1e-5)
    assert torch.allclose(model.input_vectors, w_in, atol=1e-6)
    assert torch.allclose(model.output_vectors, w_out, atol=1e-6)


def test_step_caps_a_row_that_the_whole_batch_updates():
    # Every pair predicts word 0 through the same inner nodes: with a large learning rate the
    # summed stale steps would overshoot; the cap bounds the root's step.
    model, inputs, _ = _small_model("hierarchical")
    outputs = torch.zeros_like(inputs)
    root = model.tree.points[0, 0]
    h = model.input_vectors[inputs]
    before = model.output_vectors[root].clone()
    lr = 5.0
    scores = h @ before
    code = int(model.tree.codes[0, 0])
    live = scores.abs() < MAX_EXP
    coef = (torch.sigmoid(scores) - (1 - code)) * live
    uncapped = -lr * (coef.unsqueeze(1) * h).sum(0)
    curvature = (torch.sigmoid(scores) * (1 - torch.sigmoid(scores)) * live * (h * h).sum(1)).sum()
    assert lr * curvature > 1  # the cap is active ...
    model.step(inputs, outputs, lr)
    step = model.output_vectors[root] - before
    # ... and divides the summed step by lr * curvature.
    assert torch.allclose(step, uncapped / (lr * curvature), atol=1e-6)


def test_step_caps_an_input_row_that_the_whole_batch_updates():
    # Every pair has the same input word: its summed step is divided by lr * curvature.
    model, _, outputs = _small_model("negative")
    inputs = torch.zeros_like(outputs)
    targets = model.noise_targets(outputs, torch.Generator().manual_seed(2))
    ids, weight = targets
    before = model.input_vectors[0].clone()
    u = model.output_vectors[ids]
    lr = 5.0
    g = negative_sampling_grads(before.expand(len(inputs), -1), u, weight)
    scores = (u * before).sum(-1)
    sig = torch.sigmoid(scores)
    curvature = (sig * (1 - sig) * weight * (u * u).sum(-1)).sum()
    assert lr * curvature > 1
    model.step(inputs, outputs, lr, targets)
    expected = -lr * g.grad_input.sum(0) / (lr * curvature)
    assert torch.allclose(model.input_vectors[0] - before, expected, atol=1e-5)


def _windows_and_pairs(model, n_windows=12, slots=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    n = len(model.input_vectors)
    outputs = torch.randint(0, n, (n_windows,), generator=gen)
    contexts = torch.randint(0, n, (n_windows, slots), generator=gen)
    contexts[torch.rand(n_windows, slots, generator=gen) < 0.4] = model.input_pad
    used = contexts != model.input_pad
    pair_outputs = outputs.repeat_interleave(used.sum(1))
    return outputs, contexts, contexts[used], pair_outputs


def _twin(objective):
    first, _, _ = _small_model(objective)
    second = SkipGram(objective, zipf_counts(60), dim=8, negative=4, seed=0)
    second.input_vectors.copy_(first.input_vectors)
    second.output_vectors.copy_(first.output_vectors)
    return first, second


def test_window_step_of_the_hierarchical_softmax_equals_its_pair_step():
    by_window, by_pair = _twin("hierarchical")
    outputs, contexts, pair_inputs, pair_outputs = _windows_and_pairs(by_window)
    lr = 1e-3
    loss_w = by_window.step_windows(outputs, contexts, lr)
    loss_p = by_pair.step(pair_inputs, pair_outputs, lr)
    # The same pairs and gradients, summed in another order: float32 rounding.
    assert torch.allclose(loss_w, loss_p, rtol=1e-5)
    assert torch.allclose(by_window.input_vectors, by_pair.input_vectors, atol=1e-6)
    assert torch.allclose(by_window.output_vectors, by_pair.output_vectors, atol=1e-6)
    assert not torch.equal(by_window.input_vectors, _twin("hierarchical")[0].input_vectors)
    assert by_window._w_in[-1].abs().max() == 0 and by_window._w_out[-1].abs().max() == 0


def test_window_step_without_trimming_the_paths_is_the_same():
    # On a GPU the paths are not trimmed to the batch's longest (that would need a sync).
    trimmed, padded = _twin("hierarchical")
    padded._trim_paths = False
    outputs, contexts, _, _ = _windows_and_pairs(trimmed)
    outputs = outputs % 8  # frequent words: their paths are shorter than the deepest
    assert int(torch.as_tensor(trimmed.tree.lengths)[outputs].max()) < trimmed.tree.max_depth
    loss_t = trimmed.step_windows(outputs, contexts, 1e-3)
    loss_p = padded.step_windows(outputs, contexts, 1e-3)
    assert torch.allclose(loss_t, loss_p, rtol=1e-6)
    assert torch.allclose(trimmed.output_vectors, padded.output_vectors, atol=1e-7)
    assert torch.allclose(trimmed.input_vectors, padded.input_vectors, atol=1e-7)


def test_window_step_with_shared_noise_equals_pair_steps_with_that_noise():
    by_window, by_pair = _twin("negative")
    outputs, contexts, pair_inputs, pair_outputs = _windows_and_pairs(by_window)
    noise = torch.randint(0, 60, (len(outputs), 4), generator=torch.Generator().manual_seed(1))
    noise[0, 0] = outputs[0]  # a noise word equal to the true word is skipped in both
    lr = 1e-3
    loss_w = by_window.step_windows(outputs, contexts, lr, noise)
    used = (contexts != by_window.input_pad).sum(1)
    pair_noise = noise.repeat_interleave(used, dim=0)
    targets = torch.cat([pair_outputs.unsqueeze(1), pair_noise], 1)
    weight = (targets != pair_outputs.unsqueeze(1)).float()
    weight[:, 0] = 1
    loss_p = by_pair.step(pair_inputs, pair_outputs, lr, (targets, weight))
    assert torch.allclose(loss_w, loss_p, rtol=1e-5)
    assert torch.allclose(by_window.input_vectors, by_pair.input_vectors, atol=1e-6)
    assert torch.allclose(by_window.output_vectors, by_pair.output_vectors, atol=1e-6)


# --- the fused path equals the plain path -----------------------------------------------------

needs_compiler = pytest.mark.skipif(not compiler_available(), reason="needs a C compiler")


def _pair_by_pair(model, inputs, outputs, lr, noise=None):
    """The plain step on one pair at a time: what the fused kernels must equal."""
    total = 0.0
    for p in range(len(inputs)):
        targets = None
        if noise is not None:
            ids = torch.cat([outputs[p : p + 1], noise[p]]).unsqueeze(0)
            weight = (ids != outputs[p]).float()
            weight[:, 0] = 1.0
            targets = (ids, weight)
        total += float(model.step(inputs[p : p + 1], outputs[p : p + 1], lr, targets))
    return total


@needs_compiler
@pytest.mark.parametrize("objective", ["negative", "hierarchical"])
# 0.5: rows of norm ~1.8 (dim 37, N(0, 0.3²) entries) make lr · Σ σ'·|x|² exceed 1, so the
# step caps are active; a much larger rate diverges, and diverging runs amplify rounding.
@pytest.mark.parametrize("lr", [1e-3, 0.5])
def test_fused_kernel_equals_the_plain_step_pair_after_pair(objective, lr):
    # 300 pairs in a row: every pair's update starts from the rows the previous ones left,
    # so any difference in a single step would grow from pair to pair.
    kernels = load_kernels()
    model, _, _ = _small_model(objective, dim=37)
    twin, _, _ = _small_model(objective, dim=37)
    gen = torch.Generator().manual_seed(7)
    inputs = torch.randint(0, 60, (300,), generator=gen)
    outputs = torch.randint(0, 6, (300,), generator=gen)  # frequent words: repeats in a row
    if objective == "negative":
        noise = kernels.draw_noise(model.sampler.prob, model.sampler.alias, 11, 300 * 4)
        noise = noise.view(300, 4)
        assert (noise == outputs.unsqueeze(1)).any()  # some noise words are the true word
        assert any(len(set(row.tolist())) < 4 for row in noise)  # some are drawn twice
        args = (4, model.sampler.prob, model.sampler.alias, 11)
        loss = kernels.negative_pairs(model._w_in, model._w_out, inputs, outputs, *args, lr)
    else:
        noise = None
        paths = (model._points_padded, model._labels, model._lengths)
        loss = kernels.hierarchical_pairs(model._w_in, model._w_out, inputs, outputs, *paths, lr)
    plain = _pair_by_pair(twin, inputs, outputs, lr, noise)
    # The same sums in another order, 300 times over: float32 rounding.
    assert loss == pytest.approx(plain, rel=1e-5)
    assert torch.allclose(model._w_in, twin._w_in, atol=1e-5)
    assert torch.allclose(model._w_out, twin._w_out, atol=1e-5)
    assert not torch.equal(model._w_out, _small_model(objective, dim=37)[0]._w_out)
    assert model._w_in[-1].abs().max() == 0 and model._w_out[-1].abs().max() == 0  # sinks


@needs_compiler
def test_fused_noise_words_follow_the_noise_distribution():
    counts = zipf_counts(50)
    sampler = NoiseSampler(noise_distribution(counts))
    draws = load_kernels().draw_noise(sampler.prob, sampler.alias, 3, 400_000)
    assert int(draws.min()) >= 0 and int(draws.max()) < 50
    share = np.bincount(draws.numpy(), minlength=50) / len(draws)
    # Binomial noise of 400,000 draws: within 5 standard deviations per word.
    p = sampler.probabilities
    assert np.all(np.abs(share - p) <= 5 * np.sqrt(p * (1 - p) / len(draws)) + 1e-12)
    again = load_kernels().draw_noise(sampler.prob, sampler.alias, 3, 1000)
    assert torch.equal(again, draws[:1000])  # a seed gives one stream


@needs_compiler
def test_fused_kernels_refuse_what_the_c_code_cannot_read():
    kernels = load_kernels()
    model, inputs, outputs = _small_model("negative")
    sampler = model.sampler
    with pytest.raises(ValueError, match="inputs must be a contiguous torch.int64"):
        kernels.negative_pairs(
            model._w_in, model._w_out, inputs.int(), outputs, 4, sampler.prob, sampler.alias, 0,
            0.1,
        )  # fmt: skip
    with pytest.raises(ValueError, match="w_out must be a contiguous torch.float32"):
        kernels.negative_pairs(
            model._w_in, model._w_out.T, inputs, outputs, 4, sampler.prob, sampler.alias, 0, 0.1
        )
    with pytest.raises(ValueError, match="differ in length"):
        kernels.negative_pairs(
            model._w_in, model._w_out, inputs, outputs[:3], 4, sampler.prob, sampler.alias, 0,
            0.1,
        )  # fmt: skip


@needs_compiler
def test_fused_training_is_deterministic_and_learns_what_the_plain_path_learns(lee):
    # The fused path steps one pair at a time, the plain path a batch at a time: the same
    # pairs, but a batch computes every pair's step from the same (staler) weights. One epoch
    # on the Lee corpus: the sequential steps reach a loss at least as low, and not far from
    # the batched one (measured: 3.44 vs 3.59 for negative sampling, 6.85 vs 6.87 for the
    # hierarchical softmax).
    options = dict(epochs=1, seed=3, progress=False, threads=1)
    for objective in ("negative", "hierarchical"):
        fused = train_word2vec(lee, objective, fused=True, **options)
        assert fused.stats.fused and fused.stats.batch_size == FUSED_CHUNK
        again = train_word2vec(lee, objective, fused=True, **options)
        assert np.array_equal(fused.vectors, again.vectors)
        plain = train_word2vec(lee, objective, fused=False, **options)
        assert not plain.stats.fused
        assert plain.stats.epoch_loss[0] * 0.9 < fused.stats.epoch_loss[0]
        assert fused.stats.epoch_loss[0] <= plain.stats.epoch_loss[0] * 1.001
    hogwild = train_word2vec(lee, "negative", fused=True, workers=2, **options)
    assert hogwild.stats.fused and np.isfinite(hogwild.vectors).all()
    single = train_word2vec(lee, "negative", fused=True, **options).stats.epoch_loss[0]
    assert hogwild.stats.epoch_loss[0] == pytest.approx(single, rel=0.05)


@pytest.fixture
def uncached_kernels():
    """``word2vec_fused`` with its kernels to be built afresh by the test (under whatever it
    patches), and afresh again after it, from the real source."""
    from chapter20.word2vec import fused as word2vec_fused

    word2vec_fused.load_kernels.cache_clear()
    yield word2vec_fused
    word2vec_fused.load_kernels.cache_clear()


def test_fused_path_falls_back_without_a_compiler(lee, monkeypatch, uncached_kernels):
    monkeypatch.setattr(uncached_kernels, "_compiler", lambda: None)
    with pytest.warns(RuntimeWarning, match="no C compiler"):
        wv = train_word2vec(lee[:50], "negative", dim=8, epochs=1, progress=False)
    assert not wv.stats.fused and np.isfinite(wv.vectors).all()


def test_fused_path_falls_back_when_compiling_fails(lee, monkeypatch, tmp_path, uncached_kernels):
    broken = tmp_path / "broken.c"
    broken.write_text("this is not C\n")
    monkeypatch.setattr(uncached_kernels, "SOURCE", broken)
    with pytest.warns(RuntimeWarning, match="compiling the fused word2vec kernels failed"):
        wv = train_word2vec(lee[:50], "hierarchical", dim=8, epochs=1, progress=False)
    assert not wv.stats.fused
    with pytest.warns(RuntimeWarning, match="no fused kernel"):
        shared = train_word2vec(
            lee[:50], "negative", dim=8, epochs=1, progress=False, share_negatives=True, fused=True
        )
    assert not shared.stats.fused
    with pytest.raises(TypeError, match="fused"):
        train_word2vec(lee[:50], fused="yes")
    assert SkipGram("softmax", zipf_counts(60), dim=8).fused_kernel() is None


def test_a_given_tree_replaces_the_built_one_and_is_checked():
    counts = zipf_counts(30)
    tree = build_huffman_tree(counts[::-1].copy())  # another valid tree over 30 words
    model = SkipGram("hierarchical", counts, dim=4, tree=tree)
    assert model.tree is tree
    with pytest.raises(ValueError, match="one path per word"):
        SkipGram("hierarchical", zipf_counts(31), dim=4, tree=tree)
    with pytest.raises(TypeError, match="HuffmanTree"):
        SkipGram("hierarchical", counts, dim=4, tree="gensim")
    bad = type(tree)(codes=tree.codes * 2, points=tree.points, lengths=tree.lengths)
    with pytest.raises(ValueError, match="codes must be 0 or 1"):
        SkipGram("hierarchical", counts, dim=4, tree=bad)


# --- sampling -------------------------------------------------------------------------------


def _unique_word_corpus():
    # Every token distinct, so with min_count=1 a word's id is its position in the corpus.
    lengths = [5, 1, 8, 3, 12]
    sentences, k = [], 0
    for length in lengths:
        sentences.append([f"w{k + i}" for i in range(length)])
        k += length
    vocab = build_vocab(sentences, min_count=1)
    return sentences, vocab, encode_corpus(sentences, vocab)


def test_skipgram_pairs_stay_in_sentences_and_windows_in_corpus_order():
    sentences, vocab, corpus = _unique_word_corpus()
    assert corpus.ids.tolist() == list(range(sum(map(len, sentences))))
    sentence_of = corpus.sentence
    for window in (1, 2, 5):
        gen = torch.Generator().manual_seed(window)
        inputs, outputs, kept = skipgram_pairs(corpus, window, None, gen)
        assert kept == len(corpus.ids)
        assert torch.all(sentence_of[inputs] == sentence_of[outputs])
        distance = (inputs - outputs).abs()
        assert distance.min() >= 1 and distance.max() <= window
        assert torch.all(outputs[1:] >= outputs[:-1])  # corpus order of the predicted word
        # a position's window is the same on both sides: 2 * b pairs away from sentence ends
        if window == 1:
            assert len(inputs) == 2 * sum(len(s) - 1 for s in sentences)


def test_skipgram_windows_hold_exactly_the_pairs(lee):
    vocab = build_vocab(lee, min_count=5)
    corpus = encode_corpus(lee, vocab)
    keep = torch.as_tensor(keep_probabilities(vocab.counts, 1e-3))
    inputs, outputs, kept = skipgram_pairs(corpus, 5, keep, torch.Generator().manual_seed(3))
    pad = len(vocab)
    windows = skipgram_windows(corpus, 5, keep, torch.Generator().manual_seed(3), pad)
    window_outputs, contexts, pairs, kept_too = windows
    used = contexts != pad
    assert pairs == len(inputs) and kept_too == kept and contexts.shape[1] == 10
    assert torch.equal(window_outputs.repeat_interleave(used.sum(1)), outputs)
    assert torch.equal(contexts[used], inputs)
    assert used.any(1).all()


def test_skipgram_pairs_draw_every_window_size_and_are_deterministic():
    sentences = [[f"w{i}" for i in range(400)]]
    vocab = build_vocab(sentences, min_count=1)
    corpus = encode_corpus(sentences, vocab)
    first = skipgram_pairs(corpus, 4, None, torch.Generator().manual_seed(0))
    again = skipgram_pairs(corpus, 4, None, torch.Generator().manual_seed(0))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    inputs, outputs, _ = first
    reach = torch.zeros(400, dtype=torch.int64).scatter_reduce_(
        0, outputs, (inputs - outputs).abs(), "amax", include_self=False
    )
    interior = reach[4:-4]
    assert set(interior.tolist()) == {1, 2, 3, 4}  # b ~ U{1..window}
    counts = torch.bincount(outputs, minlength=400)[4:-4]
    assert torch.equal(counts, 2 * interior)  # symmetric window around each word


def test_keep_probabilities_are_gensims(lee):
    from gensim.models import Word2Vec

    model = Word2Vec(sg=1, min_count=5, sample=1e-3, vector_size=8)
    model.build_vocab(lee)
    vocab = build_vocab(lee, min_count=5)
    ours = keep_probabilities(vocab.counts, 1e-3)
    index = [model.wv.key_to_index[w] for w in vocab.words]
    theirs = np.array([model.wv.get_vecattr(i, "sample_int") for i in index]) / (2**32 - 1)
    assert np.allclose(ours, theirs, atol=1e-9)  # gensim stores them as uint32
    assert ours.min() < 0.5 and ours.max() == 1.0
    assert np.all(keep_probabilities(vocab.counts, 0) == 1)
    with pytest.raises(ValueError, match="sample"):
        keep_probabilities(vocab.counts, -1e-3)


def test_subsampling_keeps_each_word_with_its_probability():
    counts = zipf_counts(20, total=20000)
    sentences = [[f"w{i}"] * int(c) for i, c in enumerate(counts)]
    vocab = build_vocab(sentences, min_count=1)
    corpus = encode_corpus(sentences, vocab)
    keep = torch.as_tensor(keep_probabilities(vocab.counts, 1e-2))
    _, _, kept = skipgram_pairs(corpus, 2, keep, torch.Generator().manual_seed(0))
    expected = float((keep.numpy() * vocab.counts).sum())
    # Binomial noise: well within 5 standard deviations.
    assert abs(kept - expected) < 5 * math.sqrt(expected)


def test_noise_sampler_follows_unigram_to_the_three_quarters():
    counts = zipf_counts(30)
    p = noise_distribution(counts)
    assert np.allclose(p, counts**0.75 / (counts**0.75).sum())
    sampler = NoiseSampler(p)
    draws = sampler.sample(400_000, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=30).double() / len(draws)
    # 400K draws: the standard error of each frequency is below 8e-4.
    assert torch.allclose(freq, torch.as_tensor(p), atol=4e-3)
    first = sampler.sample(1000, torch.Generator().manual_seed(7))
    assert torch.equal(first, sampler.sample(1000, torch.Generator().manual_seed(7)))


# --- training -------------------------------------------------------------------------------


def test_training_is_deterministic_for_a_seed_on_cpu(lee):
    options = dict(dim=16, epochs=1, progress=False, threads=2, fused=False)
    first = train_word2vec(lee, "negative", seed=3, **options)
    again = train_word2vec(lee, "negative", seed=3, **options)
    other = train_word2vec(lee, "negative", seed=4, **options)
    assert np.array_equal(first.vectors, again.vectors)  # bitwise
    assert not np.array_equal(first.vectors, other.vectors)
    hs = train_word2vec(lee, "hierarchical", seed=3, **options)
    assert np.array_equal(
        hs.vectors, train_word2vec(lee, "hierarchical", seed=3, **options).vectors
    )


@pytest.mark.parametrize("objective", ["negative", "hierarchical", "softmax"])
def test_training_lowers_the_loss_and_reports_what_it_did(lee, objective):
    wv = train_word2vec(lee, objective, dim=16, epochs=2, seed=1, progress=False, fused=False)
    stats = wv.stats
    assert stats.epoch_loss[1] < stats.epoch_loss[0]
    assert np.isfinite(wv.vectors).all()
    assert stats.raw_words == 2 * sum(map(len, lee))
    assert 0 < stats.effective_words < stats.raw_words
    assert stats.pairs > stats.effective_words
    assert stats.words_per_second > 0
    assert wv.words == build_vocab(lee, min_count=5).words


@pytest.mark.parametrize("share", [False, True])
def test_hogwild_workers_train_as_well(lee, share):
    options = dict(dim=16, epochs=2, seed=1, progress=False, share_negatives=share, fused=False)
    wv = train_word2vec(lee, "negative", workers=2, **options)
    assert wv.stats.workers == 2
    assert np.isfinite(wv.vectors).all()
    assert wv.stats.epoch_loss[1] < wv.stats.epoch_loss[0]
    single = train_word2vec(lee, "negative", **options)
    assert single.stats.pairs == wv.stats.pairs  # the same draws, shared between the workers


def test_word_vectors_lookup_and_neighbours_match_gensim():
    gen = np.random.default_rng(0)
    words = tuple(f"w{i}" for i in range(50))
    wv = WordVectors(words, gen.standard_normal((50, 6)).astype(np.float32))
    kv = wv.to_gensim()
    assert np.array_equal(wv["w3"], kv["w3"])
    assert math.isclose(wv.similarity("w1", "w2"), float(kv.similarity("w1", "w2")), abs_tol=1e-6)
    ours = wv.most_similar("w7", topn=5)
    theirs = kv.most_similar("w7", topn=5)
    assert [w for w, _ in ours] == [w for w, _ in theirs]
    assert np.allclose([s for _, s in ours], [s for _, s in theirs], atol=1e-6)
    with pytest.raises(KeyError):
        wv["nope"]


@pytest.mark.parametrize("name", ["wordsim353", "simlex999"])
def test_evaluate_word_pairs_equals_gensims(name):
    # Random vectors over the real vocabulary, plus a case variant: only the mechanics matter.
    vocab = build_vocab(corpus_sentences("wiki+lee"), min_count=5)
    words = list(vocab.words) + ["Tiger"]
    vectors = np.random.default_rng(1).standard_normal((len(words), 20)).astype(np.float32)
    ours = evaluate_word_pairs(words, vectors, name)
    kv = WordVectors(tuple(words), vectors).to_gensim()
    pearson, spearman, oov = kv.evaluate_word_pairs(word_similarity_path(name))
    assert ours.oov_ratio == pytest.approx(oov, abs=1e-12)
    # Cosines in float64 here and float32 in gensim: ranks, hence ρ, agree to rounding.
    assert ours.spearman == pytest.approx(spearman.statistic, abs=1e-6)
    assert ours.pearson == pytest.approx(pearson.statistic, abs=1e-5)
    assert 0 < ours.oov_pairs < ours.pairs
    strict = evaluate_word_pairs(words, vectors, name, case_insensitive=False)
    _, spearman, oov = kv.evaluate_word_pairs(word_similarity_path(name), case_insensitive=False)
    assert strict.oov_ratio == pytest.approx(oov) and strict.spearman == pytest.approx(
        spearman.statistic, abs=1e-6
    )


def test_evaluate_word_pairs_rejects_bad_input():
    with pytest.raises(ValueError, match="vectors"):
        evaluate_word_pairs(["a", "b"], np.zeros((3, 4)))
    with pytest.raises(ValueError, match="no pair"):
        evaluate_word_pairs(["qqqq", "zzzz"], np.ones((2, 4)))
    with pytest.raises(ValueError, match="name"):
        evaluate_word_pairs(["a"], np.ones((1, 4)), "nope")


@pytest.mark.parametrize(
    ("kwargs", "exception", "argument"),
    [
        ({"sentences": []}, ValueError, "sentences"),
        ({"sentences": [[], []]}, ValueError, "sentences"),
        ({"sentences": "a text, not token lists"}, TypeError, "sentences"),
        ({"sentences": ["a b", "c d"]}, TypeError, "sentences"),
        ({"min_count": 10**6}, ValueError, "min_count"),
        ({"negative": 0}, ValueError, "negative"),
        ({"negative": -3}, ValueError, "negative"),
        ({"window": 0}, ValueError, "window"),
        ({"dim": 0}, ValueError, "dim"),
        ({"epochs": 0}, ValueError, "epochs"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"workers": 0}, ValueError, "workers"),
        ({"sample": -1.0}, ValueError, "sample"),
        ({"alpha": 0.0}, ValueError, "alpha"),
        ({"min_alpha": 1.0}, ValueError, "min_alpha"),
        ({"objective": "sampled"}, ValueError, "objective"),
        ({"window": 2.5}, TypeError, "window"),
    ],
)
def test_bad_input_raises_a_clear_error(lee, kwargs, exception, argument):
    call = {"sentences": lee[:20], "progress": False, "epochs": 1, **kwargs}
    with pytest.raises(exception, match=argument):
        train_word2vec(**call)


def test_corpus_sentences():
    lee = corpus_sentences("lee")
    assert len(lee) == 300
    both = corpus_sentences("wiki+lee")
    assert both[-300:] == lee
    with pytest.raises(ValueError, match="name"):
        corpus_sentences("wiki-2")


@pytest.mark.cuda
def test_cuda_training_matches_gensim_quality():
    """On a GPU: the same run as the benchmark; vectors finite, ρ within 0.05 of gensim's."""
    from gensim.models import Word2Vec

    corpus = corpus_sentences("wiki+lee")
    settings = dict(window=5, min_count=5, negative=5, sample=1e-3, epochs=5)
    ours = train_word2vec(
        corpus, "negative", dim=100, seed=1, device="cuda", progress=False, **settings
    )
    assert ours.stats.device.startswith("cuda")
    assert np.isfinite(ours.vectors).all()
    model = Word2Vec(corpus, sg=1, vector_size=100, hs=0, workers=4, seed=1, **settings)
    theirs = evaluate_word_pairs(model.wv.index_to_key, model.wv.vectors, "wordsim353")
    assert abs(ours.evaluate_word_pairs("wordsim353").spearman - theirs.spearman) < 0.05
    hs = train_word2vec(corpus, "hierarchical", seed=1, device="cuda", progress=False, **settings)
    assert np.isfinite(hs.vectors).all() and hs.evaluate_word_pairs("wordsim353").spearman > 0.3
