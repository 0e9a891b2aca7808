"""Faults the fake server can inject, per run (a plan) or per request (a header)."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ops.fake_gemini.wire import error_body

#: Request header that forces one fault on that request.
FAULT_HEADER = "x-fake-fault"


class Fault(str, Enum):
    """What goes wrong with a request."""

    #: 429 RESOURCE_EXHAUSTED, per-minute quota, with RetryInfo
    rate_minute = "429"
    #: 429 RESOURCE_EXHAUSTED, per-day quota, with RetryInfo
    rate_day = "429-day"
    #: 500 INTERNAL
    internal = "500"
    #: 503 UNAVAILABLE ("the model is overloaded")
    unavailable = "503"
    #: 503 RESOURCE_EXHAUSTED (capacity, a rate limit in all but code)
    exhausted = "503-exhausted"
    #: no answer until long past any sane client timeout
    hang = "hang"
    #: a 200 whose body stops half way
    truncate = "truncate"
    #: finish reason MALFORMED_FUNCTION_CALL, no content
    malformed = "malformed"


@dataclass
class FaultRule:
    """Inject ``fault`` into the next ``times`` requests, or into a share ``rate`` of them.

    Args:
        fault: What to inject.
        times: How many requests to hit (``None``: no count limit).
        rate: Probability per request (1.0 with ``times``: the next ``times`` requests).
        retry_delay_s: The RetryInfo delay of a 429.
        after: Requests to let through before the rule starts.
    """

    fault: Fault
    times: int | None = 1
    rate: float = 1.0
    retry_delay_s: float = 2.0
    after: int = 0

    @classmethod
    def parse(cls, text: str) -> FaultRule:
        """``MODE[:RATE]``, e.g. ``429:0.1`` (10 % of requests) or ``hang`` (every one).

        Raises:
            ValueError: unknown mode or a rate outside (0, 1].
        """
        mode, _, rate = text.partition(":")
        value = float(rate) if rate else 1.0
        if not 0 < value <= 1:
            raise ValueError(f"fault rate {rate!r} must be in (0, 1]")
        return cls(Fault(mode), times=None, rate=value)


class FaultPlan:
    """The rules in force, consumed thread-safely as requests arrive."""

    def __init__(self, rules: list[FaultRule] | None = None, *, seed: int = 0) -> None:
        self._rules = list(rules or ())
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self.fired: dict[str, int] = {}

    def set(self, rules: list[FaultRule]) -> None:
        """Replace the rules."""
        with self._lock:
            self._rules = list(rules)

    def pick(self, forced: str | None) -> FaultRule | None:
        """The fault for the next request, if any (a forced one wins)."""
        with self._lock:
            rule = FaultRule(Fault(forced)) if forced else self._next()
            if rule is not None:
                self.fired[rule.fault.value] = self.fired.get(rule.fault.value, 0) + 1
            return rule

    def _next(self) -> FaultRule | None:
        for rule in self._rules:
            if rule.after > 0:
                rule.after -= 1
                continue
            if rule.times == 0 or self._rng.random() >= rule.rate:
                continue
            if rule.times is not None:
                rule.times -= 1
            return rule
        return None


def rate_limit_body(rule: FaultRule, model: str) -> dict[str, Any]:
    """The 429 the API sends when a quota runs out."""
    per = "Day" if rule.fault is Fault.rate_day else "Minute"
    return error_body(
        429,
        "RESOURCE_EXHAUSTED",
        f"You exceeded your current quota (requests per {per.lower()}).",
        [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": (
                            "generativelanguage.googleapis.com/generate_content_requests"
                        ),
                        "quotaId": f"GenerateRequestsPer{per}PerProjectPerModel",
                        "quotaDimensions": {"location": "global", "model": model},
                        "quotaValue": "1000",
                    }
                ],
            },
            {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{rule.retry_delay_s:g}s",
            },
        ],
    )


def server_error_body(fault: Fault) -> tuple[int, dict[str, Any]]:
    """Status and body of a 5xx fault."""
    if fault is Fault.internal:
        return 500, error_body(500, "INTERNAL", "An internal error has occurred.")
    if fault is Fault.exhausted:
        return 503, error_body(503, "RESOURCE_EXHAUSTED", "The service is out of capacity.")
    return 503, error_body(503, "UNAVAILABLE", "The model is overloaded. Please try later.")
