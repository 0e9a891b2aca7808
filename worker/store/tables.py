"""Database tables: the source of truth. Alembic migrations own the schema."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from worker.states import RunStatus, SessionStatus, WaveStatus

#: SQLite only autoincrements INTEGER primary keys; PostgreSQL gets BIGINT.
BigId = BigInteger().with_variant(Integer(), "sqlite")


metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite keeps no offset)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given for a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def _ts(*, nullable: bool = True) -> Any:
    return mapped_column(UtcDateTime(), nullable=nullable)


class Base(DeclarativeBase):
    """Declarative base bound to the project's naming convention."""

    metadata = metadata


class Ladder(Base):
    """A concurrency ladder: one run per tier, tier after tier, once per profile."""

    __tablename__ = "ladders"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    model: Mapped[str] = mapped_column(String(64))
    tiers: Mapped[list[str]] = mapped_column(JSON)
    profiles: Mapped[list[str]] = mapped_column(JSON)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default=RunStatus.pending.value)
    created_at: Mapped[datetime] = _ts(nullable=False)
    finished_at: Mapped[datetime | None] = _ts()


class Run(Base):
    """One swarm: its waves of sessions share a model, a profile and a prompt prefix."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    profile: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    prefix_sha256: Mapped[str] = mapped_column(String(64))
    budget_usd: Mapped[float | None] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16), default=RunStatus.pending.value)
    ladder_id: Mapped[int | None] = mapped_column(
        ForeignKey("ladders.id", ondelete="CASCADE"), index=True
    )
    tier: Mapped[str | None] = mapped_column(String(32))
    """The ladder tier this run is (``5x1``), or None for a run of its own."""
    stop_reason: Mapped[str | None] = mapped_column(Text)
    """Why the run stopped early (a budget, a cancel), if it did."""
    duplicate_turn_tasks: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Turn tasks that found their turn not due (sent again, or late) and did nothing."""
    forked_from_session_id: Mapped[int | None] = mapped_column(
        BigId, ForeignKey("sessions.id", ondelete="SET NULL", use_alter=True), index=True
    )
    """For a fork: the session whose history it continues."""
    forked_at_turn: Mapped[int | None] = mapped_column(Integer)
    """For a fork: its first live turn (the turns before it are the origin's)."""
    created_at: Mapped[datetime] = _ts(nullable=False)
    started_at: Mapped[datetime | None] = _ts()
    finished_at: Mapped[datetime | None] = _ts()


class Wave(Base):
    """A group of sessions that run concurrently; wave k+1 starts when wave k ends."""

    __tablename__ = "waves"
    __table_args__ = (UniqueConstraint("run_id", "index"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default=WaveStatus.pending.value)
    done_count: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime | None] = _ts()
    finished_at: Mapped[datetime | None] = _ts()


class Session(Base):
    """One agent session: a chain of turns that ends with a verified artifact or a reason."""

    __tablename__ = "sessions"
    __table_args__ = (
        UniqueConstraint("run_id", "index"),
        Index("ix_sessions_status_dispatched_at", "status", "dispatched_at"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    wave_id: Mapped[int] = mapped_column(ForeignKey("waves.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    persona: Mapped[str] = mapped_column(String(32))
    brief: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default=SessionStatus.pending.value)
    next_turn: Mapped[int] = mapped_column(Integer, default=0)
    turn_attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_epoch: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[datetime | None] = _ts()
    dispatched_at: Mapped[datetime | None] = _ts()
    repair_round: Mapped[int] = mapped_column(Integer, default=0)
    model_retries: Mapped[int] = mapped_column(Integer, default=0)
    """Turns handed back after a transient model error (limiter waits excluded)."""
    handoff_version_id: Mapped[int | None] = mapped_column(BigId)
    outcome: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None] = _ts()
    finished_at: Mapped[datetime | None] = _ts()


class Event(Base):
    """One entry of a session's log; the log is the conversation."""

    __tablename__ = "events"
    __table_args__ = (UniqueConstraint("session_id", "turn_no", "seq"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    turn_no: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = _ts(nullable=False)


class Artifact(Base):
    """The current state of one artifact a session authored."""

    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("session_id", "name"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    version: Mapped[int] = mapped_column(Integer)
    content: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = _ts(nullable=False)
    deleted_at: Mapped[datetime | None] = _ts()


class ArtifactVersion(Base):
    """Every version of every artifact, with the turn that wrote it."""

    __tablename__ = "artifact_versions"
    __table_args__ = (UniqueConstraint("artifact_id", "version"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    artifact_id: Mapped[int] = mapped_column(ForeignKey("artifacts.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    turn_no: Mapped[int] = mapped_column(Integer)
    content: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = _ts(nullable=False)


class PlanItem(Base):
    """One item of a session's plan."""

    __tablename__ = "plans"
    __table_args__ = (UniqueConstraint("session_id", "item_no"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    item_no: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    done: Mapped[bool] = mapped_column(default=False)
    set_turn: Mapped[int] = mapped_column(Integer)
    done_turn: Mapped[int | None] = mapped_column(Integer)


class Usage(Base):
    """Tokens and dollars of one model call; exactly one per committed turn."""

    __tablename__ = "usage"
    __table_args__ = (UniqueConstraint("session_id", "turn_no"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    turn_no: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(64))
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    cached_tokens: Mapped[int] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)
    thoughts_tokens: Mapped[int] = mapped_column(Integer)
    tool_use_tokens: Mapped[int] = mapped_column(Integer)
    cost_usd: Mapped[float] = mapped_column(Float)
    price_date: Mapped[str] = mapped_column(String(10))
    latency_ms: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = _ts(nullable=False)


class TurnTiming(Base):
    """Where one committed turn's time went, in milliseconds; written with its commit.

    ``queue_ms`` runs from the session's ``dispatched_at`` to the claim (None when it was
    never dispatched); ``dispatch_ms`` is how long sending this turn's task took the turn
    before it, when the same process ran both (None otherwise); ``cpu_ms`` is the CPU the
    turn's thread used up to its commit. Every phase but ``model_ms`` is overhead.
    """

    __tablename__ = "turn_timings"
    __table_args__ = (UniqueConstraint("session_id", "turn_no"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    turn_no: Mapped[int] = mapped_column(Integer)
    claimed_at: Mapped[datetime] = _ts(nullable=False)
    queue_ms: Mapped[float | None] = mapped_column(Float)
    claim_ms: Mapped[float] = mapped_column(Float)
    rebuild_ms: Mapped[float] = mapped_column(Float)
    model_ms: Mapped[float] = mapped_column(Float)
    tools_ms: Mapped[float] = mapped_column(Float)
    commit_ms: Mapped[float] = mapped_column(Float)
    dispatch_ms: Mapped[float | None] = mapped_column(Float)
    cpu_ms: Mapped[float] = mapped_column(Float)


class Verification(Base):
    """A verdict on one handed-off artifact version, one per repair round."""

    __tablename__ = "verifications"
    __table_args__ = (UniqueConstraint("session_id", "round"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    artifact_version_id: Mapped[int] = mapped_column(
        ForeignKey("artifact_versions.id", ondelete="CASCADE")
    )
    round: Mapped[int] = mapped_column(Integer)
    passed: Mapped[bool] = mapped_column()
    method: Mapped[str] = mapped_column(String(16))
    checks: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    fps: Mapped[float | None] = mapped_column(Float)
    screenshot_png: Mapped[bytes | None] = mapped_column(LargeBinary)
    elapsed_ms: Mapped[int] = mapped_column(Integer)
    video_mp4: Mapped[bytes | None] = mapped_column(LargeBinary)
    """The artifact as a video, when the run or the verify worker records them."""
    created_at: Mapped[datetime] = _ts(nullable=False)


class Sample(Base):
    """One resource sample of a worker process (or its browser tree)."""

    __tablename__ = "samples"
    __table_args__ = (Index("ix_samples_run_id_at", "run_id", "at"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int | None] = mapped_column(BigId)
    host: Mapped[str] = mapped_column(String(128))
    pid: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime] = _ts(nullable=False)
    rss_bytes: Mapped[int] = mapped_column(BigInteger)
    cpu_percent: Mapped[float] = mapped_column(Float)
    threads: Mapped[int] = mapped_column(Integer)


class Cache(Base):
    """A run's explicit context cache at the provider: its stable prefix (made again if it
    expires or is evicted, each in a row of its own)."""

    __tablename__ = "caches"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    model: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(256))
    """The provider's name for it (``cachedContents/...``)."""
    tokens: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = _ts(nullable=False)
    expires_at: Mapped[datetime | None] = _ts()
    deleted_at: Mapped[datetime | None] = _ts()


class Outbox(Base):
    """Work the database decided on and a worker must still dispatch (a wave start)."""

    __tablename__ = "outbox"
    __table_args__ = (Index("ix_outbox_dispatched_at", "dispatched_at"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    key: Mapped[str] = mapped_column(String(128), unique=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = _ts(nullable=False)
    dispatched_at: Mapped[datetime | None] = _ts()


class Fleet(Base):
    """The identity of the fleet this database drives: one random id, made by a migration.

    Every process of a fleet reads it, so tasks of fleets that share a broker never meet.
    """

    __tablename__ = "fleet"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    created_at: Mapped[datetime] = _ts(nullable=False)


def _table(model: type[Base]) -> Table:
    return cast(Table, model.__table__)


#: Core tables, for queries that do not need the ORM.
runs = _table(Run)
waves = _table(Wave)
sessions = _table(Session)
events = _table(Event)
artifacts = _table(Artifact)
artifact_versions = _table(ArtifactVersion)
plans = _table(PlanItem)
usage = _table(Usage)
turn_timings = _table(TurnTiming)
verifications = _table(Verification)
caches = _table(Cache)
ladders = _table(Ladder)
samples = _table(Sample)
outbox = _table(Outbox)
fleet = _table(Fleet)
