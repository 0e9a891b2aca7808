"""The fake Gemini API's own surface: routes, keys, both key styles, the fault controls."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner

from ops.fake_gemini import FAULT_HEADER, FakeGemini
from ops.fake_gemini.__main__ import main
from tests.factories import dashboard_brief
from tests.worker.models.replay import load, names


def _post(
    url: str, body: Any, *, key: str | None = "k", headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={
            "content-type": "application/json",
            **({"x-goog-api-key": key} if key else {}),
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _body(**extra: Any) -> dict[str, Any]:
    return {"contents": [dashboard_brief(3, 1)], **extra}


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


# -- the fake against the recorded corpus ---------------------------------------------------

Shape = dict[str, set[str]]


def _shape(value: Any, path: str = "", into: Shape | None = None) -> Shape:
    """Every field path of a JSON value with the JSON type found there (lists as ``[]``)."""
    into = {} if into is None else into
    if path.endswith("functionCall.args"):
        # a call's arguments follow the tool's own schema, not the API's
        into.setdefault(path, set()).add("object")
    elif isinstance(value, dict):
        for key, child in value.items():
            _shape(child, f"{path}.{key}" if path else key, into)
    elif isinstance(value, list):
        for child in value:
            _shape(child, f"{path}[]", into)
        into.setdefault(path, set()).add("list")
    else:
        kind = {bool: "bool", int: "int", float: "float", str: "str"}.get(type(value), "null")
        into.setdefault(path, set()).add(kind)
    return into


def _recorded(*, status: int, kind: str = "generate") -> Shape:
    shape: Shape = {}
    for name in names():
        case = load(name)
        if case.status == status and case.kind == kind:
            body = case.body[0] if isinstance(case.body, list) else case.body
            _shape(body, into=shape)
    return shape


def _strangers(fake: Shape, recorded: Shape) -> dict[str, set[str]]:
    """Fields (or types) the fake sends that no recorded body has."""
    return {
        path: kinds - recorded.get(path, set())
        for path, kinds in fake.items()
        if kinds - recorded.get(path, set())
    }


def _turns(fake: FakeGemini, model: str, n: int) -> list[dict[str, Any]]:
    """``n`` successive answers of one session, its history sent back as the API returned it."""
    url = f"{fake.url}/v1beta/models/{model}:generateContent"
    # a system instruction long enough for the prefix to be cached implicitly
    system = {"parts": [{"text": "Build one dashboard. " * 400}]}
    contents: list[dict[str, Any]] = [dashboard_brief(3, 1)]
    answers = []
    for _ in range(n):
        status, out = _post(url, {"contents": contents, "systemInstruction": system})
        assert status == 200, out
        answers.append(out)
        content = out["candidates"][0]["content"]
        responses = [
            {"functionResponse": {"name": p["functionCall"]["name"], "response": {"ok": True}}}
            for p in content["parts"]
            if "functionCall" in p
        ]
        contents += [content, {"role": "user", "parts": responses}]
    return answers


def test_the_fakes_answers_have_the_fields_and_types_of_recorded_ones(
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given the fields of every recorded 200 answer, and three turns of a 2.5 session
    recorded = _recorded(status=200)
    fake = fake_gemini(latency_ms=0)
    answers = _turns(fake, "gemini-2.5-flash", 3)
    malformed = _post(
        f"{fake.url}/v1beta/models/gemini-2.5-flash:generateContent",
        {"contents": [dashboard_brief(3, 1)]},
        headers={FAULT_HEADER: "malformed"},
    )[1]
    shape: Shape = {}
    for body in [*answers, malformed]:
        _shape(body, into=shape)
    # Then the fake sends no field, and no type, that the real API was never seen to send
    assert _strangers(shape, recorded) == {}
    # and every answer carries what every recorded answer carries
    for body in answers:
        assert {"responseId", "modelVersion", "usageMetadata"} <= body.keys()
        assert {"promptTokenCount", "totalTokenCount", "promptTokensDetails"} <= body[
            "usageMetadata"
        ].keys()
    # and 2.5 models send function calls without ids
    calls = [
        p["functionCall"]
        for b in answers
        for p in b["candidates"][0]["content"]["parts"]
        if "functionCall" in p
    ]
    assert calls and all("id" not in c for c in calls)


def test_the_fake_signs_like_the_api_and_caches_only_a_prefix(
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    fake = fake_gemini(latency_ms=0)
    answers = _turns(fake, "gemini-3-flash-preview", 3)
    for body in answers:
        parts = body["candidates"][0]["content"]["parts"]
        signed = [p for p in parts if "thoughtSignature" in p]
        # one signature, on the first call, of a size the API's own signatures have
        assert len(signed) == 1 and signed[0] is next(p for p in parts if "functionCall" in p)
        assert 70 <= len(base64.b64decode(signed[0]["thoughtSignature"])) <= 400
    # an implicit hit covers what was sent before, never the whole prompt
    usage = answers[-1]["usageMetadata"]
    assert 0 < usage["cachedContentTokenCount"] < usage["promptTokenCount"]
    assert usage["cacheTokensDetails"][0]["tokenCount"] == usage["cachedContentTokenCount"]
    # and a text answer carries its signature on its last text part
    text = fake._sign({"role": "model", "parts": [{"text": "a"}, {"text": "b"}]}, "k", 1)
    assert "thought_signature" in text["parts"][-1] and "thought_signature" not in text["parts"][0]


@pytest.mark.parametrize(
    ("fault", "status", "rpc"),
    [
        ("429", 429, "RESOURCE_EXHAUSTED"),
        ("429-day", 429, "RESOURCE_EXHAUSTED"),
        ("429-help", 429, "RESOURCE_EXHAUSTED"),
        ("429-bare", 429, "RESOURCE_EXHAUSTED"),
        ("500", 500, "INTERNAL"),
        ("503", 503, "UNAVAILABLE"),
    ],
)
def test_the_fakes_errors_have_the_fields_and_types_of_recorded_ones(
    fake_gemini: Callable[..., FakeGemini], fault: str, status: int, rpc: str
) -> None:
    fake = fake_gemini(latency_ms=0)
    got, out = _post(
        f"{fake.url}/v1beta/models/gemini-2.5-flash:generateContent",
        _body(),
        headers={FAULT_HEADER: fault},
    )
    assert (got, out["error"]["code"], out["error"]["status"]) == (status, status, rpc)
    assert _strangers(_shape(out), _recorded(status=status)) == {}


def test_a_missing_or_expired_cache_is_a_403_as_recorded(
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    fake = fake_gemini(latency_ms=0)
    created_status, created = _post(
        f"{fake.url}/v1beta/cachedContents",
        {
            "model": "models/gemini-2.5-flash",
            "systemInstruction": {"parts": [{"text": "x" * 400}]},
            "ttl": "1s",
        },
    )
    assert created_status == 200
    assert _shape(created).keys() == _recorded(status=200, kind="cache_create").keys()
    time.sleep(1.1)
    # When a request names it after its TTL
    status, out = _post(
        f"{fake.url}/v1beta/models/gemini-2.5-flash:generateContent",
        _body(cachedContent=created["name"]),
    )
    # Then the answer is the API's 403, field for field
    assert status == 403
    assert out == load("403_cache_not_found").body
    assert len(fake.caches) == 0


def test_an_unknown_fault_header_is_a_400_naming_the_faults_it_knows(
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # When a request asks for a fault the fake does not have
    fake = fake_gemini(latency_ms=0)
    got, out = _post(
        f"{fake.url}/v1beta/models/gemini-2.5-flash:generateContent",
        _body(),
        headers={FAULT_HEADER: "tea-pot"},
    )
    # Then it is answered, 400, with every fault it knows, and the connection stays good
    assert (got, out["error"]["status"]) == (400, "INVALID_ARGUMENT")
    message = out["error"]["message"]
    assert "'tea-pot'" in message and "429-day" in message and "hang" in message
    again, _ = _post(f"{fake.url}/v1beta/models/gemini-2.5-flash:generateContent", _body())
    assert again == 200
