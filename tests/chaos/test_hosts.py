"""Scenarios 11 to 15: a fleet of three hosts loses one, has one cut off for 30 s from
Redis and PostgreSQL, from PostgreSQL alone or from Redis alone, or has one on a slow,
lossy link.

Each host is a network namespace of its own with its own address and host name, its
worker pid 1 in its own PID namespace like the others' (:mod:`tests.chaos.hosts`). Settings
are the defaults, verification is static (:mod:`tests.chaos.bed_runs`). While a 5x10 run is
spread over the three hosts, the first is lost whole (every process SIGKILLed), cut off
and then healed, or slowed down. The other hosts take a lost or cut-off host's sessions
over; its turns that come back late are fenced.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest
from sqlalchemy import Engine, select

from tests.chaos.bed_runs import (
    HOSTS,
    Baselines,
    assert_healed,
    make_bed,
    report_fault,
    run_on_bed,
)
from tests.chaos.checker import check_run
from tests.chaos.hosts import Host, TestBed
from worker.settings import Settings
from worker.store.tables import samples

pytestmark = [pytest.mark.chaos, pytest.mark.services, pytest.mark.slow, pytest.mark.timeout(600)]

#: How long a cut lasts.
PARTITION_S = 30.0
#: A slow, lossy link: each way's delay (200 ms more on every round trip) and the share
#: of the packets the host sends that are lost.
SLOW_ONE_WAY_MS = 100.0
SLOW_LOSS_PCT = 5.0

_BASELINES = Baselines()

#: What the cut-off host's worker logs when it meets the cut: statements that fail (a
#: turn sent back, its consumers cancelled), or a broker it cannot reach.
_FELT = {
    "both": ("database unreachable", "could not record this worker's heartbeat"),
    "postgresql": ("database unreachable",),
    "redis": ("could not record this worker's heartbeat",),
}


@pytest.fixture(scope="module")
def bed(pg_url: str, redis_url: str) -> Iterator[TestBed]:
    """Three hosts on a bridge, reaching the test PostgreSQL and Redis through it."""
    yield from make_bed(pg_url, redis_url)


def _sampled(engine: Engine) -> set[tuple[str, int]]:
    """The (host, pid) pairs the workers' samplers recorded."""
    with engine.connect() as conn:
        rows = conn.execute(select(samples.c.host, samples.c.pid).distinct()).all()
    return {(r.host, r.pid) for r in rows}


def _cut_off(*urls: str) -> Callable[[Host], None]:
    """A fault: the host cut off from the services at ``urls`` (all, if none) for 30 s."""
    ports = [p for p in (urlsplit(u).port for u in urls) if p is not None]

    def fault(host: Host) -> None:
        host.partition(ports)
        time.sleep(PARTITION_S)
        host.heal()

    return fault


def test_a_lost_host_s_sessions_resume_on_the_others(
    bed: TestBed,
    settings: Settings,
    engine: Engine,
    enqueue: Callable[..., int],
    chaos_report: Callable[..., None],
) -> None:
    # Given the wall time of a 5x10 run over three hosts, with default settings
    base_s = _BASELINES.get(bed, settings, engine, enqueue)
    killed: list[int] = []
    # When one host is lost whole mid-run: every one of its processes SIGKILLed at once
    outcome = run_on_bed(bed, settings, engine, enqueue, fault=lambda h: killed.append(h.kill()))
    # Then the other hosts took its sessions over within seconds, nothing lost or doubled
    figures = check_run(engine, outcome.run_id)
    recovery = report_fault(chaos_report, figures, outcome, base_s, processes_killed=killed)
    assert_healed(figures, outcome, recovery, base_s)
    assert killed and killed[0] >= 2  # ``unshare`` and the worker
    # and every host's samples are its own, although their workers' pids are the same
    named = {(o.rpartition(":")[0], int(o.rpartition(":")[2])) for o in outcome.owners}
    assert named <= _sampled(engine)
    assert len(named) == HOSTS


@pytest.mark.parametrize(
    "cut",
    ["both", "postgresql", "redis"],
    ids=["from-both", "from-postgresql-only", "from-redis-only"],
)
def test_a_cut_off_host_is_taken_over_and_fenced_when_it_comes_back(
    cut: str,
    bed: TestBed,
    settings: Settings,
    engine: Engine,
    enqueue: Callable[..., int],
    chaos_report: Callable[..., None],
) -> None:
    # Given the wall time of a 5x10 run over three hosts, with default settings
    base_s = _BASELINES.get(bed, settings, engine, enqueue)
    urls = {"both": (), "postgresql": (settings.database_url,), "redis": (settings.broker_url,)}
    # When one host is cut off mid-run for 30 s from Redis and PostgreSQL, or from one of
    # them, then healed
    outcome = run_on_bed(bed, settings, engine, enqueue, fault=_cut_off(*urls[cut]))
    # Then the other hosts took its sessions over within seconds, and what the healed
    # host's turns tried to commit afterwards was fenced: nothing lost or doubled
    figures = check_run(engine, outcome.run_id)
    recovery = report_fault(
        chaos_report,
        figures,
        outcome,
        base_s,
        cut_off_from=cut,
        partition_s=PARTITION_S,
        fenced_turns_after_heal=outcome.fenced_turns,
    )
    assert_healed(figures, outcome, recovery, base_s)
    # and the cut was felt where it was made
    felt = [line for line in outcome.logs[0] if any(m in line for m in _FELT[cut])]
    assert felt, outcome.logs[0][-30:]


def test_a_slow_lossy_link_slows_its_host_and_loses_nothing(
    bed: TestBed,
    settings: Settings,
    engine: Engine,
    enqueue: Callable[..., int],
    chaos_report: Callable[..., None],
) -> None:
    # Given the wall time of a 5x10 run over three hosts, with default settings
    base_s = _BASELINES.get(bed, settings, engine, enqueue)
    victim = bed.hosts[0]
    rtt_ms: list[float] = [victim.redis_rtt_ms(settings.broker_url)]

    def slow(host: Host) -> None:
        host.slow_link(SLOW_ONE_WAY_MS, SLOW_LOSS_PCT)
        rtt_ms.append(host.redis_rtt_ms(settings.broker_url))

    # When one host's link turns slow and lossy mid-run, until the run ends
    outcome = run_on_bed(bed, settings, engine, enqueue, fault=slow)
    # Then its sessions went on, slower, and nothing was lost or doubled
    figures = check_run(engine, outcome.run_id)
    recovery = report_fault(
        chaos_report,
        figures,
        outcome,
        base_s,
        one_way_delay_ms=SLOW_ONE_WAY_MS,
        loss_pct=SLOW_LOSS_PCT,
        redis_rtt_ms=[round(r, 1) for r in rtt_ms],
    )
    assert_healed(figures, outcome, recovery, base_s)
    # and the link was as slow as asked while the run went on, so that its host took no
    # work while the others had room for it
    assert rtt_ms[1] >= rtt_ms[0] + 2 * SLOW_ONE_WAY_MS * 0.9
    assert any("stops taking work: slow link" in line for line in outcome.logs[0])
