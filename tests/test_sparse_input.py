"""Tests of chapter20.vocab.sparse_input (note, topic 3; C28); the variants are trained in
tests/test_bag_of_words.py, and proved and timed through notebook 10's lab in
tests/test_vocab_lab.py."""

import pytest

from chapter20.vocab.sparse_input import break_even_out_dim


def test_break_even_out_dim():
    limits = break_even_out_dim(10_000, 300)
    assert limits["weights"] == pytest.approx(10_000 * 300 / 9_700)
    assert limits["training_state"] == pytest.approx(limits["weights"] / 4)
    with pytest.raises(ValueError, match="k must be < input_dim"):
        break_even_out_dim(300, 300)
