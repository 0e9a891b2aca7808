"""The sim model follows the contract it is given: each profile's real behaviour."""

from __future__ import annotations

from itertools import pairwise
from types import SimpleNamespace
from typing import Any, cast

import pytest
from sqlalchemy import select

from tests.factories import dashboard_sim, make_run
from worker.agent.turn import run_turn
from worker.agent.verdict import VerdictIn
from worker.fleet.runtime import Runtime
from worker.models.sim import model as sim_model
from worker.models.sim.model import SimModel
from worker.reads.recorded import session_log
from worker.runs.verdicts import load_handoff, record_verdict
from worker.store.tables import artifact_versions, artifacts, plans, sessions, usage
from worker.tasks.dashboard import sim as dashboard_player
from worker.tasks.dashboard.pages import render_dashboard
from worker.tasks.dashboard.sim import DashboardPlayer

pytestmark = pytest.mark.services


def _until_not_running(rt: Runtime, sid: int, model: SimModel | None) -> None:
    for _ in range(30):
        with rt.engine.connect() as conn:
            row = conn.execute(
                select(sessions.c.status, sessions.c.next_turn).where(sessions.c.id == sid)
            ).one()
        if row.status != "running":
            return
        run_turn(rt=rt, session_id=sid, turn_no=row.next_turn, model=model)
    raise AssertionError("the session never handed off")


def _sim(seed: int, **kw: Any) -> SimModel:
    return dashboard_sim(seed=seed, **kw)


def _log(rt: Runtime, sid: int) -> list[tuple[str, dict[str, Any]]]:
    with rt.engine.connect() as conn:
        return [(e.kind, e.payload) for e in session_log(conn, session_id=sid)]


def _model_texts(log: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [p["text"] for k, p in log if k == "model" for p in p["content"]["parts"] if "text" in p]


def _versions(rt: Runtime, sid: int) -> list[int]:
    with rt.engine.connect() as conn:
        return list(
            conn.execute(
                select(artifact_versions.c.size_bytes)
                .join(artifacts)
                .where(artifacts.c.session_id == sid)
                .order_by(artifact_versions.c.version)
            ).scalars()
        )


def test_baseline_pastes_the_page_fits_8_kb_and_checks_the_plan_off(runtime: Runtime) -> None:
    seeds = {}
    for seed in (5, 6):  # one modest agent, one that first tries its full page
        # Given a baseline session
        _, (sid,) = make_run(runtime.engine, profile="baseline", seed=seed)
        model = _sim(seed)
        # When it works until it hands off
        _until_not_running(runtime, sid, model)
        log = _log(runtime, sid)
        # Then it pasted the app into its answer as a markdown block, as the contract asks
        assert any(t.startswith("Here is the app:\n\n```html\n") for t in _model_texts(log))
        # and what it saved fits the 8 KB ceiling; an ambitious first draft was refused
        sizes = _versions(runtime, sid)
        assert sizes and all(size <= 8 * 1024 for size in sizes)
        refused = [p["kind"] for k, p in log if k == "tool_error"]
        assert refused == (["too_large"] if cast(DashboardPlayer, model.player).ambitious else [])
        # and every plan item was checked off before the handoff was accepted
        with runtime.engine.connect() as conn:
            done = conn.execute(select(plans.c.done).where(plans.c.session_id == sid)).all()
            status = conn.execute(select(sessions.c.status).where(sessions.c.id == sid)).scalar()
        assert status == "verifying" and done and all(d for (d,) in done)
        seeds[seed] = cast(DashboardPlayer, model.player).ambitious
    assert set(seeds.values()) == {True, False}, "both kinds of draft were exercised"


def test_baseline_repairs_by_delete_then_create(runtime: Runtime) -> None:
    # Given a baseline session whose handed-off page the verifier rejects
    _, (sid,) = make_run(runtime.engine, profile="baseline", seed=1)
    model = _sim(1)
    _until_not_running(runtime, sid, model)
    handoff = load_handoff(runtime, session_id=sid, round_no=0)
    assert handoff is not None
    record_verdict(
        runtime,
        handoff,
        VerdictIn(
            passed=False,
            method="browser",
            checks=[{"name": "fps", "passed": False, "value": 3, "detail": "3 fps"}],
        ),
    )
    # When it works again
    _until_not_running(runtime, sid, model)
    # Then it deleted the draft and created it again, instead of editing it in place
    calls = [
        (p["function_call"]["name"], p["function_call"]["args"].get("action"))
        for k, pl in _log(runtime, sid)
        if k == "model"
        for p in pl["content"]["parts"]
        if "function_call" in p
    ]
    repair = calls.index(("manage_artifact", "delete"))
    assert calls[repair + 1] == ("manage_artifact", "create")
    assert ("manage_artifact", "edit") not in calls


def test_candidate_publishes_through_the_tool_and_edits_in_place(runtime: Runtime) -> None:
    _, (sid,) = make_run(runtime.engine, profile="candidate", seed=2)
    _until_not_running(runtime, sid, _sim(2))
    log = _log(runtime, sid)
    assert _model_texts(log) == []
    calls = [
        p["function_call"]["args"].get("action")
        for k, pl in log
        if k == "model"
        for p in pl["content"]["parts"]
        if p.get("function_call", {}).get("name") == "manage_artifact"
    ]
    assert calls == ["create", "edit"]
    assert max(_versions(runtime, sid)) > 12 * 1024


@pytest.mark.parametrize("jitter", [0.0, 0.2])
def test_a_sim_call_takes_the_run_s_latency_within_its_jitter(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, jitter: float
) -> None:
    # Given a run whose sim calls take 1 s, varied by ``jitter`` either way
    _, (sid,) = make_run(runtime.engine, sim_latency_ms=1000, sim_latency_jitter=jitter)
    slept: list[float] = []
    monkeypatch.setattr(sim_model, "time", SimpleNamespace(sleep=slept.append))
    # When its session works until it hands off, with the model the run names
    _until_not_running(runtime, sid, None)
    # Then every call took the latency within the jitter, and a jitter of 0 is exact
    assert len(slept) >= 3
    assert all(1 - jitter <= s <= 1 + jitter for s in slept)
    assert (len(set(slept)) == 1) == (jitter == 0), slept


def test_a_sim_call_decides_its_turn_after_the_wait_and_the_same_turn_as_without_one(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two runs of the same seed, one whose sim calls take 1 s and one without a wait
    _, (waiting,) = make_run(runtime.engine, seed=5, sim_latency_ms=1000)
    _, (instant,) = make_run(runtime.engine, seed=5, sim_latency_ms=0)
    order: list[str] = []
    monkeypatch.setattr(
        sim_model, "time", SimpleNamespace(sleep=lambda s: order.append(f"sleep {s:.1f}"))
    )

    def rendering(*args: Any, **kwargs: Any) -> Any:
        order.append("render")
        return render_dashboard(*args, **kwargs)

    monkeypatch.setattr(dashboard_player, "render_dashboard", rendering)
    # When both sessions work until they hand off
    _until_not_running(runtime, waiting, None)
    waited = order.copy()
    _until_not_running(runtime, instant, None)
    # Then the page of the waiting session was written only after its call's wait
    first_render = waited.index("render")
    assert first_render > 0 and waited[first_render - 1].startswith("sleep"), waited
    # And both sessions made the same calls, with the same usage
    assert _turns(runtime, waiting) == _turns(runtime, instant) != []


def _turns(rt: Runtime, sid: int) -> list[object]:
    """A session's model contents and the tokens each call used, in order."""
    counts = (usage.c.prompt_tokens, usage.c.cached_tokens, usage.c.output_tokens)
    with rt.engine.connect() as conn:
        used = conn.execute(
            select(*counts, usage.c.thoughts_tokens)
            .where(usage.c.session_id == sid)
            .order_by(usage.c.turn_no)
        ).all()
    return [p["content"] for k, p in _log(rt, sid) if k == "model"] + [tuple(u) for u in used]


def test_a_sim_call_finds_cached_no_more_than_the_previous_call_sent(runtime: Runtime) -> None:
    # Given sessions of a run (the second finds the run's shared prefix cached)
    _, sids = make_run(runtime.engine, waves="1x2")
    # When they work until they hand off
    for sid in sids:
        _until_not_running(runtime, sid, None)
    # Then no call's cached tokens exceed what its session's previous call sent
    with runtime.engine.connect() as conn:
        rows = conn.execute(
            select(usage.c.session_id, usage.c.prompt_tokens, usage.c.cached_tokens).order_by(
                usage.c.session_id, usage.c.turn_no
            )
        ).all()
    later = [(a, b) for a, b in pairwise(rows) if a.session_id == b.session_id]
    assert len(later) >= 4
    assert all(row.cached_tokens <= prev.prompt_tokens for prev, row in later), later
    # And after the first call all of it is (the prefix is byte-identical)
    assert all(row.cached_tokens == prev.prompt_tokens for prev, row in later), later
