"""Tests for chapter20.word2vec.epoch_reference (note, topic 1): the Python noise stream is the C
loop's, bit for bit; one epoch of the Python loops forms the trainer's pairs and, with the C loop
present, leaves the trainer's tables to float32 rounding; bad input raises."""

from __future__ import annotations

import pytest
import torch
from word2vec_helpers import zipf_counts

from chapter20.vocab.vocabulary import build_vocab
from chapter20.word2vec.epoch_reference import kernel_noise, train_epoch_reference
from chapter20.word2vec.equivalence import loop_equals_trainer
from chapter20.word2vec.fused import compiler_available, load_kernels
from chapter20.word2vec.sampling import (
    NoiseSampler,
    keep_probabilities,
    noise_distribution,
    skipgram_pairs,
)
from chapter20.word2vec.skipgram_config import Word2VecConfig
from chapter20.word2vec.skipgram_training import _encoded_corpus, _model, _torch_threads


def test_kernel_noise_is_the_c_loops_stream_bit_for_bit():
    if not compiler_available():
        pytest.skip("no C compiler: the C loop cannot run")
    sampler = NoiseSampler(noise_distribution(zipf_counts(500)))
    for seed in (0, 7, 2**63 - 2):
        ours = kernel_noise(sampler, seed, 2000)
        theirs = load_kernels().draw_noise(sampler.prob, sampler.alias, seed, 2000)
        assert torch.equal(ours, theirs)


def test_kernel_noise_follows_the_noise_distribution():
    probabilities = noise_distribution(zipf_counts(20))
    draws = kernel_noise(NoiseSampler(probabilities), 3, 40_000)
    shares = torch.bincount(draws, minlength=20).double() / len(draws)
    assert (shares - torch.as_tensor(probabilities)).abs().max() < 0.01


def test_one_epoch_forms_the_trainers_pairs(lee):
    """Without the C loop too: the sentence-by-sentence windows hold skipgram_pairs's pairs,
    from the same generator state."""
    vocab = build_vocab(lee[:15], min_count=2)
    config = Word2VecConfig(dim=8, epochs=2, batch_size=256, progress=False)
    corpus, keep = _encoded_corpus(lee[:15], vocab, config.sample, torch.device("cpu"))
    inputs, _, _ = skipgram_pairs(corpus, config.window, keep, torch.Generator().manual_seed(5))
    model = _model(config, vocab, 0, torch.device("cpu"), None)
    generators = (torch.Generator().manual_seed(5), torch.Generator().manual_seed(6))
    with _torch_threads(1):  # one pair's ops are too small to share
        loss, pairs = train_epoch_reference(model, corpus, keep, config, 1, *generators)
    assert pairs == len(inputs) > 0 and loss > 0


@pytest.mark.parametrize("objective", ["negative", "hierarchical"])
def test_one_epoch_of_python_loops_equals_the_trainer(lee, objective):
    if not compiler_available():
        pytest.skip("no C compiler: the trainer takes the batched step")
    vocab = build_vocab(lee, min_count=5)
    tables, loss, ours, theirs = loop_equals_trainer(objective, lee[:30], vocab, chunk=128)
    assert ours == theirs > 3 * 128  # several chunks: the learning rate decays between them
    assert tables < 1e-6 and loss < 1e-6  # float32 rounding of the same sums in another order


@pytest.mark.parametrize(
    "kwargs, argument",
    [({"seed": -1}, "seed"), ({"count": -1}, "count"), ({"seed": 2**64}, "seed")],
)
def test_bad_input_raises_a_clear_error(kwargs, argument):
    sampler = NoiseSampler(noise_distribution(zipf_counts(10)))
    with pytest.raises(ValueError, match=argument):
        kernel_noise(sampler, **({"seed": 0, "count": 1} | kwargs))


def test_an_epoch_outside_the_run_is_refused(lee):
    vocab = build_vocab(lee[:10], min_count=1)
    config = Word2VecConfig(dim=4, epochs=1, progress=False)
    corpus = _encoded_corpus(lee[:10], vocab, 0.0, torch.device("cpu"))[0]
    keep = torch.as_tensor(keep_probabilities(vocab.counts, 0.0))
    model = _model(config, vocab, 0, torch.device("cpu"), None)
    gen = torch.Generator()
    with pytest.raises(ValueError, match="epoch"):
        train_epoch_reference(model, corpus, keep, config, 1, gen, gen)


def test_the_full_softmax_has_no_c_loop_to_follow(lee):
    vocab = build_vocab(lee[:10], min_count=1)
    assert loop_equals_trainer("softmax", lee[:10], vocab) is None
    config = Word2VecConfig(objective="softmax", dim=4, epochs=1, progress=False)
    corpus, keep = _encoded_corpus(lee[:10], vocab, 0.0, torch.device("cpu"))
    model = _model(config, vocab, 0, torch.device("cpu"), None)
    gen = torch.Generator()
    with pytest.raises(ValueError, match="objective"):
        train_epoch_reference(model, corpus, keep, config, 0, gen, gen)
