"""OpenTelemetry traces of the fleet's sessions: a session is a trace, each turn a span.

Off unless OpenTelemetry's own variables name an OTLP endpoint
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``): then the Celery
app builds a :class:`Tracing` in every process that runs tasks and sets it as the runtime's
tracer. Without one this module is never imported, nor is OpenTelemetry, and the turn pays
a None check.

A session's turns are separate tasks, maybe on different workers, so no worker can hand
its trace to the next: the trace id and the id of the session's own span are derived from
the fleet's id and the session's, and every turn and verification names that span as its
remote parent. The session's span is sent when the session ends, from when it started, so
a receiver shows the whole tree::

    session 12                      swarm.cost_usd, swarm.session.outcome
    ├── turn 0                      swarm.run_id, swarm.session_id, swarm.turn_no
    │   ├── chat gemini-3-flash     gen_ai.* (tokens, finish reasons), swarm.cost_usd
    │   └── execute_tool plan_manage
    ├── turn 1 ...
    └── verify round 0              swarm.verification.result

Model calls follow OpenTelemetry's semantic conventions for generative AI: input tokens
are those billed as input (the prompt with its cached part, and tool-use prompts), output
tokens those billed as output (the answer and its thinking).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from sqlalchemy import Engine, func, select

from worker.agent.events import ToolFailure
from worker.models.base import FunctionCall, ModelRequest, ModelTurn
from worker.models.pricing import PriceTable
from worker.models.registry import GEMINI_PREFIX
from worker.store.engine import utcnow
from worker.store.tables import sessions, usage

__all__ = ["Tracing", "session_ids", "start_tracing"]

logger = logging.getLogger(__name__)

#: The instrumentation's name, as receivers show it.
TRACER_NAME = "swarm"
#: ``service.name`` of the spans, unless ``OTEL_SERVICE_NAME`` says otherwise.
DEFAULT_SERVICE_NAME = "swarm"
#: ``gen_ai.provider.name`` of the offline stand-in model.
SIM_PROVIDER = "swarm.sim"
#: ``gen_ai.provider.name`` of the Gemini API.
GEMINI_PROVIDER = "gcp.gemini"
#: What a verification returns when its verdict ended the session.
_ENDING_VERDICTS = frozenset({"succeeded", "failed"})

_T = TypeVar("_T")


def session_ids(fleet: str, session_id: int) -> tuple[int, int]:
    """The trace id of a session and the span id of the session's own span.

    Derived, so that every worker that runs one of its turns names the same parent.
    """
    digest = hashlib.sha256(f"swarm:{fleet}:session:{session_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


class _SessionIds(IdGenerator):
    """Random ids, except for a session's own span, whose ids are derived."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._forced = threading.local()

    @contextmanager
    def forced(self, ids: tuple[int, int]) -> Iterator[None]:
        """Give the span started in the block (on this thread) these trace and span ids."""
        self._forced.ids = ids
        try:
            yield
        finally:
            self._forced.ids = None

    def generate_trace_id(self) -> int:
        ids: tuple[int, int] | None = getattr(self._forced, "ids", None)
        return ids[0] if ids else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        ids: tuple[int, int] | None = getattr(self._forced, "ids", None)
        return ids[1] if ids else self._random.generate_span_id()


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


def provider_name(model: str) -> str:
    """``gen_ai.provider.name`` of a model the registry serves."""
    return GEMINI_PROVIDER if model.startswith(GEMINI_PREFIX) else SIM_PROVIDER


class Tracing:
    """The spans of one process's turns and verifications, batched to an exporter.

    Args:
        exporter: Where finished spans go (OTLP/HTTP in a worker).
        engine: Where a session's start, outcome and cost are read when it ends.
        prices: Prices of the model calls, for their cost.
        fleet: The fleet's id; with the session's id it names the session's trace.
    """

    def __init__(
        self, *, exporter: SpanExporter, engine: Engine, prices: PriceTable, fleet: str
    ) -> None:
        self.engine = engine
        self.prices = prices
        self.fleet = fleet
        self._ids = _SessionIds()
        resource = Resource.create()
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
        self.provider = TracerProvider(resource=resource, id_generator=self._ids)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self.provider.get_tracer(TRACER_NAME)

    def _session(self, session_id: int) -> Context:
        """A context whose span is the session's own (sent later, by another process)."""
        trace_id, span_id = session_ids(self.fleet, session_id)
        sampled = TraceFlags(TraceFlags.SAMPLED)
        parent = SpanContext(trace_id, span_id, is_remote=True, trace_flags=sampled)
        return trace.set_span_in_context(NonRecordingSpan(parent))

    @contextmanager
    def turn(self, *, session_id: int, run_id: int, turn_no: int) -> Iterator[None]:
        """The span of one turn, current while the block runs."""
        attributes = {
            "swarm.run_id": run_id,
            "swarm.session_id": session_id,
            "swarm.turn_no": turn_no,
        }
        with self._tracer.start_as_current_span(
            f"turn {turn_no}", context=self._session(session_id), attributes=attributes
        ):
            yield

    def model_call(
        self, request: ModelRequest, generate: Callable[[ModelRequest], ModelTurn]
    ) -> ModelTurn:
        """``generate(request)`` in a ``chat`` span; its cost goes on the turn's span too."""
        turn = trace.get_current_span()
        provider = provider_name(request.model)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,
            "gen_ai.request.model": request.model,
        }
        if request.max_output_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_output_tokens
        with self._tracer.start_as_current_span(
            f"chat {request.model}", kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            try:
                answer = generate(request)
            except Exception as exc:
                span.set_attribute("error.type", type(exc).__qualname__)
                raise
            used = answer.usage
            cost_usd = self.prices.cost_usd(request.model, used)
            span.set_attributes(
                {
                    "gen_ai.response.model": request.model,
                    "gen_ai.response.finish_reasons": [answer.finish_reason],
                    "gen_ai.usage.input_tokens": used.prompt_tokens + used.tool_use_tokens,
                    "gen_ai.usage.cache_read.input_tokens": used.cached_tokens,
                    "gen_ai.usage.output_tokens": used.output_tokens + used.thoughts_tokens,
                    "gen_ai.usage.reasoning.output_tokens": used.thoughts_tokens,
                    "swarm.cost_usd": cost_usd,
                }
            )
        turn.set_attribute("swarm.cost_usd", cost_usd)
        return answer

    def tool_call(self, call: FunctionCall, run: Callable[[FunctionCall], _T]) -> _T:
        """``run(call)`` in an ``execute_tool`` span; a call the tool refused is an error."""
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.type": "function",
        }
        if call.id:
            attributes["gen_ai.tool.call.id"] = call.id
        with self._tracer.start_as_current_span(
            f"execute_tool {call.name}", attributes=attributes
        ) as span:
            result = run(call)
            if isinstance(result, ToolFailure):
                span.set_attribute("error.type", result.error_kind)
                span.set_status(Status(StatusCode.ERROR, result.error_kind))
        return result

    def verification(self, *, session_id: int, round_no: int, judge: Callable[[], str]) -> str:
        """``judge()`` in a verification's span; a verdict that ends the session ends its trace."""
        attributes = {"swarm.session_id": session_id, "swarm.verification.round": round_no}
        with self._tracer.start_as_current_span(
            f"verify round {round_no}", context=self._session(session_id), attributes=attributes
        ) as span:
            result = judge()
            span.set_attribute("swarm.verification.result", result)
        if result in _ENDING_VERDICTS:
            self.session_ended(session_id=session_id)
        return result

    def session_ended(self, *, session_id: int) -> None:
        """Send the session's own span: from its start to its end, its outcome and cost."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(
                    sessions.c.run_id,
                    sessions.c.status,
                    sessions.c.outcome,
                    sessions.c.started_at,
                    sessions.c.finished_at,
                ).where(sessions.c.id == session_id)
            ).one_or_none()
            cost_usd, calls = conn.execute(
                select(func.coalesce(func.sum(usage.c.cost_usd), 0.0), func.count()).where(
                    usage.c.session_id == session_id
                )
            ).one()
        if row is None:
            return
        ended_at = row.finished_at or utcnow()
        started_at = row.started_at or ended_at
        attributes = {
            "swarm.run_id": row.run_id,
            "swarm.session_id": session_id,
            "swarm.session.status": row.status,
            "swarm.session.outcome": row.outcome or "",
            "swarm.cost_usd": float(cost_usd),
            "swarm.model_calls": int(calls),
            "gen_ai.conversation.id": str(session_id),
        }
        with self._ids.forced(session_ids(self.fleet, session_id)):
            span = self._tracer.start_span(
                f"session {session_id}",
                context=Context(),
                attributes=attributes,
                start_time=_ns(started_at),
            )
        span.end(end_time=_ns(ended_at))

    def shutdown(self) -> None:
        """Send the spans still batched, and stop."""
        self.provider.shutdown()


def start_tracing(*, endpoint: str, engine: Engine, prices: PriceTable, fleet: str) -> Tracing:
    """Tracing to an OTLP/HTTP ``endpoint`` (the whole URL, ``/v1/traces`` included).

    Headers, compression and timeouts come from OpenTelemetry's own variables.
    """
    logger.info("traces go to %s", endpoint)
    return Tracing(
        exporter=OTLPSpanExporter(endpoint=endpoint), engine=engine, prices=prices, fleet=fleet
    )
