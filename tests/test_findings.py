"""Tests of chapter20.core.findings: comparison lines printed from a run's numbers."""

import pytest

from chapter20.core.findings import compare, share


@pytest.mark.parametrize(
    "quantity, value, reference, word",
    [
        ("time", 95.5, 70.7, "slower"),
        ("time", 50.0, 70.7, "faster"),
        ("rate", 200.0, 100.0, "faster"),  # more pairs per second is faster
        ("rate", 50.0, 100.0, "slower"),
        ("memory", 2.0, 4.0, "smaller"),
        ("value", 3.0, 1.0, "higher"),
    ],
)
def test_the_word_follows_the_numbers(quantity, value, reference, word):
    line = compare("a", value, "b", reference, quantity=quantity, unit="u")
    ratio = max(value, reference) / min(value, reference)
    assert line.startswith(f"a: {ratio:.2f}× {word} than b (")


def test_a_difference_inside_the_spread_or_tolerance_chooses_no_word():
    line = compare("a", 10.3, "b", 10.0, quantity="time", unit="ms", spread=0.5)
    assert "indistinguishable" in line and "spread of 0.5 ms" in line
    assert "faster" not in line and "slower" not in line
    assert "within 2%" in compare("a", 10.1, "b", 10.0, quantity="time")
    assert "slower" in compare("a", 10.1, "b", 10.0, quantity="time", tolerance=0.0)


def test_a_share_says_negative_when_it_is():
    assert (
        share("hidden", 0.31, 0.5, of="the all-reduce")
        == "hidden: 62% of the all-reduce (0.31 of 0.5)"
    )
    assert share("hidden", -0.26, 1.0).startswith("hidden: negative: -26%")
    assert share("hidden", 0.0, 1.0).startswith("hidden: none of")


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="quantity"):
        compare("a", 1.0, "b", 1.0, quantity="speed")
    with pytest.raises(ValueError, match="reference"):
        compare("a", 1.0, "b", 0.0)
