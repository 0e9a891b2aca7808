"""``sim``: an offline model that plays a scripted agent, deterministically.

The session's task gives the agent (a :class:`~worker.models.sim.player.Player` for the
session's persona and instance); this model gives it what a real one has around it: a
latency, thought signatures, and usage reported the way Gemini reports it, with the
repeated prefix counted as cached.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import time
from dataclasses import replace
from typing import Any

from worker.config import DEFAULT_JITTER
from worker.models.base import Content, ModelRequest, ModelTurn, TokenUsage, calls_of
from worker.models.sim.player import Move, Player

__all__ = ["CHARS_PER_TOKEN", "MIN_CACHED_TOKENS", "SimModel"]

#: Smallest prefix, in tokens, that the provider caches implicitly.
MIN_CACHED_TOKENS = 1024
#: Approximate characters per token.
CHARS_PER_TOKEN = 4


class SimModel:
    """The model of one session, playing ``player``.

    Args:
        player: The scripted agent it plays.
        seed: The run's seed.
        index: The session's index within the run.
        latency_ms: Mean wall time of one call.
        jitter: Share by which one call's wall time varies either way of the mean.
    """

    def __init__(
        self,
        player: Player,
        *,
        seed: int,
        index: int,
        latency_ms: int,
        jitter: float = DEFAULT_JITTER,
    ) -> None:
        self.player = player
        self.seed = seed
        self.index = index
        self.latency_ms = latency_ms
        self.jitter = jitter

    def generate(self, request: ModelRequest) -> ModelTurn:
        """Wait the configured latency, then decide and return the next turn.

        The turn is decided after the wait, as a real model's reply arrives at its end: a
        call in flight holds nothing of its answer (at a thousand calls, their pages would
        be some 20 MB). The wait draws from a stream of its own, so the turn decided and
        its usage do not depend on whether there is one.
        """
        if self.latency_ms:
            time.sleep(self._latency_s(len(request.history)))
        turn = sum(1 for c in request.history if c["role"] == "model")
        move = self.player.play(request)
        content = self._content(move, turn)
        usage = self._usage(
            request, content, random.Random(f"usage:{self.seed}:{self.index}:{turn}")
        )
        limit = request.max_output_tokens
        if limit is not None and usage.output_tokens + usage.thoughts_tokens > limit:
            return _cut_off(move.text, usage, limit)
        return ModelTurn(content=content, calls=calls_of(content), text=move.text, usage=usage)

    def _latency_s(self, history: int) -> float:
        # A stream of its own, dropped before the wait: a generator's state is 2.5 KB, which
        # a thousand calls in flight would hold for nothing.
        wait = random.Random(f"latency:{self.seed}:{self.index}:{history}")
        return self.latency_ms * wait.uniform(1 - self.jitter, 1 + self.jitter) / 1000

    def _content(self, move: Move, turn: int) -> Content:
        parts: list[dict[str, Any]] = [{"text": move.text}] if move.text else []
        for i, call in enumerate(move.calls):
            part: dict[str, Any] = {
                "function_call": {"id": f"call-{turn}-{i}", "name": call.name, "args": call.args}
            }
            if i == 0:
                # Like Gemini 3, only the first function call of a turn carries a signature.
                digest = hashlib.sha256(f"{self.seed}:{self.index}:{turn}".encode()).digest()
                part["thought_signature"] = base64.b64encode(digest).decode()
            parts.append(part)
        return {"role": "model", "parts": parts}

    def _usage(self, request: ModelRequest, content: Content, rng: random.Random) -> TokenUsage:
        prefix = (
            len(request.system_instruction)
            + len(json.dumps([t.parameters for t in request.tools]))
            + sum(len(t.description) for t in request.tools)
        )
        sizes = [len(json.dumps(c)) for c in request.history]
        prompt = (prefix + sum(sizes)) // CHARS_PER_TOKEN
        # The previous call sent everything before the last model turn, so that is cached;
        # the model turn itself came back as its output and was never a prompt.
        last_model = max(
            (i for i, c in enumerate(request.history) if c["role"] == "model"), default=-1
        )
        seen = (prefix + sum(sizes[: max(last_model, 0)])) // CHARS_PER_TOKEN
        first_call_of_run = self.index == 0 and last_model < 0
        cached = 0 if first_call_of_run or seen < MIN_CACHED_TOKENS else seen
        output = len(json.dumps(content)) // CHARS_PER_TOKEN
        return TokenUsage(
            prompt_tokens=prompt,
            cached_tokens=min(cached, prompt),
            output_tokens=output,
            thoughts_tokens=rng.randint(64, 512),
        )


def _cut_off(text: str, usage: TokenUsage, limit: int) -> ModelTurn:
    """The turn as the API cuts it off at ``limit`` output tokens, thinking included.

    Thinking comes first; the answer that does not fit after it ends mid-way as text, with
    no function call (the API's finish reason ``MAX_TOKENS``).
    """
    thoughts = min(usage.thoughts_tokens, limit)
    output = limit - thoughts
    kept = text[: output * CHARS_PER_TOKEN] or "[cut off at the output token limit]"
    content: Content = {"role": "model", "parts": [{"text": kept}]}
    return ModelTurn(
        content=content,
        calls=(),
        text=kept,
        usage=replace(usage, output_tokens=output, thoughts_tokens=thoughts),
        finish_reason="MAX_TOKENS",
    )
