"""History kept between turns: read-only, bounded, and always what the log rebuilds."""

from __future__ import annotations

import copy
import json
import pickle
import tracemalloc
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from sqlalchemy import Engine, select

from tests.factories import ScriptedModel, call, dashboard_sim, make_run, model_turn, page
from worker.agent import history
from worker.agent.events import Brief, Event, ModelOutput, Nudge, NudgeReason, ToolResult, decode
from worker.agent.frozen import FrozenDict, FrozenList, freeze
from worker.agent.transcript import Transcript, TranscriptCache, cache_for
from worker.agent.turn import run_turn
from worker.fleet.runtime import Runtime
from worker.models.base import Content, Model, ModelRequest, ModelTurn
from worker.notices import user_text
from worker.settings import Settings
from worker.store.blobs import restore_all
from worker.store.engine import make_engine
from worker.store.eventlog import LogMark
from worker.store.tables import events, sessions

_VALUE = {"role": "user", "parts": [{"text": "hi", "tags": ["a", {"b": [1, 2]}]}]}

_CHANGES: dict[str, Callable[[Any], object]] = {
    "set item": lambda v: v["parts"][0].__setitem__("text", "changed"),
    "delete item": lambda v: v["parts"][0].__delitem__("text"),
    "update": lambda v: v.update(role="model"),
    "setdefault": lambda v: v.setdefault("extra", 1),
    "pop key": lambda v: v.pop("role"),
    "popitem": lambda v: v.popitem(),
    "clear dict": lambda v: v.clear(),
    "merge in place": lambda v: v.__ior__({"role": "model"}),
    "append": lambda v: v["parts"].append({"text": "more"}),
    "extend": lambda v: v["parts"].extend([{}]),
    "add in place": lambda v: v["parts"].__iadd__([{}]),
    "insert": lambda v: v["parts"].insert(0, {}),
    "set index": lambda v: v["parts"].__setitem__(0, {}),
    "set slice": lambda v: v["parts"].__setitem__(slice(0, 1), []),
    "delete index": lambda v: v["parts"].__delitem__(0),
    "pop index": lambda v: v["parts"].pop(),
    "remove": lambda v: v["parts"].remove(v["parts"][0]),
    "sort": lambda v: v["parts"][0]["tags"].sort(key=str),
    "reverse": lambda v: v["parts"].reverse(),
    "clear list": lambda v: v["parts"].clear(),
    "deep": lambda v: v["parts"][0]["tags"][1]["b"].append(3),
}


@pytest.mark.parametrize("change", list(_CHANGES))
def test_a_frozen_value_refuses_every_change(change: str) -> None:
    # Given a frozen JSON value
    frozen = freeze(copy.deepcopy(_VALUE))
    # When it is changed in any way, Then that raises and the value stays as it was
    with pytest.raises(TypeError, match="read-only"):
        _CHANGES[change](frozen)
    assert frozen == _VALUE


def test_a_frozen_value_reads_serialises_and_copies_as_a_plain_one() -> None:
    frozen = freeze(copy.deepcopy(_VALUE))
    assert frozen == _VALUE and isinstance(frozen, dict)
    assert type(frozen["parts"]) is FrozenList and type(frozen) is FrozenDict
    assert json.dumps(frozen) == json.dumps(_VALUE)
    assert orjson.dumps(frozen) == orjson.dumps(_VALUE)
    # Its copies are plain and writable, all the way down for a deep copy
    for thawed in (copy.deepcopy(frozen), pickle.loads(pickle.dumps(frozen))):
        thawed["parts"][0]["tags"][1]["b"].append(3)
        assert type(thawed) is dict and frozen == _VALUE
    shallow = {**frozen, "role": "model"}
    shallow["extra"] = [*frozen["parts"], {"text": "more"}]
    assert type(copy.copy(frozen)) is dict and frozen == _VALUE


def _log() -> list[Event]:
    result = ToolResult("plan_manage", "c0", {"items": ["a", "b"]}, progress=False)
    return [
        Brief(user_text("build it")),
        ModelOutput({"role": "model", "parts": [{"function_call": {"name": "a", "args": {}}}]}),
        result,
        Nudge(NudgeReason.no_tool_call, user_text("call a tool")),
        ModelOutput({"role": "model", "parts": [{"text": "hm"}]}),
        result,
        result,
        ModelOutput({"role": "model", "parts": [{"text": "done"}]}),
    ]


def test_history_extended_in_pieces_is_the_history_rebuilt_at_once() -> None:
    log = _log()
    whole = history.rebuild(log)
    for cut in range(len(log) + 1):
        assert list(history.extend(history.rebuild(log[:cut]), log[cut:])) == whole


def _mark(n: int) -> LogMark:
    return LogMark(0, n, n, "1")


def _read(session_id: int, text: str) -> Any:
    """A claim's read of a session's whole log: its brief."""
    brief = {"content": {"role": "user", "parts": [{"text": text}]}}
    return SimpleNamespace(
        id=session_id, log_after=None, log_tail=_mark(0), events=[("brief", brief)]
    )


def test_the_cache_keeps_to_its_budget_dropping_the_least_recently_used() -> None:
    # Given a cache with room for about three histories like these
    size = TranscriptCache(max_bytes=2**20).advance(None, _read(0, "x" * 1000)).size_bytes
    cache = TranscriptCache(max_bytes=3 * size + size // 2)
    # When four sessions are kept, the first one used again before the fourth comes
    for sid in (1, 2, 3):
        cache.advance(None, _read(sid, "x" * 1000))
    assert cache.get(1) is not None
    cache.advance(None, _read(4, "x" * 1000))
    # Then the least recently used (2) went, and the cache holds no more than its budget
    assert [cache.get(sid) is not None for sid in (1, 2, 3, 4)] == [True, False, True, True]
    assert cache.size_bytes == 3 * size <= cache.max_bytes
    # A history larger than the whole budget is not kept; an ended session is forgotten
    cache.advance(None, _read(5, "x" * 10 * size))
    cache.forget(1)
    assert cache.get(5) is None and cache.get(1) is None and len(cache) == 2
    assert cache.size_bytes == 2 * size


def test_a_history_holds_about_the_bytes_it_counts() -> None:
    # Given 50 turns of a session that rewrites a 15 KB page every turn, as JSON from the log
    turns = [
        [
            ("model", model_turn(call("manage_artifact", content=f"{i}" + "p" * 15_000)).content),
            ("tool_result", {"name": "manage_artifact", "response": {"output": {"version": i}}}),
        ]
        for i in range(50)
    ]
    text = json.dumps([[k, {"content": c} if k == "model" else c] for t in turns for k, c in t])
    # When a history is made of them, and what the read left behind is dropped
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        rows = [tuple(row) for row in json.loads(text)]
        made = Transcript(1, None).extend(rows, tail=_mark(99))
        del rows
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # Then what it counts is within a fifth of what it holds
    assert 0.8 < made.size_bytes / held < 1.25, (made.size_bytes, held)


# --- turns against the real database -------------------------------------------------


def _rebuilt(
    engine: Engine, session_id: int, upto: LogMark | None = None
) -> tuple[list[Event], list[Content]]:
    """The session's events (up to ``upto``) and contents, as a full read of its log gives
    them."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(events.c.turn_no, events.c.seq, events.c.kind, events.c.payload, events.c.blobs)
            .where(events.c.session_id == session_id)
            .order_by(events.c.turn_no, events.c.seq)
        ).all()
        # The pages the log keeps apart, put back: the model is sent them whole.
        payloads = restore_all(conn, [(r.payload, r.blobs) for r in rows])
    end = (upto.turn_no, upto.seq) if upto is not None else (2**31, 0)
    log = [
        decode(r.kind, p) for r, p in zip(rows, payloads, strict=True) if (r.turn_no, r.seq) <= end
    ]
    return log, history.rebuild(log)


class _Checked:
    """A model whose every request's history must be the one a full read rebuilds."""

    def __init__(self, model: Model, engine: Engine, session_id: int) -> None:
        self.model, self.engine, self.session_id = model, engine, session_id
        self.checked = 0
        self.frozen = True
        """Its contents must be frozen (they are kept for later turns)."""

    def generate(self, request: ModelRequest) -> ModelTurn:
        _, contents = _rebuilt(self.engine, self.session_id)
        assert list(request.history) == contents, "the history is not the log's"
        assert all((type(c) is FrozenDict) is self.frozen for c in request.history)
        self.checked += 1
        return self.model.generate(request)


def _status(engine: Engine, session_id: int) -> tuple[str, int]:
    with engine.connect() as conn:
        row = conn.execute(
            select(sessions.c.status, sessions.c.next_turn).where(sessions.c.id == session_id)
        ).one()
    return row.status, row.next_turn


def _assert_kept_is_the_log(rt: Runtime, session_id: int) -> None:
    kept = cache_for(engine=rt.engine, settings=rt.settings).get(session_id)
    assert kept is not None and kept.mark is not None
    log, contents = _rebuilt(rt.engine, session_id, upto=kept.mark)
    assert (list(kept.events), list(kept.contents)) == (log, contents)
    assert len(log) > 3


def test_every_turn_sees_what_a_full_read_of_the_log_rebuilds(runtime: Runtime) -> None:
    # Given a sim session (its player reads the whole history every turn)
    _, (sid,) = make_run(runtime.engine, loop_idle_turns=20)
    model = _Checked(dashboard_sim(seed=11, persona="explorer"), runtime.engine, sid)
    cache = cache_for(engine=runtime.engine, settings=runtime.settings)
    # When it runs until it hands off
    while (state := _status(runtime.engine, sid))[0] == "running" and model.checked < 12:
        assert run_turn(rt=runtime, session_id=sid, turn_no=state[1], model=model).value in (
            "committed",
            "ended",
        )
    # Then each turn's history was the log's, read on from the turn before, never whole
    assert model.checked >= 3
    assert cache.stale == 0 and cache.hits >= model.checked - 1
    _assert_kept_is_the_log(runtime, sid)


def _writable(value: Any) -> Iterator[str]:
    """Paths of the dicts and lists inside ``value`` that let themselves be changed."""
    if isinstance(value, dict | list):
        try:
            if isinstance(value, dict):
                value["__probe__"] = 1
                del value["__probe__"]
            else:
                value.append(None)
                value.pop()
            yield type(value).__name__
        except TypeError:
            pass
        for item in value.values() if isinstance(value, dict) else value:
            yield from _writable(item)


def test_nothing_downstream_can_change_the_shared_history(runtime: Runtime) -> None:
    # Given a model that tries to change every dict and list of each request's history
    _, (sid,) = make_run(runtime.engine)
    writable: list[str] = []
    model = ScriptedModel(
        [
            model_turn(call("plan_manage", action="set", items=["a", "b"])),
            model_turn(call("manage_artifact", action="create", name="d.html", content=page())),
            model_turn(text="thinking"),
            model_turn(call("plan_manage", action="list")),
        ],
        before=lambda request: writable.extend(p for c in request.history for p in _writable(c)),
    )
    # When four turns run, each over the history the turn before kept
    for n in range(4):
        assert run_turn(rt=runtime, session_id=sid, turn_no=n, model=model).value == "committed"
    # Then no part of any history or kept event could be changed, and they are the log's
    kept = cache_for(engine=runtime.engine, settings=runtime.settings).get(sid)
    assert kept is not None
    writable.extend(p for e in kept.events for v in vars(e).values() for p in _writable(v))
    assert writable == []
    assert len(model.requests) == 4 and len(model.requests[-1].history) == 7
    _assert_kept_is_the_log(runtime, sid)


def test_a_change_that_got_past_the_freeze_would_be_caught(runtime: Runtime) -> None:
    # Given a session with two turns behind it, whose kept history something changed
    # anyway, behind the freeze's back (as C code or ``dict.__setitem__`` could)
    _, (sid,) = make_run(runtime.engine)
    turns = [model_turn(text="one"), model_turn(text="two"), model_turn(text="three")]
    model = _Checked(ScriptedModel(turns), runtime.engine, sid)
    for n in range(2):
        run_turn(rt=runtime, session_id=sid, turn_no=n, model=model)
    kept = cache_for(engine=runtime.engine, settings=runtime.settings).get(sid)
    assert kept is not None
    dict.__setitem__(kept.contents[1]["parts"][0], "text", "rewritten")
    # When the next turn runs, Then the check against a full read of the log fails
    with pytest.raises(AssertionError, match="the history is not the log's"):
        run_turn(rt=runtime, session_id=sid, turn_no=2, model=model)


def test_turns_that_ran_in_other_processes_are_read_on_from_the_mark(
    runtime: Runtime, settings: Settings
) -> None:
    # Given two worker processes (each its own engine, so its own cache) taking turns
    _, (sid,) = make_run(runtime.engine)
    other_engine = make_engine(settings)
    try:
        other = Runtime(settings=settings, engine=other_engine, dispatcher=runtime.dispatcher)
        scripted = ScriptedModel([model_turn(text=f"turn {n}") for n in range(6)])
        model = _Checked(scripted, runtime.engine, sid)
        # When the session's turns alternate between them
        for n in range(6):
            rt = runtime if n % 2 == 0 else other
            assert run_turn(rt=rt, session_id=sid, turn_no=n, model=model).value == "committed"
        # Then every turn saw the whole log, each process reading on from its own mark
        caches = [cache_for(engine=rt.engine, settings=settings) for rt in (runtime, other)]
        assert model.checked == 6
        assert [(c.hits, c.stale) for c in caches] == [(2, 0), (2, 0)]
        _assert_kept_is_the_log(runtime, sid)
    finally:
        other_engine.dispose()


def test_an_ended_session_is_forgotten(runtime: Runtime) -> None:
    # Given a session allowed two turns
    _, (sid,) = make_run(runtime.engine, max_turns=2)
    model = ScriptedModel([model_turn(text="one"), model_turn(text="two")])
    cache = cache_for(engine=runtime.engine, settings=runtime.settings)
    outcomes = [run_turn(rt=runtime, session_id=sid, turn_no=n, model=model) for n in range(3)]
    # Then its history was kept while it ran, and dropped when it ended
    assert [o.value for o in outcomes] == ["committed", "committed", "ended"]
    assert cache.get(sid) is None and cache.size_bytes == 0


def test_with_no_room_every_turn_reads_the_whole_log(runtime: Runtime) -> None:
    # Given a process that keeps no history between turns
    settings = runtime.settings.model_copy(update={"history_cache_mb": 0})
    rt = Runtime(settings=settings, engine=runtime.engine, dispatcher=runtime.dispatcher)
    _, (sid,) = make_run(rt.engine)
    model = _Checked(
        ScriptedModel([model_turn(text=f"turn {n}") for n in range(3)]), rt.engine, sid
    )
    model.frozen = False
    # When three turns run
    for n in range(3):
        assert run_turn(rt=rt, session_id=sid, turn_no=n, model=model).value == "committed"
    # Then each read the whole log, and nothing was kept
    cache = cache_for(engine=rt.engine, settings=settings)
    assert (model.checked, cache.hits, cache.misses, len(cache)) == (3, 0, 3, 0)
