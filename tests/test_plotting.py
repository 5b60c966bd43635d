"""chapter20.core.plotting: the house style helpers."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from chapter20.core.plotting import (  # noqa: E402
    CATEGORY_COLORS,
    alt_text,
    byte_scale,
    new_figure,
    new_panels,
    register_alt_text,
    set_alt_text,
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


def test_alt_text_is_built_from_titles_labels_and_legend():
    fig, ax = new_figure("Step time", "batch", "time (ms)")
    ax.plot([1, 2], label="fp32")
    ax.plot([2, 3], label="bf16")
    ax.legend()
    assert alt_text(fig) == "Step time: time (ms) against batch; series: fp32, bf16."
    fig, axes = new_panels(2, "Memory per rank")
    axes[0].set_title("W=2")
    axes[0].bar([0], [1])
    assert alt_text(fig) == "Memory per rank. W=2: values."  # empty panels say nothing
    axes[0].set_title("reduce-scatter\nafter step 1")  # a title that breaks its line
    assert alt_text(fig) == "Memory per rank. reduce-scatter after step 1: values."


def test_alt_text_given_explicitly_wins_and_must_say_something():
    fig, ax = new_figure("t", "x", "y", alt="A line rising from 1 to 2.")
    ax.plot([1, 2])
    assert alt_text(fig) == "A line rising from 1 to 2."
    with pytest.raises(ValueError, match="alt text"):
        set_alt_text(fig, "  ")


def test_figure_outputs_carry_the_alt_text_in_ipython():
    """The PNG of a figure shown in an IPython kernel carries ``alt`` in its metadata (what
    nbconvert writes into the HTML ``<img alt=...>``)."""
    from IPython.core.interactiveshell import InteractiveShell
    from matplotlib.figure import Figure

    shell = InteractiveShell.instance()
    try:
        png = shell.display_formatter.formatters["image/png"]
        png.for_type(Figure, lambda fig: b"\x89PNG fake")  # what the inline backend registers
        fig, ax = new_figure("Loss", "step", "loss")
        ax.plot([3, 2, 1])
        data, metadata = shell.display_formatter.format(fig)
        assert data["image/png"] == b"\x89PNG fake"
        assert metadata["image/png"]["alt"] == "Loss: loss against step."
        assert register_alt_text()  # idempotent: wrapped once
        assert shell.display_formatter.format(fig)[1]["image/png"]["alt"] == alt_text(fig)
    finally:
        InteractiveShell.clear_instance()
