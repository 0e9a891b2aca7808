"""Configuration: one settings object, read from ``SWARM_*`` environment variables.

Entry points (the Celery app, the scheduler CLI, the verifier CLI) build a
:class:`Settings` and pass it down; nothing else reads the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The embedded default database: a SQLite file in the working directory.
DEFAULT_DATABASE_URL = "sqlite:///swarm.db"
#: The embedded default broker: kombu's in-process transport.
DEFAULT_BROKER_URL = "memory://localhost/"
#: Queue that carries one task per session turn.
SESSIONS_QUEUE = "sessions"
#: Queue that carries artifact verifications.
VERIFY_QUEUE = "verify"


class Settings(BaseSettings):
    """Everything Swarm reads from its environment, typed."""

    model_config = SettingsConfigDict(env_prefix="SWARM_", extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL
    """SQLAlchemy URL of the source of truth; ``postgresql://`` selects psycopg 3."""
    broker_url: str = DEFAULT_BROKER_URL
    """Celery broker URL; ``redis://`` for a fleet, ``memory://`` for one process."""
    db_pool_size: int = Field(default=5, ge=1)
    """Connections kept open per worker process (model calls hold none)."""
    db_max_overflow: int = Field(default=15, ge=0)
    """Extra connections a busy process may open beyond the pool."""

    lease_ttl_s: float = Field(default=120.0, gt=0)
    """How long a claimed turn owns its session before another worker may take it."""
    redispatch_after_s: float = Field(default=30.0, gt=0)
    """A due session untouched for this long is dispatched again by the reconciler."""
    verify_redispatch_after_s: float = Field(default=300.0, gt=0)
    """Like ``redispatch_after_s`` for a verification (they queue behind the browser)."""
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

    chromium_path: Path = Path("/usr/bin/chromium")
    """Debian's Chromium, driven by Playwright through ``executable_path``."""
    display: Literal["headless", "xvfb"] = "headless"
    """How the verifier renders: headless, or headed under a virtual X display."""
    verifier: Literal["auto", "browser", "static"] = "auto"
    """How artifacts are judged: in Chromium, by static checks only, or in Chromium when it
    is installed (static checks otherwise, with a warning)."""
    verify_max_pages: int | None = Field(default=None, ge=1)
    """Pages rendered at once per verifier process (default: one per two CPUs)."""
    verify_min_fps: float = Field(default=30.0, gt=0)
    """Frames per second a page's own animation loop must reach."""

    gemini_api_key: SecretStr | None = Field(default=None)
    """Gemini API key; never logged, never stored."""

    worker_name: str = "swarm"
    """Prefix of the lease owner recorded on sessions."""

    @field_validator("database_url")
    @classmethod
    def _normalize_database_url(cls, value: str) -> str:
        """Select psycopg 3 for plain PostgreSQL URLs."""
        for prefix in ("postgres://", "postgresql://"):
            if value.startswith(prefix):
                return "postgresql+psycopg://" + value[len(prefix) :]
        return value

    @property
    def is_embedded(self) -> bool:
        """True when the broker lives inside this process."""
        return self.broker_url.startswith("memory://")

    @property
    def is_sqlite(self) -> bool:
        """True when the database is a SQLite file."""
        return self.database_url.startswith("sqlite")
