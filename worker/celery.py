"""The Celery app, its tasks and signals: ``celery -A worker worker -Q sessions,verify``.

``celery -A worker`` finds :data:`app` here (Celery looks for ``worker.celery`` when the
package itself has no app). This is the only module of the core that imports Celery: the
turn loop, the store and the fleet's threads are plain Python, and the tasks below are thin
adapters around them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from celery import Celery, bootsteps, current_app, shared_task, signals
from celery.concurrency.prefork import TaskPool as PreforkPool
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from worker.agent.turn import run_turn
from worker.errors import NotMigrated, TransientError
from worker.fleet import collector, redis_transport, sampler
from worker.fleet.broker import RedisBrokerProbe, own_queue
from worker.fleet.dispatch import TURN_TASK, VERIFY_TASK, CeleryDispatcher
from worker.fleet.identity import process_owner
from worker.fleet.intake import Intake
from worker.fleet.outage import Outage
from worker.fleet.reconciler import ReconcilerThread
from worker.fleet.runtime import Runtime
from worker.settings import QUEUES, SESSIONS_QUEUE, VERIFY_QUEUE, Settings, describe_invalid
from worker.store.engine import connection_lost, database_problem, make_engine, pool_sizes
from worker.store.fleet import fleet_id
from worker.store.roles import can_reconcile

if TYPE_CHECKING:
    from worker.fleet.tracing import Tracing

__all__ = ["SwarmCelery", "app", "celery_config", "create_app"]

logger = logging.getLogger(__name__)


def celery_config(settings: Settings, *, fleet: str | None = None) -> dict[str, Any]:
    """Celery settings derived from Swarm's; ``fleet`` names the fleet's keys on Redis."""
    transport: dict[str, Any] = {}
    if settings.is_embedded:
        transport["polling_interval"] = 0.05
    elif settings.is_redis_broker:
        if settings.broker_url.startswith("redis://"):
            # A worker that loses Redis reconnects instead of stopping.
            redis_transport.install()
        # A message unacknowledged this long is delivered again; the reconciler usually
        # re-dispatches long before, so this only bounds how late a duplicate can be.
        transport["visibility_timeout"] = 3600
        if fleet:
            # Every key (queues, unacked messages, events, remote control) under the
            # fleet's prefix: fleets sharing one Redis database never see each other's tasks.
            transport["global_keyprefix"] = f"swarm:{fleet}:"
    return {
        "broker_url": settings.broker_url,
        "broker_transport_options": transport,
        "broker_connection_retry_on_startup": True,
        "task_ignore_result": True,
        "result_backend": None,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_default_queue": SESSIONS_QUEUE,
        "task_routes": {TURN_TASK: {"queue": SESSIONS_QUEUE}, VERIFY_TASK: {"queue": VERIFY_QUEUE}},
        # Off unless asked: Flower enables the workers' task events itself while it runs.
        "worker_send_task_events": settings.task_events,
        "task_send_sent_event": settings.task_events,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
    }


class SwarmCelery(Celery):  # type: ignore[misc]
    """A Celery app that carries Swarm's settings and, lazily, the process runtime."""

    def __init__(self, settings: Settings | None = None) -> None:
        # The verify task lives with the verifier, which imports the core, never the reverse.
        super().__init__("swarm", include=["verifier.tasks"])
        self._given_settings = settings
        self._runtime_lock = threading.Lock()
        self._runtime: Runtime | None = None
        #: Tasks this process runs at once, once a worker has said (sizes the engine's pool).
        self.concurrency: int | None = None
        #: The CPU clock of a task, once a worker has said which pool runs them.
        self.cpu_clock: Callable[[], float] = time.thread_time
        #: This worker's own queue of its sessions' next turns, if it consumes one
        #: (:func:`_take_own_queue`), and whether the fleet has it on record yet.
        self.own_queue: str | None = None
        self.own_queue_recorded = False
        # Read the environment when the app is first configured, not at import time.
        self.add_defaults(lambda: celery_config(self.settings, fleet=self.fleet))
        self.steps["worker"].add(ReconcilerStep)

    @cached_property
    def settings(self) -> Settings:
        """The settings given to the factory, or those of the environment.

        Raises:
            SystemExit: the environment's settings do not validate (one line, no traceback).
        """
        try:
            return self._given_settings or Settings()
        except ValidationError as exc:
            raise SystemExit(f"error: {describe_invalid(exc)}") from None

    @cached_property
    def fleet(self) -> str | None:
        """The fleet's identity: ``SWARM_FLEET``, else the id its database holds.

        Raises:
            SystemExit: the database cannot be reached, does not exist or holds no fleet
                yet (one line, no traceback).
        """
        if self.settings.fleet or self.settings.is_embedded:
            return self.settings.fleet
        # An engine of its own, closed at once: a process that only sends tasks (the
        # scheduler, Flower) keeps no connection for it.
        engine = make_engine(self.settings)
        where = engine.url.render_as_string(hide_password=True)
        not_migrated = (
            f"error: database {where} holds no Swarm schema yet: run `python -m scheduler migrate`"
        )
        try:
            return fleet_id(engine)
        except NotMigrated:
            raise SystemExit(not_migrated) from None
        except OperationalError as exc:
            line, _ = database_problem(exc, self.settings.database_url)
            raise SystemExit(f"error: {line}") from None
        except ProgrammingError as exc:
            detail = " ".join(str(exc.orig).split())
            raise SystemExit(f"error: cannot read the fleet's id from {where}: {detail}") from None
        finally:
            engine.dispose()

    @property
    def runtime(self) -> Runtime:
        """This process's runtime, built on first use."""
        with self._runtime_lock:
            if self._runtime is None:
                size, overflow = pool_sizes(self.settings, self.concurrency)
                logger.info(
                    "database pool: %d connections, %d more when busy, for %s threads",
                    size,
                    overflow,
                    self.concurrency or "unknown",
                )
                self._runtime = Runtime(
                    settings=self.settings,
                    engine=make_engine(self.settings, threads=self.concurrency),
                    dispatcher=CeleryDispatcher(self, own_queue=self.next_turns_queue),
                    cpu_clock=self.cpu_clock,
                )
            return self._runtime

    def next_turns_queue(self) -> str | None:
        """Where this process sends its sessions' next turns: its own queue, once the fleet
        has it on record and while this worker takes work; else (None) the shared one."""
        if self.own_queue is None or not self.own_queue_recorded or self.intake.paused:
            return None
        return self.own_queue

    @cached_property
    def intake(self) -> Intake:
        """This worker's consumption of its queues, stopped while a reason holds."""
        return Intake(self.control)

    @cached_property
    def outage(self) -> Outage:
        """Stops this worker taking work while its database cannot be reached."""
        return Outage(self.intake, self.runtime.engine)


class ReconcilerStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Runs the reconciler beside every worker, for as long as the worker runs."""

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.thread: ReconcilerThread | None = None
        _fit_to_pool(worker)
        _take_own_queue(worker)

    def start(self, worker: Any) -> None:
        app: SwarmCelery = worker.app
        try:
            allowed = can_reconcile(app.runtime.engine)
        except Exception:  # the database may be restarting: reconcile, each pass retries
            allowed = True
        if not allowed:
            # The verify role may not; the session workers' reconcilers cover verifications.
            logger.info("this worker's database role cannot reconcile; no reconciler here")
            return
        app.intake.bind(worker.hostname, list(app.amqp.queues.consume_from))
        probe = broker_probe(app)
        if probe is not None and app.own_queue is not None:
            app.own_queue_recorded = probe.register()
        self.thread = ReconcilerThread(
            app.runtime,
            app.settings.reconcile_interval_s,
            probe=probe,
            intake=app.intake,
        )
        self.thread.start()

    def stop(self, worker: Any) -> None:
        # The turns still running send their next turns to the shared queue: this worker
        # takes no more work, and its own queue is handed back as it signs off.
        worker.app.own_queue_recorded = False
        if self.thread is not None:
            self.thread.stop()


#: Broker connections a green worker may open beyond one per slot (its consumer, events).
GREEN_SPARE_CONNECTIONS = 10


def _prefork(worker: Any) -> bool:
    """Whether the worker runs its tasks in forked children (Celery's prefork pool)."""
    return isinstance(worker.pool_cls, type) and issubclass(worker.pool_cls, PreforkPool)


def _fit_to_pool(worker: Any) -> None:
    """Size what the worker's tasks share to its pool, before anything builds the runtime.

    The database pool is sized to the tasks that share it (a prefork child runs one at a
    time). A green pool (``-P gevent``) reads its queue ahead of its slots, may hold a
    broker connection per slot, and its turns measure their CPU by greenlet: they all run
    on one thread. Celery's gevent pool gives way to :mod:`worker.fleet.green_pool`, which
    frees each task's greenlet as the task ends.
    """
    app: SwarmCelery = worker.app
    app.concurrency = 1 if _prefork(worker) else worker.concurrency
    if getattr(worker.pool_cls, "is_green", False):
        # A green pool's consumer blocks on a message it has no slot for, and that message
        # waits a whole turn while another worker may have a slot free: reserve no more
        # than the slots (the transport looks again as soon as one frees).
        app.conf.worker_disable_prefetch = True
        if app.settings.is_redis_broker:
            # Every greenlet acks its own message and sends the next on the broker's
            # connection pool (kombu's default holds 10): past that an ack fails, the
            # consumer reconnects and every message in flight is delivered again.
            options = app.conf.broker_transport_options
            needed = worker.concurrency + GREEN_SPARE_CONNECTIONS
            options["max_connections"] = max(options.get("max_connections") or 0, needed)
        # Imported here: only a worker on a green pool loads greenlet.
        from celery.concurrency.gevent import TaskPool as GeventPool

        from worker.fleet.green_pool import TaskPool as GreenPool
        from worker.fleet.greenlets import GreenletCpu

        app.cpu_clock = GreenletCpu()
        if worker.pool_cls is GeventPool:
            # Each task's greenlet freed as it ends, not left to the collector.
            worker.pool_cls = GreenPool
            # gevent records who spawned each greenlet and where (ten frames of stack),
            # for its debugging views of the greenlet tree, which a worker never shows: at
            # 5,000 turns in flight that is 3 MiB a process, and a third of each spawn's
            # cost (measured with tracemalloc: 22.6 against 19.6 MiB for 5,000 greenlets).
            import gevent

            gevent.config.track_greenlet_tree = False


def _take_own_queue(worker: Any) -> None:
    """Consume a queue of this process's own, for its sessions' next turns, when it runs
    its turns itself (not a prefork pool) off a Redis broker and ``session_affinity`` is on.

    A turn then finds its session's history in this process's cache: its claim reads only
    the last turn's events, and the history is held by one process of the host, not by
    each. The fleet hands the queue back to the shared one once this worker is gone
    (:mod:`worker.fleet.broker`).
    """
    app: SwarmCelery = worker.app
    if (
        not app.settings.session_affinity
        or not app.settings.is_redis_broker
        or _prefork(worker)
        or SESSIONS_QUEUE not in app.amqp.queues.consume_from
    ):
        return
    app.own_queue = own_queue(process_owner())
    app.amqp.queues.select_add(app.own_queue)


def broker_probe(app: SwarmCelery) -> RedisBrokerProbe | None:
    """What tells the reconciler which messages the broker still holds, for a Redis broker."""
    if not app.settings.is_redis_broker:
        return None
    return RedisBrokerProbe(
        app.settings.broker_url,
        prefix=f"swarm:{app.fleet}:" if app.fleet else "",
        queues=QUEUES,
        owner=app.runtime.owner,
        # A live worker beats every pass; a saturated one may miss a few.
        silence_s=max(6 * app.settings.reconcile_interval_s, 30.0),
        beat_s=app.settings.reconcile_interval_s,
        own_queue=app.own_queue,
    )


def create_app(settings: Settings | None = None) -> SwarmCelery:
    """Build the Celery app; without ``settings`` they come from ``SWARM_*`` on first use."""
    return SwarmCelery(settings)


app = create_app()


@shared_task(name=TURN_TASK, bind=True, max_retries=None)  # type: ignore[untyped-decorator]
def turn(self: Any, session_id: int, turn_no: int, retries: int = 0) -> str:
    """Run one turn of one session; transient model errors come back as a retry.

    ``retries`` counts the retries that used up the turn's allowance (a wait for the
    fleet's limiter does not), so it is passed along rather than taken from Celery.
    """
    rt = self.app.runtime
    try:
        try:
            return run_turn(rt=rt, session_id=session_id, turn_no=turn_no, retries=retries).value
        except PoolTimeout:
            # The warning says it all: a retry's traceback of the pool's wait (dozens of
            # frames, formatted by Celery) cost a saturated worker a tenth of its CPU.
            raise _pool_wait(rt, session_id, turn_no) from None
        except DBAPIError as exc:
            if not connection_lost(exc):
                raise
            if rt.observer is not None:
                rt.observer.after_turn(outcome="retried")
            raise database_lost(self, f"turn {session_id}/{turn_no}", exc) from exc
    except TransientError as exc:
        kwargs = {
            "session_id": session_id,
            "turn_no": turn_no,
            "retries": retries + (1 if exc.counts else 0),
        }
        raise self.retry(args=(), kwargs=kwargs, countdown=exc.delay_s, exc=exc) from None


def _pool_wait(rt: Runtime, session_id: int, turn_no: int) -> TransientError:
    """A turn that waited too long for a database connection: retried, not an error.

    A claim is a turn's first use of the database, and its commit waits on however long
    it takes (:func:`worker.agent.turn._connect_patiently`): a turn that gives up here
    holds no lease, or one it took before a later read gave up. It is retried once such
    a lease has lapsed, and the wait does not use up its retries: the worker is only busy.
    """
    delay_s = rt.settings.lease_ttl_s
    logger.warning(
        "turn %s/%s: no database connection free within %.0fs; retrying in %.1fs",
        session_id,
        turn_no,
        rt.settings.db_pool_timeout_s,
        delay_s,
    )
    if rt.observer is not None:
        rt.observer.after_turn(outcome="retried")
    return TransientError("database pool exhausted", delay_s=delay_s, counts=False)


def database_lost(task: Any, what: str, exc: DBAPIError) -> TransientError:
    """A task that could not reach the database: sent again at once, not an error.

    A restarted server or a cut link ended its connection; the task wrote nothing it
    did not commit. This worker stops taking work until the database answers again
    (:mod:`worker.fleet.outage`), and the task goes back to the queue at once for a worker
    that can reach it. If it had claimed its lease, the new holder takes over once that
    lapses, as for a dead worker. The retry does not use up the turn's allowance.
    """
    app: SwarmCelery = task.app
    logger.warning("%s: database unreachable (%s); sent again", what, str(exc.orig).strip())
    if task.request.hostname:
        app.outage.report(worker=task.request.hostname, queues=list(app.amqp.queues.consume_from))
    return TransientError("database unreachable", delay_s=0.0, counts=False)


# Resource sampling, through Celery's signals: one sampler per process that runs tasks.
_worker_pid: int | None = None
# This process's traces, when an OTLP endpoint is set.
_tracing: Tracing | None = None


def _session_of(args: Any, kwargs: Any) -> int | None:
    value = args[0] if args else (kwargs or {}).get("session_id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _start_sampler(celery_app: SwarmCelery) -> None:
    # The process is about to run tasks: what it loaded so far lives as long as it does.
    collector.settle()
    sampler.start_sampler(
        engine=celery_app.runtime.engine,
        settings=celery_app.settings,
        queues=celery_app.amqp.queues.consume_from,
    )
    _start_metrics(celery_app)
    _start_tracing(celery_app)


def _start_metrics(celery_app: SwarmCelery) -> None:
    """Serve this process's Prometheus metrics, when ``SWARM_METRICS_PORT`` is set."""
    settings = celery_app.settings
    if settings.metrics_port is None:
        return
    # Imported here: a worker without the endpoint never loads prometheus_client.
    from worker.fleet.metrics import Metrics

    rt = celery_app.runtime
    metrics = Metrics(rt.engine)
    try:
        metrics.serve(settings.metrics_port, settings.metrics_addr)
    except OSError as exc:  # the port is taken (another worker on this host)
        logger.warning("no metrics endpoint on port %d: %s", settings.metrics_port, exc)
        return
    rt.observer = metrics


def _start_tracing(celery_app: SwarmCelery) -> None:
    """Send this process's spans to OpenTelemetry's OTLP endpoint, when one is set."""
    global _tracing
    endpoint = celery_app.settings.traces_endpoint
    if endpoint is None or _tracing is not None:
        return
    # Imported here: a worker without an endpoint never loads OpenTelemetry.
    from worker.fleet.tracing import start_tracing

    rt = celery_app.runtime
    try:
        fleet = fleet_id(rt.engine)
    except Exception:  # the database may be restarting: the broker's name for it will do
        logger.warning("no fleet id for the traces; using the fleet's name", exc_info=True)
        fleet = celery_app.settings.fleet or ""
    _tracing = start_tracing(endpoint=endpoint, engine=rt.engine, prices=rt.prices, fleet=fleet)
    rt.tracer = _tracing


def _stop_tracing() -> None:
    global _tracing
    if _tracing is not None:
        _tracing.shutdown()
        _tracing = None


@signals.task_prerun.connect  # type: ignore[untyped-decorator]
def _before_task(args: Any = None, kwargs: Any = None, **_: Any) -> None:
    if (session_id := _session_of(args, kwargs)) is not None:
        sampler.task_started(session_id)


@signals.task_postrun.connect  # type: ignore[untyped-decorator]
def _after_task(args: Any = None, kwargs: Any = None, **_: Any) -> None:
    if (session_id := _session_of(args, kwargs)) is not None:
        sampler.task_ended(session_id)


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def _after_worker_init(**_: Any) -> None:
    global _worker_pid
    _worker_pid = os.getpid()


@signals.worker_process_init.connect  # type: ignore[untyped-decorator]
def _after_process_init(**_: Any) -> None:
    celery_app = current_app._get_current_object()
    if _worker_pid is not None and os.getpid() != _worker_pid:
        # A forked child must not share the pooled connections it inherited from the worker.
        celery_app.runtime.engine.dispose(close=False)
    _start_sampler(celery_app)


@signals.worker_ready.connect  # type: ignore[untyped-decorator]
def _after_worker_ready(sender: Any = None, **_: Any) -> None:
    # Under prefork the main process only dispatches; its children sample themselves.
    if sender is not None and not isinstance(sender.pool, PreforkPool):
        _start_sampler(sender.app)


@signals.worker_process_shutdown.connect  # type: ignore[untyped-decorator]
@signals.worker_shutdown.connect  # type: ignore[untyped-decorator]
def _before_shutdown(**_: Any) -> None:
    sampler.stop_sampler()
    _stop_tracing()


#: Celery's loggers of each task's arrival ("received") and end ("succeeded in").
_TASK_LINE_LOGGERS = ("celery.worker.strategy", "celery.app.trace")


@signals.after_setup_logger.connect  # type: ignore[untyped-decorator]
def _quiet_task_lines(**_: Any) -> None:
    """Celery logs two lines per task at INFO; a fleet runs hundreds of tasks a second.

    Unless ``SWARM_TASK_LOG`` asks for them, they are left out: failures still come at
    ERROR, and Swarm logs its own retries, endings and verdicts. Flower and a session's
    transcript show every task.
    """
    if not app.settings.task_log:
        for name in _TASK_LINE_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
