"""What an artifact would load from the network, found by parsing it, not by pattern.

The page is parsed as a browser reads it: markup with the standard library's
:class:`html.parser.HTMLParser` (:mod:`worker.tasks.dashboard.markup`), scripts and styles
with tree-sitter's JavaScript and CSS grammars. Only the places that make a browser fetch
something count:

* markup: ``src`` (and ``srcset``, ``poster``, ``data``, ``background``) of the elements that
  load them, and ``href`` only where the element loads it (``<link rel=stylesheet>``, icons,
  preloads and preconnects, SVG ``<image>`` and ``<use>``), never ``<a href>``;
* styles (``<style>``, ``style=`` and CSS in script strings): ``url()``, ``image-set()`` and
  ``@import``;
* scripts (``<script>``, ``on*=`` handlers and markup in script strings): the targets of
  ``fetch``, ``XMLHttpRequest.open``, ``import`` and ``import()``, ``importScripts``,
  ``new EventSource/Worker/SharedWorker/Audio/Request``, ``.src``/``.srcset``/``.poster``
  assignments (``new Image().src``) and ``setAttribute('src', ...)``; any
  ``new WebSocket(...)`` or ``navigator.sendBeacon(...)``, whatever its argument.

A target is remote when its leading text is an absolute network URL (``https://``, ``wss://``,
``ftp://``, ``file://``) or protocol-relative (``//host``); a script target may be a literal,
a template, a concatenation that starts with one, or a variable bound to one. A URL in a link,
a comment, or a string that nothing loads is not a load. This is the cheap first look; the
browser's network cut, which sees every request actually made, has the final word.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from worker.tasks.dashboard.grammar import (
    arguments,
    called_name,
    captures,
    parse,
    string_text,
    text,
)
from worker.tasks.dashboard.markup import Markup, StartTag, read_markup

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = ["network_loads"]

#: Text that, at the start of a load's target, reaches the network.
_REMOTE_RE = re.compile(r"^\s*(?:(?:https?|wss?|ftp|file):)?//", re.I)
#: Attributes that load their URL, per element.
_LOADING_ATTRS: dict[str, tuple[str, ...]] = {
    "script": ("src",),
    "img": ("src", "srcset"),
    "iframe": ("src",),
    "frame": ("src",),
    "embed": ("src",),
    "source": ("src", "srcset"),
    "video": ("src", "poster"),
    "audio": ("src",),
    "track": ("src",),
    "object": ("data",),
    "input": ("src",),
    "image": ("href", "xlink:href"),
    "use": ("href", "xlink:href"),
    "feimage": ("href", "xlink:href"),
    "body": ("background",),
    "table": ("background",),
    "td": ("background",),
    "th": ("background",),
}
#: ``<link rel>`` values that make the browser fetch (or connect to) the ``href``.
_LOADING_RELS = frozenset(
    {
        "stylesheet",
        "icon",
        "apple-touch-icon",
        "apple-touch-icon-precomposed",
        "mask-icon",
        "manifest",
        "preload",
        "prefetch",
        "modulepreload",
        "preconnect",
        "dns-prefetch",
        "prerender",
        "import",
    }
)
#: ``<script type>`` values whose text is JavaScript.
_JS_TYPES = frozenset(
    {"", "module", "text/javascript", "application/javascript", "text/ecmascript"}
)
#: Constructors whose first argument is fetched.
_LOADING_CONSTRUCTORS = frozenset({"EventSource", "Worker", "SharedWorker", "Audio", "Request"})
#: Attribute names that ``setAttribute`` makes load.
_LOADING_SET_ATTRS = frozenset({"src", "srcset", "poster", "data", "background"})
#: First argument of ``XMLHttpRequest.open``.
_HTTP_METHOD_RE = re.compile(r"^(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS)$", re.I)
#: A script string that holds markup with at least one element.
_MARKUP_RE = re.compile(r"<[a-zA-Z][\w:-]*[\s/>]")
#: Markup inside script strings inside markup is followed this many levels deep.
_MAX_DEPTH = 3


def network_loads(page: str | Markup) -> list[str]:
    """Every remote load in ``page``, repeats included.

    Args:
        page: A whole page, or a fragment of markup, or its markup as read already.

    Returns:
        The remote URLs the page would load, or the call itself (``new WebSocket(url)``)
        where the call reaches the network whatever its argument.
    """
    markup = read_markup(page) if isinstance(page, str) else page
    return list(_markup_loads(markup, depth=0))


def _markup_loads(markup: Markup, *, depth: int) -> Iterator[str]:
    for item in markup.items:
        if isinstance(item, StartTag):
            yield from _tag_loads(item, depth=depth)
        elif item.tag == "style":
            yield from _css_loads(item.text, declarations=False)
        elif item.type in _JS_TYPES:
            yield from _js_loads(item.text, depth=depth)


def _tag_loads(start: StartTag, *, depth: int) -> Iterator[str]:
    tag, values = start.tag, start.attrs
    targets = [values[name] for name in _LOADING_ATTRS.get(tag, ()) if name in values]
    if "srcset" in values and "srcset" in _LOADING_ATTRS.get(tag, ()):
        # candidates are "url 1x, url 2x": a candidate's URL is its first word
        targets.remove(values["srcset"])
        targets += [c.split()[0] for c in values["srcset"].split(",") if c.split()]
    rels = set(values.get("rel", "").lower().split())
    if tag == "link" and rels & _LOADING_RELS:
        targets.append(values.get("href", ""))
    yield from _remote(targets)
    if "style" in values:
        yield from _css_loads(values["style"], declarations=True)
    for name, value in values.items():
        if name.startswith("on"):
            yield from _js_loads(value, depth=depth)


#: The nodes each grammar's scan looks at, found by tree-sitter's query engine (walking
#: every node from Python would cost a few hundred milliseconds on a large page). The
#: JavaScript query keeps only the calls, constructions and assignments that load, and the
#: strings that may hold markup or CSS, so a dashboard's thousands of other calls and
#: strings never reach Python; the names strings are bound to are read only when a load's
#: target is a name (``js_bindings``).
_QUERIES = {
    "css": "(import_statement) @import (call_expression) @call",
    "js": r"""
        (call_expression
          function: [(identifier) @name (member_expression property: (property_identifier) @name)]
          (#any-of? @name "fetch" "importScripts" "open" "setAttribute" "sendBeacon")) @call
        (call_expression function: (import)) @call
        (new_expression
          constructor: [
            (identifier) @name (member_expression property: (property_identifier) @name)
          ]
          (#any-of? @name "WebSocket" "EventSource" "Worker" "SharedWorker" "Audio" "Request")) @new
        (assignment_expression
          left: [(identifier) @name (member_expression property: (property_identifier) @name)]
          (#any-of? @name "src" "srcset" "poster")) @assign
        (import_statement) @import (export_statement) @import
        ([(string) (template_string)] @string (#match? @string "<[a-zA-Z]|url\\(|@import"))
    """,
    "js_bindings": "(variable_declarator) @bind (assignment_expression) @bind",
}
#: What may follow a called name on the way to its arguments: whitespace, then the ``(``,
#: a ``?.``, the backquote of a tagged template (``fetch`https://...```) or a comment (a
#: name followed by a comment is taken as a call, unread).
_CALL_GAP = r"[\s\ufeff]*(?:\(|\?\.|`|/[/*])"
#: What a script that loads something contains, at the start of the load's name: every
#: load the scan finds is a call of one of ``fetch``, ``importScripts``, ``open``,
#: ``setAttribute`` or ``sendBeacon``, a construction or assignment naming one of the other
#: words, an ``import`` or ``export``, or a string holding markup or CSS (the very test the
#: scan applies to each string). A script in which none is found is not parsed at all; on a
#: typical dashboard that skips the whole parse.
_JS_HINTS = (
    *("fetch", "import", "open", "setAttribute", "sendBeacon", "export", "WebSocket"),
    *("EventSource", "SharedWorker", "Worker", "Audio", "Request", "src", "poster", "url("),
    *("@import", "<"),
)
_JS_LOAD_RE = re.compile(
    rf"\b(?:fetch|importScripts|open|setAttribute|sendBeacon){_CALL_GAP}"
    r"|\b(?:import|export|WebSocket|EventSource|Worker|SharedWorker|Audio|Request|src|srcset"
    r"|poster)\b|url\(|@import|" + _MARKUP_RE.pattern
)
#: What a stylesheet that loads something contains, lowercased (CSS ignores case there).
_CSS_HINTS = ("url(", "image-set(", "@import")


def _may_load_js(source: str) -> bool:
    """Whether the script names anything that loads (a cheap look before a parse)."""
    # Finding each word is a scan in C; the pattern is tried only where one is found.
    for word in _JS_HINTS:
        at = source.find(word)
        while at >= 0:
            if _JS_LOAD_RE.match(source, at):
                return True
            at = source.find(word, at + 1)
    return False


def _may_load_css(css: str) -> bool:
    lowered = css.lower()
    return any(word in lowered for word in _CSS_HINTS)


# --- CSS -----------------------------------------------------------------------------------


def _css_loads(css: str, *, declarations: bool) -> Iterator[str]:
    """Remote ``url()``, ``image-set()`` and ``@import`` targets of a stylesheet or style."""
    if not _may_load_css(css):
        return
    nodes = captures("css", _QUERIES["css"], parse("css", f"a{{{css}}}" if declarations else css))
    for node in nodes.get("import", []):
        yield from _remote([_css_string(c) for c in node.named_children])
    for node in nodes.get("call", []):
        name = next((text(c) for c in node.children if c.type == "function_name"), "").lower()
        arguments = next((c for c in node.named_children if c.type == "arguments"), None)
        if arguments is None:
            continue
        if name == "url":
            yield from _remote([text(arguments)[1:-1].strip().strip("'\"")])
        elif name in ("image-set", "-webkit-image-set"):
            yield from _remote([_css_string(c) for c in arguments.named_children])


def _css_string(node: Node) -> str:
    if node.type != "string_value":
        return ""
    return "".join(text(c) for c in node.named_children if c.type == "string_content")


def _remote(targets: list[str]) -> Iterator[str]:
    for target in targets:
        if _REMOTE_RE.match(target):
            yield target.strip()


# --- JavaScript ----------------------------------------------------------------------------


def _js_loads(source: str, *, depth: int) -> Iterator[str]:
    """Remote targets of the script's loading calls, and of markup or CSS in its strings."""
    if not _may_load_js(source):
        return
    root = parse("js", source)
    nodes = captures("js", _QUERIES["js"], root)
    bindings = _Bindings(root)
    for node in nodes.get("call", []):
        yield from _call_loads(node, bindings)
    for node in nodes.get("new", []):
        yield from _new_loads(node, bindings)
    for node in nodes.get("import", []):
        yield from _remote(_leading(node.child_by_field_name("source"), bindings))
    for node in nodes.get("assign", []):
        yield from _remote(_leading(node.child_by_field_name("right"), bindings))
    if depth < _MAX_DEPTH:
        for node in nodes.get("string", []):
            yield from _embedded_loads(string_text(node), depth=depth + 1)


class _Bindings:
    """Names bound to string expressions anywhere in a script (``const API = "https:…"``),
    read from its tree the first time a load's target is a name."""

    def __init__(self, root: Node) -> None:
        self._root = root
        self._names: dict[str, list[str]] | None = None

    def get(self, name: str, default: list[str]) -> list[str]:
        if self._names is None:
            binds = captures("js", _QUERIES["js_bindings"], self._root).get("bind", [])
            self._names = _string_bindings(binds)
        return self._names.get(name, default)


def _call_loads(node: Node, bindings: _Bindings) -> Iterator[str]:
    function = node.child_by_field_name("function")
    args = arguments(node)
    name = called_name(function) if function is not None else ""
    if (function is not None and function.type == "import") or name in ("fetch", "importScripts"):
        for arg in args if name == "importScripts" else args[:1]:
            yield from _remote(_leading(arg, bindings))
    elif name == "open" and len(args) >= 2 and _HTTP_METHOD_RE.match(string_text(args[0])):
        yield from _remote(_leading(args[1], bindings))
    elif name == "setAttribute" and len(args) >= 2:
        if string_text(args[0]).lower() in _LOADING_SET_ATTRS:
            yield from _remote(_leading(args[1], bindings))
    elif name == "sendBeacon":
        yield text(node)


def _new_loads(node: Node, bindings: _Bindings) -> Iterator[str]:
    name = called_name(node.child_by_field_name("constructor"))
    args = arguments(node)
    if name == "WebSocket":
        urls = list(_remote(_leading(args[0], bindings))) if args else []
        yield from urls or [text(node)]
    elif name in _LOADING_CONSTRUCTORS and args:
        yield from _remote(_leading(args[0], bindings))


def _leading(node: Node | None, bindings: Mapping[str, list[str]] | _Bindings) -> list[str]:
    """The texts an expression can start with: its literal, or its left-most operand's."""
    if node is None:
        return []
    if node.type in ("string", "template_string"):
        return [string_text(node)]
    if node.type == "binary_expression":
        return _leading(node.child_by_field_name("left"), bindings)
    if node.type == "parenthesized_expression":
        return _leading(node.named_children[0] if node.named_children else None, bindings)
    if node.type == "ternary_expression":
        return [
            *_leading(node.child_by_field_name("consequence"), bindings),
            *_leading(node.child_by_field_name("alternative"), bindings),
        ]
    if node.type == "identifier":
        return bindings.get(text(node), [])
    return []


def _string_bindings(nodes: list[Node]) -> dict[str, list[str]]:
    """Names bound to string expressions anywhere in the script (``const API = "https:…"``)."""
    bindings: dict[str, list[str]] = {}
    for node in nodes:
        if node.type == "variable_declarator":
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        elif node.type == "assignment_expression":
            name, value = node.child_by_field_name("left"), node.child_by_field_name("right")
        else:
            continue
        if name is not None and name.type == "identifier":
            bindings.setdefault(text(name), []).extend(_leading(value, {}))
    return bindings


def _embedded_loads(text: str, *, depth: int) -> Iterator[str]:
    """Loads of markup (``innerHTML``) or CSS (``style.background``) held in a string."""
    if _MARKUP_RE.search(text):
        yield from _markup_loads(read_markup(text), depth=depth)
    elif "url(" in text or "@import" in text:
        if "@import" in text:
            yield from _css_loads(text, declarations=False)
            return
        # `style.cssText = "background: url(…)"` holds declarations, `style.background =
        # "url(…)"` a value: read it both ways, once each.
        found = [*_css_loads(text, declarations=True), *_css_loads(f"x:{text}", declarations=True)]
        yield from dict.fromkeys(found)
