"""Notebook 00's measurement (chapter20.labs.nb00_overview): the anatomy of one Adam step."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from chapter20.labs.nb00_overview import anatomy_table, benchmark, plot_anatomy, step_anatomy  # noqa: E402


@pytest.fixture(scope="module")
def small():
    return step_anatomy(2_000, 16, batch_size=32, tokens_per_example=8, device="cpu")


def test_static_components_equal_the_formula_to_the_byte(small):
    # Weights, gradients and Adam state are plain float32 tensors: no tolerance is needed.
    assert small.exact_components() == {
        "parameters": True,
        "gradients": True,
        "optimizer_state": True,
    }
    assert small.num_parameters == 2_000 * 16 + 16 * 16 + 16
    assert small.predicted["parameters"] == 4 * small.num_parameters


def test_adam_ratio_is_three_plus_the_step_counters(small):
    # (4P + 8P + 4 bytes per tensor) / 4P, with 3 parameter tensors.
    expected = 3 + 3 * 4 / (4 * small.num_parameters)
    assert small.adam_memory_ratio() == pytest.approx(expected, rel=1e-12)


def test_peak_exceeds_the_formula_and_names_its_operator(small):
    static = sum(small.predicted.values())
    assert small.peak_bytes > static  # dense gradients and Adam temporaries come on top
    assert small.backward.peak_op and small.step.peak_op
    assert small.backward.breakdown["parameters"] == small.predicted["parameters"]
    assert 0 < small.rows_touched <= 2_000


def test_deterministic_for_a_seed():
    a = step_anatomy(500, 8, batch_size=8, tokens_per_example=4, device="cpu")
    b = step_anatomy(500, 8, batch_size=8, tokens_per_example=4, device="cpu")
    assert a.rows_touched == b.rows_touched
    assert a.backward.breakdown == b.backward.breakdown
    assert a.step.breakdown == b.step.breakdown


def test_table_and_plot(small):
    table = anatomy_table([small])
    assert list(table["phase"]) == ["forward+backward", "optimizer.step", "formula 4+4+8 B/param"]
    assert table["peak / weights"].iloc[2] == pytest.approx(4.0, abs=0.01)
    fig = plot_anatomy([small, small])
    assert len(fig.axes) == 2
    assert all(ax.get_ylabel() == "memory (MiB)" for ax in fig.axes)


def test_benchmark_prints_ratios(capsys):
    benchmark(vocab_sizes=(1_000,))
    out = capsys.readouterr().out
    assert "1,000" in out and "memory method:" in out
    # weights, grads and Adam state: measured / predicted is exactly 1.
    row = next(line for line in out.splitlines() if line.strip().startswith("1,000"))
    assert row.split()[2:5] == ["1.000", "1.000", "1.000"]


def test_rejects_a_bad_vocabulary():
    with pytest.raises(ValueError, match="vocab_size"):
        step_anatomy(0)
