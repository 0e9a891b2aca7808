"""Find and replace the inside of one element by id, leaving everything else byte-identical."""

from __future__ import annotations

from html.parser import HTMLParser


class RegionNotFound(LookupError):
    """No element with that id, or it is never closed."""


class _Scanner(HTMLParser):
    """Records the inner span of the element whose id is ``target``, and every id seen."""

    def __init__(self, target: str | None) -> None:
        super().__init__(convert_charrefs=False)
        self.target = target
        self.ids: list[str] = []
        self._tag: str | None = None
        self._depth = 0
        self.inner_start: tuple[int, int] | None = None
        self.inner_end: tuple[int, int] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element_id = dict(attrs).get("id")
        if element_id:
            self.ids.append(element_id)
        if self._tag is None:
            if element_id == self.target and self.inner_start is None:
                line, col = self.getpos()
                self._tag, self._depth = tag, 1
                self.inner_start = (line, col + len(self.get_starttag_text() or ""))
        elif tag == self._tag:
            self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if self._tag is not None and tag == self._tag:
            self._depth -= 1
            if self._depth == 0:
                self.inner_end = self.getpos()
                self._tag = None


def _offset(text: str, pos: tuple[int, int]) -> int:
    line, col = pos
    start = 0
    for _ in range(line - 1):
        start = text.index("\n", start) + 1
    return start + col


def _scan(html: str, target: str | None) -> _Scanner:
    scanner = _Scanner(target)
    scanner.feed(html)
    scanner.close()
    return scanner


def region_ids(html: str) -> list[str]:
    """Every element id in the page, in document order."""
    return _scan(html, None).ids


def replace_region(html: str, region_id: str, inner: str) -> str:
    """Replace the inside of the element with id ``region_id`` by ``inner``.

    Raises:
        RegionNotFound: no such element, or it has no closing tag.
    """
    scanner = _scan(html, region_id)
    if scanner.inner_start is None or scanner.inner_end is None:
        raise RegionNotFound(region_id)
    start = _offset(html, scanner.inner_start)
    end = _offset(html, scanner.inner_end)
    return html[:start] + inner + html[end:]
