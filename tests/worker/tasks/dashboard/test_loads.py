"""The network-load scan's cheap first look: it skips parses, and never changes a finding."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from worker.tasks.dashboard import loads
from worker.tasks.dashboard.pages import render_dashboard

#: Scripts that load something, each written in forms the first look must not miss.
LOADING_SCRIPTS = [
    "fetch('https://a.example/m')",
    "fetch ('https://a.example/m')",
    "fetch\n\t('//a.example/m')",
    "fetch /* why */ ('https://a.example/m')",
    "fetch // why\n('https://a.example/m')",
    "window.fetch?.('https://a.example/m')",
    "const API = 'https://a.example'; fetch(API + '/m')",
    "x.open('GET', 'http://a.example/m')",
    "x.open /* c */ ('GET', '//a.example/m')",
    "img.setAttribute('src', '//a.example/a.png')",
    "navigator.sendBeacon('/log', data)",
    "importScripts('https://a.example/w.js')",
    "import('https://esm.example/d3')",
    'import * as d3 from "https://cdn.example/d3";',
    'export { x } from "https://cdn.example/x.js";',
    "new WebSocket(url)",
    "new window.WebSocket('wss://a.example')",
    "new SharedWorker('https://a.example/w.js')",
    "new Worker('https://a.example/w.js')",
    "new EventSource('https://a.example/s')",
    "new Audio('https://a.example/a.mp3')",
    "new Request('https://a.example/r')",
    "new Image().src = 'https://a.example/p.gif'",
    "img.srcset = 'https://a.example/a.png 2x'",
    "video.poster = '//a.example/p.png'",
    "el.innerHTML = '<img src=\"https://a.example/a.png\">'",
    "el.innerHTML = `<img src=//a.example/${n}.png>`",
    "el.style.backgroundImage = 'url(https://a.example/bg.png)'",
    "el.style.cssText = 'background: url(https://a.example/bg.png)'",
    "sheet.textContent = '@import \"https://a.example/a.css\";'",
]
#: Dashboard code that loads nothing; each is skipped without a parse.
INERT_SCRIPTS = [
    "const metrics = [{name: 'open conns', unit: ''}, {name: 'Requests/s'}];",
    "for (let i = 0; i<n; i++) { ctx.fillRect(i, 0, 1, h); }",
    "requestAnimationFrame(function frame(t) { draw(t); requestAnimationFrame(frame); });",
    "panel.opened = true; const source = 'cpu';",
]


def _unscreened(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loads, "_may_load_js", lambda source: True)
    monkeypatch.setattr(loads, "_may_load_css", lambda css: True)


def _both_ways(html: str) -> Iterator[list[str]]:
    with pytest.MonkeyPatch.context() as patch:
        yield loads.network_loads(html)
        _unscreened(patch)
        yield loads.network_loads(html)


@pytest.mark.parametrize("script", LOADING_SCRIPTS)
def test_a_loading_script_is_parsed_and_its_load_found(script: str) -> None:
    # Given a page whose script loads something, written in any of its forms
    html = f"<script>{script}</script>"
    # When it is scanned with the first look, and without
    screened, unscreened = _both_ways(html)
    # Then the first look let it through to the parse, which found the load both times
    assert loads._may_load_js(script)
    assert screened == unscreened
    assert screened


@pytest.mark.parametrize("script", INERT_SCRIPTS)
def test_inert_code_is_never_parsed(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given dashboard code that loads nothing, and a parser that must not be reached
    def no_parse(name: str, source: str) -> None:
        raise AssertionError(f"parsed {source!r}")

    monkeypatch.setattr(loads, "parse", no_parse)
    # When it is scanned
    found = loads.network_loads(f"<script>{script}</script><div style='color: red'></div>")
    # Then nothing was parsed and nothing found
    assert found == []


def test_a_generated_dashboard_is_judged_without_a_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the pages the offline model writes (about 20 KB of markup, style and script)
    pages = [render_dashboard(seed).html for seed in range(8)]
    monkeypatch.setattr(loads, "parse", lambda name, source: pytest.fail("parsed"))
    # When they are scanned, then none needed a parse and none loads anything
    assert [loads.network_loads(page) for page in pages] == [[]] * len(pages)


_WORDS = st.sampled_from(
    [
        *("fetch", "open", "setAttribute", "sendBeacon", "importScripts", "import", "export"),
        *("WebSocket", "Worker", "SharedWorker", "EventSource", "Audio", "Request", "Image"),
        *("src", "srcset", "poster", "x", "el", "window", "navigator", "innerHTML", "url"),
    ]
)
_GLUE = st.sampled_from(
    [
        *("(", ")", ".", "?.", " ", "\n", "/* c */", "// c\n", " = ", "; ", ", ", "new "),
        *("'https://a.example/x'", '"//a.example/y"', "`wss://a.example/${n}`", "'/local'"),
        *("'<img src=//a.example/i.png>'", "'url(https://a.example/b.png)'", "'@import \"//a\";'"),
        *("+", "<", "<b ", "{", "}", "'plain text'", "url(", "@import "),
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_WORDS, _GLUE), max_size=24))
@example(["sendBeacon", "`wss://a.example/${n}`"])  # a tagged template is a call too
def test_the_first_look_never_changes_what_a_script_is_found_to_load(parts: list[str]) -> None:
    # Given any script made of load names, call syntax, comments, strings and markup
    html = f'<script>{"".join(parts)}</script><p style="{"".join(parts)}"></p>'
    # When it is scanned with the first look and without
    screened, unscreened = _both_ways(html)
    # Then both find the same loads
    assert sorted(screened) == sorted(unscreened)
