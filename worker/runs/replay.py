"""Replay: re-enact a session's recorded model turns through the tools, without the model.

The event log is the session: each recorded model output, run again through the same
tools (:func:`~worker.agent.turn.run_call`) in a scratch workspace, must give back the
tool results that were recorded and, byte for byte, every artifact version. A fork
re-enacts the same way into its own workspace, up to the turn it goes live at.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.engine import Connection

from worker.agent.events import EventKind, ModelOutput, ToolFailure, ToolResult, decode
from worker.agent.history import is_elided
from worker.agent.tools import ToolContext
from worker.agent.turn import run_call
from worker.agent.workspace import seed_files
from worker.errors import ConfigError, InputError
from worker.models.base import FunctionCall, calls_of
from worker.profiles import Profile, get_profile
from worker.reads import recorded
from worker.reads.recorded import LoggedEvent, RecordedVersion
from worker.runs.rejudge import Judge, VerdictCheck, rejudge
from worker.store.sessions import SessionView
from worker.store.tables import metadata
from worker.tasks.base import Instance, Task
from worker.tasks.fingerprint import recorded_task

__all__ = ["Divergence", "ReplayReport", "VersionCheck", "reenact", "replay_session"]

#: The session id the scratch workspace files everything under.
SCRATCH_SESSION_ID = 1
_TOOL_KINDS = (EventKind.tool_result.value, EventKind.tool_error.value)


@dataclass(frozen=True)
class Divergence:
    """A tool call whose re-enacted result is not the one recorded."""

    turn_no: int
    call_no: int
    name: str
    detail: str

    def __str__(self) -> str:
        return f"turn {self.turn_no}, call {self.call_no} ({self.name}): {self.detail}"


@dataclass(frozen=True)
class Reenacted:
    """What re-enacting a log did: turns and calls run, calls taken as recorded, divergences."""

    turns: int
    calls: int
    elided: int
    """Calls whose over-long arguments were not stored: refused then, taken as recorded."""
    divergences: tuple[Divergence, ...]


@dataclass(frozen=True)
class VersionCheck:
    """One artifact version: recorded against re-enacted."""

    name: str
    version: int
    turn_no: int
    size_bytes: int
    recorded_sha256: str | None
    """None: the replay wrote a version that was never recorded."""
    replayed_sha256: str | None
    """None: the replay did not write this recorded version."""
    match: bool
    """Same turn, same bytes, and the recorded hash is the hash of the recorded bytes."""

    @property
    def problem(self) -> str | None:
        """Why this version does not match, in words; None when it does."""
        label = f"{self.name} v{self.version} (turn {self.turn_no})"
        if self.match:
            return None
        if self.recorded_sha256 is None:
            return f"{label} was written by the replay but never recorded"
        if self.replayed_sha256 is None:
            return f"{label} is recorded but the replay did not write it"
        return (
            f"{label} differs: replayed sha256 {self.replayed_sha256[:12]}, "
            f"recorded {self.recorded_sha256[:12]}"
        )


@dataclass(frozen=True)
class ReplayReport:
    """A session's replay: what was re-enacted and how every version compares."""

    session_id: int
    run_id: int
    status: str
    turns: int
    calls: int
    elided: int
    versions: tuple[VersionCheck, ...]
    divergences: tuple[Divergence, ...]
    verdicts: tuple[VerdictCheck, ...] = ()
    """Every recorded verdict, judged again (:mod:`worker.runs.rejudge`)."""

    @property
    def ok(self) -> bool:
        """Every version and verdict matched, and every tool result came back as recorded."""
        return (
            all(v.match for v in self.versions)
            and all(v.match for v in self.verdicts)
            and not self.divergences
        )

    @property
    def matched(self) -> int:
        """Versions that matched byte for byte."""
        return sum(1 for v in self.versions if v.match)

    @property
    def problem(self) -> str | None:
        """The first thing that does not replay, in words; None when all does."""
        for version in self.versions:
            if version.problem is not None:
                return version.problem
        if self.divergences:
            return str(self.divergences[0])
        return next((v.problem for v in self.verdicts if v.problem is not None), None)


def replay_session(
    conn: Connection, *, session_id: int, now: datetime, judge: Judge | None = None
) -> ReplayReport:
    """Re-enact a session's recorded turns in a scratch workspace and compare the results.

    Args:
        conn: A connection to the session's database (only read).
        session_id: The session.
        now: The time the scratch workspace stamps its rows with.
        judge: Judges each recorded verdict's workspace again with the task's whole
            verifier; None judges it again by the task's static checks.

    Raises:
        InputError: no such session.
    """
    head = recorded.find_session(conn, session_id=session_id)
    task = session_task(head)
    log = recorded.session_log(conn, session_id=session_id)
    # A turn that commits while this reads is left out: versions beyond the log read are not
    # compared (each turn commits its events and versions together).
    last = max((e.turn_no for e in log if e.kind == EventKind.model.value), default=-1)
    history = [
        v for v in recorded.artifact_history(conn, session_id=session_id) if v.turn_no <= last
    ]
    # The scratch workspace is an in-memory database of the same schema: the tools run
    # against it exactly as they ran against the fleet's.
    scratch = create_engine("sqlite://")
    try:
        with scratch.begin() as work:
            metadata.create_all(work)
            done = reenact(
                work,
                session_id=SCRATCH_SESSION_ID,
                log=log,
                profile=get_profile(head.profile),
                task=task,
                instance=Instance(head.instance_id, head.brief),
                now=now,
            )
            replayed = recorded.artifact_history(work, session_id=SCRATCH_SESSION_ID)
    finally:
        scratch.dispose()
    verdicts = rejudge(
        task=task,
        profile=get_profile(head.profile),
        instance=_instance(task, head)
        if judge is not None
        else Instance(head.instance_id, head.brief),
        log=log,
        versions=history,
        verdicts=recorded.verdict_history(conn, session_id=session_id),
        judge=judge,
    )
    return ReplayReport(
        session_id=head.id,
        run_id=head.run_id,
        status=head.status,
        turns=done.turns,
        calls=done.calls,
        elided=done.elided,
        versions=tuple(compare_versions(history, replayed)),
        divergences=done.divergences,
        verdicts=tuple(verdicts),
    )


def _instance(task: Task, head: SessionView) -> Instance:
    """The session's instance with its hidden fields, for a whole judgement."""
    try:
        return task.instance(head.instance_id)
    except ConfigError:  # a session made before tasks: its brief is all there is
        return Instance(head.instance_id, head.brief)


def reenact(
    conn: Connection,
    *,
    session_id: int,
    log: Sequence[LoggedEvent],
    profile: Profile,
    task: Task,
    instance: Instance,
    now: datetime,
    until_turn: int | None = None,
    seeded: bool = False,
) -> Reenacted:
    """Run the tool calls of every recorded model output into ``session_id``'s workspace.

    Each call's result is compared with the one recorded after it in the same turn.

    Args:
        conn: Where the workspace lives (a scratch database, or a fork's own session).
        session_id: The session whose workspace is written.
        log: The recorded events, in log order.
        profile: The profile the session was recorded under (its rules decide results).
        task: The session's task (its tools and checks decide results too).
        instance: The session's instance (public fields).
        now: Timestamp of the rows written.
        until_turn: Stop before this turn (None: every turn).
        seeded: The workspace has its starting files already (a fork made by ``create_run``);
            otherwise the task's are written first, as version 0.
    """
    if not seeded:
        seed_files(conn, session_ids=[session_id], files=[dict(task.files(instance))], now=now)
    turns = calls = elided = 0
    divergences: list[Divergence] = []
    for turn_no, group in groupby(log, key=lambda e: e.turn_no):
        if until_turn is not None and turn_no >= until_turn:
            break
        events = list(group)
        model = [e for e in events if e.kind == EventKind.model.value]
        if not model:
            continue
        turns += 1
        outputs = [e for e in events if e.kind in _TOOL_KINDS]
        ctx = ToolContext(
            conn=conn,
            session_id=session_id,
            turn_no=turn_no,
            profile=profile,
            now=now,
            task=task,
            instance=instance,
        )
        made = _calls(model)
        for i, call in enumerate(made):
            calls += 1
            logged = outputs[i] if i < len(outputs) else None
            if is_elided(call.args):
                # Arguments this far over the ceiling were refused when they were sent,
                # and only their note was kept: the recorded refusal stands.
                elided += 1
                continue
            got = json.loads(json.dumps(run_call(call, ctx).to_payload()))
            if logged is None:
                divergences.append(Divergence(turn_no, i, call.name, "no result was recorded"))
            elif got != logged.payload:
                divergences.append(Divergence(turn_no, i, call.name, _differs(got, logged)))
        if len(outputs) > len(made):
            divergences.append(
                Divergence(turn_no, len(made), "-", "more results recorded than calls made")
            )
    return Reenacted(turns, calls, elided, tuple(divergences))


def _calls(model: Iterable[LoggedEvent]) -> list[FunctionCall]:
    found: list[FunctionCall] = []
    for event in model:
        output = decode(event.kind, event.payload)
        assert isinstance(output, ModelOutput)
        found += calls_of(output.content)
    return found


def _differs(got: dict[str, Any], logged: LoggedEvent) -> str:
    want = decode(logged.kind, logged.payload)
    kind = EventKind(logged.kind).value
    if isinstance(want, ToolFailure) and got.get("kind") != want.error_kind:
        return f"recorded {kind} {want.error_kind}, replayed {got.get('kind') or 'a result'}"
    if isinstance(want, ToolResult) and "kind" in got:
        return f"recorded a result, replayed error {got['kind']}"
    return f"the {kind} differs from the one recorded"


def session_task(head: SessionView) -> Task:
    """The task a recorded session ran, as its run recorded it.

    Raises:
        InputError: it cannot be loaded, or it changed since (a replay or fork of it would
            not say what the session did).
    """
    try:
        return recorded_task(head.task_ref, version=head.task_version, sha256=head.task_sha256)
    except ConfigError as exc:
        raise InputError(f"session {head.id}: {exc}") from None


def compare_versions(
    history: Sequence[RecordedVersion], replayed: Sequence[RecordedVersion]
) -> list[VersionCheck]:
    """Every version recorded or replayed, paired by (name, version) and compared."""
    made = {(v.name, v.version): v for v in replayed}
    checks = []
    for want in history:
        got = made.pop((want.name, want.version), None)
        content = want.content.encode()
        match = (
            got is not None
            and got.turn_no == want.turn_no
            and got.content.encode() == content
            and hashlib.sha256(content).hexdigest() == want.sha256
        )
        checks.append(
            VersionCheck(
                name=want.name,
                version=want.version,
                turn_no=want.turn_no,
                size_bytes=len(content),
                recorded_sha256=want.sha256,
                replayed_sha256=got.sha256 if got is not None else None,
                match=match,
            )
        )
    for extra in made.values():
        checks.append(
            VersionCheck(
                name=extra.name,
                version=extra.version,
                turn_no=extra.turn_no,
                size_bytes=len(extra.content.encode()),
                recorded_sha256=None,
                replayed_sha256=extra.sha256,
                match=False,
            )
        )
    return sorted(checks, key=lambda c: (c.name, c.version))
