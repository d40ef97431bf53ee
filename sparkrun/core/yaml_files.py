"""YAML files that users hand to sparkrun (recipes, the configuration), loaded within bounds.

A few hundred bytes of YAML aliases can stand for billions of nodes ("billion
laughs"), an alias inside its own anchor makes a structure that contains
itself, and deep nesting exhausts Python's recursion limit. The loader counts
while it composes, before any Python object exists: alias uses, nodes (an
alias counts as every node it stands for) and nesting depth. Each failure is
one line naming the file, the line and the limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sparkrun.core.short_repr import shorten
from sparkrun.core.text_files import read_text_file
from sparkrun.errors import SparkrunError

__all__ = ["MAX_ALIASES", "MAX_DEPTH", "MAX_FILE_BYTES", "MAX_NODES", "load_yaml_file"]

MAX_FILE_BYTES = 1 << 20
MAX_ALIASES = 64
MAX_NODES = 100_000
MAX_DEPTH = 64
_MAX_PROBLEM_CHARS = 200


class _Refused(Exception):
    """A document broke a bound; carries the problem and the YAML position."""

    def __init__(self, problem: str, mark: Any, detail: str) -> None:
        super().__init__(problem)
        self.problem, self.line, self.detail = problem, mark.line + 1, detail


def _expanded_size(node: yaml.Node, budget: int) -> int:
    """Nodes under ``node``, aliases expanded; stops counting past ``budget``."""
    count, stack = 0, [node]
    while stack and count <= budget:
        node = stack.pop()
        count += 1
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.append(key)
                stack.append(value)
    return count


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses documents beyond the module's bounds."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._aliases = 0
        self._nodes = 0
        self._depth = 0
        self._complete: set[str] = set()  # anchors whose node is fully composed

    def _count(self, nodes: int, mark: Any) -> None:
        self._nodes += nodes
        if self._nodes > MAX_NODES:
            raise _Refused("has too many YAML nodes, counting what aliases stand for", mark, f"limit {MAX_NODES}")

    def compose_node(self, parent: Any, index: Any) -> Any:
        # types-PyYAML leaves Parser.peek_event unannotated; where a node is composed, it is a node's event.
        event: yaml.NodeEvent = self.peek_event()  # type: ignore[no-untyped-call]
        mark = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Refused("uses too many YAML aliases", mark, f"limit {MAX_ALIASES}")
            anchor = event.anchor
            target = self.anchors.get(anchor)
            if target is not None and anchor is not None:  # an undefined alias is reported by the composer
                if anchor not in self._complete:
                    raise _Refused("has a YAML alias inside its own anchor", mark, f"alias *{shorten(anchor)}")
                self._count(_expanded_size(target, MAX_NODES - self._nodes), mark)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused("is nested too deeply", mark, f"limit {MAX_DEPTH} levels")
        self._count(1, mark)
        node = super().compose_node(parent, index)
        self._depth -= 1
        if event.anchor is not None:
            self._complete.add(event.anchor)
        return node

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except ValueError as error:  # a scalar Python cannot hold: 5000 digits, month 13
            raise yaml.constructor.ConstructorError(None, None, str(error), node.start_mark) from None


def _load(text: str) -> tuple[Any, yaml.Node | None]:
    loader = _BoundedLoader(text)  # the reader refuses unprintable characters right here
    try:
        node = loader.get_single_node()
        return (loader.construct_document(node) if node is not None else None), node
    finally:
        loader.dispose()


def _yaml_problem(error: yaml.YAMLError, text: str) -> tuple[int | None, str]:
    """The line (if known) and a one-line description of a YAML error."""
    if isinstance(error, yaml.reader.ReaderError):  # no mark; position is an index into text
        line = text.count("\n", 0, error.position) + 1
        return line, f"unacceptable character #x{error.character:04x}: {error.reason}"
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or "unreadable YAML"
    context = getattr(error, "context", None)  # "while parsing a block mapping", "expected a single document"
    if context:
        problem = f"{context}, {problem}"
    return (mark.line + 1 if mark is not None else None), problem


def load_yaml_file(path: Path, *, what: str, error: type[SparkrunError]) -> tuple[Any, yaml.Node | None]:
    """The data of the single YAML document in ``path``, and its node tree (for line numbers).

    ``what`` names the file in messages ("recipe"); every failure raises
    ``error``. Besides the bounds of :func:`read_text_file`
    (``MAX_FILE_BYTES``), a document may use at most ``MAX_ALIASES`` aliases,
    stand for at most ``MAX_NODES`` nodes with aliases expanded, nest at most
    ``MAX_DEPTH`` levels, and contain no alias inside its own anchor.
    """
    text = read_text_file(path, what=what, limit=MAX_FILE_BYTES, error=error)
    try:
        data, node = _load(text)
    except _Refused as refused:
        raise error(f"{what} {refused.problem} (path={path}, line {refused.line}, {refused.detail})") from None
    except yaml.YAMLError as exc:
        line, problem = _yaml_problem(exc, text)
        where = f"{path}:{line}" if line is not None else str(path)
        raise error(f"{where}: malformed YAML: {shorten(problem, _MAX_PROBLEM_CHARS)}") from exc
    return data, node
