"""The checker itself: each count sees the fault it names (a checker that always says 0
would make every scenario pass)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import delete, insert, select, update

from tests.chaos.checker import RunFigures, check_run
from tests.factories import call, make_run, model_turn, page, run_script
from worker.fleet.runtime import Runtime
from worker.store.engine import utcnow
from worker.store.tables import artifact_versions, events, usage

pytestmark = [pytest.mark.chaos, pytest.mark.services]

_COUNTS = (
    "lost",
    "duplicated_turns",
    "duplicated_versions",
    "version_gaps",
    "fenced_writes",
    "orphan_usage",
    "partial_turns",
)


def _counts(figures: RunFigures) -> dict[str, int]:
    return {name: getattr(figures, name) for name in _COUNTS}


def test_each_count_sees_its_fault(runtime: Runtime) -> None:
    # Given a run whose two sessions committed turns 0 and 1 and are still running
    run_id, (a, b) = make_run(runtime.engine, waves="1x2")
    for sid in (a, b):
        run_script(
            runtime,
            sid,
            [
                model_turn(
                    call("manage_artifact", action="create", name="d.html", content=page("v1"))
                ),
                model_turn(
                    call(
                        "manage_artifact",
                        action="edit",
                        name="d.html",
                        content=page("v2"),
                        expected_version=1,
                    )
                ),
            ],
        )
    clean = check_run(runtime.engine, run_id)
    assert _counts(clean) == {**dict.fromkeys(_COUNTS, 0), "lost": 2}
    now = utcnow()

    def after(*statements: Any) -> dict[str, int]:
        with runtime.engine.begin() as conn:
            for statement in statements:
                conn.execute(statement)
        return _counts(check_run(runtime.engine, run_id))

    # When turn 0 of A gets a second model event
    got = after(
        insert(events).values(
            session_id=a, turn_no=0, seq=99, kind="model", payload={}, created_at=now
        )
    )
    assert got["duplicated_turns"] == 1
    # When A's usage row of turn 1 goes missing (a turn committed in part)
    got = after(delete(usage).where(usage.c.session_id == a, usage.c.turn_no == 1))
    assert got["partial_turns"] == 1
    # When B gets a usage row for a turn it never committed (turn 7, next_turn is 2)
    with runtime.engine.connect() as conn:
        row = dict(
            conn.execute(select(usage).where(usage.c.session_id == b, usage.c.turn_no == 0))
            .one()
            ._mapping
        )
    del row["id"]
    got = after(insert(usage).values({**row, "turn_no": 7}))
    assert (got["orphan_usage"], got["fenced_writes"]) == (1, 1)
    # When B's version 2 is renumbered 3 (a gap), and A's version 2 repeats version 1
    with runtime.engine.connect() as conn:
        v1 = conn.execute(
            select(artifact_versions)
            .where(artifact_versions.c.version == 1)
            .order_by(artifact_versions.c.id)
        ).first()
    assert v1 is not None
    got = after(
        update(artifact_versions)
        .where(artifact_versions.c.artifact_id != v1.artifact_id, artifact_versions.c.version == 2)
        .values(version=3),
        update(artifact_versions)
        .where(artifact_versions.c.artifact_id == v1.artifact_id, artifact_versions.c.version == 2)
        .values(sha256=v1.sha256, turn_no=v1.turn_no),
    )
    assert (got["version_gaps"], got["duplicated_versions"]) == (1, 1)
    assert got["lost"] == 2 and not check_run(runtime.engine, run_id).clean
