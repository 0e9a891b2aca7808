"""A prompt the API blocks is billed: its usage is recorded before the session ends."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from tests.factories import make_run
from tests.worker.models.replay import Replay, load
from worker.agent.turn import run_turn
from worker.errors import ModelFatal
from worker.fleet.runtime import Runtime
from worker.models.base import ModelRequest, TokenUsage
from worker.models.gemini.client import GeminiModel, make_client
from worker.models.limiter.base import LimitConfig, LocalLimiter
from worker.store.tables import sessions, usage

MODEL = "gemini-2.5-flash"


def _gemini(url: str) -> GeminiModel:
    client = make_client(api_key="replay-key", base_url=url, timeout_s=5.0)
    return GeminiModel(client=client, limiter=LocalLimiter(LimitConfig()), wait_s=0.0)


def test_the_refusal_carries_the_usage_the_api_reported() -> None:
    case = load("200_blocked_prompt")
    request = ModelRequest(
        model=MODEL,
        system_instruction="s",
        tools=(),
        history=({"role": "user", "parts": [{"text": "hi"}]},),
    )
    with Replay([(case.status, case.body)]) as replay, pytest.raises(ModelFatal) as refused:
        _gemini(replay.url).generate(request)
    assert "PROHIBITED_CONTENT" in str(refused.value)
    assert refused.value.usage == TokenUsage(prompt_tokens=4438)


@pytest.mark.services
def test_a_blocked_prompt_is_billed_and_its_session_ends(runtime: Runtime) -> None:
    # Given a session on a Gemini model, and the API answering its prompt with a block
    _, (sid,) = make_run(runtime.engine, model=MODEL)
    case = load("200_blocked_prompt")
    # When its first turn runs
    with Replay([(case.status, case.body)]) as replay:
        outcome = run_turn(rt=runtime, session_id=sid, turn_no=0, model=_gemini(replay.url))
    # Then the session ended in error, as before, and the prompt's tokens were billed
    assert outcome.value == "ended"
    with runtime.engine.connect() as conn:
        status, error = conn.execute(
            select(sessions.c.status, sessions.c.error).where(sessions.c.id == sid)
        ).one()
        billed = conn.execute(
            select(usage.c.turn_no, usage.c.prompt_tokens, usage.c.cost_usd).where(
                usage.c.session_id == sid
            )
        ).all()
    assert status == "error" and "PROHIBITED_CONTENT" in error
    # gemini-2.5-flash: 4,438 input tokens at $0.30 per million
    assert [(t, p) for t, p, _ in billed] == [(0, 4438)]
    assert billed[0][2] == pytest.approx(4438 * 0.30 / 1e6)
