"""Scenario 6: content far over the ceiling is refused without being copied whole again.

A call whose content is 20 MB already holds one copy of it. Measuring its size must not
make another: ``len(content.encode())`` did (20 MB of bytes for a 20 MB str), and a region
edit first built the whole new page. tracemalloc counts what the call's handling allocates
on top of the copy the call holds (allocations made by C libraries, such as libpq's wire
buffers, are not traced).

The tool step now stays within a few hundred kilobytes. The whole turn does not: the turn
stores the model's call verbatim in its ``model`` event (the event log is the
conversation), so the 20 MB goes through ``json.dumps`` and into the database, and the loop
guard serializes the call again; each costs about one more whole copy (six for text that
JSON escapes, such as "é"). ``test_a_turn_refuses_oversize_content_*`` measures that and is
expected to fail until the event log and the loop guard stop copying oversize calls whole.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import func, select

from tests.factories import (
    ScriptedModel,
    call,
    make_run,
    model_turn,
    page,
    run_script,
    tool_context,
)
from worker.agent.tools import run_tool
from worker.agent.turn import run_turn
from worker.errors import ToolError
from worker.fleet.runtime import Runtime
from worker.models.base import FunctionCall
from worker.store.tables import artifact_versions, events

pytestmark = [pytest.mark.chaos, pytest.mark.services]

#: Size of the oversize content, in bytes of UTF-8.
CONTENT_BYTES = 20 * 1024 * 1024
#: Most a call's handling may allocate beyond the copy the call holds, as a share of the
#: content's size: well short of a second whole copy.
EXTRA_SHARE = 0.25
#: Characters of 1, 2 and 4 bytes in UTF-8.
CHARS = {"ascii": "x", "latin1": "é", "emoji": "🙂"}


def _content(char: str) -> str:
    return char * (CONTENT_BYTES // len(char.encode()))


@contextmanager
def traced() -> Iterator[list[int]]:
    """Trace allocations inside the block; yields a list that receives the peak in bytes."""
    peak: list[int] = []
    gc.collect()
    tracemalloc.start()
    try:
        yield peak
    finally:
        peak.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


@pytest.mark.parametrize("action", ["create", "region_edit"])
@pytest.mark.parametrize("kind", sorted(CHARS))
def test_the_tool_refuses_oversize_content_without_copying_it(
    runtime: Runtime, kind: str, action: str, chaos_report: Callable[..., None]
) -> None:
    # Given a session with a page, and a 20 MB call to create a page or replace a region
    _, (sid,) = make_run(runtime.engine)
    run_script(
        runtime,
        sid,
        [
            model_turn(
                call("manage_artifact", action="create", name="dashboard.html", content=page())
            )
        ],
    )
    content = _content(CHARS[kind])
    args = (
        {"action": "create", "name": "big.html", "content": content}
        if action == "create"
        else {
            "action": "edit",
            "name": "dashboard.html",
            "region_id": "gauges",
            "expected_version": 1,
            "content": content,
        }
    )
    # When the tool handles it inside a real transaction
    with runtime.engine.begin() as conn, traced() as peak:
        ctx = tool_context(conn, sid, 1)
        with pytest.raises(ToolError) as refused:
            run_tool(FunctionCall("manage_artifact", args), ctx)
    # Then it is refused as too large, with its exact size, having copied next to nothing
    share = peak[0] / CONTENT_BYTES
    chaos_report(
        None,
        content_mb=CONTENT_BYTES / 2**20,
        chars=kind,
        action=action,
        answer=refused.value.kind,
        extra_peak_mb=f"{peak[0] / 2**20:.3f}",
        extra_share=f"{share:.3f}",
    )
    assert refused.value.kind == "too_large"
    assert refused.value.data["size_bytes"] == CONTENT_BYTES
    assert share < EXTRA_SHARE


@pytest.mark.parametrize("kind", ["ascii", "latin1"])
def test_a_turn_refuses_oversize_content_without_copying_it(
    runtime: Runtime, kind: str, chaos_report: Callable[..., None]
) -> None:
    # Given a session whose model sends a 20 MB page
    run_id, (sid,) = make_run(runtime.engine)
    oversize = model_turn(
        call("manage_artifact", action="create", name="big.html", content=_content(CHARS[kind]))
    )
    # When a whole turn handles the call
    with traced() as peak:
        outcome = run_turn(
            rt=runtime, session_id=sid, turn_no=0, model=ScriptedModel([oversize])
        ).value
    # Then the turn commits, the call is answered too_large, nothing was written
    with runtime.engine.connect() as conn:
        answers = (
            conn.execute(
                select(events.c.payload["kind"].as_string()).where(
                    events.c.session_id == sid, events.c.kind == "tool_error"
                )
            )
            .scalars()
            .all()
        )
        versions = conn.execute(select(func.count()).select_from(artifact_versions)).scalar_one()
    share = peak[0] / CONTENT_BYTES
    chaos_report(
        None,
        run=run_id,
        content_mb=CONTENT_BYTES / 2**20,
        chars=kind,
        outcome=outcome,
        answers=answers,
        extra_peak_mb=f"{peak[0] / 2**20:.1f}",
        extra_share=f"{share:.2f}",
    )
    assert (outcome, answers, versions) == ("committed", ["too_large"], 0)
    # and the turn, too, made no second copy of the content
    assert share < EXTRA_SHARE
