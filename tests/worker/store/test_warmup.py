"""Cache-warm dispatch in the database: which first turns are held, and who releases them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, select

from tests.factories import add_usage, make_run
from worker.store.due import Dispatch, redispatch, unclaimed
from worker.store.engine import utcnow
from worker.store.tables import sessions
from worker.store.warmup import release_wave
from worker.store.waves import take_outbox

pytestmark = pytest.mark.services

MODEL = "gemini-3-flash-preview"


def _start(engine: Engine, **run: object) -> tuple[list[int], list[Dispatch]]:
    run_id, ids = make_run(engine, start=False, **run)  # type: ignore[arg-type]
    with engine.begin() as conn:
        return ids, take_outbox(conn, now=utcnow(), run_id=run_id)


def test_a_cold_wave_sends_one_first_turn_and_holds_the_rest_until_it_completes(
    engine: Engine,
) -> None:
    # Given a 1x3 Gemini run whose prefix no call used lately
    ids, sent = _start(engine, waves="1x3", model=MODEL, cache_warm_cap_s=6.0)
    # Then its first session's turn goes now, and the others' are delayed by the cap
    assert [(d.session_id, d.delay_s) for d in sent] == [
        (ids[0], 0.0),
        (ids[1], 6.0),
        (ids[2], 6.0),
    ]
    now = utcnow()
    with engine.begin() as conn:
        # and the reconciler leaves the held turns alone while they are not due
        due = unclaimed(conn, before=now)
        assert [u.dispatch.session_id for u in due] == ids[:1]
    # When the warming turn commits, the held turns are released, once
    with engine.begin() as conn:
        assert release_wave(conn, session_id=ids[0], now=utcnow()) == ids[1:]
        assert release_wave(conn, session_id=ids[1], now=utcnow()) == []


def test_held_turns_whose_worker_died_are_sent_by_the_reconciler(engine: Engine) -> None:
    # Given a cold wave whose held turns no worker released (their messages are lost)
    ids, _ = _start(engine, waves="1x3", model=MODEL, cache_warm_cap_s=6.0)
    later = utcnow() + timedelta(seconds=6 + 30 + 1)
    # When the reconciler passes after the cap and its re-dispatch delay
    with engine.begin() as conn:
        due = redispatch(
            conn, items=unclaimed(conn, before=later - timedelta(seconds=30)), now=later
        )
    # Then it sends every first turn again
    assert [(d.session_id, d.number) for d in due] == [(i, 0) for i in ids]


@pytest.mark.parametrize(
    "run",
    [
        {"model": "sim"},
        {"model": MODEL, "cache_warm": "off"},
        {"model": MODEL, "cache": "explicit"},
    ],
)
def test_nothing_is_held_without_an_implicit_cache_to_warm(
    engine: Engine, run: dict[str, object]
) -> None:
    _, sent = _start(engine, waves="1x3", **run)
    assert [d.delay_s for d in sent] == [0.0, 0.0, 0.0]


def test_a_prefix_used_lately_is_warm_already(engine: Engine) -> None:
    # Given a call on the same model and prefix that completed a minute ago
    run_id, ids = make_run(engine, waves="1x1", model=MODEL)
    add_usage(
        engine,
        run_id=run_id,
        session_id=ids[0],
        model=MODEL,
        created_at=utcnow() - timedelta(seconds=60),
    )
    # When another run on it starts a wave
    new_ids, sent = _start(engine, waves="1x3", model=MODEL)
    # Then no first turn is held
    assert [d.delay_s for d in sent] == [0.0, 0.0, 0.0]
    with engine.connect() as conn:
        due = conn.execute(
            select(sessions.c.dispatched_at).where(sessions.c.id.in_(new_ids))
        ).scalars()
        assert all(at is not None and at <= utcnow() for at in due)
