"""Tests of chapter20.core.options: command-line options derived from dataclass fields, nested
configurations, and a refused value reported in one line with exit status 2."""

import argparse
from dataclasses import dataclass

import pytest

from chapter20.core.options import add_options, config_fields, from_options, option, parse_config


@dataclass(frozen=True)
class Inner:
    rate: float = option(0.5, "a rate")
    kind: str = option("a", "a kind", choices=("a", "b"))
    limit: int | None = option(None, "an optional limit")

    def __post_init__(self):
        if self.rate <= 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")


@dataclass(frozen=True)
class Outer:
    name: str = option(help="required: no default")
    steps: int = option(3, "steps")
    fast: bool = option(False, "a switch")
    hidden: int = option(7, "set by code only", cli=False)
    inner: Inner = option(help="the inner group", default_factory=Inner)


def _parser(defaults=None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="demo")
    add_options(parser, Outer, defaults)
    return parser


def test_every_field_becomes_an_option_and_nested_fields_a_group():
    config, _ = parse_config(_parser(), Outer, ["--name", "x"])
    assert config == Outer(name="x")
    config, _ = parse_config(
        _parser(),
        Outer,
        ["--name", "x", "--steps", "9", "--fast", "--rate", "2", "--kind", "b", "--limit", "4"],
    )
    assert config == Outer(name="x", steps=9, fast=True, inner=Inner(2.0, "b", 4))
    assert [f.name for f, _ in config_fields(Outer)] == ["name", "steps", "fast", "inner"]


def test_defaults_come_from_an_instance_and_none_is_spelled_none():
    parser = _parser(Outer(name="d", steps=5, inner=Inner(limit=8)))
    config, _ = parse_config(parser, Outer, [])
    assert (config.name, config.steps, config.inner.limit) == ("d", 5, 8)
    config, _ = parse_config(parser, Outer, ["--limit", "none", "--no-fast"])
    assert config.inner.limit is None and config.fast is False


def test_fixed_fields_override_the_command_line():
    config = from_options(Outer, _parser().parse_args(["--name", "x"]), hidden=11)
    assert config.hidden == 11


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--name", "x", "--rate", "-1"], "demo: error: rate must be > 0, got -1.0"),
        (["--name", "x", "--kind", "c"], "invalid choice: 'c'"),
        (["--name", "x", "--steps", "1.5"], "invalid int value: '1.5'"),
        ([], "the following arguments are required: --name"),
    ],
)
def test_a_refused_value_is_one_line_and_exit_status_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_config(_parser(), Outer, argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2
    assert message in err[-1] and "Traceback" not in "\n".join(err)


def test_config_fields_refuses_what_is_not_a_dataclass():
    with pytest.raises(TypeError, match="dataclass"):
        config_fields(dict)
