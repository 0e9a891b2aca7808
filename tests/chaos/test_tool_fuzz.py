"""Scenario 5: thousands of generated tool calls against the real database.

Calls are made of anything a model can send as JSON: unknown and misspelt tools, empty,
wrongly typed and huge arguments, path-like names, and the names and ids of another
session's artifacts. Each one must come back as a tool error or a valid result (never
another exception), and none may touch another session. A first batch calls
:func:`worker.agent.tools.run_tool` directly, each call in its own committed transaction; a
smaller batch goes through whole turns (:func:`worker.agent.turn.run_turn`), so the model event,
the loop guard and the commit see the same inputs.

Two kinds of text are left out of the generated strings, on purpose: NaN and infinities
(not JSON, so no provider can send them) and NUL characters or lone surrogates, which a
provider can send (``"\\u0000"``, ``"\\ud800"``) but which the tools do not yet refuse:
PostgreSQL text cannot hold NUL and UTF-8 cannot encode a lone surrogate, so the write
raises instead of answering with a tool error. ``test_text_the_database_cannot_store_*``
pins that down and is expected to fail until the tools reject such text.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select, text

from tests.chaos.checker import check_run
from tests.factories import ScriptedModel, call, make_run, model_turn, page, tool_context
from verifier.verify import verify_handoff
from worker.agent.tools import NAME_PATTERN, TOOLS, ToolContext, run_tool
from worker.agent.turn import run_turn
from worker.errors import ToolError
from worker.fleet.runtime import Runtime
from worker.models.base import FunctionCall
from worker.states import TERMINAL
from worker.store.tables import sessions

pytestmark = [pytest.mark.chaos, pytest.mark.services]

#: Generated examples of the direct batch (1 to 3 calls each).
DIRECT_EXAMPLES = 1500
#: Generated examples of the batch that goes through whole turns (1 to 3 turns each).
TURN_EXAMPLES = 60
#: Most turns a fuzzed session may take (then it is stopped by max_turns).
MAX_TURNS = 6
#: A call whose content is far past the tools' ceiling.
OVERSIZE_CREATE = {"action": "create", "name": "notes.html", "content": "x" * 300_000}
#: The other session's artifacts, whose names the fuzzer also tries.
OTHER_NAMES = ("dashboard.html", "other-notes.html")
_TERMINAL = {s.value for s in TERMINAL}

#: Any character UTF-8 can encode (so no lone surrogate) except NUL.
_chars = st.characters(codec="utf-8", exclude_characters="\x00")
_short_text = st.text(_chars, max_size=40)
#: Strings around the 64 KB ceiling in 1- to 4-byte characters, and far beyond it.
_huge = st.builds(
    lambda ch, n: ch * n,
    st.sampled_from(["x", "é", "漢", "🙂", "<"]),
    st.sampled_from([16_383, 16_385, 32_768, 65_536, 65_537, 300_000]),
)
_path_like = st.sampled_from(
    [
        "../dashboard.html",
        "../../etc/passwd",
        "/etc/passwd",
        "C:\\Windows\\win.ini",
        "a/b.html",
        "..",
        ".",
        "",
        " ",
        "dashboard.html/",
        " dashboard.html",
        "x" * 100,
        "x" * 101,
        "dashboard.html\n",
        "%2e%2e%2fdashboard.html",
        "~/.ssh/id_rsa",
        "file:///etc/passwd",
        "dashboard.html;DROP TABLE artifacts",
        "🙂.html",
    ]
)


def _json_values(other_id: int) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        _short_text,
        _path_like,
        _huge,
        st.sampled_from([*OTHER_NAMES, other_id, str(other_id), f"sessions/{other_id}"]),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(_short_text, inner, max_size=4)
        ),
        max_leaves=8,
    )


def _mostly(
    good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any], odds: int = 5
) -> st.SearchStrategy[Any]:
    """``good``, and one time in ``odds`` ``bad`` (``one_of`` does not keep to its odds)."""
    return st.integers(0, odds - 1).flatmap(lambda i: bad if i == 0 else good)


def _calls(other_id: int, *, dict_args_only: bool = False) -> st.SearchStrategy[FunctionCall]:
    """Calls to the real tools with mostly well-shaped arguments, and calls of anything."""
    anything = _json_values(other_id)
    names = _mostly(
        st.sampled_from(["dashboard.html", "notes.html", *OTHER_NAMES])
        | st.from_regex(NAME_PATTERN, fullmatch=True),
        _path_like | anything,
    )
    contents = _mostly(
        st.builds(page, _short_text) | st.just("<h2>region</h2>") | _huge, _short_text | anything
    )
    versions = _mostly(st.integers(1, 4), st.integers(-1, 6) | anything)
    regions = _mostly(st.sampled_from(["gauges", "dash", "c", "nope"]), anything)
    manage = st.fixed_dictionaries(
        {
            "action": _mostly(
                st.sampled_from(["create", "edit", "edit", "get", "delete"]), anything, odds=10
            ),
            "name": names,
        },
        optional={"content": contents, "expected_version": versions, "region_id": regions},
    )
    plan = st.fixed_dictionaries(
        {"action": _mostly(st.sampled_from(["set", "done", "list"]), anything, odds=10)},
        optional={
            "items": _mostly(
                st.lists(_short_text, min_size=1, max_size=20),
                st.lists(_short_text | _huge, max_size=22) | anything,
            ),
            "item_id": _mostly(st.integers(1, 20), st.integers(-1, 22) | anything),
        },
    )
    handoff = st.fixed_dictionaries(
        {
            "summary": _mostly(_short_text.filter(bool), _huge | anything, odds=4),
            "artifact_name": names,
        }
    )
    keys = st.one_of(
        st.sampled_from(
            [
                "action",
                "name",
                "content",
                "region_id",
                "expected_version",
                "items",
                "item_id",
                "summary",
                "artifact_name",
                "session_id",
                "path",
                "id",
                "",
            ]
        ),
        _short_text,
    )
    loose: st.SearchStrategy[Any] = st.one_of(
        manage,
        plan,
        handoff,
        st.dictionaries(keys, anything, max_size=6),
        st.fixed_dictionaries(
            {
                "action": st.just("get"),
                "name": names,
                "session_id": st.sampled_from([other_id, str(other_id)]),
            }
        ),
    )
    if not dict_args_only:
        loose = _mostly(loose, st.none() | anything)
    tool = _mostly(
        st.sampled_from(sorted(TOOLS)),
        _short_text
        | st.sampled_from(
            [
                "MANAGE_ARTIFACT",
                "manage_artifact ",
                "write_file",
                "exec",
                "__class__",
                "handoff()",
                "../handoff",
            ]
        ),
        odds=2,
    )
    # Most calls name a real tool with arguments shaped for it, so that the fuzzer gets
    # past validation into the tools' own checks and writes.
    shaped = st.sampled_from(
        ["manage_artifact", "manage_artifact", "plan_manage", "handoff"]
    ).flatmap(
        lambda name: st.builds(
            FunctionCall,
            st.just(name),
            {"manage_artifact": manage, "plan_manage": plan, "handoff": handoff}[name],
        )
    )
    return _mostly(shaped, st.builds(FunctionCall, tool, loose), odds=4)


def _session_rows(engine: Engine, session_id: int) -> dict[str, list[str]]:
    """Every row of a session's workspace and log, as text (to compare before and after)."""
    queries = {
        "artifacts": "SELECT a::text FROM artifacts a WHERE session_id = :s",
        "artifact_versions": "SELECT v::text FROM artifact_versions v JOIN artifacts a "
        "ON a.id = v.artifact_id WHERE a.session_id = :s",
        "plans": "SELECT p::text FROM plans p WHERE session_id = :s",
        "events": "SELECT e::text FROM events e WHERE session_id = :s",
        "usage": "SELECT u::text FROM usage u WHERE session_id = :s",
        "session": "SELECT s::text FROM sessions s WHERE id = :s",
    }
    with engine.connect() as conn:
        return {
            name: sorted(conn.execute(text(q), {"s": session_id}).scalars())
            for name, q in queries.items()
        }


def _seed(rt: Runtime, session_id: int, names: tuple[str, ...]) -> None:
    """Turn 0 of a session: its artifacts (with regions) and a plan."""
    creates = [call("manage_artifact", action="create", name=n, content=page(n)) for n in names]
    turn = model_turn(*creates, call("plan_manage", action="set", items=["draw", "check"]))
    assert (
        run_turn(rt=rt, session_id=session_id, turn_no=0, model=ScriptedModel([turn])).value
        == "committed"
    )


def _answer(call_: FunctionCall, ctx: ToolContext) -> str:
    """Run one call; returns the error kind or ``ok``. Anything but a ToolError propagates."""
    try:
        output = run_tool(call_, ctx)
    except ToolError as exc:
        result = exc.to_result()
        assert result["kind"] and result["message"]
        json.dumps(result, allow_nan=False)
        return exc.kind
    assert isinstance(output, dict)
    json.dumps(output, allow_nan=False)
    return "ok"


def test_generated_tool_calls_answer_and_stay_in_their_session(
    runtime: Runtime, chaos_report: Callable[..., None]
) -> None:
    # Given a session S that has an artifact and a plan, and another session O with its own
    run_id, (sid, other) = make_run(runtime.engine, waves="1x2")
    _seed(runtime, sid, ("dashboard.html",))
    _seed(runtime, other, OTHER_NAMES)
    other_before = _session_rows(runtime.engine, other)
    answers: Counter[str] = Counter()

    # When thousands of generated calls run as S, each in its own committed transaction
    @settings(
        max_examples=DIRECT_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(_calls(other), min_size=1, max_size=3))
    # Generated content past the ceiling comes a few times in thousands of calls, or not at
    # all: one such call is always made.
    @example([FunctionCall("manage_artifact", OVERSIZE_CREATE)])
    def fuzz(calls: list[FunctionCall]) -> None:
        for one in calls:
            with runtime.engine.begin() as conn:
                ctx = tool_context(conn, sid, 1000 + answers.total())
                answers[_answer(one, ctx)] += 1

    fuzz()
    # Then every call was answered (no other exception reached this test), O is untouched,
    # and S's artifact versions have neither gaps nor repeats
    figures = check_run(runtime.engine, run_id)
    other_after = _session_rows(runtime.engine, other)
    chaos_report(
        None,
        examples=DIRECT_EXAMPLES,
        calls=answers.total(),
        crashes=0,
        answers=dict(answers.most_common()),
        other_session_changed=other_after != other_before,
        version_gaps=figures.version_gaps,
        dup_versions=figures.duplicated_versions,
    )
    assert answers.total() >= DIRECT_EXAMPLES
    assert {"ok", "unknown_tool", "bad_arguments", "too_large", "conflict"} <= set(answers)
    assert other_after == other_before
    assert figures.version_gaps == 0 and figures.duplicated_versions == 0


def _drive(rt: Runtime, session_id: int, turns: list[list[FunctionCall]]) -> list[str]:
    """Run a session's scripted turns, then filler turns, verifying handoffs, to its end."""
    outcomes: list[str] = []
    script = [model_turn(*calls) for calls in turns]
    filler = model_turn(call("plan_manage", action="list"))
    for _ in range(MAX_TURNS + 5):
        with rt.engine.connect() as conn:
            row = conn.execute(
                select(sessions.c.status, sessions.c.next_turn, sessions.c.repair_round).where(
                    sessions.c.id == session_id
                )
            ).one()
        if row.status in _TERMINAL:
            return outcomes
        if row.status == "verifying":
            verify_handoff(rt, session_id=session_id, round_no=row.repair_round, browser=None)
            continue
        turn = script[row.next_turn] if row.next_turn < len(script) else filler
        outcomes.append(
            run_turn(
                rt=rt, session_id=session_id, turn_no=row.next_turn, model=ScriptedModel([turn])
            ).value
        )
        if outcomes[-1] == "committed":
            _assert_all_answered(rt.engine, session_id, row.next_turn, len(turn.calls))
    raise AssertionError(f"session {session_id} did not end: {outcomes}")


def _assert_all_answered(engine: Engine, session_id: int, turn_no: int, calls: int) -> None:
    with engine.connect() as conn:
        kinds = (
            conn.execute(
                text("SELECT kind FROM events WHERE session_id = :s AND turn_no = :t ORDER BY seq"),
                {"s": session_id, "t": turn_no},
            )
            .scalars()
            .all()
        )
    assert kinds.count("model") == 1
    assert kinds.count("tool_result") + kinds.count("tool_error") == calls


def test_generated_calls_through_whole_turns(
    runtime: Runtime, chaos_report: Callable[..., None]
) -> None:
    # Given a session O with artifacts and a plan, and one fresh session per example
    run_id, sids = make_run(runtime.engine, waves=f"1x{TURN_EXAMPLES + 1}", max_turns=MAX_TURNS)
    other, pool = sids[0], iter(sids[1:])
    _seed(runtime, other, OTHER_NAMES)
    other_before = _session_rows(runtime.engine, other)
    outcomes: Counter[str] = Counter()
    used: list[int] = []

    # When each runs turns made of generated calls, then filler turns, to its end
    @settings(
        max_examples=TURN_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        st.lists(st.lists(_calls(other, dict_args_only=True), max_size=3), min_size=1, max_size=3)
    )
    def fuzz(turns: list[list[FunctionCall]]) -> None:
        sid = next(pool)
        used.append(sid)
        outcomes.update(_drive(runtime, sid, turns))

    fuzz()
    for sid in pool:  # sessions hypothesis did not need still have to end
        _drive(runtime, sid, [])
    # Then every turn committed or ended its session (no exception), every call got an
    # answer event, every session ended, and O is untouched
    other_after = _session_rows(runtime.engine, other)
    _drive(runtime, other, [])
    figures = check_run(runtime.engine, run_id)
    chaos_report(
        figures,
        examples=len(used),
        turn_outcomes=dict(outcomes),
        crashes=0,
        other_session_changed=other_after != other_before,
    )
    assert set(outcomes) <= {"committed", "ended"}
    assert other_after == other_before
    assert figures.clean, figures


@pytest.mark.parametrize("bad", ["\x00", "\ud800"], ids=["nul", "lone_surrogate"])
@pytest.mark.parametrize("tool", ["artifact", "plan"])
def test_text_the_database_cannot_store_is_a_tool_error(
    runtime: Runtime, tool: str, bad: str
) -> None:
    # Given a session, when the model sends content or a plan item holding such text
    _, (sid,) = make_run(runtime.engine)
    one = (
        FunctionCall(
            "manage_artifact", {"action": "create", "name": "a.html", "content": page() + bad}
        )
        if tool == "artifact"
        else FunctionCall("plan_manage", {"action": "set", "items": ["a" + bad]})
    )
    # Then it is answered with a tool error, as any other bad argument is
    with runtime.engine.begin() as conn, pytest.raises(ToolError):
        run_tool(
            one,
            tool_context(conn, sid, 0),
        )
