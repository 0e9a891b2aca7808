"""Parsing a page's scripts and styles with tree-sitter's grammars, and reading the trees.

The grammars load with the first page parsed, not with this module: every worker imports
the checks, and one that never judges a page need not load them. Queries are compiled once
per process.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Language, Node, Parser, Query

__all__ = [
    "arguments",
    "called_name",
    "captures",
    "parse",
    "parse_bytes",
    "string_text",
    "text",
]


@cache
def _language(name: str) -> tuple[Language, Parser]:
    import tree_sitter_css
    import tree_sitter_javascript
    from tree_sitter import Language, Parser

    module = tree_sitter_css if name == "css" else tree_sitter_javascript
    language = Language(module.language())
    return language, Parser(language)


@cache
def _query(name: str, source: str) -> Query:
    from tree_sitter import Query

    return Query(_language(name)[0], source)


def parse(name: str, source: str) -> Node:
    """The tree of ``source`` in the grammar ``name`` (``js`` or ``css``)."""
    return parse_bytes(name, source.encode("utf-8"))


def parse_bytes(name: str, data: bytes) -> Node:
    """The tree of UTF-8 ``data`` in the grammar ``name`` (its nodes' offsets are of it)."""
    return _language(name)[1].parse(data).root_node


def captures(name: str, query: str, root: Node) -> dict[str, list[Node]]:
    """The nodes under ``root`` that ``query`` captures, by capture name, each list in
    document order (the query engine's own order varies from call to call)."""
    from tree_sitter import QueryCursor

    found = QueryCursor(_query(name, query)).captures(root)
    return {key: sorted(nodes, key=lambda n: n.start_byte) for key, nodes in found.items()}


def text(node: Node | None) -> str:
    """A node's source text."""
    return node.text.decode("utf-8", "replace") if node is not None and node.text else ""


def arguments(node: Node) -> list[Node]:
    """The arguments of a call or construction, comments left out."""
    args = node.child_by_field_name("arguments")
    return [a for a in args.named_children if a.type != "comment"] if args is not None else []


def called_name(node: Node | None) -> str:
    """The called or assigned name: ``fetch`` of ``window.fetch``, ``src`` of ``img.src``."""
    if node is None:
        return ""
    if node.type == "identifier":
        return text(node)
    if node.type == "member_expression":
        return text(node.child_by_field_name("property"))
    return ""


def string_text(node: Node) -> str:
    """A string literal's text, or a template's with each ``${...}`` left as is."""
    if node.type == "string":
        return "".join(text(c) for c in node.named_children)
    if node.type == "template_string":
        return text(node)[1:-1]
    return ""
