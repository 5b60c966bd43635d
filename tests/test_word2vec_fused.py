"""Tests for chapter20.word2vec.fused (note, topic 1): the fused C kernels equal the plain step
pair after pair, draw their noise words from the noise distribution, refuse what the C code
cannot read, and training falls back to the plain path without them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from word2vec_helpers import small_model, zipf_counts

from chapter20.word2vec.fused import compiler_available, load_kernels
from chapter20.word2vec.sampling import NoiseSampler, noise_distribution
from chapter20.word2vec.skipgram import SkipGram, step_pair_by_pair
from chapter20.word2vec.skipgram_config import Word2VecConfig
from chapter20.word2vec.skipgram_training import FUSED_CHUNK, train_word2vec

needs_compiler = pytest.mark.skipif(not compiler_available(), reason="needs a C compiler")


@needs_compiler
@pytest.mark.parametrize("objective", ["negative", "hierarchical"])
# 0.5: rows of norm ~1.8 (dim 37, N(0, 0.3²) entries) make lr · Σ σ'·|x|² exceed 1, so the
# step caps are active; a much larger rate diverges, and diverging runs amplify rounding.
@pytest.mark.parametrize("lr", [1e-3, 0.5])
def test_fused_kernel_equals_the_plain_step_pair_after_pair(objective, lr):
    # 300 pairs in a row: every pair's update starts from the rows the previous ones left,
    # so any difference in a single step would grow from pair to pair.
    kernels = load_kernels()
    model, _, _ = small_model(objective, dim=37)
    twin, _, _ = small_model(objective, dim=37)
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
    plain = step_pair_by_pair(twin, inputs, outputs, lr, noise)
    # The same sums in another order, 300 times over: float32 rounding.
    assert loss == pytest.approx(plain, rel=1e-5)
    assert torch.allclose(model._w_in, twin._w_in, atol=1e-5)
    assert torch.allclose(model._w_out, twin._w_out, atol=1e-5)
    assert not torch.equal(model._w_out, small_model(objective, dim=37)[0]._w_out)
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
    model, inputs, outputs = small_model("negative")
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
        fused = train_word2vec(lee, Word2VecConfig(objective, fused=True, **options))
        assert fused.stats.fused and fused.stats.batch_size == FUSED_CHUNK
        again = train_word2vec(lee, Word2VecConfig(objective, fused=True, **options))
        assert np.array_equal(fused.vectors, again.vectors)
        plain = train_word2vec(lee, Word2VecConfig(objective, fused=False, **options))
        assert not plain.stats.fused
        assert plain.stats.epoch_loss[0] * 0.9 < fused.stats.epoch_loss[0]
        assert fused.stats.epoch_loss[0] <= plain.stats.epoch_loss[0] * 1.001
    hogwild = train_word2vec(lee, Word2VecConfig("negative", fused=True, workers=2, **options))
    assert hogwild.stats.fused and np.isfinite(hogwild.vectors).all()
    single = train_word2vec(lee, Word2VecConfig("negative", fused=True, **options))
    single = single.stats.epoch_loss[0]
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
        wv = train_word2vec(lee[:50], Word2VecConfig("negative", dim=8, epochs=1, progress=False))
    assert not wv.stats.fused and np.isfinite(wv.vectors).all()


def test_fused_path_falls_back_when_compiling_fails(lee, monkeypatch, tmp_path, uncached_kernels):
    broken = tmp_path / "broken.c"
    broken.write_text("this is not C\n")
    monkeypatch.setattr(uncached_kernels, "SOURCE", broken)
    with pytest.warns(RuntimeWarning, match="compiling the fused word2vec kernels failed"):
        config = Word2VecConfig("hierarchical", dim=8, epochs=1, progress=False)
        wv = train_word2vec(lee[:50], config)
    assert not wv.stats.fused
    with pytest.warns(RuntimeWarning, match="no fused kernel"):
        config = Word2VecConfig(
            "negative", dim=8, epochs=1, progress=False, share_negatives=True, fused=True
        )
        shared = train_word2vec(lee[:50], config)
    assert not shared.stats.fused
    with pytest.raises(TypeError, match="fused"):
        Word2VecConfig(fused="yes")
    assert SkipGram("softmax", zipf_counts(60), dim=8, seed=0).fused_kernel() is None
