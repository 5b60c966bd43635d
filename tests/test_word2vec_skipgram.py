"""Tests for chapter20.word2vec.skipgram (note, topic 1): the training step is the objectives'
gradients, applied (with its per-row cap), the window step equals the pair step, and a given
tree is checked."""

from __future__ import annotations

import pytest
import torch
from word2vec_helpers import small_model, zipf_counts

from chapter20.word2vec.fused import MAX_EXP
from chapter20.word2vec.huffman import build_huffman_tree
from chapter20.word2vec.objectives import (
    full_softmax_grads,
    hierarchical_softmax_grads,
    negative_sampling_grads,
)
from chapter20.word2vec.skipgram import SkipGram


@pytest.mark.parametrize("objective", ["negative", "hierarchical", "softmax"])
def test_step_applies_the_objectives_gradients(objective):
    model, inputs, outputs = small_model(objective)
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
    model, inputs, _ = small_model("hierarchical")
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
    model, _, outputs = small_model("negative")
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
    first, _, _ = small_model(objective)
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


def test_a_given_tree_replaces_the_built_one_and_is_checked():
    counts = zipf_counts(30)
    tree = build_huffman_tree(counts[::-1].copy())  # another valid tree over 30 words
    model = SkipGram("hierarchical", counts, dim=4, seed=0, tree=tree)
    assert model.tree is tree
    with pytest.raises(ValueError, match="one path per word"):
        SkipGram("hierarchical", zipf_counts(31), dim=4, seed=0, tree=tree)
    with pytest.raises(TypeError, match="HuffmanTree"):
        SkipGram("hierarchical", counts, dim=4, seed=0, tree="gensim")
    bad = type(tree)(codes=tree.codes * 2, points=tree.points, lengths=tree.lengths)
    with pytest.raises(ValueError, match="codes must be 0 or 1"):
        SkipGram("hierarchical", counts, dim=4, seed=0, tree=bad)
