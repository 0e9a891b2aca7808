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

    #: 429 RESOURCE_EXHAUSTED, per-minute quota: QuotaFailure, Help, RetryInfo
    rate_minute = "429"
    #: 429 RESOURCE_EXHAUSTED, per-day and per-minute quotas at once, with RetryInfo
    rate_day = "429-day"
    #: 429 RESOURCE_EXHAUSTED naming no quota: only a ``google.rpc.Help`` detail
    rate_help = "429-help"
    #: 429 RESOURCE_EXHAUSTED with only a message ("Resource has been exhausted")
    exhausted = "429-bare"
    #: 500 INTERNAL
    internal = "500"
    #: 503 UNAVAILABLE ("the model is overloaded")
    unavailable = "503"
    #: no answer until long past any sane client timeout
    hang = "hang"
    #: a 200 whose body stops half way
    truncate = "truncate"
    #: finish reason MALFORMED_FUNCTION_CALL, no content
    malformed = "malformed"
    #: a normal answer the implicit cache does not serve, as when the prefix or the model
    #: behind a name changed
    cache_cold = "cache-cold"


#: The faults answered with a 429.
RATE_LIMITS = frozenset({Fault.rate_minute, Fault.rate_day, Fault.rate_help, Fault.exhausted})


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


#: The ``google.rpc.Help`` detail every quota 429 of the API carries.
HELP = {
    "@type": "type.googleapis.com/google.rpc.Help",
    "links": [
        {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
        }
    ],
}
_QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. "
    "To monitor your current usage, head to: https://ai.dev/rate-limit. "
)


def _violation(metric: str, quota_id: str, model: str, value: str) -> dict[str, Any]:
    return {
        "quotaMetric": f"generativelanguage.googleapis.com/{metric}",
        "quotaId": quota_id,
        "quotaDimensions": {"location": "global", "model": model},
        "quotaValue": value,
    }


def rate_limit_body(rule: FaultRule, model: str) -> dict[str, Any]:
    """The 429 the API sends when a quota runs out, in the form ``rule`` asks for."""
    if rule.fault is Fault.exhausted:
        return error_body(
            429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."
        )
    if rule.fault is Fault.rate_help:
        return error_body(429, "RESOURCE_EXHAUSTED", _QUOTA_MESSAGE.rstrip(), [HELP])
    violations = [
        _violation(
            "generate_content_free_tier_requests",
            "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
            model,
            "10",
        )
    ]
    if rule.fault is Fault.rate_day:
        violations.insert(
            0,
            _violation(
                "generate_content_free_tier_requests",
                "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                model,
                "250",
            ),
        )
    metric = violations[0]["quotaMetric"]
    limit = violations[0]["quotaValue"]
    message = (
        f"{_QUOTA_MESSAGE}\n* Quota exceeded for metric: {metric}, limit: {limit}, "
        f"model: {model}\nPlease retry in {rule.retry_delay_s + 0.429760048:.9f}s."
    )
    return error_body(
        429,
        "RESOURCE_EXHAUSTED",
        message,
        [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": violations},
            HELP,
            {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{rule.retry_delay_s:g}s",
            },
        ],
    )


def server_error_body(fault: Fault) -> tuple[int, dict[str, Any]]:
    """Status and body of a 5xx fault."""
    if fault is Fault.internal:
        return 500, error_body(
            500,
            "INTERNAL",
            "An internal error has occurred. Please retry or report in "
            "https://developers.generativeai.google/guide/troubleshooting",
        )
    return 503, error_body(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")
