"""Configurations as dataclasses, and command-line options derived from their fields.

A setting is written once: as a field of a frozen dataclass (``TrainConfig``, ``LoopConfig``,
``RunConfig``, ...) declared with :func:`option`, which records its help text and, for a
choice, the allowed values. :func:`add_options` turns the fields into ``argparse`` options
(``chunk_size`` → ``--chunk-size``; a bool → ``--flag/--no-flag``; a field whose type is itself
such a dataclass → an option group of its own fields), and :func:`from_options` builds the
configuration back from the parsed namespace, so the dataclass's own checks judge the values
given on the command line, with the same messages. :func:`parse_config` does both and turns a
value the dataclass refuses into one line on stderr and exit status 2, as argparse does for its
own errors. The scripts and ``chapter20 train`` use these functions; none of them lists its
options by hand.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "option",
    "preset_option",
    "add_options",
    "from_options",
    "config_argv",
    "config_fields",
    "parse_config",
]

#: Metadata keys of :func:`option`.
_HELP, _CHOICES, _CLI = "help", "choices", "cli"


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    choices: Sequence[Any] | None = None,
    cli: bool = True,
    default_factory: Any = dataclasses.MISSING,
    kw_only: bool = False,
) -> Any:
    """A dataclass field with its help text and allowed ``choices`` for the command line;
    ``cli=False`` keeps it off the command line (set by code only)."""
    metadata = {_HELP: help, _CHOICES: tuple(choices) if choices is not None else None, _CLI: cli}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(
            default_factory=default_factory, metadata=metadata, kw_only=kw_only
        )
    return dataclasses.field(default=default, metadata=metadata, kw_only=kw_only)


def preset_option(
    base: type, name: str, default: Any = dataclasses.MISSING, *, default_factory: Any = None
) -> Any:
    """The field ``name`` of the dataclass ``base`` with a preset's own default: its help text and
    choices are the base's (written once); ``default_factory`` for a configuration-valued
    default. Without a default the field becomes a required keyword argument (and a required
    option on the command line)."""
    found = {f.name: f for f in dataclasses.fields(base)} if dataclasses.is_dataclass(base) else {}
    if name not in found:
        raise ValueError(
            f"name must be a field of {getattr(base, '__name__', base)!r}, got {name!r}"
        )
    metadata = found[name].metadata
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=metadata, kw_only=True)
    return dataclasses.field(default=default, metadata=metadata)


def config_fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    """``(field, resolved type)`` of every field of the dataclass ``cls`` that the command line
    sets."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"cls must be a dataclass type, got {cls!r}")
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.metadata.get(_CLI, True)]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _base_type(hint: Any) -> tuple[Any, bool]:
    """(the type without ``None``, whether ``None`` is allowed) of a field's type hint."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return (args[0] if len(args) == 1 else str), len(args) < len(typing.get_args(hint))
    return hint, False


def _parser_for(kind: Any, optional: bool):
    def parse(text: str):
        if optional and text.lower() == "none":
            return None
        return kind(text)

    parse.__name__ = getattr(kind, "__name__", "value")  # argparse names it in its errors
    return parse


def _is_config(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def add_options(
    parser: argparse.ArgumentParser | Any,
    cls: type,
    defaults: Any = None,
    *,
    exclude: Sequence[str] = (),
) -> None:
    """Add one option per command-line field of the dataclass ``cls`` to ``parser`` (a parser
    or an argument group). ``defaults`` (an instance of ``cls``) gives the defaults; without it
    the fields' own defaults are used, and a field without one becomes a required option. A
    field whose type is a dataclass adds a group with that dataclass's fields. Fields named in
    ``exclude`` (at any depth) get no option: :func:`from_options` leaves them at their
    default."""
    _add_fields(parser, parser, cls, defaults, exclude)


def _add_fields(root, target, cls: type, defaults: Any, exclude: Sequence[str]) -> None:
    """:func:`add_options` into ``target``; nested configurations get groups of ``root`` (argparse
    does not nest groups)."""
    for f, hint in config_fields(cls):
        if f.name in exclude:
            continue
        kind, optional = _base_type(hint)
        if defaults is not None:
            default = getattr(defaults, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        help_text = f.metadata.get(_HELP, "")
        if _is_config(kind):
            title = help_text or kind.__name__
            group = getattr(root, "add_argument_group", None)
            nested = None if default is dataclasses.MISSING else default
            _add_fields(root, group(title) if group is not None else target, kind, nested, exclude)
            continue
        kwargs: dict[str, Any] = {"dest": f.name, "help": help_text}
        if default is dataclasses.MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = default
            if kind is not bool:
                kwargs["help"] = f"{help_text} (default: {default})".strip()
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _parser_for(kind, optional)
            kwargs["metavar"] = f.name.upper()
            if f.metadata.get(_CHOICES):
                kwargs["choices"] = f.metadata[_CHOICES] + ((None,) if optional else ())
                kwargs["metavar"] = "{" + ",".join(map(str, f.metadata[_CHOICES])) + "}"
        target.add_argument(_flag(f.name), **kwargs)


def from_options(cls: type, namespace: argparse.Namespace, **fixed: Any) -> Any:
    """The ``cls`` instance that ``namespace`` (parsed with :func:`add_options`) describes; the
    fields of nested dataclasses are read from the same namespace. ``fixed`` gives fields that
    are not on the command line (or overrides them). The dataclass checks every value."""
    values = dict(fixed)
    for f, hint in config_fields(cls):
        if (
            f.name in values
            or not hasattr(namespace, f.name)
            and not _is_config(_base_type(hint)[0])
        ):
            continue
        kind, _ = _base_type(hint)
        values[f.name] = (
            from_options(kind, namespace) if _is_config(kind) else getattr(namespace, f.name)
        )
    return cls(**values)


def _field_default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def config_argv(config: Any, defaults: Any = None) -> list[str]:
    """The command-line options that :func:`parse_config` turns back into ``config`` (a dataclass
    instance whose options :func:`add_options` derived, with ``defaults`` as the parser's
    defaults, if given): one option per field whose value is not the parser's default, nested
    configurations included. A float is written as its ``repr``, which reads back exactly."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"config must be a dataclass instance, got {config!r}")
    argv: list[str] = []
    for f, hint in config_fields(type(config)):
        value = getattr(config, f.name)
        default = getattr(defaults, f.name) if defaults is not None else _field_default(f)
        kind, _ = _base_type(hint)
        if _is_config(kind):
            argv += config_argv(value, None if default is dataclasses.MISSING else default)
        elif kind is bool:
            if value != default:
                argv.append(_flag(f.name) if value else "--no-" + f.name.replace("_", "-"))
        elif value != default or default is dataclasses.MISSING:
            text = "none" if value is None else repr(value) if isinstance(value, float) else value
            argv += [_flag(f.name), str(text)]
    return argv


def parse_config(
    parser: argparse.ArgumentParser,
    cls: type,
    argv: Sequence[str] | None = None,
    *,
    check: Callable[[Any], None] | None = None,
    **fixed: Any,
) -> tuple[Any, argparse.Namespace]:
    """Parse ``argv`` with ``parser`` (to which :func:`add_options` added ``cls``'s options) and
    build the configuration (:func:`from_options`). A value the dataclass refuses, or that
    ``check(config)`` refuses (checks that need the machine, e.g. that a directory can be
    created), ends the program as argparse's own errors do: ``PROG: error: MESSAGE`` on one line
    of stderr, exit status 2, no traceback. Returns the configuration and the namespace (for
    options that are not fields)."""
    namespace = parser.parse_args(argv)
    try:
        config = from_options(cls, namespace, **fixed)
        if check is not None:
            check(config)
        return config, namespace
    except (ValueError, TypeError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
