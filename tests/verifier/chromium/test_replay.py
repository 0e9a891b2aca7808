"""Replay judges a page's recorded verdict again: its static checks, or in Chromium."""

from __future__ import annotations

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import select, update

from scheduler.cli import cli
from tests.factories import call, make_run, model_turn, run_script
from verifier.chromium.browser import Browser
from verifier.verify import verify_handoff
from worker.fleet.runtime import Runtime
from worker.store.tables import verifications
from worker.tasks.dashboard.pages import render_dashboard

pytestmark = [pytest.mark.services, pytest.mark.browser]


def _judged_in_chromium(rt: Runtime, browser: Browser) -> int:
    """A dashboard session whose handed-off page passed in Chromium."""
    _, (sid,) = make_run(rt.engine)
    html = render_dashboard(11).html
    run_script(
        rt,
        sid,
        [
            model_turn(
                call("manage_artifact", action="create", name="dashboard.html", content=html),
                call("handoff", summary="done", artifact_name="dashboard.html"),
            )
        ],
    )
    outcome = verify_handoff(rt, session_id=sid, round_no=0, browser=browser)
    assert outcome == "succeeded"
    return sid


def _rewrite(rt: Runtime, sid: int, name: str) -> None:
    """Record check ``name`` of the session's verdict, and so the verdict, as failed."""
    with rt.engine.begin() as conn:
        checks = conn.execute(
            select(verifications.c.checks).where(verifications.c.session_id == sid)
        ).scalar_one()
        changed = [{**c, "passed": False} if c["name"] == name else c for c in checks]
        conn.execute(
            update(verifications)
            .where(verifications.c.session_id == sid)
            .values(checks=changed, passed=False)
        )


def _replay(rt: Runtime, sid: int, *args: str) -> Result:
    # The frame rate the page was judged at, not the default one a busy machine may miss
    env = {"SWARM_VERIFY_MIN_FPS": str(rt.settings.verify_min_fps)}
    url = ["--database-url", rt.settings.database_url]
    return CliRunner().invoke(cli, [*url, "replay", str(sid), *args], env=env)


def _verdict_row(result: Result) -> str:
    """The one row of the verdicts' table, its columns one space apart."""
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["verdict", "round"])
    return " ".join(lines[header + 1].split())


def test_a_page_judged_in_chromium_is_judged_again_in_chromium(
    runtime: Runtime, browser: Browser
) -> None:
    # Given a dashboard session whose page passed in Chromium
    sid = _judged_in_chromium(runtime, browser)
    # When it is replayed with the browser
    result = _replay(runtime, sid, "--browser")
    # Then its verdict was judged again in Chromium, and holds
    assert result.exit_code == 0, result.output
    assert _verdict_row(result) == "dashboard.html v1 0 pass pass verifier match"
    assert "1 verdicts as recorded" in result.output.splitlines()[-1]


@pytest.mark.parametrize(
    ("check", "args", "how"),
    [("no_page_errors", ("--browser",), "verifier"), ("canvas_2d", (), "static")],
)
def test_a_page_verdict_changed_after_the_fact_is_a_mismatch(
    runtime: Runtime, browser: Browser, check: str, args: tuple[str, ...], how: str
) -> None:
    # Given a page that passed in Chromium, its verdict rewritten: one check, a browser one
    # or a static one, recorded as failed
    sid = _judged_in_chromium(runtime, browser)
    _rewrite(runtime, sid, check)
    # When it is replayed, in the browser or by the static checks
    result = _replay(runtime, sid, *args)
    # Then the check that no longer holds is a MISMATCH row, and the replay fails
    assert result.exit_code == 1, result.output
    assert _verdict_row(result) == (
        f"dashboard.html v1 0 FAIL pass {how} MISMATCH: {check} passes now, failed then"
    )
    assert "does not replay: verdict of round 0" in result.output
