"""Verification of handed-off artifacts: browser verdicts, repair rounds, browser faults."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from click.testing import CliRunner
from sqlalchemy import select

from scheduler.cli import cli
from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import ScriptedModel, call, make_run, model_turn, run_script
from tests.verifier.chromium.test_browser import on_loaded
from verifier.chromium.browser import Browser
from verifier.verify import verify_handoff
from worker.agent.turn import run_turn
from worker.errors import BrowserUnavailable
from worker.fleet.runtime import Runtime
from worker.store.tables import events, sessions, verifications
from worker.tasks.dashboard.pages import render_dashboard
from worker.tasks.dashboard.personas import flaw_for

pytestmark = [pytest.mark.services, pytest.mark.browser]
BROWSER_ONLY_FLAWS = {"js_error", "static_canvas"}


@pytest.fixture
def private_browser() -> Iterator[Browser]:
    with Browser(max_pages=1) as own:
        yield own


def _hand_off(rt: Runtime, html: str, **config: Any) -> int:
    _, (sid,) = make_run(rt.engine, **config)
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
    return sid


def _session(rt: Runtime, sid: int) -> Any:
    with rt.engine.connect() as conn:
        return conn.execute(select(sessions).where(sessions.c.id == sid)).one()


def _verdicts(rt: Runtime, sid: int) -> list[Any]:
    with rt.engine.connect() as conn:
        return list(
            conn.execute(
                select(verifications)
                .where(verifications.c.session_id == sid)
                .order_by(verifications.c.round)
            ).all()
        )


def test_browser_killed_mid_verification_is_retried_not_blamed(
    runtime: Runtime, private_browser: Browser
) -> None:
    # Given a good dashboard handed off for verification
    sid = _hand_off(runtime, render_dashboard(11).html)
    private_browser.measure("<p>warm</p>", warmup_s=0.05, measure_s=0.05)
    root = private_browser.browser_pids()[0]
    # When Chromium dies while the page is being measured
    with on_loaded(lambda: psutil.Process(root).kill()) as hook, pytest.raises(BrowserUnavailable):
        verify_handoff(runtime, session_id=sid, round_no=0, browser=private_browser)
    # Then nothing was recorded against the artifact and the session still waits
    assert hook.fired == 1
    assert _verdicts(runtime, sid) == []
    assert _session(runtime, sid).status == "verifying"
    # And the retry (a relaunched browser) verifies it
    assert (
        verify_handoff(runtime, session_id=sid, round_no=0, browser=private_browser) == "succeeded"
    )
    (verdict,) = _verdicts(runtime, sid)
    assert verdict.passed and verdict.method == "browser"
    assert verdict.fps > 0 and verdict.screenshot_png.startswith(b"\x89PNG")
    assert {c["name"] for c in verdict.checks} >= {"fps", "canvas_changes", "no_page_errors"}


def test_a_rejected_artifact_goes_back_for_repair_then_fails(
    runtime: Runtime, private_browser: Browser
) -> None:
    # Given a handed-off page that throws in its draw loop, and one repair round allowed
    sid = _hand_off(runtime, render_dashboard(5, flaw="js_error").html, repair_rounds=1)
    # When the verifier judges it
    outcome = verify_handoff(runtime, session_id=sid, round_no=0, browser=private_browser)
    # Then the session runs again with the findings as its next message
    assert outcome == "repair"
    row = _session(runtime, sid)
    assert (row.status, row.repair_round) == ("running", 1)
    with runtime.engine.connect() as conn:
        feedback = conn.execute(
            select(events.c.payload).where(events.c.session_id == sid, events.c.kind == "feedback")
        ).scalar_one()
    text = feedback["content"]["parts"][0]["text"]
    assert text.startswith("The verifier rejected") and "no_page_errors" in text
    sent = runtime.dispatcher.sent  # type: ignore[attr-defined]
    assert (sent[-1].kind, sent[-1].number) == ("turn", row.next_turn)
    # And when the same broken page is handed off again with no rounds left, it fails
    run_turn(
        rt=runtime,
        session_id=sid,
        turn_no=row.next_turn,
        model=ScriptedModel(
            [model_turn(call("handoff", summary="again", artifact_name="dashboard.html"))]
        ),
    )
    assert verify_handoff(runtime, session_id=sid, round_no=1, browser=private_browser) == "failed"
    row = _session(runtime, sid)
    assert (row.status, row.outcome) == ("failed", "failed_verification")
    assert [v.passed for v in _verdicts(runtime, sid)] == [False, False]


def _seed_with_browser_only_flaw(sessions_: int) -> int:
    return next(
        seed
        for seed in range(1000)
        if any(flaw_for(1.0, seed, i) in BROWSER_ONLY_FLAWS for i in range(sessions_))
    )


@pytest.mark.slow
def test_run_verified_in_browser_with_a_repair_round(
    settings: Any, engine: Any, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker that verifies in Chromium, and first drafts that all carry a defect
    worker = start_worker(SWARM_VERIFIER="browser")
    seed = _seed_with_browser_only_flaw(6)
    result = CliRunner().invoke(
        cli,
        [
            "--database-url",
            settings.database_url,
            "--broker-url",
            settings.broker_url,
            "enqueue",
            "--wave",
            "2x3",
            "--seed",
            str(seed),
            "--sim-latency-ms",
            "20",
            "--sim-flaw-rate",
            "1",
        ],
        catch_exceptions=False,
    )
    run_id = int(result.output.split()[1].rstrip(":"))
    # When the run ends
    status = until_finished(engine, run_id, show=False, timeout_s=240)
    # Then every artifact passed in the browser, with a screenshot, after repairs
    assert status.sessions.succeeded == 6, status
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                verifications.c.session_id,
                verifications.c.passed,
                verifications.c.method,
                verifications.c.screenshot_png,
            )
            .join(sessions)
            .where(sessions.c.run_id == run_id)
        ).all()
        repaired = conn.execute(
            select(sessions.c.id).where(sessions.c.run_id == run_id, sessions.c.repair_round > 0)
        ).all()
    passed = [r for r in rows if r.passed]
    assert len(passed) == 6
    assert all(r.method == "browser" and r.screenshot_png for r in passed)
    assert any(not r.passed for r in rows), "a draft should have failed in the browser"
    assert repaired
    assert worker.errors() == []
