"""Factories for runs, sessions and scripted model turns."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, insert, select

from worker.agent.prompt import Prefix, brief_message, build_prefix
from worker.agent.tools import ToolContext
from worker.config import RunConfig
from worker.fleet.runtime import Runtime
from worker.models.base import Content, FunctionCall, ModelRequest, ModelTurn, TokenUsage, calls_of
from worker.models.sim.model import SimModel
from worker.profiles import get_profile
from worker.runs.create import create_run
from worker.settings import Settings
from worker.store.engine import utcnow
from worker.store.tables import (
    artifact_versions,
    artifacts,
    events,
    sessions,
    usage,
    verifications,
)
from worker.store.waves import take_outbox
from worker.tasks.base import Instance
from worker.tasks.dashboard.brief import make_brief
from worker.tasks.dashboard.sim import DashboardPlayer
from worker.tasks.dashboard.task import task as dashboard

_seeds = itertools.count(1000)


def make_run(
    engine: Engine,
    *,
    waves: str = "1x1",
    model: str = "sim",
    start: bool = True,
    budget_usd: float | None = None,
    profile: str = "candidate",
    **config: Any,
) -> tuple[int, list[int]]:
    """Create a run (wave 1 started unless ``start`` is false); returns (run id, session ids)."""
    config.setdefault("seed", next(_seeds))
    config.setdefault("sim_latency_ms", 0)
    task = config.pop("task", "dashboard")
    with engine.begin() as conn:
        run_id = create_run(
            conn,
            model=model,
            config=RunConfig(waves=waves, **config),
            now=utcnow(),
            budget_usd=budget_usd,
            profile=profile,
            task=task,
        )
        if start:
            take_outbox(conn, now=utcnow(), run_id=run_id)
        ids = (
            conn.execute(
                select(sessions.c.id).where(sessions.c.run_id == run_id).order_by(sessions.c.index)
            )
            .scalars()
            .all()
        )
    return run_id, list(ids)


def enqueue(settings: Settings, *args: str, model: str = "sim", seed: int = 7) -> int:
    """Run ``scheduler enqueue`` in-process against the test services; returns the run id."""
    from click.testing import CliRunner

    from scheduler.cli import cli

    result = CliRunner().invoke(
        cli,
        [
            "--database-url",
            settings.database_url,
            "--broker-url",
            settings.broker_url,
            "enqueue",
            "--model",
            model,
            "--seed",
            str(seed),
            *args,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return int(result.output.split()[1].rstrip(":"))


def dashboard_brief(seed: int, index: int) -> Content:
    """The first user message of a dashboard session with card ``index`` of ``seed``."""
    return brief_message(dashboard, Instance(f"card-{index}", make_brief(index, seed=seed)))


def dashboard_prefix(profile: str = "candidate") -> Prefix:
    """The prompt prefix of a dashboard run under ``profile``."""
    return build_prefix(dashboard, get_profile(profile))


def dashboard_sim(
    *,
    seed: int,
    index: int = 0,
    persona: str = "diligent",
    latency_ms: int = 0,
    design_seed: int | None = None,
    title: str = "Cache Fleet Pulse",
    flaw: str | None = None,
    metrics: tuple[str, ...] = ("cpu load", "p99 latency", "error rate"),
    **model: Any,
) -> SimModel:
    """The sim model playing a dashboard author."""
    player = DashboardPlayer(
        seed=seed,
        index=index,
        persona=persona,
        design_seed=seed if design_seed is None else design_seed,
        title=title,
        flaw=flaw,
        metrics=metrics,
    )
    return SimModel(player, seed=seed, index=index, latency_ms=latency_ms, **model)


def tool_context(
    conn: Any, session_id: int, turn_no: int, *, profile: str = "candidate", **brief: Any
) -> ToolContext:
    """The tools' context for a dashboard session's turn, as the turn loop makes it."""
    return ToolContext(
        conn=conn,
        session_id=session_id,
        turn_no=turn_no,
        profile=get_profile(profile),
        now=utcnow(),
        task=dashboard,
        instance=Instance("card-0", {**make_brief(0), **brief}),
    )


def call(tool: str, /, **args: Any) -> FunctionCall:
    """A function call, as a model would send it."""
    return FunctionCall(tool, args)


def model_turn(*calls: FunctionCall, text: str = "") -> ModelTurn:
    """A model turn with the given calls (or only text)."""
    parts: list[dict[str, Any]] = [
        {"function_call": {"id": f"c{i}", "name": c.name, "args": c.args}}
        for i, c in enumerate(calls)
    ]
    if text:
        parts.insert(0, {"text": text})
    content: Content = {"role": "model", "parts": parts}
    return ModelTurn(
        content=content,
        calls=calls_of(content),
        text=text,
        usage=TokenUsage(
            prompt_tokens=1000, cached_tokens=800, output_tokens=50, thoughts_tokens=20
        ),
    )


class ScriptedModel:
    """Plays back model turns in order; ``before`` runs inside each call (to inject faults)."""

    def __init__(
        self, turns: Iterable[ModelTurn], before: Callable[[ModelRequest], None] | None = None
    ) -> None:
        self.turns = list(turns)
        self.requests: list[ModelRequest] = []
        self.before = before

    def generate(self, request: ModelRequest) -> ModelTurn:
        self.requests.append(request)
        if self.before is not None:
            self.before(request)
        return self.turns[len(self.requests) - 1]


def page(marker: str = "v1") -> str:
    """A small page that passes the static checks."""
    return (
        '<!doctype html><html><body><main id="dash"><section id="gauges">'
        f'<h2>{marker}</h2></section></main><canvas id="c"></canvas><script>'
        "const ctx=document.getElementById('c').getContext('2d');let t=0;"
        "function f(){t++;ctx.fillRect(t%100,10,5,5);requestAnimationFrame(f);}"
        "requestAnimationFrame(f);</script></body></html>"
    )


def run_script(rt: Runtime, session_id: int, turns: list[ModelTurn]) -> list[str]:
    """Run turns 0..n-1 of a session in-process with a scripted model; returns outcomes."""
    from worker.agent.turn import run_turn

    model = ScriptedModel(turns)
    return [
        run_turn(rt=rt, session_id=session_id, turn_no=n, model=model).value
        for n in range(len(turns))
    ]


def duplicates(engine: Engine) -> dict[str, int]:
    """Rows that would betray a turn committed twice (all must be 0)."""
    with engine.connect() as conn:
        usage_per_turn = (
            select(usage.c.session_id, usage.c.turn_no)
            .group_by(usage.c.session_id, usage.c.turn_no)
            .having(func.count() > 1)
        )
        model_events = (
            select(events.c.session_id, events.c.turn_no)
            .where(events.c.kind == "model")
            .group_by(events.c.session_id, events.c.turn_no)
            .having(func.count() > 1)
        )
        # version numbers of each artifact must be exactly first..n, the first 0 or 1
        gaps = (
            select(artifacts.c.id)
            .join(artifact_versions)
            .group_by(artifacts.c.id)
            .having(
                func.count()
                != func.max(artifact_versions.c.version) - func.min(artifact_versions.c.version) + 1
            )
        )
        return {
            name: len(conn.execute(q).all())
            for name, q in (
                ("usage", usage_per_turn),
                ("model_events", model_events),
                ("version_gaps", gaps),
            )
        }


def passed_verdicts(engine: Engine, run_id: int, column: str) -> list[Any]:
    """``column`` of every passing verdict of a run's sessions."""
    with engine.connect() as conn:
        return list(
            conn.execute(
                select(verifications.c[column])
                .join(sessions)
                .where(sessions.c.run_id == run_id, verifications.c.passed)
            ).scalars()
        )


def add_usage(
    engine: Engine,
    *,
    run_id: int,
    session_id: int,
    model: str = "sim",
    cost_usd: float = 0.001,
    created_at: datetime | None = None,
    turn_no: int = 0,
    prompt_tokens: int = 1000,
    cached_tokens: int = 0,
) -> None:
    """Record one model call of a session (its first turn unless told), as a commit would."""
    with engine.begin() as conn:
        conn.execute(
            insert(usage).values(
                session_id=session_id,
                run_id=run_id,
                turn_no=turn_no,
                model=model,
                prompt_tokens=prompt_tokens,
                cached_tokens=cached_tokens,
                output_tokens=100,
                thoughts_tokens=0,
                tool_use_tokens=0,
                cost_usd=cost_usd,
                price_date="2026-12-01",
                latency_ms=1,
                created_at=created_at or utcnow(),
            )
        )
