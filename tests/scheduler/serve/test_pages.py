"""``serve``'s list of runs and a session's transcript, in Chromium."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.scheduler.serve.conftest import Served

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_list_shows_the_runs(
    sloppy_humaneval: str, serve_app: Callable[..., Served], chromium: Any
) -> None:
    # Given the store of a finished embedded run, served
    served = serve_app(database_url=sloppy_humaneval)
    # When its first page is opened
    page = chromium.new_page()
    page.goto(served.url + "/")
    row = page.locator("#runs tr[data-run='1']")
    # Then the run is listed, finished, with its sessions and a link to its page
    assert "finished" in row.inner_text() and "humaneval" in row.inner_text()
    assert row.locator("td").nth(6).inner_text() == "2 / 2"
    row.get_by_role("link", name="run 1").click()
    page.wait_for_url(served.url + "/runs/1")
    assert page.locator("#sessions-ended").inner_text() == "2 / 2"
    page.close()


def test_a_transcript_page_shows_the_diff(
    sloppy_humaneval: str, serve_app: Callable[..., Served], chromium: Any
) -> None:
    # Given the store of a finished embedded run whose sloppy session 1 repaired its solution
    served = serve_app(database_url=sloppy_humaneval)
    page = chromium.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    # When the session's transcript is opened from the run's page
    page.goto(served.url + "/runs/1")
    page.locator("#sessions tr[data-session='1']").get_by_role("link").click()
    page.wait_for_url(served.url + "/sessions/1")
    # Then it has its four turns, and the repair as diff lines: a line taken out, one put in
    assert page.locator("section.turn").count() == 4
    removed = page.locator("pre.diff span.del", has_text="raise NotImplementedError")
    assert removed.first.inner_text().startswith("-")
    added = page.locator("pre.diff span.add", has_text="return")
    assert added.first.inner_text().startswith("+")
    assert "verdict · round 0" in (page.locator(".verdict").first.text_content() or "")
    # and each version links to the artifact viewer
    page.get_by_role("link", name="view v1").first.click()
    page.wait_for_url(served.url + "/sessions/1/artifacts/1/solution.py")
    frame = page.frame_locator("#artifact")
    assert "def has_close_elements" in frame.locator("body").inner_text()
    assert errors == []
    page.close()
