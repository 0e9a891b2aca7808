"""Static checks on a standalone HTML/Canvas artifact.

These run before any browser is started: they are cheap, deterministic and catch the
common ways a first draft goes wrong (too big, no 2D canvas, no animation loop, anything
loaded from the network). Every :class:`Check` carries a ``detail`` sentence that is shown
to the agent as a repair hint, so it says what was found and what to do instead.

``canvas_2d`` and ``raf_loop`` read the page's code, not its text
(:mod:`worker.tasks.dashboard.code`): a comment or a string that names them is no canvas and
no loop. ``no_external_url`` looks for what the page would load (see
:mod:`worker.tasks.dashboard.loads`), not for URL-looking text: a credit link, a URL in a
comment or in a string that nothing loads is no failure. The browser, with the network cut,
has the final word on what is requested.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from worker.tasks.base import Check, passed
from worker.tasks.dashboard.code import PageCode, page_code
from worker.tasks.dashboard.loads import network_loads
from worker.tasks.dashboard.markup import Markup, read_markup

__all__ = ["DEFAULT_MAX_BYTES", "Check", "passed", "static_checks"]

#: Default artifact ceiling in UTF-8 bytes (the candidate profile's 64 KB).
DEFAULT_MAX_BYTES = 65536
#: At most this many offending URLs are reported in ``no_external_url``.
MAX_REPORTED_URLS = 20
#: Each reported URL or snippet is cut to this many characters.
MAX_SNIPPET_CHARS = 120
#: Pages whose checks a process remembers (a few hundred bytes each).
RECENT_PAGES = 512


_recent: OrderedDict[tuple[bytes, int], tuple[Check, ...]] = OrderedDict()
_recent_lock = threading.Lock()


def static_checks(html: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> list[Check]:
    """Run every static check on one artifact.

    The checks are a function of the page and the ceiling alone, so the last few hundred
    pages a process checked are remembered by digest: a handed-off page is checked by its
    handoff and again by the verifier, often in the same worker.

    Args:
        html: The whole standalone page.
        max_bytes: The size ceiling in UTF-8 bytes (inclusive).

    Returns:
        One :class:`Check` per check, always all four and always in this order:
        ``size``, ``canvas_2d``, ``raf_loop``, ``no_external_url``.
    """
    key = (hashlib.sha256(html.encode("utf-8", "surrogatepass")).digest(), max_bytes)
    with _recent_lock:
        found = _recent.get(key)
        if found is not None:
            _recent.move_to_end(key)
            return list(found)
    # Both readings start from the markup: it is read once.
    markup = read_markup(html)
    code = page_code(markup)
    checks = (
        _check_size(html, max_bytes),
        _check_canvas_2d(code),
        _check_raf_loop(code),
        _check_no_external_url(markup),
    )
    with _recent_lock:
        _recent[key] = checks
        while len(_recent) > RECENT_PAGES:
            _recent.popitem(last=False)
    return list(checks)


def _check_size(html: str, max_bytes: int) -> Check:
    size = len(html.encode("utf-8"))
    if size == 0:
        detail = "The page is empty; write the complete HTML document."
    elif size > max_bytes:
        detail = (
            f"The page is {size} bytes, over the {max_bytes}-byte limit; cut at least "
            f"{size - max_bytes} bytes by removing repetition, dead code and long comments."
        )
    else:
        detail = f"The page is {size} bytes, within the {max_bytes}-byte limit."
    return Check("size", 0 < size <= max_bytes, size, detail)


def _check_canvas_2d(code: PageCode) -> Check:
    problems = []
    if not code.canvas:
        problems.append(
            "no <canvas> element was found (add one to the markup or create it with "
            "document.createElement('canvas'))"
        )
    if not code.context_2d:
        problems.append(
            "no getContext('2d') call was found in the page's code (draw through "
            "canvas.getContext('2d'); a comment or a string does not count)"
        )
    if problems:
        detail = "The page does not draw on a 2D canvas: " + "; ".join(problems) + "."
    else:
        detail = "The page has a canvas and obtains its 2D context."
    return Check("canvas_2d", not problems, not problems, detail)


def _check_raf_loop(code: PageCode) -> Check:
    found = code.animation_frame
    if found:
        detail = "The page animates with requestAnimationFrame."
    else:
        detail = (
            "No requestAnimationFrame call was found in the page's code (a comment or a "
            "string does not count); drive drawing with a requestAnimationFrame loop instead "
            "of setInterval, setTimeout or a single draw."
        )
    return Check("raf_loop", found, found, detail)


def _check_no_external_url(markup: Markup) -> Check:
    offending = sorted({_snippet(found) for found in network_loads(markup)})[:MAX_REPORTED_URLS]
    if offending:
        detail = (
            f"The page loads {len(offending)} resource(s) from the network: "
            f"{', '.join(offending)}; it must be self-contained, so inline every script, "
            "style, font and image (data: URLs are fine), use system fonts, and remove all "
            "network calls (links and comments may name URLs; nothing may load them)."
        )
    else:
        detail = "Nothing is loaded from the network; the page is self-contained."
    return Check("no_external_url", not offending, offending, detail)


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= MAX_SNIPPET_CHARS:
        return text
    return text[: MAX_SNIPPET_CHARS - 3] + "..."
