"""Procedural dashboards: deterministic, distinct, sized, and clean unless flawed."""

from __future__ import annotations

import hashlib
import re
import statistics

import pytest

from worker.tasks.dashboard.checks import passed, static_checks
from worker.tasks.dashboard.pages import FLAWS, render_dashboard, render_lite, render_region

MIN_BYTES, MAX_BYTES = 12 * 1024, 25 * 1024


def failing(html: str) -> set[str]:
    return {check.name for check in static_checks(html) if not check.passed}


def replace_inner(html: str, region_id: str, inner: str) -> str:
    """Swap the inside of ``<section id=region_id>``; sections are never nested here."""
    pattern = re.compile(rf'(<section id="{re.escape(region_id)}"[^>]*>)(.*?)(</section>)', re.S)
    new, count = pattern.subn(lambda m: m.group(1) + inner + m.group(3), html)
    assert count == 1
    return new


def css_value(prop: str, html: str) -> str:
    match = re.search(rf"\b{prop}: ([^;]*);", html)
    assert match is not None
    return match[1]


def test_same_seed_gives_the_same_page() -> None:
    assert render_dashboard(7) == render_dashboard(7)
    assert render_dashboard(7, flaw="js_error") == render_dashboard(7, flaw="js_error")


def test_different_seeds_give_different_pages() -> None:
    digests = {hashlib.sha256(render_dashboard(s).html.encode()).hexdigest() for s in range(50)}

    assert len(digests) == 50


def test_seeds_vary_theme_layout_and_panels() -> None:
    # Given 50 dashboards
    pages = [render_dashboard(seed) for seed in range(50)]

    # Then they do not all share one look: backgrounds, grids and panel sets vary
    backgrounds = {css_value("background", p.html) for p in pages}
    layouts = {css_value("grid-template-areas", p.html) for p in pages}
    assert len(backgrounds) >= 5
    assert len(layouts) >= 6
    assert len({p.regions for p in pages}) >= 30
    assert len({p.title for p in pages}) >= 30


def test_size_is_between_12_and_25_kb_for_every_seed() -> None:
    sizes = [len(render_dashboard(seed).html.encode("utf-8")) for seed in range(300)]

    assert min(sizes) >= MIN_BYTES, min(sizes)
    assert max(sizes) <= MAX_BYTES, max(sizes)
    assert MIN_BYTES < statistics.median(sizes) < MAX_BYTES


@pytest.mark.parametrize("flaw", FLAWS)
def test_flawed_drafts_stay_within_size_bounds(flaw: str) -> None:
    for seed in range(40):
        size = len(render_dashboard(seed, flaw=flaw).html.encode("utf-8"))
        assert MIN_BYTES <= size <= MAX_BYTES, (seed, size)


def test_clean_pages_pass_static_checks() -> None:
    for seed in range(100):
        html = render_dashboard(seed).html
        assert passed(static_checks(html)), (seed, failing(html))


def test_regions_are_section_ids_each_with_a_canvas() -> None:
    dashboard = render_dashboard(3)

    assert '<main id="dashboard">' in dashboard.html
    assert 4 <= len(dashboard.regions) <= 6
    assert len(set(dashboard.regions)) == len(dashboard.regions)
    for region_id in dashboard.regions:
        assert f'<section id="{region_id}"' in dashboard.html
        assert f'data-panel="{region_id}"' in dashboard.html
        assert f"function draw{region_id.capitalize()}(" in dashboard.html


def test_given_title_is_used_and_escaped() -> None:
    dashboard = render_dashboard(1, title="Ops <b>&</b> Co")

    assert dashboard.title == "Ops <b>&</b> Co"
    assert "<title>Ops &lt;b&gt;&amp;&lt;/b&gt; Co</title>" in dashboard.html
    assert render_dashboard(1).title != dashboard.title


def test_page_is_deterministic_and_offline_by_construction() -> None:
    html = render_dashboard(11).html

    assert "Math.random" not in html
    assert "Date.now" not in html
    assert "mulberry32" in html
    assert "devicePixelRatio" in html


def test_set_interval_flaw_fails_the_raf_check_only() -> None:
    html = render_dashboard(5, flaw="set_interval").html

    assert "setInterval(" in html
    assert "requestAnimationFrame" not in html
    assert failing(html) == {"raf_loop"}


def test_external_font_flaw_fails_the_external_url_check_only() -> None:
    html = render_dashboard(5, flaw="external_font").html

    urls = static_checks(html)[-1].value
    assert failing(html) == {"no_external_url"}
    assert isinstance(urls, list)
    assert any("fonts.googleapis.com" in url for url in urls)


@pytest.mark.parametrize("flaw", ["js_error", "static_canvas"])
def test_runtime_flaws_pass_static_checks(flaw: str) -> None:
    # These are caught in the browser, not statically
    for seed in range(10):
        html = render_dashboard(seed, flaw=flaw).html
        assert passed(static_checks(html)), (seed, failing(html))
        assert html != render_dashboard(seed).html


def test_static_canvas_flaw_never_requests_a_second_frame() -> None:
    html = render_dashboard(2, flaw="static_canvas").html

    assert html.count("requestAnimationFrame(frame)") == 1
    assert "setInterval" not in html


def test_unknown_flaw_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown flaw"):
        render_dashboard(1, flaw="slow")


def test_render_region_revision_zero_reproduces_the_original() -> None:
    dashboard = render_dashboard(8)

    for region_id in dashboard.regions:
        inner = render_region(8, region_id, revision=0)
        assert replace_inner(dashboard.html, region_id, inner) == dashboard.html


def test_render_region_edits_keep_the_page_valid() -> None:
    for seed in range(30):
        # Given a clean dashboard
        dashboard = render_dashboard(seed)
        html = dashboard.html

        # When every region is refined in place
        for revision, region_id in enumerate(dashboard.regions, start=1):
            inner = render_region(seed, region_id, revision=revision)
            assert f'data-panel="{region_id}"' in inner
            assert "<section" not in inner
            html = replace_inner(html, region_id, inner)

        # Then the page changed and still passes every static check
        assert html != dashboard.html
        assert passed(static_checks(html)), (seed, failing(html))
        assert len(html.encode("utf-8")) <= MAX_BYTES + 2048


def test_render_region_is_deterministic_and_varies_by_revision() -> None:
    region_id = render_dashboard(4).regions[0]

    first = render_region(4, region_id, revision=1)
    assert first == render_region(4, region_id, revision=1)
    assert "rev 1" in first
    assert 'class="legend"' in first
    assert render_region(4, region_id, revision=2) != first


def test_render_region_refuses_unknown_regions_and_negative_revisions() -> None:
    regions = render_dashboard(4).regions
    missing = next(k for k in ("gauges", "rings", "bars", "heatmap", "area") if k not in regions)

    with pytest.raises(ValueError, match="no region"):
        render_region(4, missing, revision=1)
    with pytest.raises(ValueError, match="revision"):
        render_region(4, regions[0], revision=-1)


def test_lite_cards_fit_the_baseline_ceiling_and_pass_static_checks() -> None:
    for seed in range(50):
        html = render_lite(seed, title="Edge <Pulse>", metrics=["cpu load", "io wait"])
        assert len(html.encode()) < 8 * 1024
        assert passed(static_checks(html)), (seed, failing(html))
        assert "Edge &lt;Pulse&gt;" in html


@pytest.mark.parametrize(
    ("flaw", "fails"),
    [
        ("set_interval", {"raf_loop"}),
        ("external_font", {"no_external_url"}),
        ("js_error", set()),
        ("static_canvas", set()),
    ],
)
def test_lite_card_flaws(flaw: str, fails: set[str]) -> None:
    html = render_lite(3, title="t", metrics=["a"], flaw=flaw)
    assert failing(html) == fails
