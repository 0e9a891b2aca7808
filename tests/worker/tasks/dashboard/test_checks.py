"""Static artifact checks: each check passing and failing on small inline pages."""

from __future__ import annotations

import json

import pytest

from worker.tasks.dashboard import checks as checks_module
from worker.tasks.dashboard import markup as markup_module
from worker.tasks.dashboard.checks import Check, passed, static_checks
from worker.tasks.dashboard.markup import Markup

GOOD_SCRIPT = """
const c = document.getElementById('c');
const ctx = c.getContext('2d');
function frame(t) { ctx.fillRect(0, 0, t % 100, 10); requestAnimationFrame(frame); }
requestAnimationFrame(frame);
"""


def page(body: str = "", *, script: str = GOOD_SCRIPT, head: str = "") -> str:
    """A minimal standalone page that passes every check unless told otherwise."""
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'>{head}</head><body>"
        f"<canvas id='c'></canvas>{body}<script>{script}</script></body></html>"
    )


def by_name(html: str, **kwargs: int) -> dict[str, Check]:
    return {check.name: check for check in static_checks(html, **kwargs)}


def external(html: str) -> Check:
    return by_name(html)["no_external_url"]


def test_clean_page_passes_every_check_in_order() -> None:
    # Given a small self-contained animated canvas page
    html = page()

    # When it is checked
    checks = static_checks(html)

    # Then all four checks are present, in order, and pass
    assert [c.name for c in checks] == ["size", "canvas_2d", "raf_loop", "no_external_url"]
    assert passed(checks)
    assert all(c.detail for c in checks)
    assert json.dumps([c.value for c in checks])


def test_all_checks_present_even_when_everything_fails() -> None:
    checks = static_checks("")

    assert [c.name for c in checks] == ["size", "canvas_2d", "raf_loop", "no_external_url"]
    assert [c.passed for c in checks] == [False, False, False, True]
    assert not passed(checks)


def test_passed_is_false_when_any_check_fails() -> None:
    ok = Check("a", True, 1, "fine")
    bad = Check("b", False, 0, "broken")

    assert passed([ok, ok])
    assert not passed([ok, bad])


def test_size_counts_utf8_bytes() -> None:
    html = page("<p>µ°</p>")

    check = by_name(html)["size"]

    assert check.value == len(html.encode("utf-8")) > len(html)
    assert check.passed


def test_size_fails_over_the_limit_and_says_by_how_much() -> None:
    html = page("<!--" + "x" * 2000 + "-->")

    check = by_name(html, max_bytes=1000)["size"]

    assert not check.passed
    assert "1000" in check.detail
    assert str(len(html) - 1000) in check.detail


def test_size_at_the_limit_passes() -> None:
    html = page()

    assert by_name(html, max_bytes=len(html))["size"].passed
    assert not by_name(html, max_bytes=len(html) - 1)["size"].passed


def test_empty_page_fails_size() -> None:
    check = by_name("")["size"]

    assert (check.passed, check.value) == (False, 0)


@pytest.mark.parametrize(
    "script",
    [
        "const ctx = c.getContext('2d');",
        'const ctx = c.getContext("2d");',
        "const ctx = c.getContext( `2d` );",
        "const ctx = c.getContext(\n  '2d', { alpha: false });",
    ],
)
def test_canvas_2d_accepts_any_quote_and_whitespace(script: str) -> None:
    check = by_name(page(script=script + " requestAnimationFrame(f);"))["canvas_2d"]

    assert check.passed
    assert check.value is True


def test_canvas_2d_accepts_a_canvas_created_from_script() -> None:
    script = "const c = document.createElement('canvas'); const x = c.getContext('2d');"
    html = f"<html><body><script>{script}</script></body></html>"

    assert by_name(html)["canvas_2d"].passed


def test_canvas_2d_fails_without_a_2d_context() -> None:
    check = by_name(page(script="const gl = c.getContext('webgl'); requestAnimationFrame(f);"))[
        "canvas_2d"
    ]

    assert not check.passed
    assert check.value is False
    assert "getContext('2d')" in check.detail


def test_canvas_2d_fails_without_a_canvas_element() -> None:
    html = "<html><body><div></div><script>x.getContext('2d')</script></body></html>"

    check = by_name(html)["canvas_2d"]

    assert not check.passed
    assert "<canvas>" in check.detail


def test_raf_loop_passes_and_fails() -> None:
    timer = "const ctx = c.getContext('2d'); setInterval(() => ctx.fillRect(0, 0, 1, 1), 16);"

    assert by_name(page())["raf_loop"].value is True
    check = by_name(page(script=timer))["raf_loop"]
    assert not check.passed
    assert "setInterval" in check.detail


#: A canvas element, and the script text around a case's code.
C, S = "<canvas></canvas>", "<script>{}</script>"


@pytest.mark.parametrize(
    ("page", "canvas_2d", "raf_loop"),
    [
        # named in code: called, on window, handed on, in a handler attribute
        (C + S.format("c.getContext('2d');requestAnimationFrame(f)"), True, True),
        (C + S.format('c.getContext("2d");window.requestAnimationFrame(f)'), True, True),
        (C + S.format("c.getContext(`2d`);const t=requestAnimationFrame;t(f)"), True, True),
        (
            C
            + S.format("const m='2d';c.getContext(m)")
            + "<body onload='requestAnimationFrame(f)'>",
            True,
            True,
        ),
        # a canvas a script makes, or writes as markup
        (S.format("document.createElement('canvas').getContext('2d')"), True, False),
        (S.format("box.innerHTML='<canvas id=c></canvas>';c.getContext('2d')"), True, False),
        # named only in a comment or a string: no canvas context, no loop
        (C + S.format("/* requestAnimationFrame(f); c.getContext('2d') */"), False, False),
        (C + S.format("// requestAnimationFrame(f)\nc.getContext('2d')"), True, False),
        (C + S.format("const s=\"requestAnimationFrame getContext('2d')\""), False, False),
        (
            C + "<!-- " + S.format("c.getContext('2d');requestAnimationFrame(f)") + " -->",
            False,
            False,
        ),
        ("<p>requestAnimationFrame, getContext('2d') in prose, a <b>canvas</b></p>", False, False),
        # other names and contexts
        (C + S.format("c.getContext('webgl');myrequestAnimationFrame(f)"), False, False),
        (S.format("c.getContext('2d');setInterval(f, 16)"), False, False),
    ],
)
def test_canvas_and_loop_are_read_from_the_code_not_the_text(
    page: str, canvas_2d: bool, raf_loop: bool
) -> None:
    found = {c.name: c.passed for c in static_checks(page)}
    assert (found["canvas_2d"], found["raf_loop"]) == (canvas_2d, raf_loop)


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ('<script src="https://cdn.example.com/chart.js"></script>', "https://cdn.example.com"),
        ("<img src=http://example.com/a.png>", "http://example.com/a.png"),
        ('<script src="//cdn.example.com/x.js"></script>', "//cdn.example.com/x.js"),
        ("<img src=//cdn/x.png>", "//cdn/x.png"),
        ('<object data="ftp://files.example.com/data.svg"></object>', "ftp://files.example.com"),
        ("<style>body{background:url(https://x.example/bg.png)}</style>", "https://x.example"),
        ("<style>body{background:url( '//x.example/bg.png' )}</style>", "//x.example/bg.png"),
        ('<style>@import "https://fonts.example.com/a.css";</style>', "https://fonts.example"),
        ('<style>@import "//fonts.example.com/a.css";</style>', "//fonts.example.com"),
        ("<style>@import url(//fonts.example.com/a.css);</style>", "//fonts.example.com"),
        ("<style>@import url('https://f.example/a.css');</style>", "https://f.example/a.css"),
        ("<script>fetch('https://api.example.com/metrics')</script>", "https://api.example.com"),
        ('<script>fetch("//api.example.com/metrics")</script>', "//api.example.com/metrics"),
        ("<script>import('https://esm.sh/d3')</script>", "https://esm.sh/d3"),
        (
            '<script type="module">import * as d3 from "https://cdn.skypack.dev/d3";</script>',
            "https://cdn.skypack.dev/d3",
        ),
        ("<script>const s = new WebSocket(url);</script>", "new WebSocket(url)"),
        ("<script>new WebSocket('wss://feed.example.com')</script>", "wss://feed.example.com"),
        ("<script>new EventSource('https://sse.example.com/s')</script>", "https://sse.example"),
        (
            "<script>const x = new XMLHttpRequest(); x.open('GET', 'http://a.example/m');</script>",
            "http://a.example/m",
        ),
        ("<script>x.open('GET', '//a.example/m')</script>", "//a.example/m"),
        (
            "<script>navigator.sendBeacon('/log', data)</script>",
            "navigator.sendBeacon('/log', data)",
        ),
        ('<link rel="preconnect" href="https://fonts.gstatic.com">', "https://fonts.gstatic.com"),
        ("<link rel=dns-prefetch href=//cdn.example.com>", "//cdn.example.com"),
        ('<link rel="stylesheet" href="http://example.com/s.css">', "http://example.com/s.css"),
        ('<iframe src="https://example.com/embed"></iframe>', "https://example.com/embed"),
        ("<video poster='HTTPS://EXAMPLE.COM/P.PNG'></video>", "HTTPS://EXAMPLE.COM/P.PNG"),
        ('<img srcset="a.png 1x, https://x.example/b.png 2x">', "https://x.example/b.png"),
        ('<link rel="icon" href="https://x.example/favicon.ico">', "https://x.example/favicon"),
        ('<div style="background: url(https://x.example/bg.png)"></div>', "https://x.example/bg"),
        ("<button onclick=\"fetch('https://x.example/ping')\">go</button>", "https://x.example"),
        ('<svg><image href="https://x.example/map.png"/></svg>', "https://x.example/map.png"),
        ("<script>new Image().src = 'https://x.example/pixel.gif';</script>", "https://x.example"),
        ("<script>img.setAttribute('src', '//x.example/a.png');</script>", "//x.example/a.png"),
        ("<script>el.innerHTML = '<img src=\"https://x.example/a.png\">';</script>", "https://x"),
        (
            "<script>el.style.backgroundImage = 'url(https://x.example/bg.png)';</script>",
            "https://x.example/bg.png",
        ),
        (
            "<script>const API = 'https://api.example.com/v1'; fetch(API + '/m');</script>",
            "https://api.example.com/v1",
        ),
        ("<script>fetch(`https://${host}/m`);</script>", "https://${host}/m"),
        ("<script>new Worker('https://x.example/w.js');</script>", "https://x.example/w.js"),
        ("<script>importScripts('https://x.example/w.js');</script>", "https://x.example"),
        ("<script>new FontFace('X', 'url(https://x.example/x.woff2)');</script>", "https://x"),
        ("<style>a{background:image-set('https://x.example/a.png' 1x)}</style>", "https://x"),
    ],
)
def test_no_external_url_flags_every_remote_form(snippet: str, expected: str) -> None:
    # Given a page that loads (or could load) something from the network
    html = page(snippet)

    # When it is checked
    check = external(html)

    # Then the check fails and names the offending reference
    assert not check.passed
    assert isinstance(check.value, list)
    assert any(expected in found for found in check.value), check.value
    assert "inline" in check.detail


@pytest.mark.parametrize(
    "snippet",
    [
        "<p>HTTP 5xx rate</p><p>http errors per second; https handshakes</p>",
        "<script>const label = 'HTTP 5xx rate'; // http: shown in the legend</script>",
        '<img src="data:image/png;base64,iVBORw0KGgo=">',
        "<style>body{background:url(data:image/svg+xml;utf8,%3Csvg%3E%3C/svg%3E)}</style>",
        "<style>@font-face{font-family:X;src:url('data:font/woff2;base64,AAAA')}</style>",
        '<script>const u = URL.createObjectURL(b); img.src = "blob:" + u;</script>',
        '<a href="#gauges">gauges</a><a href="./help.html">help</a>',
        "<script>// draw loop\nconst s = '// TODO';</script>",
        '<svg xmlns="http://www.w3.org/2000/svg"><rect/></svg>',
        "<script>document.createElementNS('http://www.w3.org/2000/svg', 'svg')</script>",
        "<script>fetch('data:application/json,{}')</script>",
        # links, comments and strings that nothing loads
        '<a href="https://github.com/someone/dash">made by someone</a>',
        '<a href="ftp://files.example.com/data.csv">data</a>',
        "<!-- data from https://metrics.example.com/feed -->",
        "<script>// after https://example.com/tutorial\nconst x = 1;</script>",
        "<script>/* see //cdn.example.com/lib.js */</script>",
        "<style>/* from https://fonts.example.com/a.css */ body { color: red }</style>",
        "<script>const docs = 'https://example.org/docs'; console.log(docs);</script>",
        '<script>const unit = "ms"//d3.format-style suffix\n</script>',
        "<script>const labels = ['p50'];//chart.js naming</script>",
        "<script>el.innerHTML = '<a href=\"https://example.org\">credits</a>';</script>",
        "<script>a.href = 'https://example.org/about';</script>",
        "<script>fetch('ht' + 'tps://' + host + '/x');</script>",
        '<form action="https://example.org/send"><button>send</button></form>',
        '<link rel="author" href="https://example.org/me">',
        '<script type="application/json">{"home": "https://example.org"}</script>',
    ],
)
def test_no_external_url_allows_inline_and_same_document_references(snippet: str) -> None:
    check = external(page(snippet))

    assert check.passed, check.value
    assert check.value == []


def test_no_external_url_reports_a_sorted_capped_truncated_list() -> None:
    # Given many distinct remote URLs, one of them very long
    links = "".join(f'<img src="https://h{i:02d}.example.com/a.png">' for i in range(30))
    long_url = "https://long.example.com/" + "p" * 300

    # When the page is checked
    check = external(page(links + f'<img src="{long_url}">'))

    # Then at most 20 are reported, sorted, each at most 120 characters
    assert isinstance(check.value, list)
    assert len(check.value) == 20
    assert check.value == sorted(check.value)
    assert all(len(found) <= 120 for found in check.value)
    assert "https://h00.example.com/a.png" in check.detail


def test_no_external_url_reports_a_repeated_url_once() -> None:
    html = page('<img src="https://a.example/x.png"><img src="https://a.example/x.png">')

    assert external(html).value == ["https://a.example/x.png"]


def test_a_page_checked_again_is_not_scanned_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a page already checked once in this process (as its handoff checks it)
    html = page("<p>checked twice</p>")
    first = static_checks(html, max_bytes=4096)
    scans: list[str] = []

    def counted(found: str) -> list[str]:
        scans.append(found)
        return []

    monkeypatch.setattr(checks_module, "network_loads", counted)
    # When the verifier checks the same page with the same ceiling
    again = static_checks(html, max_bytes=4096)
    # Then it gets the same checks without scanning the page again
    assert again == first and scans == []
    # And another ceiling, or another page, is checked afresh
    assert by_name(html, max_bytes=16)["size"].passed is False
    static_checks(page("<p>another page</p>"), max_bytes=4096)
    assert len(scans) == 2


def test_a_page_s_markup_is_read_once_for_all_its_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given every read of markup counted, and a page whose script loads something
    reads: list[str] = []
    read = markup_module.read_markup

    def counted(html: str) -> Markup:
        reads.append(html)
        return read(html)

    monkeypatch.setattr(checks_module, "read_markup", counted)
    html = page("<p>read once</p>", script=GOOD_SCRIPT + "fetch('https://cdn.example/x.json');")
    # When it is checked
    found = by_name(html)
    # Then its markup was read once, and both readings of it judged the page
    assert reads == [html]
    assert found["canvas_2d"].passed and found["raf_loop"].passed
    assert found["no_external_url"].value == ["https://cdn.example/x.json"]
