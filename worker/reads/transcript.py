"""A session's transcript: what ``show`` prints and the report's session pages draw.

One frozen tree per session, read from its event log, its usage rows, its artifact
versions and its verdicts: turn by turn, what the model was sent and what it cost, what it
said and thought, each tool call with its result or error, each artifact version as a diff
against the one before, each verdict with its checks; and how the session's lease went and
how it ended. Only what the session stored is read, so a task's hidden fields (which only
its verifier sees) never appear. :mod:`.conversation` cuts the log into turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.engine import Connection

from worker.errors import InputError
from worker.reads.conversation import (
    Check,
    Ending,
    Message,
    Recorded,
    ToolCall,
    Turn,
    TurnUsage,
    Verdict,
    VersionDiff,
    build_turns,
)
from worker.store.blobs import restore_all
from worker.store.tables import (
    artifact_versions,
    artifacts,
    blobs,
    events,
    runs,
    sessions,
    usage,
    verifications,
    waves,
)

__all__ = [
    "Check",
    "Ending",
    "Lease",
    "Message",
    "StartFile",
    "ToolCall",
    "Transcript",
    "Turn",
    "TurnUsage",
    "Verdict",
    "VersionDiff",
    "session_transcript",
    "verdict_media",
]


@dataclass(frozen=True)
class StartFile:
    """A file the task gave the session before its first turn (an artifact's version 0)."""

    name: str
    size_bytes: int


@dataclass(frozen=True)
class Lease:
    """How often the session's lease was taken, and by whom it is held now.

    Every turn and every verification takes the lease once when all goes well; a model
    retry hands it back and takes it again. ``other_claims`` are the rest: a lease taken
    over after its worker vanished, a wait for the fleet's rate limiter, a verification
    retried after a browser failure.
    """

    claims: int
    turns: int
    verdicts: int
    model_retries: int
    other_claims: int
    held_by: str | None
    """The worker holding it now (a turn or a verification in flight), if any."""
    expires_at: datetime | None
    next_turn_attempts: int
    """Claims of the next turn that vanished without a commit (a worker died on it)."""


@dataclass(frozen=True)
class Transcript:
    """One session, turn by turn."""

    session_id: int
    run_id: int
    index: int
    """The session's place in its run (``status --sessions`` lists it)."""
    wave: int
    persona: str
    instance: str
    task: str
    model: str
    profile: str
    status: str
    outcome: str | None
    error: str | None
    repair_round: int
    next_turn: int
    started_at: datetime | None
    finished_at: datetime | None
    cost_usd: float
    tokens: int
    start_files: list[StartFile]
    lease: Lease
    turns: list[Turn]

    def turn(self, number: int) -> Turn:
        """The turn numbered ``number``.

        Raises:
            InputError: the session has no such turn.
        """
        for turn in self.turns:
            if turn.number == number:
                return turn
        have = f"turns 0 to {self.turns[-1].number}" if self.turns else "no turn yet"
        raise InputError(f"session {self.session_id} has no turn {number} ({have})")


def session_transcript(conn: Connection, *, session_id: int) -> Transcript:
    """The session's transcript, as far as it has gone (a running session's too).

    Raises:
        InputError: no session has that id.
    """
    head = conn.execute(
        select(
            sessions,
            waves.c.index.label("wave_index"),
            runs.c.task,
            runs.c.model,
            runs.c.profile,
        )
        .join(waves, waves.c.id == sessions.c.wave_id)
        .join(runs, runs.c.id == sessions.c.run_id)
        .where(sessions.c.id == session_id)
    ).first()
    if head is None:
        raise InputError(f"no session {session_id}")
    recorded = _recorded(conn, session_id)
    turns = build_turns(recorded)
    start = [StartFile(v["name"], v["size_bytes"]) for v in recorded.versions if v["turn_no"] < 0]
    lease = Lease(
        claims=head.lease_epoch,
        turns=len(recorded.usage),
        verdicts=len(recorded.verdicts),
        model_retries=head.model_retries,
        other_claims=max(
            0,
            head.lease_epoch
            - len(recorded.usage)
            - len(recorded.verdicts)
            - head.model_retries
            - (1 if head.lease_owner is not None else 0),
        ),
        held_by=head.lease_owner,
        expires_at=head.lease_expires_at,
        next_turn_attempts=head.turn_attempts,
    )
    return Transcript(
        session_id=head.id,
        run_id=head.run_id,
        index=head._mapping["index"],
        wave=head.wave_index,
        persona=head.persona,
        instance=head.instance_id,
        task=head.task,
        model=head.model,
        profile=head.profile,
        status=head.status,
        outcome=head.outcome,
        error=head.error,
        repair_round=head.repair_round,
        next_turn=head.next_turn,
        started_at=head.started_at,
        finished_at=head.finished_at,
        cost_usd=round(sum(u["cost_usd"] for u in recorded.usage), 6),
        tokens=sum(
            u["prompt_tokens"] + u["output_tokens"] + u["thoughts_tokens"] + u["tool_use_tokens"]
            for u in recorded.usage
        ),
        start_files=start,
        lease=lease,
        turns=turns,
    )


def _recorded(conn: Connection, session_id: int) -> Recorded:
    log = conn.execute(
        select(events.c.turn_no, events.c.seq, events.c.kind, events.c.payload, events.c.blobs)
        .where(events.c.session_id == session_id)
        .order_by(events.c.turn_no, events.c.seq)
    ).all()
    payloads = restore_all(conn, [(r.payload, r.blobs) for r in log])
    used = conn.execute(
        select(usage).where(usage.c.session_id == session_id).order_by(usage.c.turn_no)
    ).all()
    versions = conn.execute(
        select(
            artifact_versions.c.id,
            artifacts.c.name,
            artifact_versions.c.version,
            artifact_versions.c.turn_no,
            blobs.c.content,
            artifact_versions.c.sha256,
            artifact_versions.c.size_bytes,
        )
        .join(artifacts, artifacts.c.id == artifact_versions.c.artifact_id)
        .join(blobs, blobs.c.sha256 == artifact_versions.c.sha256)
        .where(artifacts.c.session_id == session_id)
        .order_by(artifacts.c.name, artifact_versions.c.version)
    ).all()
    v = verifications
    verdicts = conn.execute(
        select(
            v.c.id,
            v.c.round,
            v.c.artifact_version_id,
            v.c.passed,
            v.c.method,
            v.c.checks,
            v.c.fps,
            v.c.elapsed_ms,
            v.c.screenshot_png.isnot(None).label("has_screenshot"),
            v.c.video_mp4.isnot(None).label("has_video"),
        )
        .where(v.c.session_id == session_id)
        .order_by(v.c.round)
    ).all()
    return Recorded(
        events=[(r.turn_no, r.kind, p) for r, p in zip(log, payloads, strict=True)],
        usage=[dict(r._mapping) for r in used],
        versions=[dict(r._mapping) for r in versions],
        verdicts=[dict(r._mapping) for r in verdicts],
    )


def verdict_media(conn: Connection, verification_id: int) -> tuple[bytes | None, bytes | None]:
    """The screenshot (PNG) and the video (MP4) kept with a verdict, each if it has one."""
    row = conn.execute(
        select(verifications.c.screenshot_png, verifications.c.video_mp4).where(
            verifications.c.id == verification_id
        )
    ).first()
    if row is None:
        return None, None
    png, mp4 = row
    return (None if png is None else bytes(png)), (None if mp4 is None else bytes(mp4))
