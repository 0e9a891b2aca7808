"""The HTML report as a person sees it: rendered in Chromium at 1280 px."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from verifier.chromium.binary import DEFAULT_CHROMIUM_PATH

pytestmark = [pytest.mark.browser, pytest.mark.slow]

#: Every comment of every chart (matplotlib writes each text it draws as one), and every
#: scrolling card that is wider than its box.
_LOOK = """() => {
  const texts = [];
  for (const svg of document.querySelectorAll("svg")) {
    const walk = document.createTreeWalker(svg, NodeFilter.SHOW_COMMENT);
    while (walk.nextNode()) texts.push(walk.currentNode.nodeValue.trim());
  }
  const wide = [...document.querySelectorAll(".scroll")]
    .filter((el) => el.scrollWidth > el.clientWidth + 1)
    .map((el) => (el.previousElementSibling || el.parentElement).textContent.trim().slice(0, 40));
  return {texts, wide, charts: document.querySelectorAll("svg").length};
}"""


def test_charts_read_as_plain_numbers_and_tables_fit_at_1280_px(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    # Given a run's HTML report, made as the README's first command and report make it
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    for args in (
        ["run", "--wave", "2x2"],
        ["report", "1", "--html", str(tmp_path / "report.html")],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "scheduler", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    # When it is opened in Chromium at 1280 px
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=DEFAULT_CHROMIUM_PATH, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto((tmp_path / "report.html").as_uri())
            seen = page.evaluate(_LOOK)
        finally:
            browser.close()
    # Then no chart prints TeX source, the log axis reads in milliseconds, and no card
    # scrolls sideways
    assert seen["charts"] >= 3
    assert not [t for t in seen["texts"] if "mathdefault" in t or "$" in t], seen["texts"]
    assert any(re.fullmatch(r"\d+(\.\d+)? m?s", t) for t in seen["texts"]), seen["texts"]
    assert seen["wide"] == []
