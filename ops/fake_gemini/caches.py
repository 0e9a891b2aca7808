"""Explicit context caches of the fake API: ``cachedContents`` create, use and delete."""

from __future__ import annotations

import secrets
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from ops.fake_gemini.wire import BadRequest, parse, prefix_hashes

#: What the API answers for a cache that expired, was deleted or never existed (403, not 404).
NOT_FOUND = "CachedContent not found (or permission denied)"
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
        expires_at = now + timedelta(seconds=ttl_s)
        with self._lock:
            self._caches[name] = {
                "model": body["model"],
                "prefix": prefix,
                "tokens": tokens,
                "expires_at": expires_at,
            }
            self.created += 1
        stamp = _timestamp(now)
        return {
            "name": name,
            "model": body["model"],
            "createTime": stamp,
            "updateTime": stamp,
            "expireTime": _timestamp(expires_at),
            "displayName": str(body.get("displayName") or body.get("display_name") or ""),
            "usageMetadata": {"totalTokenCount": tokens},
        }

    def delete(self, name: str) -> bool:
        """Forget a cache; False when there was none of that name (or it had expired)."""
        with self._lock:
            self._expire()
            found = self._caches.pop(name, None) is not None
            self.deleted += found
        return found

    def evict(self, name: str) -> None:
        """Drop a cache before its time, as the API may."""
        with self._lock:
            self._caches.pop(name, None)

    def get(self, name: str) -> dict[str, Any] | None:
        """A live cache by name: its model, the prefix it holds and its size in tokens."""
        with self._lock:
            self._expire()
            return self._caches.get(name)

    def _expire(self) -> None:
        now = datetime.now(UTC)
        for name in [n for n, c in self._caches.items() if c["expires_at"] <= now]:
            del self._caches[name]

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._caches)


def _timestamp(at: datetime) -> str:
    """An RFC 3339 UTC time as the API writes it (``2026-09-07T01:18:17.438678Z``)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
