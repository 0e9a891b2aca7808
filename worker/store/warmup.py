"""Cache-warm dispatch: one first turn warms the provider's implicit cache for its wave.

Gemini's implicit cache serves a prefix only once a request carrying it has completed, so
the first turns of a wave that all start together pay the full prompt price, however
alike they are. When a wave starts on a prefix the provider has not seen lately (the
run's first wave; a ladder's next run on another profile or model), one session's first
turn goes out at once and the others are held back: their turns are sent with a countdown
of the run's ``cache_warm_cap_s``, and sent at once when the warming turn commits
(:func:`release_wave`). A slow model therefore never stalls a wave for longer than the
cap.

Held sessions record the time their turn is due as ``dispatched_at``, so if every worker
holding their delayed messages dies, the reconciler sends them as it sends any lost
message, ``redispatch_after_s`` after that time. Sending a held turn twice (released,
then its countdown fires) is harmless: only one claim of a turn commits.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection

from worker.states import SessionStatus
from worker.store.tables import runs, sessions, usage

logger = logging.getLogger(__name__)

#: A prefix a call of the same model used this recently is taken to be cached still (the
#: API keeps an implicit cache for minutes; this errs on the short side).
WARM_FOR_S = 180.0
#: Seconds the rest of a wave waits for its warming turn at most, unless the run says.
DEFAULT_CAP_S = 8.0


def wants_warmup(model: str, config: dict[str, Any]) -> bool:
    """True when a run's waves should start with one warming turn.

    Only Gemini models have an implicit cache; an explicit cache is made by the first
    turn and waited for by the others anyway.
    """
    return (
        model.startswith("gemini")
        and config.get("cache_warm", "on") == "on"
        and config.get("cache", "implicit") == "implicit"
    )


def hold_wave(conn: Connection, *, run_id: int, session_ids: Sequence[int], now: datetime) -> float:
    """Hold back all but the first of a wave's first turns when the wave starts cold.

    Args:
        conn: The wave start's transaction.
        run_id: The run.
        session_ids: The sessions of the wave that just started, in order.
        now: The wave's start time.

    Returns:
        The delay, in seconds, of the held sessions' first turns (0: none is held).
    """
    if len(session_ids) < 2:
        return 0.0
    run = conn.execute(
        select(runs.c.model, runs.c.prefix_sha256, runs.c.config).where(runs.c.id == run_id)
    ).one()
    if not wants_warmup(run.model, run.config) or _recently_used(
        conn, model=run.model, prefix_sha256=run.prefix_sha256, now=now
    ):
        return 0.0
    cap_s = float(run.config.get("cache_warm_cap_s", DEFAULT_CAP_S))
    conn.execute(
        update(sessions)
        .where(sessions.c.id.in_(session_ids[1:]))
        .values(dispatched_at=now + timedelta(seconds=cap_s))
    )
    logger.info(
        "run %s: session %s warms the cache; %d first turn(s) held for up to %.1fs",
        run_id,
        session_ids[0],
        len(session_ids) - 1,
        cap_s,
    )
    return cap_s


def release_wave(conn: Connection, *, session_id: int, now: datetime) -> list[int]:
    """The sessions of a session's wave whose held first turns are to be sent now.

    Called when a first turn commits. Claimed by ``UPDATE ... RETURNING``: two first turns
    committing at once never release the same session twice. A session already retried is
    left to its retry's schedule.
    """
    wave_id = select(sessions.c.wave_id).where(sessions.c.id == session_id).scalar_subquery()
    rows = conn.execute(
        update(sessions)
        .where(
            sessions.c.wave_id == wave_id,
            sessions.c.status == SessionStatus.running.value,
            sessions.c.next_turn == 0,
            sessions.c.lease_expires_at.is_(None),
            sessions.c.model_retries == 0,
            sessions.c.dispatched_at > now,
        )
        .values(dispatched_at=now)
        .returning(sessions.c.id)
    ).scalars()
    return sorted(rows)


def _recently_used(conn: Connection, *, model: str, prefix_sha256: str, now: datetime) -> bool:
    """True when a call of ``model`` on this prefix completed within :data:`WARM_FOR_S`."""
    since = now - timedelta(seconds=WARM_FOR_S)
    found = conn.execute(
        select(usage.c.id)
        .join(runs, runs.c.id == usage.c.run_id)
        .where(
            usage.c.model == model,
            runs.c.prefix_sha256 == prefix_sha256,
            usage.c.created_at > since,
        )
        .limit(1)
    ).first()
    return found is not None


@dataclass(frozen=True)
class FirstTurns:
    """What the first turns of a run's sessions sent and paid: the cache-warm figures."""

    turns: int
    prompt_tokens: int
    cached_tokens: int
    cost_usd: float

    @property
    def cache_share(self) -> float | None:
        """``cached / prompt`` over the first turns; None before any."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None


def first_turns(conn: Connection, *, run_id: int) -> FirstTurns:
    """The usage of the run's first turns (turn 0 of each session)."""
    row = conn.execute(
        select(
            func.count(),
            func.coalesce(func.sum(usage.c.prompt_tokens), 0),
            func.coalesce(func.sum(usage.c.cached_tokens), 0),
            func.coalesce(func.sum(usage.c.cost_usd), 0.0),
        ).where(usage.c.run_id == run_id, usage.c.turn_no == 0)
    ).one()
    return FirstTurns(int(row[0]), int(row[1]), int(row[2]), float(row[3]))
