"""How a failure of the Gemini API or its transport maps onto the project's errors.

Classification only: the provider tells the limiter, and the turn loop owns the policy.
A 429 is a :class:`~worker.errors.RateLimited` whose ``quota`` says which limit ran out
(``day``, ``minute``, or ``unknown`` when the body names none) and whose ``delay_s`` is the
server's; a cache the API no longer has is a :class:`~worker.errors.CacheNotFound`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
from google.genai import errors
from pydantic import ValidationError

from worker.errors import (
    CacheNotFound,
    ModelFatal,
    ModelUnavailable,
    RateLimited,
    SwarmError,
)

_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")
_RETRY_IN = re.compile(r"retry in (\d+(?:\.\d+)?)(ms|s)\b", re.IGNORECASE)
_CACHE_GONE = re.compile(r"CachedContent not found", re.IGNORECASE)


@contextmanager
def classified() -> Iterator[None]:
    """Re-raise an SDK or transport failure as the project error it stands for."""
    try:
        yield
    except Exception as exc:
        error = classify(exc)
        if error is None or error is exc:
            raise
        raise error from exc


def classify(exc: BaseException) -> SwarmError | None:
    """The project error an SDK or transport failure stands for (``None``: not ours)."""
    if isinstance(exc, SwarmError):
        return exc
    if isinstance(exc, errors.APIError):
        return _classify_api(exc)
    if isinstance(exc, httpx2.TimeoutException):
        # Past the connection, the request may have been served and billed.
        sent = not isinstance(exc, (httpx2.ConnectTimeout, httpx2.PoolTimeout))
        return ModelUnavailable(
            f"the Gemini API timed out: {type(exc).__name__}", maybe_billed=sent
        )
    if isinstance(exc, httpx2.TransportError):
        sent = not isinstance(exc, httpx2.ConnectError)
        return ModelUnavailable(
            f"cannot reach the Gemini API: {type(exc).__name__}: {exc}", maybe_billed=sent
        )
    if isinstance(exc, (ValidationError, ValueError)):
        # An answer came back, cut off or garbled: the call was served.
        return ModelUnavailable(f"unreadable answer from the Gemini API: {exc}", maybe_billed=True)
    return None


def _classify_api(exc: errors.APIError) -> SwarmError:
    message = f"{exc.code} {exc.status}: {exc.message}"
    details = _details(exc)
    if exc.code == 429 or (exc.code == 503 and exc.status == "RESOURCE_EXHAUSTED"):
        ids = quota_ids(details)
        if ids:
            # The message often names the metric but not the window; the quota ids do.
            message = f"{message} [{', '.join(ids)}]"
        delay_s = retry_delay_s(details, str(exc.message or ""))
        return RateLimited(message, delay_s=delay_s, quota=quota_kind(details))
    if exc.code in (403, 404) and _CACHE_GONE.search(str(exc.message or "")):
        return CacheNotFound(message)
    if exc.code in (408,) or exc.code >= 500:
        return ModelUnavailable(message)
    return ModelFatal(message)


def _details(exc: errors.APIError) -> list[dict[str, Any]]:
    body = exc.details
    # Some error bodies arrive wrapped in a JSON array.
    if isinstance(body, list):
        body = next((b for b in body if isinstance(b, dict)), {})
    if not isinstance(body, dict):
        return []
    error = body.get("error", body)
    found = error.get("details") if isinstance(error, dict) else None
    return [d for d in found or () if isinstance(d, dict)]


def quota_kind(details: list[dict[str, Any]]) -> str:
    """Which quota a 429 names: ``day``, ``minute``, or ``unknown`` when it names none.

    A body listing several violations at once counts as ``day`` if any of them is per day.
    """
    ids = quota_ids(details)
    if any("PerDay" in i for i in ids):
        return "day"
    return "minute" if ids else "unknown"


def quota_ids(details: list[dict[str, Any]]) -> list[str]:
    """The ``quotaId`` of every ``QuotaFailure`` violation of an error, in order."""
    return [
        str(v.get("quotaId", ""))
        for d in details
        if d.get("@type", "").endswith("google.rpc.QuotaFailure")
        for v in d.get("violations") or ()
        if isinstance(v, dict) and v.get("quotaId")
    ]


def retry_delay_s(details: list[dict[str, Any]], message: str = "") -> float | None:
    """The error's retry delay in seconds: ``RetryInfo.retryDelay`` (``"2s"``, ``"34.4s"``),
    else a "Please retry in 45.2s" in its message."""
    for detail in details:
        if detail.get("@type", "").endswith("google.rpc.RetryInfo"):
            found = _DELAY.match(str(detail.get("retryDelay", "")))
            if found:
                return float(found.group(1))
    said = _RETRY_IN.search(message)
    if said:
        value = float(said.group(1))
        return value / 1000 if said.group(2) == "ms" else value
    return None
