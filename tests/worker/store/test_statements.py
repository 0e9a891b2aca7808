"""The timing ledger counts what each turn sends to PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, select

from tests.factories import ScriptedModel, call, make_run, model_turn, page
from worker.agent.turn import run_turn
from worker.fleet.runtime import Runtime
from worker.store.tables import turn_timings

pytestmark = pytest.mark.services


def test_a_turn_records_what_it_sent_before_its_commit_statement(runtime: Runtime) -> None:
    # Given a session, and every statement its engine runs counted apart
    _, (sid,) = make_run(runtime.engine)
    seen: list[str] = []

    def statement(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        seen.append(sql)

    event.listen(runtime.engine, "before_cursor_execute", statement)
    turn = model_turn(
        call("manage_artifact", action="create", name="dashboard.html", content=page())
    )
    # When one turn runs
    try:
        outcome = run_turn(rt=runtime, session_id=sid, turn_no=0, model=ScriptedModel([turn]))
    finally:
        event.remove(runtime.engine, "before_cursor_execute", statement)
    assert outcome.value == "committed"
    with runtime.engine.connect() as conn:
        row = conn.execute(
            select(turn_timings.c.statements, turn_timings.c.round_trips).where(
                turn_timings.c.session_id == sid
            )
        ).one()
    # Then its timing row counts every statement but the commit statement that wrote it,
    # and a round trip for each statement and for its transaction's BEGIN at least
    assert row.statements == len(seen) - 1
    assert row.statements >= 2
    assert row.round_trips > row.statements
