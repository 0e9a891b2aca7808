"""The API's implicit cache: prefixes of completed requests, per model, for a few minutes.

What the Gemini API documents, and this models:

- A request's prefix is served from cache only once a request carrying it has *completed*:
  a wave of requests that arrive together all pay full price, however alike they are.
- Caching is per model: the same prefix sent to another model is not a hit.
- A model has a minimum input size for caching (the caching page's table: 1,024 tokens for
  Gemini 3 Flash and 2.5 Flash, 4,096 for Gemini 3 Pro and 2.5 Pro). A request smaller than
  that neither stores its prefix nor is served one.
- A cached prefix expires after a few minutes unused (the API gives no figure; the default
  here is five minutes, and each hit keeps it alive).

Prefixes are compared at content boundaries (system instruction and tools, then each
content), as :func:`~ops.fake_gemini.wire.prefix_hashes` cuts them; the newest content is
never served from cache.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

#: Smallest request, in tokens, that the API caches implicitly, by model name prefix.
MIN_TOKENS_BY_MODEL = (
    ("gemini-3-pro", 4096),
    ("gemini-2.5-pro", 4096),
    ("gemini-3-flash", 1024),
    ("gemini-2.5-flash", 1024),
)
#: Minimum of a model the table does not name.
DEFAULT_MIN_TOKENS = 1024
#: Seconds a cached prefix lives without a hit.
DEFAULT_TTL_S = 300.0
#: Prefixes remembered at most (the oldest go first).
DEFAULT_LIMIT = 200_000


def min_tokens(model: str) -> int:
    """The smallest request ``model`` caches implicitly, in tokens."""
    found = (n for name, n in MIN_TOKENS_BY_MODEL if model.startswith(name))
    return next(found, DEFAULT_MIN_TOKENS)


class ImplicitCache:
    """Prefix hashes of completed requests, each with its expiry.

    Args:
        ttl_s: How long a prefix lives without a hit.
        limit: Most prefixes remembered.
        clock: Monotonic seconds (tests move it).
    """

    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        limit: int = DEFAULT_LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.limit = limit
        self.clock = clock
        self._expires: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def lookup(self, model: str, hashes: Sequence[tuple[str, int]]) -> int:
        """Tokens of the longest cached prefix of a request (0: a miss).

        Args:
            model: The model asked.
            hashes: The request's prefix hashes and sizes, shortest first; the last covers
                the whole request and is never served from cache.
        """
        if not hashes or hashes[-1][1] < min_tokens(model):
            return 0
        now = self.clock()
        with self._lock:
            for digest, size in reversed(hashes[:-1]):
                expires = self._expires.get(digest)
                if expires is not None and expires > now:
                    self._expires[digest] = now + self.ttl_s
                    self._expires.move_to_end(digest)
                    return size
        return 0

    def complete(self, model: str, hashes: Sequence[tuple[str, int]]) -> None:
        """Store the prefixes of a request that completed, from now on servable."""
        if not hashes or hashes[-1][1] < min_tokens(model):
            return
        expires = self.clock() + self.ttl_s
        with self._lock:
            for digest, _ in hashes:
                self._expires[digest] = expires
                self._expires.move_to_end(digest)
            while len(self._expires) > self.limit:
                self._expires.popitem(last=False)

    def __len__(self) -> int:
        now = self.clock()
        with self._lock:
            return sum(1 for e in self._expires.values() if e > now)
