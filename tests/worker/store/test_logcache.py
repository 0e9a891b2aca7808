"""The event log a worker process keeps: new rows read, rewritten or recreated rows read anew."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, event, insert, text, update

from tests.factories import make_run
from worker.store.engine import utcnow
from worker.store.logcache import read_log
from worker.store.tables import events

pytestmark = pytest.mark.services


def _note(text: str) -> dict[str, Any]:
    return {"reason": "note", "content": {"role": "user", "parts": [{"text": text}]}}


def _add(engine: Engine, session_id: int, turn_no: int, note: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            insert(events).values(
                session_id=session_id,
                turn_no=turn_no,
                seq=0,
                kind="nudge",
                payload=_note(note),
                created_at=utcnow(),
            )
        )


def _notes(engine: Engine, session_id: int) -> list[str]:
    with engine.connect() as conn:
        log = read_log(conn, session_id=session_id)
    return [e.payload["content"]["parts"][0]["text"] for e in log if e.kind == "nudge"]


def _filled_payloads(engine: Engine) -> list[int]:
    """Collects, per statement, how many event payloads came back filled."""
    filled: list[int] = []

    def after(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "FROM events" in statement and cursor.description:
            names = [d.name for d in cursor.description]
            if "payload" in names:
                at = names.index("payload")
                filled.append(sum(1 for row in cursor.fetchall() if row[at] is not None))
                cursor.scroll(0, mode="absolute")

    event.listen(engine, "after_cursor_execute", after)
    return filled


def test_a_second_read_fetches_only_new_rows_and_returns_the_same_log(engine: Engine) -> None:
    # Given a session whose log was read once
    _, (sid,) = make_run(engine)
    _add(engine, sid, 1, "one")
    first = _notes(engine, sid)
    # When a row is added and the log is read again
    _add(engine, sid, 2, "two")
    filled = _filled_payloads(engine)
    second = _notes(engine, sid)
    # Then only the new row's payload came from the database, and the log is whole
    assert first == ["one"]
    assert second == ["one", "two"]
    assert filled == [1]


def test_a_rewritten_row_is_read_anew(engine: Engine) -> None:
    # Given a log read once
    _, (sid,) = make_run(engine)
    _add(engine, sid, 1, "before")
    assert _notes(engine, sid) == ["before"]
    # When its row is rewritten in place
    with engine.begin() as conn:
        conn.execute(
            update(events)
            .where(events.c.session_id == sid, events.c.kind == "nudge")
            .values(payload=_note("after"))
        )
    # Then the next read has the new payload
    assert _notes(engine, sid) == ["after"]


def test_a_recreated_row_with_the_same_id_is_read_anew(engine: Engine) -> None:
    # Given a log read once
    _, (sid,) = make_run(engine)
    _add(engine, sid, 1, "old database")
    assert _notes(engine, sid) == ["old database"]
    # When the events are emptied and the same ids are written again with other payloads
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE events RESTART IDENTITY"))
    _add(engine, sid, 0, "new database")
    # Then the next read has the new payload, not the one kept for that id
    assert _notes(engine, sid) == ["new database"]
