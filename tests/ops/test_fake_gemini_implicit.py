"""The fake API's implicit cache: per model, after completion, above a size, for minutes."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from typing import Any

from ops.fake_gemini import FAULT_HEADER, FakeGemini
from ops.fake_gemini.implicit import ImplicitCache, min_tokens
from tests.factories import dashboard_brief

#: A system instruction of about 1,500 tokens: above Flash's minimum, below Pro's.
SYSTEM = {"parts": [{"text": "Build one dashboard. " * 290}]}


def _cached(fake: FakeGemini, model: str, index: int, *, fault: str | None = None) -> int:
    """cachedContentTokenCount of the first turn of session ``index``."""
    body = {"contents": [dashboard_brief(5, index)], "systemInstruction": SYSTEM}
    request = urllib.request.Request(
        f"{fake.url}/v1beta/models/{model}:generateContent",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "content-type": "application/json",
            "x-goog-api-key": "k",
            **({FAULT_HEADER: fault} if fault else {}),
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        out: Any = json.loads(response.read())
    return int(out["usageMetadata"].get("cachedContentTokenCount", 0))


def test_a_wave_that_arrives_at_once_pays_in_full_and_the_next_request_does_not(
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given a fake whose answers take 300 ms
    fake = fake_gemini(latency_ms=300)
    model = "gemini-3-flash-preview"
    # When four first turns sharing the prefix arrive together
    got: list[int] = []
    threads = [
        threading.Thread(target=lambda i=i: got.append(_cached(fake, model, i))) for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then none was served from cache: no request with the prefix had completed
    assert got == [0, 0, 0, 0]
    # and a fifth, sent after they completed, is served the shared prefix, not its own brief
    cached = _cached(fake, model, 4)
    assert cached == len(SYSTEM["parts"][0]["text"]) // 4
    # and the same prefix on another model is not cached, nor on a model whose minimum
    # the request does not reach
    assert _cached(fake, "gemini-2.5-flash", 5) == 0
    assert _cached(fake, "gemini-3-pro-preview", 6) == 0
    assert _cached(fake, "gemini-3-pro-preview", 7) == 0
    # and a cache-cold fault answers without the cache
    assert _cached(fake, model, 8, fault="cache-cold") == 0
    assert _cached(fake, model, 9) == cached


def test_a_prefix_expires_unless_it_is_hit() -> None:
    now = [0.0]
    cache = ImplicitCache(ttl_s=300.0, clock=lambda: now[0])
    model = "gemini-3-flash-preview"
    request = [("system", 1100), ("brief-a", 1150)]
    other = [("system", 1100), ("brief-b", 1150)]
    small = [("tiny", 10), ("tiny-brief", 60)]
    # a request's prefix is not served before it completes
    assert cache.lookup(model, other) == 0
    cache.complete(model, request)
    assert cache.lookup(model, other) == 1100
    # a hit keeps it alive; five minutes without one expire it
    now[0] = 200.0
    assert cache.lookup(model, other) == 1100
    now[0] = 499.0
    assert cache.lookup(model, other) == 1100
    now[0] = 800.0
    assert cache.lookup(model, other) == 0
    # requests below the model's minimum are neither stored nor served
    cache.complete(model, small)
    assert len(cache) == 0
    assert min_tokens("gemini-3-pro-preview") == 4096 and min_tokens("gemini-3-flash") == 1024
