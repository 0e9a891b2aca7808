"""Database tables: the source of truth. Alembic migrations own the schema.

Core tables: nothing here maps rows to objects, so no process imports the ORM.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
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
    false,
    text,
)
from sqlalchemy.engine import Dialect

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


#: zlib's level for stored texts: a page of HTML and script packs to about a third, in about
#: a quarter of a millisecond (the database's own lz4 left about half, on every copy).
PACK_LEVEL = 1


def pack(text: str) -> bytes:
    """``text`` as ``blobs`` stores it: its UTF-8 bytes, zlib-compressed."""
    return zlib.compress(text.encode(), PACK_LEVEL)


def unpack(data: bytes) -> str:
    """The text :func:`pack` stored."""
    return zlib.decompress(data).decode()


class PackedText(TypeDecorator[str]):
    """Text stored compressed (:func:`pack`); the database keeps the bytes as they are."""

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> bytes | None:
        return None if value is None else pack(value)

    def process_result_value(self, value: bytes | None, dialect: Dialect) -> str | None:
        return None if value is None else unpack(value)


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


def _ts(name: str, *, nullable: bool = True) -> Column[datetime]:
    return Column(name, UtcDateTime(), nullable=nullable)


def _id() -> Column[int]:
    return Column("id", BigId, primary_key=True)


def _parent(name: str, table: str, *, index: bool = False) -> Column[int]:
    """A required reference to ``table``, gone with it."""
    return Column(name, ForeignKey(f"{table}.id", ondelete="CASCADE"), nullable=False, index=index)


#: A concurrency ladder: one run per tier, tier after tier, once per profile.
ladders = Table(
    "ladders",
    metadata,
    _id(),
    Column("model", String(64), nullable=False),
    Column("tiers", JSON, nullable=False),
    Column("profiles", JSON, nullable=False),
    Column("config", JSON, nullable=False),
    Column("status", String(16), nullable=False, default=RunStatus.pending.value),
    _ts("created_at", nullable=False),
    _ts("finished_at"),
)

#: One swarm: its waves of sessions share a model, a profile and a prompt prefix.
runs = Table(
    "runs",
    metadata,
    _id(),
    Column("profile", String(32), nullable=False),
    Column("model", String(64), nullable=False),
    Column("config", JSON, nullable=False),
    Column("prefix_sha256", String(64), nullable=False),
    Column("task", String(64), nullable=False, server_default="dashboard", doc="The task's name."),
    Column(
        "task_ref",
        String(256),
        nullable=False,
        server_default="dashboard",
        doc="How to load the task again: an entry point's name, or ``package.module:factory``.",
    ),
    Column("task_version", String(32), nullable=False, server_default="1"),
    Column(
        "task_sha256",
        String(64),
        doc="The hash of the task's configuration when the run was made (None before tasks).",
    ),
    Column(
        "verifier",
        String(16),
        nullable=False,
        server_default="chromium",
        doc="The kind of verifier that judges the task's handoffs (it picks the verify queue).",
    ),
    Column("budget_usd", Float),
    Column(
        "spent_usd",
        Float,
        doc="With a budget: the dollars of the run's usage rows, added as they are written "
        "(None without one).",
    ),
    Column(
        "reserved_usd",
        Float,
        doc="With a budget: the worst-case cost of the model calls in flight, held against "
        "it until each is settled or released (None without one).",
    ),
    Column("status", String(16), nullable=False, default=RunStatus.pending.value),
    Column("ladder_id", ForeignKey("ladders.id", ondelete="CASCADE"), index=True),
    Column("tier", String(32), doc="The ladder tier this run is (``5x1``), or None."),
    Column("stop_reason", Text, doc="Why the run stopped early (a budget, a cancel), if it did."),
    Column(
        "duplicate_turn_tasks",
        Integer,
        nullable=False,
        default=0,
        server_default="0",
        doc="Turn tasks that found their turn not due (sent again, or late) and did nothing.",
    ),
    Column(
        "forked_from_session_id",
        BigId,
        ForeignKey("sessions.id", ondelete="SET NULL", use_alter=True),
        index=True,
        doc="For a fork: the session whose history it continues.",
    ),
    Column(
        "forked_at_turn",
        Integer,
        doc="For a fork: its first live turn (the turns before it are the origin's).",
    ),
    _ts("created_at", nullable=False),
    _ts("started_at"),
    _ts("finished_at"),
)

#: A group of sessions that run concurrently; wave k+1 starts when wave k ends.
waves = Table(
    "waves",
    metadata,
    _id(),
    _parent("run_id", "runs"),
    Column("index", Integer, nullable=False),
    Column("size", Integer, nullable=False),
    Column("status", String(16), nullable=False, default=WaveStatus.pending.value),
    Column("done_count", Integer, nullable=False, default=0),
    _ts("started_at"),
    _ts("finished_at"),
    UniqueConstraint("run_id", "index"),
)

#: One agent session: a chain of turns that ends with a verified artifact or a reason.
sessions = Table(
    "sessions",
    metadata,
    _id(),
    _parent("run_id", "runs", index=True),
    _parent("wave_id", "waves", index=True),
    Column("index", Integer, nullable=False),
    Column("persona", String(32), nullable=False),
    Column(
        "instance_id",
        String(128),
        nullable=False,
        server_default="",
        doc="The task instance the session works on.",
    ),
    Column(
        "epoch",
        Integer,
        nullable=False,
        server_default="0",
        doc="How many sessions of the run played this instance before this one.",
    ),
    Column("brief", JSON, nullable=False, doc="The instance's public fields."),
    Column("status", String(16), nullable=False, default=SessionStatus.pending.value),
    Column("next_turn", Integer, nullable=False, default=0),
    Column("turn_attempts", Integer, nullable=False, default=0),
    Column("lease_epoch", Integer, nullable=False, default=0),
    Column("lease_owner", String(128)),
    _ts("lease_expires_at"),
    _ts("dispatched_at"),
    Column("repair_round", Integer, nullable=False, default=0),
    Column(
        "model_retries",
        Integer,
        nullable=False,
        default=0,
        doc="Turns handed back after a transient model error (limiter waits excluded).",
    ),
    Column("handoff_version_id", BigId),
    Column("outcome", String(32)),
    Column("error", Text),
    _ts("started_at"),
    _ts("finished_at"),
    Column(
        "counted",
        Boolean,
        nullable=False,
        default=False,
        server_default=false(),
        doc="Its ending is counted on its wave's barrier (worker.store.endings).",
    ),
    UniqueConstraint("run_id", "index"),
    Index("ix_sessions_status_dispatched_at", "status", "dispatched_at"),
    # The endings left to count, which a reconciler looks for every few seconds: a handful.
    Index(
        "ix_sessions_uncounted",
        "finished_at",
        postgresql_where=text("NOT counted AND finished_at IS NOT NULL"),
        sqlite_where=text("NOT counted AND finished_at IS NOT NULL"),
    ),
)

#: Text stored once, addressed by the SHA-256 of its UTF-8 bytes: every version of every
#: artifact, and the long strings of the event log (a page the model wrote is one row,
#: shared by its call's event, the artifact, its version and any session that wrote the
#: same bytes), compressed by the worker that writes it. Rows are only ever added
#: (``ON CONFLICT DO NOTHING``), never changed.
#:
#: No foreign key points here: each reference is written in the same transaction as its
#: row, and a key would lock the shared row (``FOR KEY SHARE``) on every reference.
blobs = Table(
    "blobs",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("content", PackedText(), nullable=False),
    Column("size_bytes", Integer, nullable=False, doc="Bytes of its UTF-8 encoding."),
)

#: One entry of a session's log; the log is the conversation.
events = Table(
    "events",
    metadata,
    _id(),
    _parent("session_id", "sessions"),
    Column("turn_no", Integer, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("kind", String(32), nullable=False, index=True),
    Column("payload", JSON, nullable=False),
    Column(
        "blobs",
        JSON(none_as_null=True),
        doc="The payload's strings kept in ``blobs``: ``[[path, sha256], ...]``, each path "
        "the keys and indexes that lead to it (None: the payload is whole).",
    ),
    _ts("created_at", nullable=False),
    UniqueConstraint("session_id", "turn_no", "seq"),
)

#: The current state of one artifact a session authored.
artifacts = Table(
    "artifacts",
    metadata,
    _id(),
    _parent("session_id", "sessions"),
    Column("name", String(128), nullable=False),
    Column("version", Integer, nullable=False),
    Column("sha256", String(64), nullable=False, doc="Its content, in ``blobs``."),
    Column("size_bytes", Integer, nullable=False),
    _ts("updated_at", nullable=False),
    _ts("deleted_at"),
    UniqueConstraint("session_id", "name"),
)

#: Every version of every artifact, with the turn that wrote it.
artifact_versions = Table(
    "artifact_versions",
    metadata,
    _id(),
    _parent("artifact_id", "artifacts"),
    Column("version", Integer, nullable=False),
    Column("turn_no", Integer, nullable=False),
    Column("sha256", String(64), nullable=False, doc="Its content, in ``blobs``."),
    Column("size_bytes", Integer, nullable=False),
    _ts("created_at", nullable=False),
    UniqueConstraint("artifact_id", "version"),
)

#: One item of a session's plan.
plans = Table(
    "plans",
    metadata,
    _id(),
    _parent("session_id", "sessions"),
    Column("item_no", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("done", Boolean, nullable=False, default=False),
    Column("set_turn", Integer, nullable=False),
    Column("done_turn", Integer),
    UniqueConstraint("session_id", "item_no"),
)

#: Tokens and dollars of one model call; exactly one per committed turn.
usage = Table(
    "usage",
    metadata,
    _id(),
    _parent("session_id", "sessions"),
    _parent("run_id", "runs", index=True),
    Column("turn_no", Integer, nullable=False),
    Column("model", String(64), nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("cached_tokens", Integer, nullable=False),
    Column("output_tokens", Integer, nullable=False),
    Column("thoughts_tokens", Integer, nullable=False),
    Column("tool_use_tokens", Integer, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("price_date", String(10), nullable=False),
    Column("latency_ms", Integer, nullable=False),
    _ts("created_at", nullable=False),
    UniqueConstraint("session_id", "turn_no"),
)

#: A model call's worst-case cost, held against its run's budget while the call is out.
#:
#: Keyed by the turn's lease: a takeover of the lease releases the stale holder's hold, and
#: the fence of a stale commit keeps it from being settled twice. ``state`` is ``held``
#: while the call is out, ``unknown`` once it failed in a way that may have been billed (a
#: timeout after sending): that one stays until the run ends.
reservations = Table(
    "reservations",
    metadata,
    _id(),
    _parent("run_id", "runs", index=True),
    _parent("session_id", "sessions"),
    Column("turn_no", Integer, nullable=False),
    Column("lease_epoch", Integer, nullable=False),
    Column("amount_usd", Float, nullable=False),
    Column("state", String(16), nullable=False, default="held", server_default="held"),
    _ts("created_at", nullable=False),
    UniqueConstraint("session_id", "turn_no", "lease_epoch"),
)

#: Where one committed turn's time went, in milliseconds; written with its commit.
#:
#: ``reserve_ms`` is the reservation of the model call's cost against the run's budget (its
#: settlement rides on the commit). ``queue_ms`` runs from the session's ``dispatched_at``
#: to the claim (None when it was never dispatched); ``dispatch_ms`` is how long sending
#: this turn's task took the turn before it, when the same process ran both (None
#: otherwise); ``cpu_ms`` is the CPU the turn used up to its commit. Every phase but
#: ``model_ms`` is overhead.
turn_timings = Table(
    "turn_timings",
    metadata,
    _id(),
    _parent("run_id", "runs", index=True),
    _parent("session_id", "sessions"),
    Column("turn_no", Integer, nullable=False),
    _ts("claimed_at", nullable=False),
    Column("queue_ms", Float),
    Column("claim_ms", Float, nullable=False),
    Column("rebuild_ms", Float, nullable=False),
    Column("model_ms", Float, nullable=False),
    Column("tools_ms", Float, nullable=False),
    Column("commit_ms", Float, nullable=False),
    Column("dispatch_ms", Float),
    Column("cpu_ms", Float, nullable=False),
    Column(
        "reserve_ms",
        Float,
        doc="Reserving the model call's cost against the run's budget (None: no budget).",
    ),
    Column("reserve_cpu_ms", Float, doc="The worker CPU of that reservation."),
    Column(
        "statements",
        Integer,
        doc="Statements the turn sent to PostgreSQL before its commit statement, the one "
        "that writes this row (None on SQLite).",
    ),
    Column(
        "round_trips",
        Integer,
        doc="Round trips to PostgreSQL they took, BEGIN included: the commit statement and "
        "COMMIT are two more (None on SQLite).",
    ),
    UniqueConstraint("session_id", "turn_no"),
)

#: A verdict on one handed-off artifact version, one per repair round.
verifications = Table(
    "verifications",
    metadata,
    _id(),
    _parent("session_id", "sessions"),
    _parent("artifact_version_id", "artifact_versions"),
    Column("round", Integer, nullable=False),
    Column("passed", Boolean, nullable=False),
    Column("method", String(16), nullable=False),
    Column("checks", JSON, nullable=False),
    Column("fps", Float),
    Column("screenshot_png", LargeBinary),
    Column("elapsed_ms", Integer, nullable=False),
    Column(
        "video_mp4",
        LargeBinary,
        doc="The artifact as a video, when the run or the verify worker records them.",
    ),
    _ts("created_at", nullable=False),
    UniqueConstraint("session_id", "round"),
)

#: One resource sample of a worker process (or its browser tree).
samples = Table(
    "samples",
    metadata,
    _id(),
    Column("run_id", BigId),
    Column("host", String(128), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("role", String(16), nullable=False),
    _ts("at", nullable=False),
    Column("rss_bytes", BigInteger, nullable=False),
    Column("cpu_percent", Float, nullable=False),
    Column("threads", Integer, nullable=False),
    Index("ix_samples_run_id_at", "run_id", "at"),
)

#: A run's explicit context cache at the provider: its stable prefix (made again if it
#: expires or is evicted, each in a row of its own).
caches = Table(
    "caches",
    metadata,
    _id(),
    _parent("run_id", "runs", index=True),
    Column("model", String(64), nullable=False),
    Column(
        "name", String(256), nullable=False, doc="The provider's name (``cachedContents/...``)."
    ),
    Column("tokens", Integer, nullable=False),
    _ts("created_at", nullable=False),
    _ts("expires_at"),
    _ts("deleted_at"),
)

#: Work the database decided on and a worker must still dispatch (a wave start).
outbox = Table(
    "outbox",
    metadata,
    _id(),
    Column("key", String(128), nullable=False, unique=True),
    _parent("run_id", "runs"),
    Column("kind", String(32), nullable=False),
    Column("payload", JSON, nullable=False),
    _ts("created_at", nullable=False),
    _ts("dispatched_at"),
    Index("ix_outbox_dispatched_at", "dispatched_at"),
)

#: The worker processes that hold turn leases, each alive until ``alive_until``: a worker
#: renews its one row while it holds any, and a turn's lease whose own expiry passed is
#: still held while its owner's row is alive (:mod:`worker.store.claims`).
lease_holders = Table(
    "lease_holders",
    metadata,
    Column("owner", String(128), primary_key=True),
    _ts("alive_until", nullable=False),
)

#: The identity of the fleet this database drives: one random id, made by a migration.
#: Every process of a fleet reads it, so tasks of fleets that share a broker never meet.
fleet = Table(
    "fleet",
    metadata,
    Column("id", String(32), primary_key=True),
    _ts("created_at", nullable=False),
)
