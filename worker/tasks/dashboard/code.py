"""What a page's scripts do, read from their parse: a 2D canvas and an animation loop.

A name in a comment or a string is not code. A page draws on a 2D canvas when it has a
canvas (a ``<canvas>`` tag in its markup, in markup a script writes, or one a script makes
with ``createElement('canvas')``) and a script calls ``getContext('2d')`` (the argument a
literal, or a name bound to one). It runs an animation loop when ``requestAnimationFrame``
is named in its code: called, or handed on (``const tick = requestAnimationFrame``). The
markup is read once for this and the load analysis (:mod:`worker.tasks.dashboard.markup`,
:mod:`worker.tasks.dashboard.loads`) and the scripts with tree-sitter, as the load analysis
reads them; a script that names none of these words is not parsed at all, and a page whose
every finding a scan of its scripts' text is sure of (:mod:`worker.tasks.dashboard.scan`)
needs no parse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from worker.tasks.dashboard.grammar import arguments, parse_bytes, string_text, text
from worker.tasks.dashboard.markup import Markup, StartTag, read_markup
from worker.tasks.dashboard.scan import sure_of

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = ["PageCode", "page_code"]

#: Words one of which a script must contain, in any case, to be worth a parse. Looked for in
#: the script's lower-cased text: a case-blind regular expression over a dashboard's 16 KB
#: took 0.59 ms, the lowering and the four searches 0.013 ms.
_HINTS = ("requestanimationframe", "getcontext", "createelement", "<canvas")
#: ``<script type>`` values whose text is JavaScript.
_JS_TYPES = frozenset({"", "module", "text/javascript", "application/javascript"})
#: How deep markup inside script strings is read.
_MAX_DEPTH = 2


@dataclass(frozen=True)
class PageCode:
    """What the page's markup and scripts were found to do."""

    canvas: bool
    """A canvas is in the markup, or a script makes one."""
    context_2d: bool
    """A script asks a canvas for its 2D context."""
    animation_frame: bool
    """A script names ``requestAnimationFrame`` in its code."""


def page_code(page: str | Markup) -> PageCode:
    """Read what a page draws with and how it animates.

    Args:
        page: The page, or its markup as read already.
    """
    return _read(read_markup(page) if isinstance(page, str) else page, depth=0)


def scripts_of(markup: Markup) -> tuple[bool, list[str]]:
    """Whether the markup has a ``<canvas>`` tag, and its scripts (``on*`` handlers and the
    text of each JavaScript ``<script>``), in document order."""
    canvas, scripts = False, []
    for item in markup.items:
        if isinstance(item, StartTag):
            canvas = canvas or item.tag == "canvas"
            scripts += [v for name, v in item.attrs.items() if name.startswith("on")]
        elif item.tag == "script" and item.type in _JS_TYPES:
            scripts.append(item.text)
    return canvas, scripts


def _read(markup: Markup, *, depth: int) -> PageCode:
    canvas, scripts = scripts_of(markup)
    scripts = [script for script in scripts if _hinted(script)]
    found_canvas, context_2d, frame = canvas, False, False
    # A scan of the text is sure of what most pages do, for a tenth of a parse; what it is
    # not sure of, the parse decides.
    for script in scripts:
        sure = sure_of(script)
        found_canvas, context_2d = found_canvas or sure.canvas, context_2d or sure.context_2d
        frame = frame or sure.animation_frame
    if found_canvas and context_2d and frame:
        return PageCode(found_canvas, context_2d, frame)
    context_2d, frame = False, False
    for script in scripts:
        found = _script(script, depth=depth)
        canvas, context_2d = canvas or found.canvas, context_2d or found.context_2d
        frame = frame or found.animation_frame
    return PageCode(canvas, context_2d, frame)


def _hinted(script: str) -> bool:
    lowered = script.lower()
    return any(word in lowered for word in _HINTS)


def _script(source: str, *, depth: int) -> PageCode:
    # The words are found by a scan of the text and judged by the node they fall in: a
    # query over every identifier would test each one's text in Python.
    data = source.encode("utf-8")
    root = parse_bytes("js", data)
    raf = b"requestAnimationFrame"
    frame = any(_is_name(node, raf.decode()) for node in _at(root, data, raf))
    canvas = context_2d = False
    for word in (b"getContext", b"createElement"):
        for node in _at(root, data, word):
            if not _is_name(node, word.decode()):
                continue
            call = node.parent
            if call is not None and node.type == "property_identifier":
                call = call.parent  # the member expression's call
            if call is None or call.type != "call_expression":
                continue
            args = arguments(call)
            value = _value(args[0], root, data) if args else ""
            if word == b"getContext" and value == "2d":
                context_2d = True
            elif word == b"createElement" and value.lower() == "canvas":
                canvas = True
    if depth < _MAX_DEPTH and not canvas:
        for node in _at(root, data, b"<canvas", ignore_case=True):
            string = _enclosing_string(node)
            if (
                string is not None
                and _read(read_markup(string_text(string)), depth=depth + 1).canvas
            ):
                canvas = True
                break
    return PageCode(canvas, context_2d, frame)


#: The node types a name is code in (called, handed on, a property of an object).
_NAMES = frozenset({"identifier", "property_identifier", "shorthand_property_identifier"})


def _is_name(node: Node, name: str) -> bool:
    """True when ``node`` is the name ``name`` in code (not a longer name, a comment, a string)."""
    return node.type in _NAMES and text(node) == name


def _at(root: Node, data: bytes, word: bytes, *, ignore_case: bool = False) -> list[Node]:
    """The smallest node at each occurrence of ``word`` in the script."""
    haystack = data.lower() if ignore_case else data
    found, at = [], haystack.find(word)
    while at >= 0:
        node = root.descendant_for_byte_range(at, at + len(word))
        if node is not None:
            found.append(node)
        at = haystack.find(word, at + len(word))
    return found


def _value(node: Node, root: Node, data: bytes) -> str:
    """A call's argument as a string: a literal, or the literal a name is bound to."""
    if node.type in ("string", "template_string"):
        return string_text(node).strip()
    if node.type != "identifier":
        return ""
    name = text(node).encode("utf-8")
    for use in _at(root, data, name):
        declarator = use.parent
        if (
            declarator is not None
            and declarator.type == "variable_declarator"
            and declarator.child_by_field_name("name") == use
        ):
            value = declarator.child_by_field_name("value")
            if value is not None and value.type in ("string", "template_string"):
                return string_text(value).strip()
    return ""


def _enclosing_string(node: Node | None) -> Node | None:
    while node is not None and node.type not in ("string", "template_string"):
        if node.type in ("comment", "program"):
            return None
        node = node.parent
    return node
