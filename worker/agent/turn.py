"""One turn of one session: claim, rebuild, generate, run tools, commit, hand on.

Every exit is written out: the turn is skipped (not due), fenced (another worker took the
lease), committed (next turn or verification dispatched), ends the session (a guard, a
fatal provider error, a poison turn), or asks to be retried later (a transient error).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import timedelta
from enum import Enum
from typing import Any, NoReturn

from sqlalchemy import update

from worker.agent import history, limits
from worker.agent.profiles import get_profile
from worker.agent.prompt import build_prefix, user_text
from worker.agent.runs import RunConfig
from worker.agent.tools import ToolContext, run_tool
from worker.errors import (
    ConfigError,
    LimitExceeded,
    ModelFatal,
    ModelUnavailable,
    RateLimited,
    ToolError,
    TransientError,
)
from worker.fleet.runtime import Runtime
from worker.models.base import Model, ModelRequest, ModelTurn
from worker.models.gemini import cache as caches
from worker.models.limiter.base import ModelPaused, Throttled
from worker.models.registry import GEMINI_PREFIX
from worker.states import RunStatus, SessionStatus
from worker.store import lifecycle
from worker.store.tables import runs, sessions

logger = logging.getLogger(__name__)

#: A call argument longer than this many artifact ceilings is not stored whole.
STORED_ARG_CEILINGS = 4
#: What the agent is told when it answers without calling a tool.
NO_CALL_NOTICE = (
    "No tool was called. Text answers are not read: publish the page with "
    'manage_artifact(action="create") or edit it, then call handoff.'
)


class TurnOutcome(str, Enum):
    """How a turn task ended."""

    #: not due: already committed, session not running, or leased by a live worker
    skipped = "skipped"
    #: the lease moved on before the commit; nothing was written
    fenced = "fenced"
    #: the turn committed and the next step was dispatched
    committed = "committed"
    #: the session ended in this turn
    ended = "ended"


def backoff_s(rt: Runtime, retries: int) -> float:
    """Capped exponential backoff before retry number ``retries + 1``."""
    return float(min(rt.settings.retry_backoff_s * 2**retries, rt.settings.retry_backoff_max_s))


def run_turn(
    *, rt: Runtime, session_id: int, turn_no: int, retries: int = 0, model: Model | None = None
) -> TurnOutcome:
    """Run turn ``turn_no`` of a session.

    Args:
        rt: The process's runtime.
        session_id: The session.
        turn_no: The turn this task was sent for.
        retries: How many times this turn was retried after transient errors.
        model: Overrides the model the run names (tests).

    Raises:
        TransientError: the model is unavailable for now; retry after ``delay_s``.
    """
    started = time.monotonic()
    with rt.engine.begin() as conn:
        claim = lifecycle.claim_turn(
            conn,
            session_id=session_id,
            turn_no=turn_no,
            owner=rt.owner,
            now=rt.clock(),
            ttl_s=rt.settings.lease_ttl_s,
        )
    if claim is None:
        logger.info("turn %s/%s skipped: not due", session_id, turn_no)
        return TurnOutcome.skipped
    if claim.attempts > rt.settings.max_turn_attempts:
        return _end(
            rt,
            claim,
            SessionStatus.error,
            outcome="poison_turn",
            error=f"turn {turn_no} was claimed {claim.attempts - 1} times without committing",
        )
    with rt.engine.connect() as conn:
        view = lifecycle.load_session(conn, session_id=session_id)
        spent = limits.spend(conn, session_id=session_id, run_id=view.run_id)
    config = RunConfig.model_validate(view.run_config)
    if view.run_status == RunStatus.cancelled.value:
        return _end(
            rt, claim, SessionStatus.cancelled, outcome="cancelled", error="the run was cancelled"
        )
    if turn_no >= config.max_turns:
        return _end(
            rt,
            claim,
            SessionStatus.stopped,
            outcome="max_turns",
            error=f"stopped after {turn_no} turns (max_turns={config.max_turns})",
        )
    try:
        limits.check_spend(config, spent, view.run_budget_usd)
    except LimitExceeded as exc:
        if exc.kind == "budget":
            _record_run_stop(rt, view.run_id, f"budget: spent ${exc.value:.4f} of ${exc.limit:.4f}")
        return _end(rt, claim, SessionStatus.stopped, outcome=exc.kind, error=str(exc))
    profile = get_profile(view.profile)
    prefix = build_prefix(profile)
    request = ModelRequest(
        model=view.model,
        system_instruction=prefix.system_instruction,
        tools=prefix.tools,
        history=tuple(history.rebuild(view.events)),
        tool_mode=profile.tool_mode,
    )
    called = time.monotonic()
    try:
        if config.cache == "explicit" and view.model.startswith(GEMINI_PREFIX):
            request = replace(
                request,
                cached_content=caches.ensure_cache(
                    rt,
                    run_id=view.run_id,
                    model=view.model,
                    prefix=prefix,
                    tool_mode=profile.tool_mode,
                ),
            )
        answer = (model or rt.providers.model_for(view)).generate(request)
    except ModelPaused as exc:
        return _end(rt, claim, SessionStatus.stopped, outcome="quota", error=str(exc))
    except ModelUnavailable as exc:
        if isinstance(exc, RateLimited) and exc.quota == "day":
            # The model is paused fleet-wide until the quota resets: stop, don't retry.
            return _end(rt, claim, SessionStatus.stopped, outcome="quota", error=str(exc))
        # A wait for the fleet's own limiter is no failure of the model.
        counts = not isinstance(exc, Throttled)
        if counts and retries >= rt.settings.max_model_retries:
            return _end(
                rt,
                claim,
                SessionStatus.error,
                outcome="retries_exhausted",
                error=f"model unavailable after {retries} retries: {exc}",
            )
        _retry_later(rt, claim, exc, retries, counts=counts)
    except (ModelFatal, ConfigError) as exc:
        return _end(rt, claim, SessionStatus.error, outcome="model_error", error=str(exc))
    latency_ms = int((time.monotonic() - called) * 1000)
    outcome, loop = _commit(rt, claim, view, config, answer, latency_ms)
    if loop is not None:
        return _end(
            rt, claim, SessionStatus.stopped, outcome="loop", error=f"{loop.kind}: {loop.message}"
        )
    logger.info(
        "turn %s/%s %s in %.2fs (%d calls)",
        session_id,
        turn_no,
        outcome.value,
        time.monotonic() - started,
        len(answer.calls),
    )
    return outcome


def _commit(
    rt: Runtime,
    claim: lifecycle.Claim,
    view: lifecycle.SessionView,
    config: RunConfig,
    answer: ModelTurn,
    latency_ms: int,
) -> tuple[TurnOutcome, limits.Loop | None]:
    """Commit the turn; returns its outcome and a loop that must now end the session."""
    now = rt.clock()
    profile = get_profile(view.profile)
    with rt.engine.begin() as conn:
        if not lifecycle.holds_lease(conn, claim=claim):
            logger.warning(
                "turn %s/%s fenced: lease epoch %s superseded",
                claim.session_id,
                claim.turn_no,
                claim.epoch,
            )
            return TurnOutcome.fenced, None
        ctx = ToolContext(
            conn=conn, session_id=claim.session_id, turn_no=claim.turn_no, profile=profile, now=now
        )
        stored = history.elide_long_args(
            answer.content, max_chars=STORED_ARG_CEILINGS * profile.artifact_max_bytes
        )
        items: list[tuple[str, dict[str, Any]]] = [
            ("model", {"content": stored, "finish_reason": answer.finish_reason})
        ]
        items += _run_tools(answer, ctx)
        if not answer.calls:
            items.append(
                ("nudge", {"reason": "no_tool_call", "content": user_text(NO_CALL_NOTICE)})
            )
        loop, warnings = (
            (None, 0)
            if ctx.handed_off is not None
            else limits.find_loop([*view.events, *items], config)
        )
        if loop is not None and warnings == 0:
            # The first time, the agent is told what it repeats and what to do instead.
            items.append(
                (
                    "nudge",
                    {
                        "reason": limits.LOOP_NUDGE,
                        "kind": loop.kind,
                        "content": user_text(loop.message),
                    },
                )
            )
            loop = None
        lifecycle.add_events(
            conn, session_id=claim.session_id, turn_no=claim.turn_no, items=items, now=now
        )
        usage = answer.usage
        lifecycle.add_usage(
            conn,
            session_id=claim.session_id,
            run_id=view.run_id,
            turn_no=claim.turn_no,
            now=now,
            values={
                "model": view.model,
                "prompt_tokens": usage.prompt_tokens,
                "cached_tokens": usage.cached_tokens,
                "output_tokens": usage.output_tokens,
                "thoughts_tokens": usage.thoughts_tokens,
                "tool_use_tokens": usage.tool_use_tokens,
                "cost_usd": rt.prices.cost_usd(view.model, usage),
                "price_date": rt.prices.price(view.model).as_of,
                "latency_ms": latency_ms,
            },
        )
        verifying = ctx.handed_off is not None
        status = SessionStatus.verifying if verifying else SessionStatus.running
        committed = lifecycle.fence_turn(conn, claim=claim, now=now, status=status)
        assert committed, "the lease was checked under a row lock in this transaction"
        if verifying:
            conn.execute(
                update(sessions)
                .where(sessions.c.id == claim.session_id)
                .values(handoff_version_id=ctx.handed_off)
            )
    if loop is not None:
        return TurnOutcome.committed, loop
    nxt = (
        lifecycle.Dispatch(claim.session_id, "verify", view.repair_round)
        if verifying
        else lifecycle.Dispatch(claim.session_id, "turn", claim.turn_no + 1)
    )
    rt.send_all([nxt])
    return TurnOutcome.committed, None


def _run_tools(answer: ModelTurn, ctx: ToolContext) -> list[tuple[str, dict[str, Any]]]:
    items: list[tuple[str, dict[str, Any]]] = []
    for call in answer.calls:
        base = {"name": call.name, "call_id": call.id}
        try:
            if ctx.handed_off is not None:
                raise ToolError(
                    "the artifact was already handed off in this turn",
                    kind="after_handoff",
                    hint="handoff must be the last call",
                )
            output = run_tool(call, ctx)
        except ToolError as exc:
            items.append(
                ("tool_error", {**base, "kind": exc.kind, "response": {"error": exc.to_result()}})
            )
        else:
            items.append(("tool_result", {**base, "response": {"output": output}}))
    return items


def _end(
    rt: Runtime, claim: lifecycle.Claim, status: SessionStatus, *, outcome: str, error: str
) -> TurnOutcome:
    with rt.engine.begin() as conn:
        ended = lifecycle.end_session(
            conn,
            session_id=claim.session_id,
            status=status,
            now=rt.clock(),
            outcome=outcome,
            error=error,
            epoch=claim.epoch,
        )
        if ended:
            lifecycle.add_events(
                conn,
                session_id=claim.session_id,
                turn_no=claim.turn_no,
                items=[("ended", {"status": status.value, "outcome": outcome, "error": error})],
                now=rt.clock(),
            )
    if not ended:
        return TurnOutcome.fenced
    logger.info(
        "session %s ended %s (%s) at turn %s",
        claim.session_id,
        status.value,
        outcome,
        claim.turn_no,
    )
    rt.flush_outbox()
    return TurnOutcome.ended


def _record_run_stop(rt: Runtime, run_id: int, reason: str) -> None:
    with rt.engine.begin() as conn:
        conn.execute(
            update(runs)
            .where(runs.c.id == run_id, runs.c.stop_reason.is_(None))
            .values(stop_reason=reason)
        )


def _retry_later(
    rt: Runtime, claim: lifecycle.Claim, exc: TransientError, retries: int, *, counts: bool
) -> NoReturn:
    # The server's own retry delay wins; otherwise back off exponentially.
    delay_s = exc.delay_s if exc.delay_s is not None else backoff_s(rt, retries)
    with rt.engine.begin() as conn:
        lifecycle.release_turn(
            conn, claim=claim, counted=counts, retry_at=rt.clock() + timedelta(seconds=delay_s)
        )
    logger.warning(
        "turn %s/%s: %s; retrying in %.1fs", claim.session_id, claim.turn_no, exc, delay_s
    )
    raise TransientError(str(exc), delay_s=delay_s, counts=counts) from exc
