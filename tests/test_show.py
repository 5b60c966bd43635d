"""Tests of chapter20.core.show: excerpts of the package's source as a notebook shows them."""

import pytest

from chapter20.core.show import show_code
from chapter20.techniques.sharding import ShardedEmbedding
from chapter20.training.trainer import Trainer


def test_an_excerpt_is_the_source_with_its_file_and_line_numbers():
    excerpt = show_code(ShardedEmbedding.forward)
    import inspect

    source, first = inspect.getsourcelines(ShardedEmbedding.forward)
    assert excerpt.path == "chapter20/techniques/sharding.py"
    assert excerpt.numbers[0] == first and excerpt.lines[0].startswith("def forward(")
    assert str(excerpt).splitlines()[0] == f"# {excerpt.header}"
    assert "ShardedEmbedding.forward" in excerpt.header
    for number, line in zip(excerpt.numbers, excerpt.lines):  # each line is that file line
        assert source[number - first].strip() == line.strip()


def test_the_docstring_is_skipped_and_the_gap_shows():
    excerpt = show_code(Trainer.step, stop="return StepResult", max_lines=80)
    assert '"""' not in excerpt.code
    assert "(docstring skipped)" in excerpt.header
    assert excerpt.numbers[1] > excerpt.numbers[0] + 1  # the lines of the docstring are missing
    full = show_code(Trainer.step, stop="return StepResult", docstring=True, max_lines=80)
    assert '"""' in full.code and "skipped" not in full.header


def test_start_and_stop_select_the_essential_lines():
    excerpt = show_code(Trainer.step, start="if self.scaler is not None:", stop="self.steps += 1")
    assert excerpt.lines[0] == "if self.scaler is not None:"  # dedented
    assert excerpt.lines[-1] == "self.steps += 1"
    assert "<div" in excerpt._repr_html_() and "self" in excerpt._repr_html_()


def test_bad_selections_are_refused_with_what_went_wrong():
    with pytest.raises(ValueError, match="start='no such line'"):
        show_code(Trainer.step, start="no such line")
    with pytest.raises(ValueError, match="max_lines=3"):
        show_code(Trainer.step, max_lines=3)
    with pytest.raises(TypeError, match="with source"):
        show_code(len)
