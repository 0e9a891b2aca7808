"""Configuration: one settings object, read from ``SWARM_*`` environment variables.

Entry points (the Celery app, the scheduler CLI, the verifier CLI) build a
:class:`Settings` and pass it down; nothing else reads the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

#: The embedded default database: a SQLite file in the working directory.
DEFAULT_DATABASE_URL = "sqlite:///swarm.db"
#: The embedded default broker: kombu's in-process transport.
DEFAULT_BROKER_URL = "memory://localhost/"
#: Queue that carries one task per session turn.
SESSIONS_QUEUE = "sessions"
#: Queue that carries artifact verifications (pages in Chromium, and static judgements).
VERIFY_QUEUE = "verify"
#: Queue that carries verifications in the Python sandbox.
SANDBOX_QUEUE = "sandbox"
#: Every queue a fleet's workers consume.
QUEUES = (SESSIONS_QUEUE, VERIFY_QUEUE, SANDBOX_QUEUE)


#: URL schemes of PostgreSQL, all served by psycopg 3.
_POSTGRES_SCHEMES = frozenset({"postgres", "postgresql", "postgresql+psycopg"})
#: The SQLAlchemy dialect and driver every PostgreSQL URL is normalized to.
_POSTGRES_DRIVER = "postgresql+psycopg"
#: URL schemes of SQLite.
_SQLITE_SCHEMES = frozenset({"sqlite", "sqlite+pysqlite"})
#: URL schemes of the brokers Swarm supports.
_BROKER_SCHEMES = frozenset({"redis", "rediss", "memory"})
_DATABASE_URL_EXAMPLES = "postgresql://user:password@host:5432/swarm or sqlite:///swarm.db"
_BROKER_URL_EXAMPLES = (
    "redis://host:6379/0 (rediss:// for TLS), or leave it unset for the embedded broker"
)


#: An explicit cache this close to its expiry counts as gone: a request naming it could
#: outlive it. A run's cache must live longer than this.
CACHE_EXPIRY_MARGIN_S = 120.0

#: Frames per second a page's own animation loop must reach, unless told otherwise.
DEFAULT_VERIFY_MIN_FPS = 30.0

#: Megabytes of decoded session histories a worker process keeps between turns.
DEFAULT_HISTORY_CACHE_MB = 256.0


def _redis_url_is_wellformed(url: str) -> bool:
    """True when the port and the database number of a Redis URL are numbers."""
    parts = urlsplit(url)
    try:
        _ = parts.port  # raises on a port that is not a number
    except ValueError:
        return False
    db = parts.path.strip("/")
    return not db or db.isdigit()


class Settings(BaseSettings):
    """Everything Swarm reads from its environment, typed."""

    model_config = SettingsConfigDict(env_prefix="SWARM_", extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL
    """SQLAlchemy URL of the source of truth; ``postgresql://`` selects psycopg 3."""
    broker_url: str = DEFAULT_BROKER_URL
    """Celery broker URL; ``redis://`` for a fleet, ``memory://`` for one process."""
    db_pool_size: int | None = Field(default=None, ge=1)
    """Connections kept open per process (model calls hold none); unset: 5 and the
    overflow's, all kept."""
    db_max_overflow: int | None = Field(default=None, ge=0)
    """Extra connections a busy process may open beyond the pool, closed as they come back;
    unset: none when the pool size is unset too (the pool keeps them all), else a tenth of
    the worker's threads, at least 15 and at most 25."""
    db_pool_timeout_s: float = Field(default=60.0, gt=0)
    """How long a thread waits for a free connection; a turn that waits longer to claim is
    retried, one waiting to commit warns and waits on."""
    task_log: bool = False
    """Workers log each task's arrival and end (Celery's own two lines per task, at INFO).
    Off, a task's failure is still logged, as are Swarm's own lines (retries, endings,
    verdicts)."""
    task_events: bool = False
    """Workers send task events, and senders task-sent events, without being asked. Off, a
    worker sends them only while Flower (or ``celery control enable_events``) asks."""

    lease_ttl_s: float = Field(default=10.0, gt=0)
    """How long a claimed turn or verification owns its session without a renewal; its
    worker renews the lease every ``lease_renew_s`` while it lives."""
    lease_renew_s: float = Field(default=2.5, gt=0)
    """Period of the lease renewals of each worker process."""
    fleet: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """The fleet's name on the broker; by default the id its database holds, so every
    process of a fleet agrees on it and fleets sharing one Redis database stay apart."""
    redispatch_after_s: float = Field(default=30.0, gt=0)
    """A due session untouched for this long is dispatched again by the reconciler."""
    verify_redispatch_after_s: float = Field(default=60.0, gt=0)
    """Like ``redispatch_after_s`` for a verification never claimed (they queue behind the
    browser); one whose worker died is taken over as soon as its lease lapses."""
    reconcile_interval_s: float = Field(default=5.0, gt=0)
    """Period of the reconciler loop inside each worker process."""
    max_turn_attempts: int = Field(default=5, ge=1)
    """Claims of one turn before the session ends in ``error`` (a poison turn)."""
    max_model_retries: int = Field(default=8, ge=0)
    """Retries of one turn after transient model errors before the session ends in error."""
    retry_backoff_s: float = Field(default=1.0, gt=0)
    """First delay of the capped exponential backoff for transient model errors."""
    retry_backoff_max_s: float = Field(default=60.0, gt=0)
    """Cap of that backoff."""
    history_cache_mb: float = Field(default=DEFAULT_HISTORY_CACHE_MB, ge=0)
    """Megabytes of decoded session histories a worker process keeps between turns, so a
    turn reads and decodes only the events new since the one before; the least recently
    used go first. 0 turns the cache off: every turn reads its session's whole log."""
    session_affinity: bool = True
    """A worker process that runs its tasks itself (a green, threads or solo pool) sends its
    sessions' next turns to a queue of its own, where its history cache holds them; the
    fleet's reconcilers hand a stopped or silent worker's queue back to the shared one."""

    chromium_path: Path | None = None
    """The Chromium binary Playwright drives through ``executable_path``; by default Debian's
    ``chromium-headless-shell`` for headless rendering when installed, else ``chromium``."""
    display: Literal["headless", "xvfb"] = "headless"
    """How the verifier renders: headless, or headed under a virtual X display."""
    verifier: Literal["auto", "browser", "static"] = "auto"
    """How artifacts are judged: in Chromium, by static checks only, or in Chromium when it
    is installed (static checks otherwise, with a warning)."""
    verify_max_pages: int | None = Field(default=None, ge=1)
    """Pages rendered at once per verifier process (default: one per CPU)."""
    verify_min_fps: float = Field(default=DEFAULT_VERIFY_MIN_FPS, gt=0)
    """Frames per second a page's own animation loop must reach."""
    verify_database_url: str | None = None
    """Database URL of the verify worker's least-privileged role (``swarm_verify``): the
    verify task claims, judges and records through it. A process given this and no
    ``database_url`` uses it for everything (a verify-only worker that holds no other
    credentials); ``scheduler migrate`` gives the role this URL's password."""
    verify_record: bool = False
    """Record every artifact this worker judges as a video, whatever its run asked."""
    verify_record_s: float = Field(default=5.0, gt=0, le=60)
    """Seconds of each artifact's video."""
    sandbox_python: Path | None = None
    """The interpreter the Python sandbox runs (default: Debian's ``/usr/bin/python3``, else
    this one's); only the standard library is there."""
    sandbox_user: int = Field(default=65534, ge=1)
    """The unprivileged user id a worker running as root runs sandboxes as (``nobody``)."""
    sandbox_dir: Path | None = None
    """Where scratch directories are made (default: the system's temporary directory)."""
    sandbox_cpu_s: int = Field(default=10, ge=1)
    """CPU seconds each process of a sandbox may use."""
    sandbox_memory_mb: int = Field(default=1024, ge=64)
    """Address space of each process of a sandbox, in MiB."""

    gemini_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("SWARM_GEMINI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"),
    )
    """Gemini API key (``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``); never logged, never stored."""
    gemini_base_url: str | None = None
    """Where the Gemini API is served; unset means Google's endpoint."""
    gemini_timeout_s: float = Field(default=60.0, gt=0)
    """Longest wait for one model call (the SDK has no timeout of its own)."""
    thinking_level: Literal["minimal", "low", "medium", "high"] = "low"
    """Thinking level of Gemini 3 models."""
    thinking_budget: int = Field(default=1024, ge=-1)
    """Thinking budget of Gemini 2.5 models, in tokens (-1: dynamic)."""
    model_concurrency: int = Field(default=16, ge=1)
    """Calls in flight per model across the fleet (cut on 429s, grown back slowly)."""
    model_rpm: int = Field(default=1000, ge=1)
    """Requests per minute per model across the fleet."""
    model_tpm: int = Field(default=1_000_000, ge=1)
    """Input and output tokens per minute per model across the fleet."""
    limiter_prefix: str = "swarm:limit"
    """Redis key prefix of the limiter's state (fleets sharing one Redis need their own)."""
    limiter_wait_s: float = Field(default=10.0, ge=0)
    """How long a turn waits for the limiter before it is handed back and retried."""
    cache_ttl_s: float = Field(default=3 * 3600.0, gt=0)
    """Lifetime of a run's explicit context cache (it is deleted when the run ends)."""
    prices_file: Path | None = None
    """JSON file of prices laid over the built-in table (``{model: {input_per_m, ...}}``)."""

    sample_interval_s: float = Field(default=0.5, gt=0)
    """Period of each worker process's resource sampler (RSS, CPU, threads)."""
    sample_flush_s: float = Field(default=2.0, gt=0)
    """Samples are written to the database in batches at least this often."""
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Port of each worker process's Prometheus ``/metrics`` (0: any free port, logged);
    unset: no endpoint."""
    metrics_addr: str = "127.0.0.1"
    """Interface the metrics endpoint listens on (``0.0.0.0`` in a container)."""
    otlp_endpoint: str | None = Field(default=None, validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    """OpenTelemetry's base OTLP/HTTP endpoint (traces go to ``/v1/traces`` under it)."""
    otlp_traces_endpoint: str | None = Field(
        default=None, validation_alias="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    """OpenTelemetry's OTLP/HTTP endpoint for traces, whole; wins over ``otlp_endpoint``.
    Neither set: no traces, and no OpenTelemetry library is loaded."""
    otel_sdk_disabled: bool = Field(default=False, validation_alias="OTEL_SDK_DISABLED")
    """OpenTelemetry's switch that turns tracing off whatever the endpoints say."""
    serve_basic_auth: SecretStr | None = None
    """``user:password`` that ``scheduler serve`` asks every page for (HTTP basic auth);
    required when it listens beyond the loopback interface. Never logged."""

    @field_validator("serve_basic_auth")
    @classmethod
    def _check_serve_basic_auth(cls, value: SecretStr | None) -> SecretStr | None:
        """A ``user:password`` pair, both non-empty; empty (an unset compose variable) is none.

        The message never repeats the value.
        """
        if value is None or not value.get_secret_value():
            return None
        user, colon, password = value.get_secret_value().partition(":")
        if not (user and colon and password):
            raise ValueError("must be user:password, both non-empty")
        return value

    @field_validator("verify_database_url")
    @classmethod
    def _normalize_verify_database_url(cls, value: str | None) -> str | None:
        """The same URLs as ``database_url``; empty (an unset compose variable) is none."""
        return cls._normalize_database_url(value) if value else None

    @field_validator("database_url")
    @classmethod
    def _normalize_database_url(cls, value: str) -> str:
        """Accept SQLite and PostgreSQL (psycopg 3) URLs only; select psycopg 3 for plain ones.

        The message names the scheme, never the whole URL, which may hold a password.
        """
        scheme, sep, rest = value.strip().partition("://")
        scheme = scheme.lower()
        value = value.strip()
        if not sep or not scheme:
            raise ValueError(f"not a database URL: use {_DATABASE_URL_EXAMPLES}")
        if scheme in _POSTGRES_SCHEMES:
            value = f"{_POSTGRES_DRIVER}://{rest}"
        elif scheme not in _SQLITE_SCHEMES:
            raise ValueError(
                f"unsupported database {scheme!r}: Swarm runs on SQLite or PostgreSQL "
                f"(psycopg 3); use {_DATABASE_URL_EXAMPLES}"
            )
        try:
            make_url(value)
        except (ArgumentError, ValueError):
            raise ValueError(
                f"malformed {scheme} URL (check the host, port and database name); "
                f"use {_DATABASE_URL_EXAMPLES}"
            ) from None
        return value

    @field_validator("broker_url")
    @classmethod
    def _check_broker_url(cls, value: str) -> str:
        """Accept Redis (``redis://``, ``rediss://``) and the embedded ``memory://`` only."""
        scheme, sep, _ = value.strip().partition("://")
        scheme = scheme.lower()
        if not sep or scheme not in _BROKER_SCHEMES:
            what = f"unsupported broker {scheme!r}" if sep and scheme else "not a broker URL"
            raise ValueError(f"{what}: use {_BROKER_URL_EXAMPLES}")
        value = value.strip()
        if scheme != "memory" and not _redis_url_is_wellformed(value):
            raise ValueError(
                f"malformed {scheme} URL (the port and the database must be numbers); "
                f"use {_BROKER_URL_EXAMPLES}"
            )
        return value

    @field_validator("gemini_base_url")
    @classmethod
    def _unset_if_empty(cls, value: str | None) -> str | None:
        """An empty value (as compose passes an unset variable) means Google's endpoint."""
        return value or None

    @model_validator(mode="after")
    def _verify_only_database(self) -> Settings:
        """A process given only the verify role's URL uses it for everything."""
        if self.verify_database_url and "database_url" not in self.model_fields_set:
            self.database_url = self.verify_database_url
        return self

    @field_validator("cache_ttl_s")
    @classmethod
    def _cache_outlives_its_margin(cls, value: float) -> float:
        """A cache that lives no longer than the expiry margin could never be named."""
        if value <= CACHE_EXPIRY_MARGIN_S:
            raise ValueError(
                f"must be more than {CACHE_EXPIRY_MARGIN_S:g} s, the margin within which a "
                "cache counts as expired"
            )
        return value

    @model_validator(mode="after")
    def _renewals_fit_in_a_lease(self) -> Settings:
        """A lease must survive a missed renewal or two (a busy process, a database blip)."""
        if self.lease_renew_s * 2 >= self.lease_ttl_s:
            raise ValueError(
                f"lease_renew_s ({self.lease_renew_s:g} s) must be under half of "
                f"lease_ttl_s ({self.lease_ttl_s:g} s)"
            )
        return self

    @property
    def is_embedded(self) -> bool:
        """True when the broker lives inside this process."""
        return self.broker_url.startswith("memory://")

    @property
    def is_redis_broker(self) -> bool:
        """True when the broker is Redis (kombu's Redis transport, plain or over TLS)."""
        return self.broker_url.startswith(("redis://", "rediss://"))

    @property
    def traces_endpoint(self) -> str | None:
        """Where OTLP/HTTP traces go, as OpenTelemetry's variables say; None: no traces."""
        if self.otel_sdk_disabled:
            return None
        if self.otlp_traces_endpoint:
            return self.otlp_traces_endpoint
        if self.otlp_endpoint:
            return self.otlp_endpoint.rstrip("/") + "/v1/traces"
        return None

    @property
    def is_sqlite(self) -> bool:
        """True when the database is a SQLite file."""
        return self.database_url.startswith("sqlite")


def describe_invalid(exc: ValidationError, *, option: str | None = None) -> str:
    """One line for settings that do not validate, naming the variables (or ``option``)."""
    problems = []
    for error in exc.errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        names = [option] if option else [f"SWARM_{str(p).upper()}" for p in error["loc"]]
        problems.append(f"{'.'.join(names)}: {message}" if names else message)
    return "; ".join(problems)
