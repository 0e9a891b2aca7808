# ruff: noqa: T201
"""Worker CPU per turn as a session grows: turn 50 against turn 5, from the timing ledger.

One session runs ``--turns`` turns in this process (no Celery, a scripted model that
rewrites a whole ~15 KB page every turn, so the history grows by a page a turn) on a
scratch PostgreSQL database. Each turn's CPU (``turn_timings.cpu_ms``: claim, history
rebuild, tools, commit; the scripted model costs nothing) is printed for a few turns, with
the mean over all turns and the ratio of turn 50 to turn 5, also from the turns around each
(the goal is at most 1.2: a turn reads and decodes only the events new since the turn
before). Then the statements and round trips to PostgreSQL per turn, counted on the engine
(a round trip is a statement, or a BEGIN or COMMIT the driver sends; a claim runs in
autocommit, with neither), and the transactions. Last, the bytes of history the process
keeps per session between turns (``Settings.history_cache_mb``).

    python -m ops.bench.turn_growth
    python -m ops.bench.turn_growth --turns 50 --repeat 3
"""

from __future__ import annotations

import statistics
from typing import Any

import click
from sqlalchemy import Connection, Engine, event, select

from ops.bench.wave_memory import DEFAULT_PG_ADMIN_URL, scratch_database
from worker.agent.transcript import cache_for
from worker.agent.turn import run_turn
from worker.config import RunConfig
from worker.fleet.runtime import Runtime
from worker.models.base import ModelRequest, ModelTurn, TokenUsage, calls_of
from worker.runs.create import create_run
from worker.settings import Settings
from worker.store.due import Dispatch
from worker.store.engine import make_engine, utcnow
from worker.store.tables import sessions, turn_timings
from worker.store.waves import take_outbox
from worker.tasks.dashboard.pages import render_dashboard

#: Turns whose CPU is printed.
SHOWN = (1, 5, 10, 25, 50)


class StatementCount:
    """Counts what a turn asks of PostgreSQL, from the engine's events."""

    def __init__(self, engine: Engine) -> None:
        self.statements = self.round_trips = self.transactions = 0
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "begin", self._begin)
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "rollback", self._commit)

    def take(self) -> tuple[int, int, int]:
        """Statements, round trips and transactions since the last take."""
        counts = (self.statements, self.round_trips, self.transactions)
        self.statements = self.round_trips = self.transactions = 0
        return counts

    def _statement(self, *_: Any) -> None:
        self.statements += 1
        self.round_trips += 1

    def _begin(self, conn: Connection) -> None:
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            self.round_trips += 1  # the driver sends BEGIN before the first statement
            self.transactions += 1

    def _commit(self, conn: Connection) -> None:
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            self.round_trips += 1


class _Drop:
    def send(self, item: Dispatch, *, delay_s: float = 0.0) -> None:
        """The next turn runs in this process: nothing to send."""


class _Rewriter:
    """A model that writes the whole page again every turn, each time a little different."""

    def __init__(self) -> None:
        self.page = render_dashboard(7).html
        self.turn = 0

    def generate(self, request: ModelRequest) -> ModelTurn:
        self.turn += 1
        action = "create" if self.turn == 1 else "edit"
        args: dict[str, object] = {
            "action": action,
            "name": "dashboard.html",
            "content": self.page.replace("</body>", f"<!-- rev {self.turn} --></body>"),
        }
        if action == "edit":
            args["expected_version"] = self.turn - 1
        content = {
            "role": "model",
            "parts": [{"function_call": {"name": "manage_artifact", "args": args}}],
        }
        return ModelTurn(
            content=content,
            calls=calls_of(content),
            text="",
            usage=TokenUsage(
                prompt_tokens=1000, cached_tokens=0, output_tokens=4000, thoughts_tokens=0
            ),
        )


def one_session(
    rt: Runtime,
    turns: int,
    seed: int,
    counted: list[tuple[int, int, int]] | None = None,
    ledger: list[tuple[int, int]] | None = None,
) -> dict[int, float]:
    """Run one session's turns in process; returns CPU ms by turn number, and adds each
    turn's statements, round trips and transactions to ``counted``, and its ledger's
    statements and round trips to ``ledger``."""
    config = RunConfig(waves="1x1", seed=seed, max_turns=turns + 5, loop_idle_turns=turns + 5)
    with rt.engine.begin() as conn:
        run_id = create_run(conn, model="sim", config=config, now=utcnow())
        take_outbox(conn, now=utcnow(), run_id=run_id)
        sid = conn.execute(select(sessions.c.id).where(sessions.c.run_id == run_id)).scalar_one()
    model = _Rewriter()
    count = StatementCount(rt.engine)
    for n in range(turns):
        count.take()
        outcome = run_turn(rt=rt, session_id=sid, turn_no=n, model=model)
        if outcome.value != "committed":
            raise click.ClickException(f"turn {n} {outcome.value}")
        if counted is not None:
            counted.append(count.take())
    with rt.engine.connect() as conn:
        rows = conn.execute(
            select(
                turn_timings.c.turn_no,
                turn_timings.c.cpu_ms,
                turn_timings.c.statements,
                turn_timings.c.round_trips,
            ).where(turn_timings.c.session_id == sid)
        ).all()
    if ledger is not None:
        ledger.extend((int(r.statements), int(r.round_trips)) for r in rows)
    return {int(r.turn_no) + 1: float(r.cpu_ms) for r in rows}


def _near(runs: list[dict[int, float]], n: int, turns: int) -> float:
    """Median CPU of turns ``n - 2`` to ``n + 2`` (those the sessions had) of every session."""
    return statistics.median(
        r[k] for r in runs for k in range(max(n - 2, 1), min(n + 2, turns) + 1)
    )


@click.command(context_settings={"show_default": True})
@click.option("--turns", type=click.IntRange(min=5), default=50)
@click.option("--repeat", type=click.IntRange(min=1), default=3, help="Sessions run.")
@click.option("--pg-admin-url", default=DEFAULT_PG_ADMIN_URL)
def main(turns: int, repeat: int, pg_admin_url: str) -> None:
    """Print worker CPU per turn at turns 1, 5, 10, 25 and 50, and turn 50 / turn 5."""
    with scratch_database(pg_admin_url) as url:
        settings = Settings(database_url=url)
        engine = make_engine(settings)
        # The leases renewed on the turn's engine: every statement is counted.
        rt = Runtime(settings=settings, engine=engine, dispatcher=_Drop(), lease_engine=engine)
        counted: list[tuple[int, int, int]] = []
        ledger: list[tuple[int, int]] = []
        try:
            runs = [one_session(rt, turns, seed, counted, ledger) for seed in range(repeat)]
            kept = cache_for(engine=engine, settings=settings)
        finally:
            engine.dispose()
    last = min(turns, 50)
    shown = sorted({n for n in SHOWN if n <= turns} | {last})
    medians = {n: statistics.median(r[n] for r in runs) for n in shown}
    print(f"worker CPU per turn, median of {repeat} session(s) of {turns} turns:")
    for n, ms in medians.items():
        print(f"  turn {n:>3}: {ms:6.2f} ms")
    mean_ms = statistics.median(statistics.mean(r.values()) for r in runs)
    print(f"  mean of all turns: {mean_ms:.2f} ms")
    print(f"turn {last} / turn 5 = {medians[last] / medians[5]:.2f}x")
    # One turn's CPU on a shared machine is noisy: the turns around each say it steadier.
    late, early = _near(runs, last, turns), _near(runs, 5, turns)
    print(f"  turns near {last} / near 5 = {late / early:.2f}x ({late:.2f} / {early:.2f} ms)")
    statements, round_trips, transactions = (
        statistics.median(c[i] for c in counted) for i in range(3)
    )
    print(
        f"per turn (median): {statements:g} statements, {round_trips:g} round trips to "
        f"PostgreSQL, {transactions:g} transaction(s) besides the claim"
    )
    print(
        f"  the timing ledger's (median): {statistics.median(c[0] for c in ledger):g} "
        f"statements and {statistics.median(c[1] for c in ledger):g} round trips before "
        "the commit statement"
    )
    if len(kept):
        print(f"history kept: {kept.size_bytes / len(kept) / 1024:.0f} KiB per session")


if __name__ == "__main__":
    main()
