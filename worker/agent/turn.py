"""One turn of one session: claim, rebuild, generate, run tools, commit, hand on.

Every exit is written out: the turn is skipped (not due), fenced (another worker took the
lease), committed (next turn or verification dispatched), ends the session (any
:class:`~worker.errors.SessionStopped`: a limit, the budget, a loop, the quota, a cancel,
a poison turn, a fatal provider error), or asks to be retried later (a transient error).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, replace
from datetime import datetime, timedelta
from enum import Enum
from functools import partial
from typing import Any, NamedTuple, NoReturn

from sqlalchemy.engine import Connection
from sqlalchemy.exc import TimeoutError as PoolTimeout

from worker.agent import history, limits, transcript, workspace
from worker.agent import verdict as verdicts
from worker.agent.accounting import observe_commit, usage_row
from worker.agent.budget import CallHold, worst_case_usd
from worker.agent.events import (
    Ended,
    Event,
    ModelOutput,
    Nudge,
    NudgeReason,
    ToolFailure,
    ToolResult,
)
from worker.agent.frozen import freeze
from worker.agent.prompt import build_prefix
from worker.agent.timings import TurnTimer
from worker.agent.tools import ToolContext, run_tool, texts_needed
from worker.config import RunConfig
from worker.errors import (
    BudgetHeld,
    CallOverBudget,
    ConfigError,
    LimitExceeded,
    ModelFatal,
    ModelUnavailable,
    SessionStopped,
    ToolError,
    TransientError,
)
from worker.fleet.runtime import Runtime, Tracer
from worker.models.base import FunctionCall, Model, ModelRequest, ModelTurn
from worker.models.sim.model import SimModel
from worker.notices import NO_CALL_NOTICE, user_text
from worker.profiles import get_profile
from worker.states import Outcome, RunStatus
from worker.store import (
    claims,
    due,
    endings,
    reservations,
    sessions,
    statements,
    turns,
    warmup,
)
from worker.tasks.base import Instance, Task, VerifierKind, passed
from worker.tasks.fingerprint import recorded_task

logger = logging.getLogger(__name__)

#: A call argument longer than this many artifact ceilings is not stored whole.
STORED_ARG_CEILINGS = 4


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
    try:
        with statements.counting() as sent:
            counted = None if rt.settings.is_sqlite else sent
            outcome = _run_turn(rt, session_id, turn_no, retries=retries, model=model, sent=counted)
    except TransientError:
        if rt.observer is not None:
            rt.observer.after_turn(outcome="retried")
        raise
    if rt.observer is not None:
        rt.observer.after_turn(outcome=outcome.value)
    return outcome


def _run_turn(
    rt: Runtime,
    session_id: int,
    turn_no: int,
    *,
    retries: int,
    model: Model | None,
    sent: statements.Counts | None,
) -> TurnOutcome:
    started = time.monotonic()
    timer = TurnTimer(cpu_clock=rt.cpu_clock)
    claimed_at = rt.clock()
    claimed = _claim(rt, session_id, turn_no, claimed_at, timer)
    if claimed is None:
        return TurnOutcome.skipped
    claim, loaded = claimed
    view = loaded.view
    timer.lap("rebuild")
    ledger = _Ledger(timer, claimed_at, claim.dispatched_at, rt.send_ms(session_id, turn_no), sent)
    traced = (
        rt.tracer.turn(session_id=claim.session_id, run_id=view.run_id, turn_no=claim.turn_no)
        if rt.tracer is not None
        else nullcontext()
    )
    # The lease lives as long as this worker does: renewed through the model call.
    with rt.leases.hold(claim.session_id, claim.epoch), traced:
        try:
            outcome, calls = _play(rt, claim, loaded, ledger, retries=retries, model=model)
        except SessionStopped as stop:
            return _end(rt, claim, stop, view=view, ledger=ledger)
    # Celery logs each task at INFO and the timing ledger keeps the figures: at hundreds of
    # threads this line's handler lock cost about 3% of the worker's CPU.
    logger.debug(
        "turn %s/%s %s in %.2fs (%d calls, model %.0f ms, cpu %.1f ms)",
        session_id,
        turn_no,
        outcome.value,
        time.monotonic() - started,
        calls,
        timer.ms("model"),
        timer.cpu_ms(),
    )
    return outcome


def _claim(
    rt: Runtime, session_id: int, turn_no: int, now: datetime, timer: TurnTimer
) -> tuple[claims.Claim, _Loaded] | None:
    """Claim the turn and read what it needs; None when it is not due.

    A turn waiting on its model holds only what this returns: not the claim's own read of
    the session (its rows are in the history now, kept and frozen), not the history that
    read extended, not the run's settings as read (the run's are shared), not the
    connection.
    """
    kept = transcript.cache_for(engine=rt.engine, settings=rt.settings)
    held = kept.get(session_id)
    with rt.engine.connect() as conn:
        claimed = turns.claim_turn(
            conn,
            session_id=session_id,
            turn_no=turn_no,
            owner=rt.owner,
            now=now,
            ttl_s=rt.settings.lease_ttl_s,
            since=None if held is None else held.mark,
        )
        if claimed is None:
            with conn.begin():
                claims.count_duplicate_turn(conn, session_id=session_id)
            logger.info("turn %s/%s skipped: not due", session_id, turn_no)
            return None
        claim, view = claimed
        timer.lap("claim")
        read = kept.advance(held, view)
        run_config, config = RUN_CONFIGS.get(view.run_id, view.run_config)
        view = replace(view, events=[], run_config=run_config)
        return claim, _load(conn, view, config, read)


class RunConfigs:
    """Each run's settings as this process last read them, decoded and validated once.

    Every turn reads its run's settings with its claim; kept by each turn while it waits on
    its model, they cost about 5 KB a session, the same for every session of the run. A
    turn that reads settings other than those kept (a run whose settings were rewritten)
    validates and keeps what it read: what a process keeps never decides what a turn sees.
    """

    def __init__(self, *, max_runs: int = 64) -> None:
        self.max_runs = max_runs
        self._kept: OrderedDict[int, tuple[dict[str, Any], RunConfig]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, run_id: int, read: dict[str, Any]) -> tuple[dict[str, Any], RunConfig]:
        """The run's settings as ``read`` (read-only, shared) and validated.

        Raises:
            pydantic.ValidationError: ``read`` is not a run's settings.
        """
        with self._lock:
            kept = self._kept.get(run_id)
            if kept is not None and kept[0] == read:
                self._kept.move_to_end(run_id)
                return kept
        config = RunConfig.model_validate(read)
        kept = (freeze(read), config)
        with self._lock:
            self._kept[run_id] = kept
            self._kept.move_to_end(run_id)
            while len(self._kept) > self.max_runs:
                self._kept.popitem(last=False)
        return kept


#: The process's runs' settings (:class:`RunConfigs`).
RUN_CONFIGS = RunConfigs()


class _Ledger(NamedTuple):
    """A turn's stopwatch and what it needs to become the turn's timing row."""

    timer: TurnTimer
    claimed_at: datetime
    dispatched_at: datetime | None
    dispatch_ms: float | None
    sent: statements.Counts | None
    """What the turn has sent to PostgreSQL so far (None on SQLite)."""

    def row(self) -> dict[str, Any]:
        return {
            **self.timer.row(
                claimed_at=self.claimed_at,
                dispatched_at=self.dispatched_at,
                dispatch_ms=self.dispatch_ms,
            ),
            "statements": None if self.sent is None else self.sent.statements,
            "round_trips": None if self.sent is None else self.sent.round_trips,
        }


class _Loaded(NamedTuple):
    """What a turn reads of its session before the model call."""

    view: sessions.SessionView
    config: RunConfig
    spent: limits.Spend | None
    """The session's and run's spend, when a limit is set to check it against."""
    read: transcript.Transcript
    """The session's history: its events and the model's contents."""


def _load(
    conn: Connection, view: sessions.SessionView, config: RunConfig, read: transcript.Transcript
) -> _Loaded:
    # Summing the run's usage rows costs the database more with every turn of the run:
    # only a limit to check is worth it. A budget held by reservations needs no sum.
    checked = view.run_budget_usd is not None and config.reserve == "off"
    limited = checked or config.max_tokens or config.max_cost_usd
    run_id = view.run_id if checked else None
    spent = limits.spend(conn, session_id=view.id, run_id=run_id) if limited else None
    return _Loaded(view, config, spent, read)


def _reserves(view: sessions.SessionView, config: RunConfig) -> bool:
    """Whether the turn's model calls are reserved against the run's budget."""
    return view.run_budget_usd is not None and config.reserve == "on"


def _play(
    rt: Runtime,
    claim: claims.Claim,
    loaded: _Loaded,
    ledger: _Ledger,
    *,
    retries: int,
    model: Model | None,
) -> tuple[TurnOutcome, int]:
    """Check the guards, call the model and commit; returns the outcome and the calls made.

    Raises:
        SessionStopped: the session ends now.
        TransientError: retry the turn later.
    """
    if claim.attempts > rt.settings.max_turn_attempts:
        raise SessionStopped(
            f"turn {claim.turn_no} was claimed {claim.attempts - 1} times without committing",
            outcome=Outcome.poison_turn,
        )
    view, config, spent, read = loaded
    if view.run_status == RunStatus.cancelled.value:
        raise SessionStopped("the run was cancelled", outcome=Outcome.cancelled)
    limits.check_turns(config, claim.turn_no)
    if spent is not None:
        limits.check_spend(config, spent, view.run_budget_usd)
    task = _task_of(view)
    reserved = _reserves(view, config)
    profile = get_profile(view.profile)
    prefix = build_prefix(task, profile)
    request = ModelRequest(
        model=view.model,
        system_instruction=prefix.system_instruction,
        tools=prefix.tools,
        history=read.contents,
        tool_mode=profile.tool_mode,
        # A bound is sent when the run sets one or reserves its calls: without a budget, a
        # model's own limit leaves a large page whole.
        max_output_tokens=config.output_limit(reserved=reserved),
    )
    chosen = model or _model_for(rt, view, config, task)
    ledger.timer.lap("rebuild")
    hold = None
    if reserved:
        hold, request = _reserve(rt, claim, view, config, request, ledger.timer, retries)
        ledger.timer.lap("reserve")
    answer = _generate(rt, claim, request, chosen, retries=retries, hold=hold)
    ledger.timer.lap("model")
    outcome = _commit(rt, claim, view, read.events, config, task, answer, ledger)
    return outcome, len(answer.calls)


def _task_of(view: sessions.SessionView) -> Task:
    """The session's task, as its run recorded it.

    Raises:
        SessionStopped: it cannot be loaded here, or it is not the one the run recorded.
    """
    try:
        return recorded_task(view.task_ref, version=view.task_version, sha256=view.task_sha256)
    except ConfigError as exc:
        raise SessionStopped(str(exc), outcome=Outcome.task_error) from exc


def public_instance(view: sessions.SessionView) -> Instance:
    """The session's instance as the session's side sees it (its public fields)."""
    return Instance(view.instance_id, view.brief)


def full_instance(task: Task, view: sessions.SessionView) -> Instance:
    """The session's instance with its hidden fields, as the task defines it."""
    try:
        return task.instance(view.instance_id)
    except ConfigError:  # a session made before tasks: its brief is all there is
        return public_instance(view)


def _model_for(rt: Runtime, view: sessions.SessionView, config: RunConfig, task: Task) -> Model:
    def sim() -> Model:
        player = task.player(
            full_instance(task, view),
            view.persona,
            seed=config.seed,
            index=view.index,
            flaw_rate=config.sim_flaw_rate,
        )
        return SimModel(
            player,
            seed=config.seed,
            index=view.index,
            latency_ms=config.sim_latency_ms,
            jitter=config.sim_latency_jitter,
        )

    try:
        return rt.providers.model_for(
            view.model, run_id=view.run_id, explicit_cache=config.cache == "explicit", sim=sim
        )
    except ConfigError as exc:
        raise SessionStopped(str(exc), outcome=Outcome.model_error) from exc


def _reserve(
    rt: Runtime,
    claim: claims.Claim,
    view: sessions.SessionView,
    config: RunConfig,
    request: ModelRequest,
    timer: TurnTimer,
    retries: int,
) -> tuple[CallHold, ModelRequest]:
    """Reserve the call's worst case against the run's budget; returns the hold and the
    request, which reserves a second call of the turn before the provider sends one.

    Raises:
        CallOverBudget: the call does not fit; it is not sent.
        TransientError: calls in flight hold what it needs; the turn waits for them.
    """
    with timer.cpu_of("reserve"):
        limit = config.reserved_output_limit()
        amount = worst_case_usd(rt.prices, request, max_output_tokens=limit)
        hold = CallHold(rt=rt, claim=claim, run_id=view.run_id, amount_usd=amount)
        try:
            hold.first()
        except BudgetHeld as exc:
            _retry_later(rt, claim, exc, retries)

    def again() -> bool:
        with timer.cpu_of("reserve"):
            return hold.again()

    return hold, replace(request, may_resend=again)


def _generate(
    rt: Runtime,
    claim: claims.Claim,
    request: ModelRequest,
    model: Model,
    *,
    retries: int,
    hold: CallHold | None = None,
) -> ModelTurn:
    """The model's answer; a failure becomes a stop or a retry.

    A call that failed unbilled gives its reservation back; one that may have been billed
    keeps it until the run ends.

    Raises:
        SessionStopped: the provider refused for good, or retries are used up.
        TransientError: retry the turn later.
    """
    try:
        if rt.tracer is not None:
            return rt.tracer.model_call(request, model.generate)
        return model.generate(request)
    except ModelUnavailable as exc:
        if hold is not None:
            _after_failed_call(rt, claim, maybe_billed=exc.maybe_billed)
        if exc.counts and retries >= rt.settings.max_model_retries:
            raise SessionStopped(
                f"model unavailable after {retries} retries: {exc}",
                outcome=Outcome.retries_exhausted,
            ) from exc
        _retry_later(rt, claim, exc, retries)
    except ModelFatal as exc:
        raise SessionStopped(str(exc), outcome=Outcome.model_error, billed=exc.usage) from exc
    except ConfigError as exc:
        raise SessionStopped(str(exc), outcome=Outcome.model_error) from exc


def _after_failed_call(rt: Runtime, claim: claims.Claim, *, maybe_billed: bool) -> None:
    with rt.engine.begin() as conn:
        keys = {"session_id": claim.session_id, "turn_no": claim.turn_no, "epoch": claim.epoch}
        if maybe_billed:
            reservations.keep(conn, **keys)
        else:
            reservations.release(conn, **keys)


def _connect_patiently(rt: Runtime, claim: claims.Claim) -> Connection:
    """A connection to commit the turn on, however long a busy pool takes to free one.

    The model's answer is in hand and the lease lives as long as this worker does, so
    waiting loses nothing; giving up would throw the answer away and run the turn again,
    the model call included, on a worker already too busy.
    """
    while True:
        try:
            return rt.engine.connect()
        except PoolTimeout:
            logger.warning(
                "turn %s/%s: no database connection free within %.0fs to commit; waiting on",
                claim.session_id,
                claim.turn_no,
                rt.settings.db_pool_timeout_s,
            )


def _commit(
    rt: Runtime,
    claim: claims.Claim,
    view: sessions.SessionView,
    log: Sequence[Event],
    config: RunConfig,
    task: Task,
    answer: ModelTurn,
    ledger: _Ledger,
) -> TurnOutcome:
    """Commit the turn: its events, tool effects, usage and ``next_turn + 1``, at once.

    Raises:
        SessionStopped: the turn committed, and the loop detector now ends the session.
    """
    now = rt.clock()
    profile = get_profile(view.profile)
    with rt.commit_gate, _connect_patiently(rt, claim) as conn, conn.begin():
        # The lease's row lock and the workspace the calls read, in one statement.
        held = workspace.lock_workspace(
            conn, claim=claim, contents=texts_needed(answer.calls, task)
        )
        if held is None:
            logger.warning(
                "turn %s/%s fenced: lease epoch %s superseded",
                claim.session_id,
                claim.turn_no,
                claim.epoch,
            )
            return TurnOutcome.fenced
        ctx = ToolContext(
            conn=conn,
            session_id=claim.session_id,
            turn_no=claim.turn_no,
            profile=profile,
            now=now,
            task=task,
            instance=public_instance(view),
            snapshot=held,
        )
        ceiling = max(profile.max_bytes(a.max_bytes) for a in task.artifacts)
        stored = history.elide_long_args(answer.content, max_chars=STORED_ARG_CEILINGS * ceiling)
        items: list[Event] = [ModelOutput(stored, answer.finish_reason)]
        ledger.timer.lap("commit")
        items += _run_tools(answer, ctx, rt.tracer)
        ledger.timer.lap("tools")
        if not answer.calls:
            items.append(Nudge(NudgeReason.no_tool_call, user_text(NO_CALL_NOTICE)))
        loop, warnings = (
            (None, 0) if ctx.handed_off is not None else limits.find_loop([*log, *items], config)
        )
        if loop is not None and warnings == 0:
            # The first time, the agent is told what it repeats and what to do instead.
            items.append(Nudge(NudgeReason.loop, user_text(loop.message), loop_kind=loop.kind))
            loop = None
        usage = answer.usage
        cost_usd = rt.prices.cost_usd(view.model, usage)
        ledger.timer.lap("commit")
        timing = ledger.row()
        rows = turns.TurnRows(
            run_id=view.run_id,
            items=items,
            first_seq=view.next_seq,
            usage=usage_row(rt.prices, view.model, usage, cost_usd, ledger.timer),
            timing=timing,
            budgeted=view.run_budget_usd is not None,
        )
        # The next turn's queue wait starts at the fence, not when this commit began.
        committed = turns.commit_turn(
            conn,
            claim=claim,
            rows=rows,
            now=now,
            fenced_at=rt.clock(),
            handoff_version_id=ctx.handed_off,
        )
        assert committed, "the lease was checked under a row lock in this transaction"
        # A handoff judged by static checks alone is judged here, in the handoff's own
        # transaction: a verification task would only read back what this turn holds.
        verdict = (
            _judge_inline(rt, conn, claim, view, config, task, ctx, now)
            if ctx.handed_off is not None and judged_inline(task, config)
            else None
        )
        # A first turn warmed the cache: its wave's held first turns may go now. Only a
        # run that warms the cache holds any (the look reads every session of the wave).
        released = (
            warmup.release_wave(conn, session_id=claim.session_id, now=now)
            if claim.turn_no == 0 and warmup.wants_warmup(view.model, view.run_config)
            else []
        )
    if rt.observer is not None:
        observe_commit(rt.observer, view.model, timing, usage, cost_usd)
    if loop is not None:
        raise SessionStopped(f"{loop.kind}: {loop.message}", outcome=Outcome.loop)
    if verdict is not None:
        rt.send_all([due.Dispatch(s, "turn", 0) for s in released])
        return _after_inline_verdict(rt, claim.session_id, view.repair_round, verdict)
    nxt = (
        due.Dispatch(claim.session_id, "verify", view.repair_round, verifier=task.verifier.value)
        if ctx.handed_off is not None
        else due.Dispatch(claim.session_id, "turn", claim.turn_no + 1)
    )
    rt.send_all([nxt, *(due.Dispatch(s, "turn", 0) for s in released)])
    return TurnOutcome.committed


def judged_inline(task: Task, config: RunConfig) -> bool:
    """Whether a run's handoffs are judged by static checks alone, in the handoff's own
    commit: its task's verifier is static, or the run asks for static verdicts."""
    return task.verifier is VerifierKind.static or config.verify == "static"


def _judge_inline(
    rt: Runtime,
    conn: Connection,
    claim: claims.Claim,
    view: sessions.SessionView,
    config: RunConfig,
    task: Task,
    ctx: ToolContext,
    now: datetime,
) -> verdicts.Applied:
    """Judge the handoff of this turn as the verify queue would, and record the verdict in
    the turn's own transaction: the static checks the handoff passed, then, for a static
    task, the task's own judgement with the instance's hidden fields."""
    started = time.perf_counter()
    submitted = ctx.handed_off_as
    assert ctx.handed_off is not None and submitted is not None, "set by the handoff tool"
    checks = list(ctx.handoff_checks)
    if task.verifier is VerifierKind.static:
        checks += task.judge(replace(submitted, instance=full_instance(task, view)))
    verdict = verdicts.VerdictIn(
        passed=passed(checks),
        method="static",
        checks=[asdict(c) for c in checks],
        elapsed_ms=int((time.perf_counter() - started) * 1000),
    )
    return verdicts.apply_verdict(
        conn,
        session_id=claim.session_id,
        round_no=view.repair_round,
        version_id=ctx.handed_off,
        verdict=verdict,
        now=now,
        next_turn=claim.turn_no + 1,
        repair_rounds=config.repair_rounds,
    )


def _after_inline_verdict(
    rt: Runtime, session_id: int, round_no: int, applied: verdicts.Applied
) -> TurnOutcome:
    """Act on a verdict recorded with its handoff, now committed, as the verify task would."""
    result = verdicts.after_verdict(rt, session_id=session_id, round_no=round_no, applied=applied)
    if rt.tracer is not None:
        rt.tracer.verification(session_id=session_id, round_no=round_no, judge=lambda: result)
    return TurnOutcome.committed if applied.ended is None else TurnOutcome.ended


def _run_tools(answer: ModelTurn, ctx: ToolContext, tracer: Tracer | None = None) -> list[Event]:
    if tracer is not None:
        run = partial(run_call, ctx=ctx)
        return [tracer.tool_call(call, run) for call in answer.calls]
    return [run_call(call, ctx) for call in answer.calls]


def run_call(call: FunctionCall, ctx: ToolContext) -> ToolResult | ToolFailure:
    """Run one call of a model turn; what the model is shown is the event returned.

    Replay re-enacts recorded turns through this same function.
    """
    ctx.progress = False
    try:
        if ctx.handed_off is not None:
            raise ToolError(
                "the artifact was already handed off in this turn",
                kind="after_handoff",
                hint="handoff must be the last call",
            )
        output = run_tool(call, ctx)
    except ToolError as exc:
        return ToolFailure(call.name, call.id, exc.kind, exc.to_result())
    return ToolResult(call.name, call.id, output, progress=ctx.progress)


def _end(
    rt: Runtime,
    claim: claims.Claim,
    stop: SessionStopped,
    *,
    view: sessions.SessionView,
    ledger: _Ledger,
) -> TurnOutcome:
    """End the session as ``stop`` says, if this worker still holds its lease.

    A model call the turn was billed for (``stop.billed``) is recorded with the ending.
    """
    outcome, error = stop.outcome, str(stop)
    with rt.engine.begin() as conn:
        ended = endings.end_session(
            conn,
            session_id=claim.session_id,
            outcome=outcome,
            now=rt.clock(),
            error=error,
            epoch=claim.epoch,
        )
        if ended:
            sessions.add_events(
                conn,
                session_id=claim.session_id,
                turn_no=claim.turn_no,
                items=[Ended(outcome.status.value, outcome.value, error)],
                now=rt.clock(),
            )
            if view.run_budget_usd is not None:
                # What the session still holds (a dead worker's call) goes back to the run.
                reservations.release_session(conn, session_id=claim.session_id)
            if stop.billed is not None:
                cost_usd = rt.prices.cost_usd(view.model, stop.billed)
                sessions.add_usage(
                    conn,
                    session_id=claim.session_id,
                    run_id=view.run_id,
                    turn_no=claim.turn_no,
                    values=usage_row(rt.prices, view.model, stop.billed, cost_usd, ledger.timer),
                    now=rt.clock(),
                )
                reservations.add_spent(conn, run_id=view.run_id, cost_usd=cost_usd)
            if isinstance(stop, CallOverBudget):
                endings.record_run_stop(conn, session_id=claim.session_id, reason=f"budget: {stop}")
            elif isinstance(stop, LimitExceeded) and outcome is Outcome.budget:
                reason = f"budget: spent ${stop.value:.4f} of ${stop.limit:.4f}"
                endings.record_run_stop(conn, session_id=claim.session_id, reason=reason)
    if not ended:
        return TurnOutcome.fenced
    transcript.cache_for(engine=rt.engine, settings=rt.settings).forget(claim.session_id)
    logger.info(
        "session %s ended %s (%s) at turn %s",
        claim.session_id,
        outcome.status.value,
        outcome.value,
        claim.turn_no,
    )
    if rt.tracer is not None:
        rt.tracer.session_ended(session_id=claim.session_id)
    rt.count_endings([claim.session_id])
    return TurnOutcome.ended


def _retry_later(rt: Runtime, claim: claims.Claim, exc: TransientError, retries: int) -> NoReturn:
    # The server's own retry delay wins; otherwise back off exponentially.
    delay_s = exc.delay_s if exc.delay_s is not None else backoff_s(rt, retries)
    with rt.engine.begin() as conn:
        claims.release_turn(
            conn,
            claim=claim,
            counted=exc.counts,
            retry_at=rt.clock() + timedelta(seconds=delay_s),
        )
    # A wait for the budget's holds is the budget working, not a fault to alert on.
    logger.log(
        logging.INFO if isinstance(exc, BudgetHeld) else logging.WARNING,
        "turn %s/%s: %s; retrying in %.1fs",
        claim.session_id,
        claim.turn_no,
        exc,
        delay_s,
    )
    raise TransientError(str(exc), delay_s=delay_s, counts=exc.counts) from exc
