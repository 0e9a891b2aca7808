"""The scan of a script's text: where its code is, and what it is sure the script does,
held to the parse on every page the project has."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.tasks.dashboard import code
from worker.tasks.dashboard.markup import read_markup
from worker.tasks.dashboard.pages import FLAWS, render_dashboard, render_lite
from worker.tasks.dashboard.scan import Sure, code_spans, sure_of

#: The verifier's corpus: pages written for it and real pages from public repositories.
CORPUS = sorted((Path(__file__).parents[3] / "verifier" / "chromium" / "pages").rglob("*.html"))


def _pages() -> list[tuple[str, str]]:
    pages = [(path.name, path.read_text(encoding="utf-8", errors="replace")) for path in CORPUS]
    pages += [(f"sim-{seed}", render_dashboard(seed).html) for seed in range(40)]
    pages += [(f"sim-{flaw}", render_dashboard(3, flaw=flaw).html) for flaw in FLAWS]
    pages += [
        (f"lite-{flaw}", render_lite(5, title="Lite", metrics=["cpu", "mem"], flaw=flaw))
        for flaw in (None, *FLAWS)
    ]
    return pages


def _scripts(html: str) -> list[str]:
    return code.scripts_of(read_markup(html))[1]


def test_the_corpus_is_there() -> None:
    assert len(CORPUS) >= 40


@pytest.mark.parametrize(("name", "html"), _pages(), ids=lambda v: v if len(v) < 60 else "")
def test_the_scan_is_sure_only_of_what_the_parse_finds(name: str, html: str) -> None:
    for script in _scripts(html):
        sure, parsed = sure_of(script), code._script(script, depth=0)
        assert not sure.animation_frame or parsed.animation_frame, name
        assert not sure.context_2d or parsed.context_2d, name
        assert not sure.canvas or parsed.canvas, name


@pytest.mark.parametrize(("name", "html"), _pages(), ids=lambda v: v if len(v) < 60 else "")
def test_a_page_reads_the_same_with_the_scan_and_with_the_parse_alone(
    name: str, html: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    scanned = code.page_code(html)
    monkeypatch.setattr(code, "sure_of", lambda _script: Sure())
    assert scanned == code.page_code(html), name


def test_the_scan_is_sure_of_what_a_sim_dashboard_does() -> None:
    # A dashboard is what a fleet hands off: its checks need no parse at all
    for seed in range(20):
        scripts = _scripts(render_dashboard(seed).html)
        sure = [sure_of(s) for s in scripts]
        assert any(s.context_2d for s in sure) and any(s.animation_frame for s in sure), seed


@pytest.mark.parametrize(
    "script",
    [
        # in a comment, a string, a template's text, a regular expression
        "/* requestAnimationFrame(f); c.getContext('2d') */",
        "// requestAnimationFrame(f); c.getContext('2d')",
        "const s = \"requestAnimationFrame(f); c.getContext('2d')\";",
        "const s = 'it\\'s requestAnimationFrame(f)';",
        "const t = `requestAnimationFrame(f) ${x} c.getContext('2d')`;",
        "const r = /requestAnimationFrame\\(f\\)/g; const q = x / 2 / /getContext\\('2d'\\)/;",
        "const r = /[/]requestAnimationFrame(f)/;",
        "const t = `${/requestAnimationFrame(f)/.source}`;",
        # not a call or a name the parse counts
        "const g = new c.getContext('2d');",
        "const { requestAnimationFrame } = window;",
        "requestAnimationFrame: for (;;) { break requestAnimationFrame; }",
        "class A { #requestAnimationFrame = 1; }",
        "myrequestAnimationFrame(f); c.getContextual('2d'); c.getContext('webgl');",
        "c.getContext(' 2d');",
    ],
)
def test_the_scan_is_not_sure_of_a_name_that_is_not_code(script: str) -> None:
    assert sure_of(script) == Sure()


@pytest.mark.parametrize(
    ("script", "sure"),
    [
        (
            "c.getContext('2d'); requestAnimationFrame(f);",
            Sure(context_2d=True, animation_frame=True),
        ),
        ("const x = `a ${requestAnimationFrame(f)} b`;", Sure(animation_frame=True)),
        ("const t = window.requestAnimationFrame;", Sure(animation_frame=True)),
        (
            'document.createElement("CANVAS").getContext("2d", {alpha: false})',
            Sure(canvas=True, context_2d=True),
        ),
        ("const n = (a + b) / 2; requestAnimationFrame(f)", Sure(animation_frame=True)),
        ("i++ / 2; requestAnimationFrame(f)", Sure(animation_frame=True)),
    ],
)
def test_the_scan_is_sure_of_a_call_in_code(script: str, sure: Sure) -> None:
    assert sure_of(script) == sure


def test_code_spans_leave_out_comments_strings_templates_and_regular_expressions() -> None:
    source = "a = 'x' /* c */ + b / 2 + /r\\/e/g; t = `p${q + `i${j}`}r`; // end"
    spans = code_spans(source)
    assert spans is not None
    assert [source[a:b] for a, b in spans] == [
        "a = ",
        " ",
        " + b / 2 + ",
        "; t = ",
        "q + ",
        "j",
        "; ",
    ]


@pytest.mark.parametrize(
    ("source", "code"),
    [
        # What the code before a comment ended decides the slash after it: a division after
        # a value, a regular expression after a keyword or an operator.
        ("n = x /* c */ / 2 / y", ["n = x ", " / 2 / y"]),
        ("n = x // c\n/ 2 / y", ["n = x ", "\n/ 2 / y"]),
        ("return /* c */ /'/.test(s)", ["return ", " ", ".test(s)"]),
        ("f(a, /* c */ /'/g)", ["f(a, ", " ", ")"]),
        ("s = 'a' /* c */ / 2", ["s = ", " ", " / 2"]),
    ],
)
def test_a_comment_keeps_what_the_code_before_it_ended(source: str, code: list[str]) -> None:
    spans = code_spans(source)
    assert spans is not None
    assert [source[a:b] for a, b in spans] == code


@pytest.mark.parametrize(
    "source",
    [
        "if (x) {}\n/requestAnimationFrame/.test(s)",  # a block, then a regular expression
        "const \\u0061 = 1;",  # an escaped name
        "<!-- requestAnimationFrame(f)",  # an HTML-like comment
        "const s = 'open",
        "const t = `open ${x",
        "/* open",
        "const r = /open",
        "const r = /[open/;",
    ],
)
def test_code_spans_give_up_on_what_they_cannot_read(source: str) -> None:
    assert code_spans(source) is None
