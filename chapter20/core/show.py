"""Show the code a notebook proves: an excerpt of the package's own source, in the notebook.

A proof is only as convincing as the reader's view of what it proves. :func:`show_code` puts
the essential lines of a function, method or class in front of the reader — read from the
package's source file at the moment the notebook runs, so the excerpt cannot drift from the
code that is then executed and proven — with its file and line numbers, syntax-highlighted in
Jupyter (HTML) and as numbered plain text everywhere else (a terminal, a diff, nbval).

    show_code(ShardedEmbedding.forward)                                  # the whole method
    show_code(Trainer.step, start="def step", stop="return StepResult")  # from … to …
"""

from __future__ import annotations

import ast
import html
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chapter20.core.checks import check_int

__all__ = ["CodeExcerpt", "show_code"]

_REPOSITORY = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class CodeExcerpt:
    """Lines of ``path`` (relative to the repository) holding ``name``: ``numbers[i]`` is the
    line number in the file of ``lines[i]`` (a skipped docstring leaves a gap). Displays as
    highlighted HTML in Jupyter and as numbered text otherwise."""

    path: str
    name: str
    numbers: tuple[int, ...]
    lines: tuple[str, ...]

    @property
    def header(self) -> str:
        skipped = (
            " (docstring skipped)"
            if len(self.numbers) != self.numbers[-1] - self.numbers[0] + 1
            else ""
        )
        return f"{self.path}, lines {self.numbers[0]}–{self.numbers[-1]}{skipped}: {self.name}"

    @property
    def code(self) -> str:
        return "\n".join(self.lines)

    def __str__(self) -> str:
        width = len(str(self.numbers[-1]))
        body = [f"{n:>{width}}  {line}".rstrip() for n, line in zip(self.numbers, self.lines)]
        return "\n".join([f"# {self.header}", *body])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        caption = (
            f"<div style='font-size:85%;color:#555'><code>{html.escape(self.header)}</code></div>"
        )
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import PythonLexer
        except ImportError:  # pygments comes with Jupyter; without it, plain preformatted text
            return caption + f"<pre>{html.escape(self.code)}</pre>"
        return caption + highlight(self.code, PythonLexer(), HtmlFormatter(noclasses=True))


def _docstring_lines(source: str) -> set[int]:
    """0-based indices of the lines of the docstring of the first ``def``/``class`` in
    ``source`` (empty when it has none)."""
    tree = ast.parse(textwrap.dedent(source))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    return set(range(body[0].lineno - 1, body[0].end_lineno))
            return set()
    return set()


def _between(lines: list[str], start: str | None, stop: str | None) -> tuple[int, int]:
    """Indices (inclusive) of the first line containing ``start`` and the first line at or
    after it containing ``stop`` (the whole source when None); ValueError naming what is
    missing."""
    first = 0
    if start is not None:
        found = [i for i, line in enumerate(lines) if start in line]
        if not found:
            raise ValueError(f"start={start!r} is not in the source")
        first = found[0]
    last = len(lines) - 1
    if stop is not None:
        found = [i for i in range(first, len(lines)) if stop in lines[i]]
        if not found:
            raise ValueError(f"stop={stop!r} is not in the source after start={start!r}")
        last = found[0]
    return first, last


def _shown_path(path: Path) -> str:
    try:
        return path.relative_to(_REPOSITORY).as_posix()
    except ValueError:  # an installed copy: the path inside the package
        return "/".join(path.parts[path.parts.index("chapter20") :])


def show_code(
    obj: Callable | type,
    *,
    start: str | None = None,
    stop: str | None = None,
    docstring: bool = False,
    max_lines: int = 60,
) -> CodeExcerpt:
    """The source of ``obj`` (a function, method or class of the package) as a
    :class:`CodeExcerpt` to display (§ of the notebook that shows it): from the first line
    containing ``start`` to the next line containing ``stop`` (both optional, so an excerpt
    follows the code when lines move), without its docstring unless ``docstring``. ValueError
    when the excerpt would pass ``max_lines``: show the essential lines, not a whole module."""
    max_lines = check_int("max_lines", max_lines, 1)
    target = inspect.unwrap(obj)
    try:
        source, first_line = inspect.getsourcelines(target)
        path = Path(inspect.getsourcefile(target) or "").resolve()
    except (TypeError, OSError) as exc:
        raise TypeError(
            f"obj must be a function, method or class with source, got {obj!r}"
        ) from exc
    lines = [line.rstrip("\n") for line in source]
    skipped = set() if docstring else _docstring_lines("".join(source))
    first, last = _between(lines, start, stop)
    kept = [i for i in range(first, last + 1) if i not in skipped]
    if len(kept) > max_lines:
        name = getattr(obj, "__qualname__", obj)
        raise ValueError(
            f"the excerpt of {name} has {len(kept)} lines, more than max_lines={max_lines}: "
            "narrow it with start= and stop="
        )
    text = textwrap.dedent("\n".join(lines[i] for i in kept)).split("\n")
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", str(obj)))
    return CodeExcerpt(_shown_path(path), name, tuple(first_line + i for i in kept), tuple(text))
