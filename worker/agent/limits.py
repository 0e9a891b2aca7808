"""Guards against runaway sessions: spend limits, the run budget and the loop detector.

Spend limits are checked when a turn is claimed, before the model is called, so a turn
already in flight is always paid for and recorded. A run's budget is held call by call: each
call's worst-case cost is reserved before it is sent (:mod:`worker.agent.budget`), unless
the run turned reservations off, when the budget is checked here like the others. The loop
detector reads the session's event log: the first time it sees a loop the agent gets one
corrective message, the second time the session is stopped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from worker.agent.events import Event, ModelOutput, Nudge, NudgeReason, ToolFailure, ToolResult
from worker.config import RunConfig
from worker.errors import LimitExceeded
from worker.models.base import calls_of
from worker.notices import LOOP_HINT
from worker.states import Outcome
from worker.store.tables import usage


@dataclass(frozen=True)
class Spend:
    """What a session and its run have spent so far."""

    session_tokens: int
    session_cost_usd: float
    run_cost_usd: float
    run_turns: int

    @property
    def mean_turn_cost_usd(self) -> float:
        """The run's average cost of one turn (0 before its first turn)."""
        return self.run_cost_usd / self.run_turns if self.run_turns else 0.0


def spend(conn: Connection, *, session_id: int, run_id: int | None) -> Spend:
    """Read the session's and the run's spending from the usage rows (the run's only with
    ``run_id``: a run whose calls are reserved keeps its spending on its row)."""
    tokens = (
        usage.c.prompt_tokens
        + usage.c.output_tokens
        + usage.c.thoughts_tokens
        + usage.c.tool_use_tokens
    )
    mine = conn.execute(
        select(
            func.coalesce(func.sum(tokens), 0), func.coalesce(func.sum(usage.c.cost_usd), 0.0)
        ).where(usage.c.session_id == session_id)
    ).one()
    if run_id is None:
        return Spend(int(mine[0]), float(mine[1]), 0.0, 0)
    total = conn.execute(
        select(func.coalesce(func.sum(usage.c.cost_usd), 0.0), func.count()).where(
            usage.c.run_id == run_id
        )
    ).one()
    return Spend(int(mine[0]), float(mine[1]), float(total[0]), int(total[1]))


def check_turns(config: RunConfig, turn_no: int) -> None:
    """Refuse turn ``turn_no`` when the session has had its turns.

    Raises:
        LimitExceeded: its outcome is ``max_turns``.
    """
    if turn_no >= config.max_turns:
        raise LimitExceeded(Outcome.max_turns, value=turn_no, limit=config.max_turns)


def check_spend(config: RunConfig, spent: Spend, budget_usd: float | None) -> None:
    """Refuse the next turn when it would pass a limit.

    Raises:
        LimitExceeded: its outcome is ``budget`` (the run's), ``max_tokens`` or ``max_cost``
            (the session's).
    """
    # The next turn will cost about what an average turn has cost so far. A run whose calls
    # are reserved is held to its budget call by call instead (``worker.store.reservations``).
    if (
        budget_usd is not None
        and config.reserve == "off"
        and spent.run_cost_usd + spent.mean_turn_cost_usd >= budget_usd
    ):
        raise LimitExceeded(Outcome.budget, value=spent.run_cost_usd, limit=budget_usd)
    if config.max_tokens is not None and spent.session_tokens >= config.max_tokens:
        raise LimitExceeded(Outcome.max_tokens, value=spent.session_tokens, limit=config.max_tokens)
    if config.max_cost_usd is not None and spent.session_cost_usd >= config.max_cost_usd:
        raise LimitExceeded(
            Outcome.max_cost, value=spent.session_cost_usd, limit=config.max_cost_usd
        )


@dataclass
class _Since:
    """The session's turns since the last loop warning, as much as the detector reads.

    One scan of the log a turn: the calls are unpacked only for the last turns compared,
    so a long session costs a few comparisons per event, not a copy of every call.
    """

    outputs: list[ModelOutput] = field(default_factory=list)
    """Each turn's model output."""
    idle: int = 0
    """Turns since the last one that wrote the artifact or handed it off."""
    error_streak: list[str] = field(default_factory=list)
    """Kinds of the tool errors since the last successful tool call."""
    warnings: int = 0
    """Loop warnings given so far."""

    def last_calls(self, turns: int) -> list[list[tuple[str, Any]]]:
        """The calls of the last ``turns`` turns as ``(name, args)``, compared as they are."""
        return [[(c.name, c.args) for c in calls_of(o.content)] for o in self.outputs[-turns:]]


def _since_warning(log: Iterable[Event]) -> _Since:
    since = _Since()
    for event in log:
        if isinstance(event, ModelOutput):
            since.outputs.append(event)
            since.idle += 1
        elif isinstance(event, ToolResult):
            since.error_streak = []
            if event.progress:
                since.idle = 0
        elif isinstance(event, ToolFailure):
            since.error_streak.append(event.error_kind)
        elif isinstance(event, Nudge) and event.reason is NudgeReason.loop:
            since = _Since(warnings=since.warnings + 1)
    return since


@dataclass(frozen=True)
class Loop:
    """A loop the detector found: its kind and what the agent should be told."""

    kind: str
    message: str


def find_loop(log: Iterable[Event], config: RunConfig) -> tuple[Loop | None, int]:
    """Look for a loop since the last warning; returns it and the warnings given so far."""
    since = _since_warning(log)
    last = since.last_calls(config.loop_repeat)
    if len(last) == config.loop_repeat and last[0] and all(c == last[0] for c in last):
        call = last[0][0][0]
        return Loop(
            "repeat",
            (
                f"You made the same call ({call} with the same arguments) {len(last)} times in "
                "a row and got the same answer each time. Do not repeat it. " + _NEXT_STEP
            ),
        ), since.warnings
    if len(since.error_streak) >= config.loop_errors:
        kinds = ", ".join(sorted(set(since.error_streak)))
        return Loop(
            "errors",
            (
                f"Your last {len(since.error_streak)} tool calls failed ({kinds}). Read the hint "
                "in each error and change the call instead of trying it again. " + _NEXT_STEP
            ),
        ), since.warnings
    idle = since.idle
    if idle >= config.loop_idle_turns:
        return Loop(
            "no_progress", (f"{idle} turns have passed without writing the artifact. " + _NEXT_STEP)
        ), since.warnings
    return None, since.warnings


_NEXT_STEP = (
    f'{LOOP_HINT} with manage_artifact(action="create", name, content) if it '
    "does not exist yet; otherwise edit it with the current version, or call handoff if it "
    "is done."
)
