"""Smoke test: procedural dashboards render, animate and stay error-free in Chromium."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from typing import Any

import pytest

from verifier.chromium.binary import CHROMIUM_ARGS, DEFAULT_CHROMIUM_PATH
from worker.tasks.dashboard.pages import render_dashboard, render_lite

CHROMIUM = DEFAULT_CHROMIUM_PATH
VIEWPORT = {"width": 1280, "height": 800}
#: Time between the two canvas snapshots that must differ.
SNAPSHOT_GAP_MS = 300

pytestmark = pytest.mark.browser

CANVAS_SNAPSHOT_JS = "() => [...document.querySelectorAll('canvas')].map((c) => c.toDataURL())"
# Decodes a PNG in the browser and counts distinct colours on a coarse grid of samples.
DISTINCT_COLOURS_JS = """async (b64) => {
  const img = new Image();
  img.src = 'data:image/png;base64,' + b64;
  await img.decode();
  const c = document.createElement('canvas');
  c.width = img.width; c.height = img.height;
  const ctx = c.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const data = ctx.getImageData(0, 0, c.width, c.height).data, seen = new Set();
  for (let y = 0; y < c.height; y += 8)
    for (let x = 0; x < c.width; x += 8) {
      const i = (y * c.width + x) * 4;
      seen.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
    }
  return seen.size;
}"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM) and not os.environ.get("CI"):
        pytest.skip(f"{CHROMIUM} is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=CHROMIUM, args=list(CHROMIUM_ARGS), headless=True
        )
        yield chromium
        chromium.close()


def open_page(browser: Any, html: str) -> tuple[Any, list[str]]:
    """Load ``html`` into a fresh page and collect its uncaught errors."""
    page = browser.new_page(viewport=VIEWPORT)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.set_content(html)
    return page, errors


def wait_past(page: Any, ms: int) -> None:
    """Wait until the page has been alive for ``ms`` of its own clock."""
    page.wait_for_function(f"() => performance.now() > {ms}")


def canvas_snapshots(page: Any) -> tuple[list[str], list[str]]:
    """Every canvas as a data URL, twice, SNAPSHOT_GAP_MS apart."""
    before = page.evaluate(CANVAS_SNAPSHOT_JS)
    page.wait_for_timeout(SNAPSHOT_GAP_MS)
    return before, page.evaluate(CANVAS_SNAPSHOT_JS)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_clean_dashboard_animates_without_errors(browser: Any, seed: int) -> None:
    # Given a clean dashboard that has run for about a second
    page, errors = open_page(browser, render_dashboard(seed).html)
    try:
        wait_past(page, 1000)

        # When the canvases are snapshotted twice, 300 ms apart
        before, after = canvas_snapshots(page)
        screenshot = page.screenshot()
        colours = browser_colours(browser, screenshot)
        fits = page.evaluate(
            "() => document.documentElement.scrollWidth <= innerWidth"
            " && document.documentElement.scrollHeight <= innerHeight"
        )
    finally:
        page.close()

    # Then nothing threw, the pixels moved, the page fits and the screenshot is not blank
    assert errors == []
    assert len(before) == len(render_dashboard(seed).regions)
    assert before != after
    assert fits
    assert colours > 50


def test_js_error_flaw_raises_a_page_error(browser: Any) -> None:
    page, errors = open_page(browser, render_dashboard(1, flaw="js_error").html)
    try:
        page.wait_for_function("() => performance.now() > 500")
    finally:
        page.close()

    assert errors
    assert any("Cannot read properties of undefined" in e for e in errors), errors


def test_static_canvas_flaw_never_changes(browser: Any) -> None:
    page, errors = open_page(browser, render_dashboard(2, flaw="static_canvas").html)
    try:
        wait_past(page, 500)
        before, after = canvas_snapshots(page)
    finally:
        page.close()

    assert errors == []
    assert before == after


def browser_colours(browser: Any, png: bytes) -> int:
    """Distinct colours in a PNG, counted by Chromium itself (no imaging library needed)."""
    page = browser.new_page()
    try:
        return int(page.evaluate(DISTINCT_COLOURS_JS, base64.b64encode(png).decode("ascii")))
    finally:
        page.close()


def test_lite_card_animates_without_errors(browser: Any) -> None:
    page, errors = open_page(browser, render_lite(5, title="Lite", metrics=["a", "b", "c"]))
    try:
        wait_past(page, 800)
        before, after = canvas_snapshots(page)
    finally:
        page.close()
    assert errors == [] and len(before) == 1 and before != after
