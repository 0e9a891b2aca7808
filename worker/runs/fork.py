"""Fork: a new run whose one session continues another's history from turn N, live.

The fork keeps the origin's first N turns (``0 .. N-1``) and the verifier's findings that
opened turn N, re-enacts their tool calls into its own workspace (so its artifacts and
plan are the origin's at that turn, checked result by result), and plays turn N onwards
with the model, profile and note it was given. Its run records where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, update
from sqlalchemy.engine import Connection

from worker.agent.events import EventKind, Nudge, NudgeReason
from worker.config import RunConfig
from worker.errors import InputError
from worker.notices import user_text
from worker.profiles import get_profile
from worker.reads import recorded
from worker.reads.recorded import LoggedEvent
from worker.runs.create import create_run
from worker.runs.replay import compare_versions, reenact, session_task
from worker.store.sessions import add_logged
from worker.store.tables import events, runs, sessions
from worker.tasks.base import Instance

__all__ = ["Fork", "create_fork", "kept_events"]

#: Most characters of an operator's note to a fork.
MAX_NOTE_CHARS = 4000


@dataclass(frozen=True)
class Fork:
    """A fork as created: its run and session, and where it came from."""

    run_id: int
    session_id: int
    origin_run_id: int
    origin_session_id: int
    at_turn: int


def create_fork(
    conn: Connection,
    *,
    session_id: int,
    at_turn: int,
    now: datetime,
    model: str | None = None,
    profile: str | None = None,
    note: str | None = None,
) -> Fork:
    """Create the fork's run, session, history and workspace, with wave 1 due to start.

    Args:
        conn: A connection inside the caller's transaction.
        session_id: The origin session.
        at_turn: The fork's first live turn: turns before it are the origin's.
        now: Creation time.
        model: The fork's model (default: the origin's).
        profile: The fork's profile (default: the origin's).
        note: Text the agent reads as the fork goes live (an operator's hint).

    Raises:
        InputError: no such session, a turn out of range or right after a handoff, a
            note too long, or a history that does not re-enact as recorded.
    """
    origin = recorded.find_session(conn, session_id=session_id)
    if not 0 <= at_turn <= origin.next_turn:
        raise InputError(
            f"session {session_id} has turns 0 to {origin.next_turn - 1}: "
            f"--at-turn takes 0 to {origin.next_turn}"
        )
    if note is not None and not 0 < len(note) <= MAX_NOTE_CHARS:
        raise InputError(f"the note must have 1 to {MAX_NOTE_CHARS} characters")
    log = kept_events(recorded.session_log(conn, session_id=session_id), at_turn)
    _refuse_after_handoff(log, session_id=session_id, at_turn=at_turn)
    if model is not None and model != origin.model and note is None:
        _refuse_foreign_signatures(log, origin_model=origin.model, model=model)
    task = session_task(origin)
    config = RunConfig.model_validate(origin.run_config).model_copy(
        update={
            "waves": "1x1",
            "instances": origin.instance_id or None,
            "sample": None,
            "epochs": 1,
        }
    )
    run_id = create_run(
        conn,
        model=model or origin.model,
        config=config,
        now=now,
        task=origin.task_ref,
        profile=profile or origin.profile,
        budget_usd=origin.run_budget_usd,
    )
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id)
        .values(forked_from_session_id=session_id, forked_at_turn=at_turn)
    )
    # The fork is the origin's session again: same index, persona and brief, so a model
    # seeded by them (the sim) goes on as the origin would have.
    fork_id = conn.execute(
        update(sessions)
        .where(sessions.c.run_id == run_id)
        .values(
            index=origin.index,
            persona=origin.persona,
            instance_id=origin.instance_id,
            brief=origin.brief,
            next_turn=at_turn,
            repair_round=_repair_round(log),
        )
        .returning(sessions.c.id)
    ).scalar_one()
    conn.execute(delete(events).where(events.c.session_id == fork_id))
    rows = [
        {**_row(e), "session_id": fork_id, "created_at": now}
        for e in [*log, *_note(note, log, at_turn)]
    ]
    # The texts the log keeps apart are the origin's rows: the fork's events share them.
    add_logged(conn, rows)
    done = reenact(
        conn,
        session_id=fork_id,
        log=log,
        profile=get_profile(origin.profile),
        task=task,
        instance=Instance(origin.instance_id, origin.brief),
        now=now,
        until_turn=at_turn,
        seeded=True,
    )
    recorded_versions = [
        v for v in recorded.artifact_history(conn, session_id=session_id) if v.turn_no < at_turn
    ]
    versions = compare_versions(
        recorded_versions, recorded.artifact_history(conn, session_id=fork_id)
    )
    problem = next((v.problem for v in versions if not v.match), None)
    if done.divergences or problem is not None:
        raise InputError(
            f"session {session_id} does not re-enact as recorded "
            f"({problem or done.divergences[0]}); "
            f"`python -m scheduler replay {session_id}` shows where"
        )
    return Fork(run_id, fork_id, origin.run_id, session_id, at_turn)


def kept_events(log: list[LoggedEvent], at_turn: int) -> list[LoggedEvent]:
    """The origin's events a fork at ``at_turn`` keeps: turns before it, and the verifier's
    findings that opened that turn (they were in its prompt)."""
    return [
        e
        for e in log
        if e.kind != EventKind.ended.value
        and (e.turn_no < at_turn or (e.turn_no == at_turn and e.kind == EventKind.feedback.value))
    ]


def _refuse_after_handoff(log: list[LoggedEvent], *, session_id: int, at_turn: int) -> None:
    # A turn that handed off is followed by a verification, not by a turn: a fork right
    # after it would have nothing to play until its verdict, which the fork does not copy.
    last = [e for e in log if e.turn_no == at_turn - 1]
    if any(e.kind == EventKind.feedback.value and e.turn_no == at_turn for e in log):
        return
    if any(
        e.kind == EventKind.tool_result.value and e.payload.get("name") == "handoff" for e in last
    ):
        raise InputError(
            f"turn {at_turn - 1} of session {session_id} hands off its artifact and no "
            "verdict sent it back: fork at an earlier turn"
        )


def _refuse_foreign_signatures(log: list[LoggedEvent], *, origin_model: str, model: str) -> None:
    # Gemini checks the thought signature of every function call since the last user text
    # (the API's "current turn"), and the signatures another provider wrote (the sim's)
    # never pass. A note is user text: it starts a new turn, with nothing left to check.
    if not model.startswith("gemini-") or origin_model.startswith("gemini-"):
        return
    texts = (EventKind.brief.value, EventKind.feedback.value, EventKind.nudge.value)
    start = max((i for i, e in enumerate(log) if e.kind in texts), default=-1)
    calls = [
        e
        for e in log[start + 1 :]
        if e.kind == EventKind.model.value
        and any("function_call" in p for p in e.payload["content"].get("parts") or ())
    ]
    if calls:
        raise InputError(
            f"turn {calls[-1].turn_no} carries thought signatures of {origin_model}, which "
            f"{model} would refuse in the turn the fork continues: pass --brief-note to "
            "start a new turn, or fork at a turn that follows a user message"
        )


def _repair_round(log: list[LoggedEvent]) -> int:
    rounds = [int(e.payload["round"]) for e in log if e.kind == EventKind.feedback.value]
    return max(rounds) + 1 if rounds else 0


def _note(note: str | None, log: list[LoggedEvent], at_turn: int) -> list[LoggedEvent]:
    if note is None:
        return []
    seq = max((e.seq for e in log if e.turn_no == at_turn), default=-1) + 1
    nudge = Nudge(NudgeReason.note, user_text(note))
    return [LoggedEvent(at_turn, seq, nudge.kind.value, nudge.to_payload())]


def _row(event: LoggedEvent) -> dict[str, object]:
    return {
        "turn_no": event.turn_no,
        "seq": event.seq,
        "kind": event.kind,
        "payload": event.payload,
    }
