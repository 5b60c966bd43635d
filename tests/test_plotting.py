"""chapter20.plotting: the house style helpers."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from chapter20.plotting import (  # noqa: E402
    CATEGORY_COLORS,
    byte_scale,
    new_figure,
    new_panels,
    stacked_memory_bars,
)


def test_byte_scale():
    assert byte_scale("MiB") == 2**20
    with pytest.raises(ValueError, match="unit"):
        byte_scale("MB")


def test_stacked_bars_stack_in_the_unit_asked():
    ax = stacked_memory_bars(
        ["a", "b"],
        [{"parameters": 2**20, "gradients": 2**20}, {"activations": 3 * 2**20}],
        title="t",
    )
    tops = sorted({round(p.get_y() + p.get_height(), 6) for p in ax.patches})
    assert tops[-1] == 3.0  # both bars reach 2 and 3 MiB; the tallest is 3 MiB
    assert ax.get_ylabel() == "memory (MiB)"
    assert len(ax.patches) == 2 * len(CATEGORY_COLORS)


def test_stacked_bars_reject_mismatched_lengths():
    with pytest.raises(ValueError, match="labels"):
        stacked_memory_bars(["a"], [], title="t")


def test_figure_helpers_label_axes():
    _, ax = new_figure("title", "x (units)", "y (units)")
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("title", "x (units)", "y (units)")
    fig, axes = new_panels(3, "three")
    assert len(axes) == 3 and fig._suptitle.get_text() == "three"
