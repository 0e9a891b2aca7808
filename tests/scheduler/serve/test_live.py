"""A run's page follows the run while it goes on, without being reloaded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.factories import call, make_run, model_turn, page, run_script
from tests.scheduler.serve.conftest import Served
from worker.fleet.runtime import Runtime
from worker.store.control import cancel_run
from worker.store.endings import count_endings
from worker.store.engine import utcnow

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

#: Where the screenshot of the live page is kept, for a person to look at.
SCREENSHOT = Path("/tmp/serve-run.png")


def test_a_run_in_progress_changes_what_its_page_shows(
    runtime: Runtime, serve_app: Callable[..., Served], chromium: Any
) -> None:
    # Given a run of two sessions that has not started any turn, and its page open
    run_id, (first, _) = make_run(runtime.engine, waves="1x2")
    served = serve_app(engine=runtime.engine)
    tab = chromium.new_page(viewport={"width": 1280, "height": 900})
    navigations: list[str] = []
    tab.on("framenavigated", lambda f: navigations.append(f.url) if f == tab.main_frame else None)
    tab.goto(f"{served.url}/runs/{run_id}")
    assert tab.locator("#sessions-ended").inner_text() == "0 / 2"
    assert tab.locator("#turns").inner_text() == "0"
    tab.evaluate("window.loadedOnce = true")

    # When a session takes a turn (recorded as a worker records it)
    create = call("manage_artifact", action="create", name="dashboard.html", content=page("v1"))
    assert run_script(runtime, first, [model_turn(create, text="Drafting.")])
    # Then the page shows it
    tab.locator("#turns", has_text="1").wait_for()
    tab.locator(f"#sessions tr[data-session='{first}'] td", has_text="1").first.wait_for()
    tab.locator("#live-status", has_text="updated").wait_for()
    tab.screenshot(path=str(SCREENSHOT), full_page=True)

    # When the run is cancelled: both sessions end, and are counted (as `cancel` does)
    with runtime.engine.begin() as conn:
        cancel_run(conn, run_id=run_id, now=utcnow())
    count_endings(runtime.engine, now=utcnow())
    # Then the page shows the sessions ended and the run cancelled, and stops following it
    tab.locator("#sessions-ended", has_text="2 / 2").wait_for()
    tab.locator("#run-status", has_text="cancelled").wait_for()
    tab.locator("#live-status", has_text="the run has ended").wait_for()
    assert tab.locator("#states [data-state='cancelled']").inner_text() == "2"
    assert "cancelled by a user" in tab.locator("#warnings").inner_text()
    # and all along it was the same page: never reloaded, never navigated
    assert tab.evaluate("window.loadedOnce") is True
    assert navigations == [f"{served.url}/runs/{run_id}"]
    tab.close()
