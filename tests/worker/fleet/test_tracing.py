"""Traces: the spans of a turn, a model call and a tool call, as a process records them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from sqlalchemy import create_engine

from worker.agent.events import ToolFailure, ToolResult
from worker.fleet.tracing import Tracing, session_ids
from worker.models.base import FunctionCall, ModelRequest, ModelTurn, TokenUsage
from worker.models.pricing import PriceTable
from worker.settings import Settings

USAGE = TokenUsage(
    prompt_tokens=1200, cached_tokens=1000, output_tokens=300, thoughts_tokens=50, tool_use_tokens=7
)


@pytest.fixture
def spans() -> Iterator[tuple[Tracing, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tracing = Tracing(
        exporter=exporter,
        engine=create_engine("sqlite://"),
        prices=PriceTable.load(None),
        fleet="f1",
    )
    yield tracing, exporter
    tracing.shutdown()


def _finished(tracing: Tracing, exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    tracing.provider.force_flush()
    return {s.name: s for s in exporter.get_finished_spans()}


def _answer(calls: tuple[FunctionCall, ...] = ()) -> ModelTurn:
    return ModelTurn(content={"role": "model", "parts": []}, calls=calls, text="", usage=USAGE)


def test_a_session_has_one_trace_whichever_worker_names_it() -> None:
    # Given the ids two workers derive for the same session, and for others
    # Then they agree, and differ from another session's or another fleet's
    assert session_ids("f1", 7) == session_ids("f1", 7)
    assert session_ids("f1", 7) != session_ids("f1", 8)
    assert session_ids("f1", 7) != session_ids("f2", 7)
    trace_id, span_id = session_ids("f1", 7)
    assert 0 < trace_id < 2**128 and 0 < span_id < 2**64


def test_a_turn_span_holds_its_model_call_and_tool_calls(
    spans: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = spans
    request = ModelRequest(
        model="gemini-3-flash-preview",
        system_instruction="",
        tools=(),
        history=(),
        max_output_tokens=8192,
    )
    calls = (FunctionCall("plan_manage", {}, "c-0"), FunctionCall("handoff", {}, "c-1"))

    def run(call: FunctionCall) -> ToolResult | ToolFailure:
        if call.name == "handoff":
            return ToolFailure(call.name, call.id, "bad_args", {"error": "no"})
        return ToolResult(call.name, call.id, {"ok": True})

    # When a turn of session 7 calls the model and runs two tools, one refused
    with tracing.turn(session_id=7, run_id=3, turn_no=2):
        answer = tracing.model_call(request, lambda _: _answer(calls))
        results = [tracing.tool_call(call, run) for call in answer.calls]
    assert [type(r) for r in results] == [ToolResult, ToolFailure]
    found = _finished(tracing, exporter)

    # Then the turn is a child of the session's derived span
    turn = found["turn 2"]
    trace_id, session_span_id = session_ids("f1", 7)
    assert turn.context is not None and turn.parent is not None
    assert (turn.context.trace_id, turn.parent.span_id) == (trace_id, session_span_id)
    cost = PriceTable.load(None).cost_usd(request.model, USAGE)
    assert dict(turn.attributes or {}) == {
        "swarm.run_id": 3,
        "swarm.session_id": 7,
        "swarm.turn_no": 2,
        "swarm.cost_usd": pytest.approx(cost),
    }
    # And the model call follows the GenAI conventions, with tokens as billed
    chat = found["chat gemini-3-flash-preview"]
    assert chat.parent is not None and chat.parent.span_id == turn.context.span_id
    attrs: dict[str, Any] = dict(chat.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == attrs["gen_ai.system"] == "gcp.gemini"
    assert attrs["gen_ai.request.model"] == attrs["gen_ai.response.model"] == request.model
    assert attrs["gen_ai.request.max_tokens"] == 8192
    assert attrs["gen_ai.usage.input_tokens"] == 1207
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 1000
    assert attrs["gen_ai.usage.output_tokens"] == 350
    assert attrs["gen_ai.usage.reasoning.output_tokens"] == 50
    assert tuple(attrs["gen_ai.response.finish_reasons"]) == ("STOP",)
    assert attrs["swarm.cost_usd"] == pytest.approx(cost)
    # And each tool call is a span of the turn; the refused one is an error
    ok, refused = found["execute_tool plan_manage"], found["execute_tool handoff"]
    assert ok.parent is not None and ok.parent.span_id == turn.context.span_id
    assert dict(ok.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "plan_manage",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": "c-0",
    }
    assert ok.status.status_code is StatusCode.UNSET
    assert refused.status.status_code is StatusCode.ERROR
    assert (refused.attributes or {})["error.type"] == "bad_args"


def test_a_failed_model_call_is_an_error_span(
    spans: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = spans
    request = ModelRequest(model="sim", system_instruction="", tools=(), history=())

    def fail(_: ModelRequest) -> ModelTurn:
        raise TimeoutError("slow")

    # When the model call raises
    with (
        pytest.raises(TimeoutError),
        tracing.turn(session_id=1, run_id=1, turn_no=0),
    ):
        tracing.model_call(request, fail)
    # Then its span and the turn's say so
    found = _finished(tracing, exporter)
    assert found["chat sim"].status.status_code is StatusCode.ERROR
    assert (found["chat sim"].attributes or {})["error.type"] == "TimeoutError"
    assert (found["chat sim"].attributes or {})["gen_ai.provider.name"] == "swarm.sim"
    assert found["turn 0"].status.status_code is StatusCode.ERROR


def test_traces_are_off_unless_an_otlp_endpoint_is_set() -> None:
    def endpoint(**variables: Any) -> str | None:
        return Settings.model_validate(variables).traces_endpoint

    # Given OpenTelemetry's own variables, or none, Then traces go where they say
    assert endpoint() is None
    base = "http://127.0.0.1:4318/"
    assert endpoint(OTEL_EXPORTER_OTLP_ENDPOINT=base) == "http://127.0.0.1:4318/v1/traces"
    whole = "http://b:4318/traces"
    assert (
        endpoint(OTEL_EXPORTER_OTLP_ENDPOINT=base, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=whole)
        == whole
    )
    assert endpoint(OTEL_EXPORTER_OTLP_ENDPOINT=base, OTEL_SDK_DISABLED=True) is None
