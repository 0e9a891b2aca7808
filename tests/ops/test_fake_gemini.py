"""The fake Gemini API's own surface: routes, keys, both key styles, the fault controls."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner

from ops.fake_gemini import FakeGemini
from ops.fake_gemini.__main__ import main
from worker.agent.prompt import brief_message, make_brief


def _post(url: str, body: Any, *, key: str | None = "k") -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={"content-type": "application/json", **({"x-goog-api-key": key} if key else {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _body(**extra: Any) -> dict[str, Any]:
    return {"contents": [brief_message(make_brief(3, 1))], **extra}


@pytest.mark.parametrize("version", ["v1", "v1beta"])
def test_both_api_versions_answer_in_camel_case(
    fake_gemini: Callable[..., FakeGemini], version: str
) -> None:
    fake = fake_gemini(latency_ms=0)
    status, out = _post(
        f"{fake.url}/{version}/models/gemini-3-flash-preview:generateContent",
        _body(generation_config={"thinking_config": {"thinking_level": "LOW"}}),
    )
    assert status == 200
    assert out["usageMetadata"]["promptTokenCount"] > 0
    assert out["candidates"][0]["finishReason"] == "STOP"
    first = out["candidates"][0]["content"]["parts"][0]
    assert "functionCall" in first and "thoughtSignature" in first


def test_requests_without_a_key_or_with_a_bad_body_are_refused(
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    fake = fake_gemini(latency_ms=0)
    url = f"{fake.url}/v1beta/models/gemini-3-flash-preview:generateContent"
    assert _post(url, _body(), key=None)[0] == 403
    status, out = _post(url, b"{not json")
    assert (status, out["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert _post(url, {"contents": []})[0] == 400
    assert _post(f"{fake.url}/v1beta/models/x:streamGenerateContent", _body())[0] == 404
    assert len(fake.served) == 0  # refused before any model work


def test_fault_rules_are_set_over_http(fake_gemini: Callable[..., FakeGemini]) -> None:
    fake = fake_gemini(latency_ms=0)
    url = f"{fake.url}/v1beta/models/gemini-3-flash-preview:generateContent"
    assert _post(f"{fake.url}/_fake/faults", [{"fault": "503", "times": 2}])[0] == 200
    statuses = [_post(url, _body())[0] for _ in range(3)]
    assert statuses == [503, 503, 200]
    assert _post(f"{fake.url}/_fake/faults", [{"fault": "nope"}])[0] == 400


def test_the_cli_refuses_an_unknown_fault() -> None:
    result = CliRunner().invoke(main, ["--fault", "418"])
    assert result.exit_code == 2
    assert "429-day" in result.output
