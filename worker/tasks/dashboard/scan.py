"""What a scan of a script's text can be sure of, without a parse.

A page's scripts are parsed with tree-sitter (:mod:`worker.tasks.dashboard.code`) to tell
their code from their comments, strings and regular expressions: about 2 ms for a
dashboard's 15 KB, most of what the static checks of a handoff cost. A scan of the text
tells them apart too, in a tenth of that, wherever it is sure: it walks from one quote,
slash, backtick or brace to the next, and gives up (:func:`code_spans` returns None) on
what it cannot read the way a parser would: a ``/`` after a ``}``, a backslash outside a
literal, an HTML-like comment (``<!--``), anything left open at the end.

Only what it finds is trusted, never what it does not find: a page whose every fact
(:class:`Sure`) the scan is sure of needs no parse, and any other page is parsed as before,
so the checks' results are the parse's. The scan is built to say "code" only where the
parse says so, and a test holds it to that on every page of the verifier's corpus.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

__all__ = ["Sure", "code_spans", "sure_of"]

#: Where the scan has something to decide: a literal or a comment may start, ...
_EVENT = re.compile(r"[\"'`/\\]")
#: ... and, inside a template's ``${...}``, a brace may close it.
_EVENT_IN_TEMPLATE = re.compile(r"[\"'`/{}\\]")
#: Words after which a ``/`` starts a regular expression, not a division.
_BEFORE_EXPRESSION = frozenset(
    {
        "await",
        "case",
        "delete",
        "do",
        "else",
        "in",
        "instanceof",
        "new",
        "of",
        "return",
        "throw",
        "typeof",
        "void",
        "yield",
    }
)
_LONGEST_KEYWORD = max(map(len, _BEFORE_EXPRESSION))
_WORD_CHAR = re.compile(r"[\w$]")
_SPACE = frozenset(" \t\n\r\v\f\u00a0\ufeff")
_LINE_END = re.compile(r"[\n\r\u2028\u2029]")
#: The end of a quoted string's text: its quote, a backslash, or a line end (an error).
_STRING_END = {q: re.compile(rf"[{q}\\\n\r\u2028\u2029]") for q in "'\""}
_TEMPLATE_END = re.compile(r"[`\\]|\$\{")
_REGEX_END = re.compile(r"[/\\\[\n\r\u2028\u2029]")
_CLASS_END = re.compile(r"[\]\\\n\r\u2028\u2029]")
_FLAGS = re.compile(r"[A-Za-z]*")
#: A character of a name (JavaScript names may also hold any letter beyond ASCII).
_NAME_CHAR = re.compile(r"[\w$\u0080-\uffff]")


def code_spans(source: str) -> list[tuple[int, int]] | None:
    """The stretches of ``source`` that are code, in order, as ``(start, end)`` offsets;
    None when the scan cannot be sure where its comments, strings and regular expressions
    are."""
    if "<!--" in source or "-->" in source:
        return None
    spans: list[tuple[int, int]] = []
    n, start, i = len(source), 0, 0
    depth = 0  # open braces inside templates' ``${...}``
    templates: list[int] = []  # the brace depth at each open ``${``
    after_value = False  # the last token ends a value: a ``/`` divides
    if source.startswith("#!"):
        line = _LINE_END.search(source)
        start = i = line.start() if line else n
    while (m := (_EVENT_IN_TEMPLATE if templates else _EVENT).search(source, i)) is not None:
        j = m.start()
        c = source[j]
        if c == "\\":
            return None  # an escaped name: the scan does not read those
        if c == "{":
            depth, after_value, i = depth + 1, False, j + 1
            continue
        if c == "}":
            if not templates or templates[-1] != depth:
                depth -= 1
                after_value, i = True, j + 1
                continue
            templates.pop()  # it closes a ``${``: the template's text goes on
            end = _template_rest(source, j + 1, templates, depth)
        elif c in "'\"":
            end = _string_end(source, j + 1, c)
        elif c == "`":
            end = _template_rest(source, j + 1, templates, depth)
        else:  # "/"
            # Only a slash needs to know whether the code before it ended a value (every
            # other event sets that itself), so the code since the last event is read here.
            last = j  # just past the last code character before the slash
            while last > i and source[last - 1] in _SPACE:
                last -= 1
            if last > i:
                after_value = _ends_value(source, i, last)
            nxt = source[j + 1 : j + 2]
            if nxt == "/":
                line = _LINE_END.search(source, j)
                spans.append((start, j))
                start = i = line.start() if line else n
                continue
            if nxt == "*":
                close = source.find("*/", j + 2)
                if close < 0:
                    return None
                spans.append((start, j))
                start = i = close + 2
                continue
            if last > i and source[last - 1] == "}":
                # After a block a regular expression, after an object a division.
                return None
            if after_value:
                after_value, i = False, j + 1
                continue
            end = _regex_end(source, j + 1)
        if end is None:
            return None
        spans.append((start, j))
        start = i = end
        # After a literal a ``/`` divides; at the start of a ``${`` it starts an expression.
        after_value = not source.endswith("${", 0, end)
    if depth or templates:
        return None
    spans.append((start, n))
    return [(a, b) for a, b in spans if a < b]


def _ends_value(source: str, start: int, end: int) -> bool:
    """Whether code ending at ``end`` (its last character not a space) ends a value, so
    that a ``/`` after it divides."""
    last = source[end - 1]
    if last in ")]":
        return True
    if source.endswith(("++", "--"), start, end):
        return True
    begin = end
    while begin > start and end - begin <= _LONGEST_KEYWORD and _WORD_CHAR.match(source[begin - 1]):
        begin -= 1
    if begin == end:
        return False  # an operator or a punctuator
    if end - begin > _LONGEST_KEYWORD or source[begin].isdigit():
        return True  # a longer name, or a number
    return source[begin:end] not in _BEFORE_EXPRESSION


def _string_end(source: str, i: int, quote: str) -> int | None:
    """Just past the quoted string whose text starts at ``i``; None if it is left open."""
    pattern = _STRING_END[quote]
    while (m := pattern.search(source, i)) is not None:
        c = source[m.start()]
        if c == quote:
            return m.end()
        if c != "\\":
            return None  # a line end inside a string
        i = m.start() + 2
        if source[m.start() + 1 : i] == "\r" and source[i : i + 1] == "\n":
            i += 1
    return None


def _template_rest(source: str, i: int, templates: list[int], depth: int) -> int | None:
    """Read template text from ``i``: just past its closing backtick, or just past a
    ``${`` (recorded in ``templates`` at brace ``depth``); None if it is left open."""
    while (m := _TEMPLATE_END.search(source, i)) is not None:
        token = m.group()
        if token == "`":
            return m.end()
        if token == "\\":
            i = m.start() + 2
            continue
        templates.append(depth)
        return m.end()
    return None


def _regex_end(source: str, i: int) -> int | None:
    """Just past the flags of the regular expression whose body starts at ``i``."""
    while (m := _REGEX_END.search(source, i)) is not None:
        c = source[m.start()]
        if c == "/":
            return _FLAGS.match(source, m.end()).end()  # type: ignore[union-attr]
        if c == "\\":
            i = m.start() + 2
        elif c == "[":
            close = _CLASS_END.search(source, m.end())
            while close is not None and source[close.start()] == "\\":
                close = _CLASS_END.search(source, close.start() + 2)
            if close is None or source[close.start()] != "]":
                return None
            i = close.end()
        else:
            return None  # a line end inside a regular expression
    return None


@dataclass(frozen=True)
class Sure:
    """What a script surely does (False: not found by the scan, which says nothing)."""

    canvas: bool = False
    """It calls ``createElement('canvas')``."""
    context_2d: bool = False
    """It calls ``getContext('2d')``."""
    animation_frame: bool = False
    """It names ``requestAnimationFrame`` in its code."""


#: What may follow ``requestAnimationFrame`` when it is called (or declared).
_CALL_OPEN = re.compile(r"[ \t\n\r]*\(")
#: What must follow ``getContext`` and ``createElement`` for a call the scan is sure of:
#: its parenthesis, then a quoted first argument, ``2d`` or ``canvas``.
_ARGUMENT = re.compile(r"[ \t\n\r]*\([ \t\n\r]*(['\"])([A-Za-z0-9]+)\1[ \t\n\r]*[,)]")
_NEW = re.compile(r"\bnew\b")


def _names(source: str, word: str) -> list[int]:
    """Where ``word`` stands in ``source`` as a whole name (not a part of a longer one, not
    a private ``#name``)."""
    found, at = [], source.find(word)
    while at >= 0:
        end = at + len(word)
        before = source[at - 1] if at else " "
        after = source[end] if end < len(source) else " "
        if not _NAME_CHAR.match(before) and before != "#" and not _NAME_CHAR.match(after):
            found.append(at)
        at = source.find(word, end)
    return found


def sure_of(source: str) -> Sure:
    """What a scan of ``source`` is sure the script does."""
    spans = code_spans(source)
    if spans is None:
        return Sure()
    starts = [a for a, _ in spans]

    def span_of(at: int) -> tuple[int, int] | None:
        k = bisect.bisect_right(starts, at) - 1
        return spans[k] if k >= 0 and spans[k][0] <= at < spans[k][1] else None

    frame = False
    for at in _names(source, "requestAnimationFrame"):
        span = span_of(at)
        end = at + len("requestAnimationFrame")
        if span is None or end > span[1]:
            continue
        # Called or declared, or read as a property: a name in code wherever the parse
        # would find one, unlike a label or a destructured binding.
        call = _CALL_OPEN.match(source, end, span[1])
        k = at
        while k > span[0] and source[k - 1] in " \t\n\r":
            k -= 1
        if call is not None or (k > span[0] and source[k - 1] == "."):
            frame = True
            break
    found = {"getContext": False, "createElement": False}
    # As the parse reads them: ``getContext('2d')`` exactly, ``createElement`` in any case.
    wanted = {"getContext": "2d", "createElement": "canvas"}
    for word in found:
        for at in _names(source, word):
            span = span_of(at)
            call = _ARGUMENT.match(source, at + len(word))
            # The name and the call's parenthesis are code, and the argument's quote ends it.
            if span is None or call is None or span[1] != call.start(1):
                continue
            value = call.group(2)
            if (value if word == "getContext" else value.lower()) != wanted[word]:
                continue
            if _may_be_constructed(source, spans, starts, at):
                continue
            found[word] = True
            break
    return Sure(
        canvas=found["createElement"], context_2d=found["getContext"], animation_frame=frame
    )


def _may_be_constructed(
    source: str, spans: list[tuple[int, int]], starts: list[int], at: int
) -> bool:
    """Whether a ``new`` could make the call at ``at`` a construction, not a call: a ``new``
    anywhere in the code of its statement before it, or a block or function just before
    the member access that leads to it."""
    k = bisect.bisect_right(starts, at) - 1
    code = []
    while k >= 0:
        a, b = spans[k]
        piece = source[a : min(b, at)]
        cut = max(piece.rfind(";"), piece.rfind("{"), piece.rfind("}"))
        if cut >= 0:
            if piece[cut] == "}" and piece[cut + 1 :].lstrip()[:1] in (".", "?", "(", "["):
                return True
            code.append(piece[cut + 1 :])
            break
        code.append(piece)
        at = a
        k -= 1
    return _NEW.search("".join(reversed(code))) is not None
