"""A page's markup, read once: its start tags and its script and style texts, in order.

Both static readings of a page start from its markup: what it draws with and how it
animates (:mod:`worker.tasks.dashboard.code`) and what it loads from the network
(:mod:`worker.tasks.dashboard.loads`). The markup is read by the standard library's
:class:`html.parser.HTMLParser`, as a browser tokenizes it (script and style text is raw,
character references are decoded), once per page: the parse is most of what reading a
page's markup costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser

__all__ = ["Markup", "RawText", "StartTag", "read_markup"]


@dataclass(frozen=True, slots=True)
class StartTag:
    """An element's start tag (or a self-closing tag)."""

    tag: str
    """Lowercased, as the parser gives it."""
    attrs: dict[str, str]
    """Its attributes (a valueless one maps to ``""``; of a repeated name, the last)."""


@dataclass(frozen=True, slots=True)
class RawText:
    """The text of a ``<script>`` or ``<style>`` element (one left open runs to the end)."""

    tag: str
    """``script`` or ``style``."""
    type: str
    """Its ``type`` attribute, stripped and lowercased (``""`` when it has none)."""
    text: str


@dataclass(frozen=True)
class Markup:
    """What a page's markup holds, in document order: each raw text follows its start tag."""

    items: tuple[StartTag | RawText, ...]


def read_markup(html: str) -> Markup:
    """Read ``html`` (a whole page, or a fragment of markup)."""
    reader = _Reader()
    reader.feed(html)
    reader.close()
    reader.finish()
    return Markup(tuple(reader.items))


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.items: list[StartTag | RawText] = []
        self._raw: tuple[str, str] | None = None  # (tag, type) of the raw text being read
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        self.items.append(StartTag(tag, values))
        if tag in ("script", "style"):
            self._raw, self._text = (tag, values.get("type", "").strip().lower()), []

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self._raw = None  # ``<script/>`` has no text

    def handle_data(self, data: str) -> None:
        if self._raw is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._raw is not None and tag == self._raw[0]:
            self.finish()

    def finish(self) -> None:
        """Keep the raw text being read (also one left open at the end of the page)."""
        if self._raw is None:
            return
        (tag, kind), text = self._raw, "".join(self._text)
        self._raw = None
        self.items.append(RawText(tag, kind, text))
