"""Prometheus metrics of a worker process, served on ``SWARM_METRICS_PORT``.

Defined once here, on a registry of their own, and fed by two hooks: the turn loop calls
:meth:`Metrics.after_turn` through the runtime's observer, and the sessions gauge and the
RSS are read when Prometheus scrapes. Labels are outcomes, phases, token kinds, models
and statuses, never ids.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import psutil
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func, select

from worker.states import RunStatus
from worker.store.tables import runs, sessions

logger = logging.getLogger(__name__)

#: Bucket bounds of the phase histograms, in seconds: a millisecond up to a long model call.
PHASE_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
)  # fmt: skip
#: Bucket bounds of the CPU-per-turn histogram, in seconds.
CPU_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1)


class _Sessions(Collector):
    """Sessions of the runs still pending or running, by status (read at scrape time)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "swarm_sessions", "Sessions of unfinished runs, by status", labels=["status"]
        )
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(
                    select(sessions.c.status, func.count())
                    .join(runs, runs.c.id == sessions.c.run_id)
                    .where(runs.c.status.in_([RunStatus.pending.value, RunStatus.running.value]))
                    .group_by(sessions.c.status)
                ).all()
        except Exception:  # the database may be restarting: scrape the rest
            logger.warning("could not count sessions for the metrics", exc_info=True)
            return
        for status, n in rows:
            family.add_metric([str(status)], int(n))
        yield family


class Metrics:
    """The metrics of one worker process.

    Args:
        engine: Where the sessions gauge counts sessions (None: no such gauge).
    """

    def __init__(self, engine: Engine | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns = Counter("swarm_turns", "Turn tasks by outcome", ["outcome"], registry=r)
        self.phases = Histogram(
            "swarm_turn_phase_seconds",
            "Time of each phase of a committed turn (overhead: all but the model call)",
            ["phase"],
            buckets=PHASE_BUCKETS_S,
            registry=r,
        )
        self.cpu = Histogram(
            "swarm_turn_cpu_seconds",
            "Worker CPU of a committed turn (its thread, claim to commit)",
            buckets=CPU_BUCKETS_S,
            registry=r,
        )
        self.tokens = Counter(
            "swarm_tokens", "Tokens of committed turns by kind", ["model", "kind"], registry=r
        )
        self.cost = Counter("swarm_cost_usd", "Dollars of committed turns", ["model"], registry=r)
        process = psutil.Process()
        rss = Gauge("swarm_worker_rss_bytes", "Resident memory of this process", registry=r)
        rss.set_function(lambda: float(process.memory_info().rss))
        if engine is not None:
            r.register(_Sessions(engine))

    def after_turn(self, *, outcome: str) -> None:
        """Count one turn task by how it ended (skipped, fenced, committed, ended)."""
        self.turns.labels(outcome=outcome).inc()

    def after_commit(
        self,
        *,
        model: str,
        phases_ms: Mapping[str, float | None],
        cpu_ms: float,
        tokens: Mapping[str, int],
        cost_usd: float,
    ) -> None:
        """Observe a committed turn: its phases, CPU, tokens by kind and dollars."""
        for phase, ms in phases_ms.items():
            if ms is not None:
                self.phases.labels(phase=phase).observe(ms / 1000)
        self.cpu.observe(cpu_ms / 1000)
        for kind, n in tokens.items():
            self.tokens.labels(model=model, kind=kind).inc(n)
        self.cost.labels(model=model).inc(cost_usd)

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``port`` (0: a free one) in a daemon thread; returns the port."""
        server: Any
        server, _ = start_http_server(port, addr=addr, registry=self.registry)
        bound = int(server.server_port)
        logger.info("metrics on http://%s:%d/metrics", addr, bound)
        return bound
