"""Explicit context caches of the fake API: ``cachedContents`` create, use and delete."""

from __future__ import annotations

import secrets
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from ops.fake_gemini.wire import BadRequest, parse, prefix_hashes

#: Fields a cache holds, which a request that uses it must not repeat.
PREFIX_FIELDS = ("systemInstruction", "tools", "toolConfig")
_SNAKE = {
    "systemInstruction": "system_instruction",
    "toolConfig": "tool_config",
    "cachedContent": "cached_content",
}


def body_field(body: dict[str, Any], camel: str) -> Any:
    """A request field in either key style."""
    return body.get(camel, body.get(_SNAKE.get(camel, camel)))


class CacheStore:
    """The caches created so far, and counts of creations and deletions."""

    def __init__(self) -> None:
        self._caches: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.created = 0
        self.deleted = 0

    def create(self, body: Any) -> dict[str, Any]:
        """Store a cache from a ``cachedContents.create`` body; returns the API's answer.

        Raises:
            BadRequest: no model, or nothing to cache.
        """
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            raise BadRequest("a cached content needs a model")
        prefix = {f: body_field(body, f) for f in PREFIX_FIELDS if body_field(body, f) is not None}
        if not prefix:
            raise BadRequest("a cached content needs contents, a system instruction or tools")
        ttl_s = float(str(body.get("ttl", "3600s")).rstrip("s"))
        now = datetime.now(UTC)
        name = f"cachedContents/{secrets.token_hex(6)}"
        # Counted as a request's prefix is, so usage adds up.
        probe = {**prefix, "contents": [{"role": "user", "parts": [{"text": "."}]}]}
        tokens = prefix_hashes(parse(body["model"].removeprefix("models/"), probe))[0][1]
        with self._lock:
            self._caches[name] = {"model": body["model"], "prefix": prefix, "tokens": tokens}
            self.created += 1
        return {
            "name": name,
            "model": body["model"],
            "createTime": now.isoformat(),
            "expireTime": (now + timedelta(seconds=ttl_s)).isoformat(),
            "usageMetadata": {"totalTokenCount": tokens},
        }

    def delete(self, name: str) -> bool:
        """Forget a cache; False when there was none of that name."""
        with self._lock:
            found = self._caches.pop(name, None) is not None
            self.deleted += found
        return found

    def get(self, name: str) -> dict[str, Any] | None:
        """A cache by name: its model, the prefix it holds and its size in tokens."""
        with self._lock:
            return self._caches.get(name)

    def __len__(self) -> int:
        with self._lock:
            return len(self._caches)
