"""Counts over the database that tell whether a run survived its faults.

Each figure is a count of something the design says cannot happen (a duplicated turn, a
gap in an artifact's versions, a write by a turn that never committed), or of sessions
that never reached a recorded end. After a run that should be over, every one of them is
0; :attr:`RunFigures.clean` says so, and :meth:`RunFigures.line` prints them on one line.

The checker lives with the tests, not in ``ops/``: it re-derives, after the fact, what the
schema's unique constraints and the lease fence already enforce while the run is live, so
the product has no use for it at run time. A ``scheduler check RUN`` command could grow out
of it if operators ever want the same audit of a production run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import CompoundSelect, Engine, Select, and_, func, literal_column, or_, select
from sqlalchemy.engine import Connection

from worker.states import TERMINAL
from worker.store.tables import artifact_versions, artifacts, events, plans, runs, sessions, usage

#: Event kinds a turn writes in its commit transaction (``brief``, ``feedback`` and
#: ``ended`` are written outside a turn's commit, at a turn number not yet committed).
TURN_EVENT_KINDS = ("model", "tool_result", "tool_error", "nudge")
_TERMINAL = tuple(s.value for s in TERMINAL)


@dataclass(frozen=True)
class RunFigures:
    """What the database holds for one run, counted for the chaos scenarios."""

    run_id: int
    run_status: str
    sessions: int
    """Sessions of the run."""
    ended: int
    """Sessions in a terminal state (succeeded, failed, stopped, cancelled, error)."""
    lost: int
    """Sessions not ended although the run should be over."""
    statuses: tuple[tuple[str, int], ...]
    """Sessions per status, sorted by status."""
    turns: int
    """Usage rows: model calls that committed."""
    cost_usd: float
    """Their summed cost."""
    duplicated_events: int
    """(session, turn, seq) held more than once (the unique constraint forbids it)."""
    duplicated_turns: int
    """(session, turn) with more than one ``model`` event or more than one usage row."""
    duplicated_versions: int
    """Consecutive versions of one artifact with the same content hash from the same turn."""
    version_gaps: int
    """Artifacts whose version numbers are not exactly 1..n."""
    fenced_writes: int
    """Rows written for a turn its session never committed (turn events, usage rows,
    artifact versions, plan items at ``turn_no >= next_turn``): what a worker whose lease
    was taken would leave behind if fencing failed. A fenced worker writing after the new
    owner committed would show up in ``duplicated_turns`` instead."""
    orphan_usage: int
    """Usage (cost) rows without a ``model`` event for their (session, turn)."""
    partial_turns: int
    """``model`` events without a usage row: a turn committed in part."""

    @property
    def integrity_faults(self) -> int:
        """Sum of every count that must be 0 whatever happened to the run."""
        return (
            self.duplicated_events
            + self.duplicated_turns
            + self.duplicated_versions
            + self.version_gaps
            + self.fenced_writes
            + self.orphan_usage
            + self.partial_turns
        )

    @property
    def clean(self) -> bool:
        """True when every session ended and nothing was written twice or in part."""
        return self.lost == 0 and self.ended == self.sessions and self.integrity_faults == 0

    def status_count(self, status: str) -> int:
        """Sessions of the run in ``status``."""
        return dict(self.statuses).get(status, 0)

    def line(self) -> str:
        """The figures on one line."""
        statuses = ",".join(f"{s}={n}" for s, n in self.statuses)
        return (
            f"run {self.run_id} {self.run_status}: sessions={self.sessions} "
            f"ended={self.ended} lost={self.lost} [{statuses}] turns={self.turns} "
            f"cost=${self.cost_usd:.4f} dup_events={self.duplicated_events} "
            f"dup_turns={self.duplicated_turns} dup_versions={self.duplicated_versions} "
            f"version_gaps={self.version_gaps} fenced_writes={self.fenced_writes} "
            f"orphan_usage={self.orphan_usage} partial_turns={self.partial_turns}"
        )


def check_run(engine: Engine, run_id: int) -> RunFigures:
    """Count, over the database, what a run left behind."""
    with engine.connect() as conn:
        return _check(conn, run_id)


def _count(conn: Connection, query: Select[Any] | CompoundSelect[Any]) -> int:
    return int(conn.execute(select(func.count()).select_from(query.subquery())).scalar_one())


def _check(conn: Connection, run_id: int) -> RunFigures:
    run_status = conn.execute(select(runs.c.status).where(runs.c.id == run_id)).scalar_one()
    ids = select(sessions.c.id).where(sessions.c.run_id == run_id).scalar_subquery()
    by_status: dict[str, int] = dict(
        conn.execute(
            select(sessions.c.status, func.count())
            .where(sessions.c.run_id == run_id)
            .group_by(sessions.c.status)
        ).all()
    )
    total = sum(by_status.values())
    ended = sum(n for s, n in by_status.items() if s in _TERMINAL)
    turns, cost = conn.execute(
        select(func.count(), func.coalesce(func.sum(usage.c.cost_usd), 0.0)).where(
            usage.c.session_id.in_(ids)
        )
    ).one()

    dup_events = (
        select(events.c.session_id)
        .where(events.c.session_id.in_(ids))
        .group_by(events.c.session_id, events.c.turn_no, events.c.seq)
        .having(func.count() > 1)
    )
    model_twice = (
        select(events.c.session_id, events.c.turn_no)
        .where(events.c.session_id.in_(ids), events.c.kind == "model")
        .group_by(events.c.session_id, events.c.turn_no)
        .having(func.count() > 1)
    )
    usage_twice = (
        select(usage.c.session_id, usage.c.turn_no)
        .where(usage.c.session_id.in_(ids))
        .group_by(usage.c.session_id, usage.c.turn_no)
        .having(func.count() > 1)
    )
    dup_turns = model_twice.union(usage_twice)

    v = artifact_versions
    run_versions = (
        select(v.c.artifact_id, v.c.version, v.c.turn_no, v.c.sha256)
        .join(artifacts, artifacts.c.id == v.c.artifact_id)
        .where(artifacts.c.session_id.in_(ids))
    )
    lagged = (
        select(
            v.c.turn_no,
            v.c.sha256,
            func.lag(v.c.turn_no)
            .over(partition_by=v.c.artifact_id, order_by=v.c.version)
            .label("prev_turn"),
            func.lag(v.c.sha256)
            .over(partition_by=v.c.artifact_id, order_by=v.c.version)
            .label("prev_sha256"),
        )
        .join(artifacts, artifacts.c.id == v.c.artifact_id)
        .where(artifacts.c.session_id.in_(ids))
        .subquery()
    )
    dup_versions = select(lagged.c.turn_no).where(
        lagged.c.prev_sha256 == lagged.c.sha256, lagged.c.prev_turn == lagged.c.turn_no
    )
    per_artifact = run_versions.subquery()
    gaps = (
        select(per_artifact.c.artifact_id)
        .group_by(per_artifact.c.artifact_id)
        .having(
            or_(
                func.min(per_artifact.c.version) != 1,
                func.max(per_artifact.c.version) != func.count(),
                func.count(func.distinct(per_artifact.c.version)) != func.count(),
            )
        )
    )

    s = sessions
    run_sessions = s.c.run_id == run_id
    fenced = [
        select(events.c.id)
        .join(s, s.c.id == events.c.session_id)
        .where(
            run_sessions, events.c.kind.in_(TURN_EVENT_KINDS), events.c.turn_no >= s.c.next_turn
        ),
        select(usage.c.id)
        .join(s, s.c.id == usage.c.session_id)
        .where(run_sessions, usage.c.turn_no >= s.c.next_turn),
        select(v.c.id)
        .join(artifacts, artifacts.c.id == v.c.artifact_id)
        .join(s, s.c.id == artifacts.c.session_id)
        .where(run_sessions, v.c.turn_no >= s.c.next_turn),
        select(plans.c.id)
        .join(s, s.c.id == plans.c.session_id)
        .where(
            run_sessions, or_(plans.c.set_turn >= s.c.next_turn, plans.c.done_turn >= s.c.next_turn)
        ),
    ]
    model_event = (
        select(literal_column("1"))
        .where(
            events.c.session_id == usage.c.session_id,
            events.c.turn_no == usage.c.turn_no,
            events.c.kind == "model",
        )
        .exists()
    )
    orphan_usage = select(usage.c.id).where(usage.c.session_id.in_(ids), ~model_event)
    usage_row = (
        select(literal_column("1"))
        .where(usage.c.session_id == events.c.session_id, usage.c.turn_no == events.c.turn_no)
        .exists()
    )
    partial = select(events.c.id).where(
        and_(events.c.session_id.in_(ids), events.c.kind == "model", ~usage_row)
    )

    return RunFigures(
        run_id=run_id,
        run_status=run_status,
        sessions=total,
        ended=ended,
        lost=total - ended,
        statuses=tuple(sorted((str(k), int(n)) for k, n in by_status.items())),
        turns=int(turns),
        cost_usd=float(cost),
        duplicated_events=_count(conn, dup_events),
        duplicated_turns=_count(conn, dup_turns),
        duplicated_versions=_count(conn, dup_versions),
        version_gaps=_count(conn, gaps),
        fenced_writes=sum(_count(conn, q) for q in fenced),
        orphan_usage=_count(conn, orphan_usage),
        partial_turns=_count(conn, partial),
    )
