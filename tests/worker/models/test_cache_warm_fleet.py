"""Cache-warm dispatch end to end: a real worker, the real SDK, the fake API's implicit cache."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine, select

from ops.fake_gemini import FakeGemini
from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import duplicates, enqueue
from worker.settings import Settings
from worker.store.tables import usage
from worker.store.warmup import FirstTurns, first_turns

pytestmark = [pytest.mark.services, pytest.mark.slow]

MODEL = "gemini-3-flash-preview"
#: Seconds any whole run in these tests may take.
RUN_TIMEOUT_S = 120
#: Latency of the fake's answers: long enough for a wave's first turns to overlap.
LATENCY_MS = 800


def _run(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    fake_gemini: Callable[..., FakeGemini],
    mode: str,
) -> tuple[FirstTurns, list[int]]:
    """A 1x4 run with ``--cache-warm mode`` on a fresh fake API and its own worker."""
    fake = fake_gemini(latency_ms=LATENCY_MS)
    worker = start_worker(SWARM_GEMINI_BASE_URL=fake.url, GEMINI_API_KEY="k")
    run_id = enqueue(settings, "--wave", "1x4", "--cache-warm", mode, model=MODEL, seed=5)
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    worker.stop()
    assert status.sessions.succeeded == 4
    assert worker.errors() == []
    with engine.connect() as conn:
        cached = conn.execute(
            select(usage.c.cached_tokens)
            .where(usage.c.run_id == run_id, usage.c.turn_no == 0)
            .order_by(usage.c.session_id)
        ).scalars()
        return first_turns(conn, run_id=run_id), list(cached)


def test_a_warmed_wave_pays_one_full_first_turn_and_a_cold_one_pays_four(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given a 1x4 run dispatched warm, then the same run (same seed) dispatched cold
    warm, warm_cached = _run(settings, engine, start_worker, fake_gemini, "on")
    cold, cold_cached = _run(settings, engine, start_worker, fake_gemini, "off")
    # Then warm, only the warming first turn paid in full; the others were served the
    # shared prefix from the implicit cache
    assert warm_cached[0] == 0 and all(c > 0 for c in warm_cached[1:]), warm_cached
    # and cold, the four first turns arrived together and none was served from cache
    assert cold_cached == [0, 0, 0, 0]
    # and the same prompts cost less warm
    assert warm.prompt_tokens == cold.prompt_tokens
    assert warm.cost_usd < cold.cost_usd
    assert (warm.cache_share or 0) > 0.5
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}
