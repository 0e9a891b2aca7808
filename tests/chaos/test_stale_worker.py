"""Scenario 4: a stale worker loses its lease mid-turn, another commits, then it commits.

The stale worker is a runtime of its own (its own engine and connection pool) whose model
call blocks on an Event, so the takeover happens at a known point. Its lease runs out for
real (a one-second TTL), and the turn is taken over either by a second runtime in this
process or by a real Celery worker, whose reconciler finds the expired lease. Every row in
the database is fingerprinted before the stale worker is let go and after it returned, and
every statement it runs from then on is counted with its rowcount.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, select, text

from tests.chaos.checker import check_run
from tests.chaos.conftest import FAST_RECOVERY_ENV
from tests.chaos.progress import wait_until
from tests.conftest import RecordingDispatcher, WorkerProcess
from tests.factories import ScriptedModel, call, make_run, model_turn, page
from worker.agent.turn import run_turn
from worker.fleet.runtime import Runtime
from worker.models.base import ModelRequest, ModelTurn
from worker.settings import Settings
from worker.states import TERMINAL
from worker.store.claims import lease_lapsed
from worker.store.engine import make_engine
from worker.store.tables import artifacts, blobs, metadata, sessions

pytestmark = [pytest.mark.chaos, pytest.mark.services]

#: The stale worker's lease: short, so that it runs out while its model call blocks.
STALE_LEASE_TTL_S = 1.0
#: The stale worker never renews its lease within the test: a frozen or partitioned
#: process, whose renewals stop with everything else.
STALE_RENEW_S = 3600.0
#: Longest wait for the takeover.
TAKEOVER_TIMEOUT_S = 60.0
#: Tables a live worker process writes to on its own (its resource sampler).
UNRELATED = {"samples"}


class BlockingModel:
    """Returns its turn only once ``release`` is set; ``entered`` tells it was called."""

    def __init__(self, turn: ModelTurn) -> None:
        self.turn = turn
        self.entered = threading.Event()
        self.release = threading.Event()

    def generate(self, request: ModelRequest) -> ModelTurn:
        self.entered.set()
        assert self.release.wait(TAKEOVER_TIMEOUT_S), "the test never released the model"
        return self.turn


@dataclass(eq=False)  # hashable by identity: SQLAlchemy keeps listeners in a dict
class WriteCounter:
    """Counts the statements an engine runs, and the rows they change, while ``on``."""

    on: bool = False
    statements: list[tuple[str, int]] = field(default_factory=list)

    def __call__(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if self.on:
            self.statements.append((statement.split(None, 1)[0].upper(), cursor.rowcount))

    @property
    def rows_written(self) -> int:
        return sum(
            max(n, 0) for verb, n in self.statements if verb in ("INSERT", "UPDATE", "DELETE")
        )


@dataclass
class StaleWorker:
    """A runtime whose turn blocks in its model call, running in a thread."""

    rt: Runtime
    model: BlockingModel
    counter: WriteCounter
    outcome: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start(self, session_id: int, turn_no: int) -> None:
        def run() -> None:
            self.outcome.append(
                run_turn(rt=self.rt, session_id=session_id, turn_no=turn_no, model=self.model).value
            )

        self.thread = threading.Thread(target=run, name="stale-worker")
        self.thread.start()
        assert self.model.entered.wait(TAKEOVER_TIMEOUT_S)

    def finish(self) -> str:
        """Let the model call return and wait for the turn's outcome."""
        assert self.thread is not None
        self.counter.on = True
        self.model.release.set()
        self.thread.join(TAKEOVER_TIMEOUT_S)
        return self.outcome[0]


@pytest.fixture
def stale_worker(settings: Settings) -> Iterator[Callable[[ModelTurn], StaleWorker]]:
    """Factory of stale workers with a one-second lease and an engine of their own."""
    made: list[StaleWorker] = []

    def make(turn: ModelTurn) -> StaleWorker:
        short = settings.model_copy(
            update={
                "lease_ttl_s": STALE_LEASE_TTL_S,
                "lease_renew_s": STALE_RENEW_S,
                "gemini_timeout_s": 0.5,
                "limiter_wait_s": 0.2,
            }
        )
        engine = make_engine(short)
        counter = WriteCounter()
        event.listen(engine, "after_cursor_execute", counter)
        rt = Runtime(
            settings=short, engine=engine, dispatcher=RecordingDispatcher(), owner="stale-worker"
        )
        made.append(StaleWorker(rt, BlockingModel(turn), counter))
        return made[-1]

    yield make
    for worker in made:
        worker.model.release.set()
        if worker.thread is not None:
            worker.thread.join(TAKEOVER_TIMEOUT_S)
        worker.rt.engine.dispose()


def fingerprint(engine: Engine) -> dict[str, tuple[int, str]]:
    """Row count and an md5 of the contents of every table the turn loop writes."""
    out: dict[str, tuple[int, str]] = {}
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            if table.name in UNRELATED:
                continue
            count, digest = conn.execute(
                text(
                    "SELECT count(*), "
                    "coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') "
                    f"FROM {table.name} t"
                )
            ).one()
            out[table.name] = (int(count), str(digest))
    return out


def _lease(engine: Engine, session_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            select(
                sessions.c.lease_owner,
                sessions.c.lease_epoch,
                sessions.c.next_turn,
                sessions.c.status,
                lease_lapsed(func.now()).label("expired"),
            ).where(sessions.c.id == session_id)
        ).one()


def test_a_stale_runtime_commits_nothing_after_another_committed(
    runtime: Runtime,
    stale_worker: Callable[[ModelTurn], StaleWorker],
    chaos_report: Callable[..., None],
) -> None:
    # Given a session at turn 1 with an artifact and a plan, and a stale worker A blocked
    # in the model call of turn 1, about to edit the artifact and replace the plan
    run_id, (sid,) = make_run(runtime.engine, max_turns=2)
    first = ScriptedModel(
        [
            model_turn(
                call("manage_artifact", action="create", name="dashboard.html", content=page("v1")),
                call("plan_manage", action="set", items=["draw", "check"]),
            )
        ]
    )
    assert run_turn(rt=runtime, session_id=sid, turn_no=0, model=first).value == "committed"
    a = stale_worker(
        model_turn(
            call(
                "manage_artifact",
                action="edit",
                name="dashboard.html",
                content=page("from A"),
                expected_version=1,
            ),
            call("plan_manage", action="set", items=["from A"]),
        )
    )
    a.start(sid, 1)
    held = _lease(runtime.engine, sid)
    # When its lease runs out, worker B (its own runtime and engine) commits turn 1
    wait_until(
        "the stale lease's expiry",
        lambda: bool(_lease(runtime.engine, sid).expired),
        TAKEOVER_TIMEOUT_S,
    )
    b_engine = make_engine(runtime.settings)
    rt_b = Runtime(
        settings=runtime.settings,
        engine=b_engine,
        dispatcher=RecordingDispatcher(),
        owner="fresh-worker",
    )
    b_turn = model_turn(
        call(
            "manage_artifact",
            action="edit",
            name="dashboard.html",
            content=page("from B"),
            expected_version=1,
        )
    )
    b_outcome = run_turn(rt=rt_b, session_id=sid, turn_no=1, model=ScriptedModel([b_turn]))
    taken = _lease(runtime.engine, sid)
    before = fingerprint(runtime.engine)
    # and then A's model call returns and A commits
    a_outcome = a.finish()
    after = fingerprint(runtime.engine)
    # Then A was fenced: not one row changed, B's turn stands
    ended = run_turn(rt=rt_b, session_id=sid, turn_no=2, model=ScriptedModel([b_turn])).value
    b_engine.dispose()
    figures = check_run(runtime.engine, run_id)
    changed = sorted(t for t in before if before[t] != after[t])
    chaos_report(
        figures,
        stale_outcome=a_outcome,
        fresh_outcome=b_outcome.value,
        epochs=f"{held.lease_epoch}->{taken.lease_epoch}",
        stale_statements=len(a.counter.statements),
        stale_rows_written=a.counter.rows_written,
        tables_changed=changed,
    )
    assert (held.lease_owner, held.lease_epoch) == ("stale-worker", 2)
    assert (b_outcome.value, a_outcome, ended) == ("committed", "fenced", "ended")
    assert taken.lease_epoch == held.lease_epoch + 1 and taken.next_turn == 2
    assert a.counter.rows_written == 0 and changed == []
    with runtime.engine.connect() as conn:
        content = conn.execute(
            select(blobs.c.content).join(artifacts, artifacts.c.sha256 == blobs.c.sha256)
        ).scalar_one()
    assert "from B" in content and "from A" not in content
    assert figures.clean, figures


def test_a_stale_runtime_commits_nothing_after_a_real_worker_took_over(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    stale_worker: Callable[[ModelTurn], StaleWorker],
    chaos_report: Callable[..., None],
) -> None:
    # Given a stale worker A (this process) blocked in the model call of turn 0
    run_id, (sid,) = make_run(engine, max_turns=3, sim_latency_ms=20)
    a = stale_worker(
        model_turn(
            call("manage_artifact", action="create", name="dashboard.html", content=page("from A")),
            call("plan_manage", action="set", items=["from A"]),
        )
    )
    a.start(sid, 0)
    held = _lease(engine, sid)
    # When a real worker process's reconciler finds A's lease expired and runs the session
    # (sim model) to its end
    worker = start_worker(concurrency=2, **FAST_RECOVERY_ENV)
    wait_until(
        "the real worker's takeover",
        lambda: _lease(engine, sid).status in {s.value for s in TERMINAL},
        TAKEOVER_TIMEOUT_S,
    )
    taken = _lease(engine, sid)
    # (the worker is stopped first: it counts an ending on its wave and run after the
    # ending's own commit, and from here on only A may write)
    worker.stop()
    before = fingerprint(engine)
    # and then A's model call returns and A commits
    a_outcome = a.finish()
    after = fingerprint(engine)
    # Then A was fenced and changed nothing
    figures = check_run(engine, run_id)
    changed = sorted(t for t in before if before[t] != after[t])
    redispatched = sum("reconciler re-dispatching" in line for line in worker.log)
    chaos_report(
        figures,
        stale_outcome=a_outcome,
        worker_pid=worker.proc and worker.proc.pid,
        epochs=f"{held.lease_epoch}->{taken.lease_epoch}",
        reconciler_redispatch_passes=redispatched,
        stale_statements=len(a.counter.statements),
        stale_rows_written=a.counter.rows_written,
        tables_changed=changed,
    )
    assert held.lease_owner == "stale-worker" and taken.lease_epoch > held.lease_epoch
    assert redispatched >= 1
    assert a_outcome == "fenced"
    assert a.counter.rows_written == 0 and changed == []
    assert figures.clean, figures
    assert worker.errors() == []
