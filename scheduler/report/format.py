"""How figures read: dollars, shares, sizes, durations and clock times as text, and as JSON.

The one place the CLI's status, the report's tables and its HTML page take their formatting
from; it imports no other report module at run time, so they all import it downward.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

from worker.states import CostBucket

if TYPE_CHECKING:
    from worker.reads.ladders import Comparison

__all__ = [
    "BYTES_PER_MIB",
    "OUTCOME_LABELS",
    "arrow",
    "clock",
    "delta",
    "duration",
    "jsonable",
    "mib",
    "ms",
    "pct",
    "usd",
]

#: How each :class:`~worker.states.CostBucket` reads in a report.
OUTCOME_LABELS = {
    CostBucket.verified: "verified",
    CostBucket.failed_verification: "failed verification",
    CostBucket.stopped: "stopped by a guard",
    CostBucket.lost_to_retries: "lost to retries",
    CostBucket.other_errors: "other errors",
    CostBucket.cancelled: "cancelled",
    CostBucket.unfinished: "still running",
}

#: Bytes in a mebibyte, the unit reports give memory in.
BYTES_PER_MIB = 1024 * 1024

_ARROW = "\N{RIGHTWARDS ARROW}"


def usd(value: float | None) -> str:
    """Dollars with cents, or more digits under a dollar; ``-`` for none."""
    if value is None:
        return "-"
    return f"${value:,.2f}" if abs(value) >= 1 else f"${value:.4f}"


def ms(value: float | None) -> str:
    """Milliseconds, one decimal under 100; ``-`` for none."""
    if value is None:
        return "-"
    return f"{value:.1f} ms" if value < 100 else f"{value:,.0f} ms"


def pct(value: float | None, *, signed: bool = False) -> str:
    """A share (0..1) as a percentage; ``-`` for none."""
    return "-" if value is None else f"{value * 100:{'+' if signed else ''}.1f}%"


def mib(value: float | None) -> str:
    """Bytes in MiB; ``-`` for none."""
    return "-" if value is None else f"{value / BYTES_PER_MIB:,.1f} MiB"


def duration(seconds: float | None) -> str:
    """Seconds as ``42.0 s``, ``3 m 05 s`` or ``1 h 02 m``; ``-`` for none."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} m {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} m"


def clock(when: datetime | None) -> str:
    """The time of day to the millisecond, as ``14:03:27.512``; ``-`` for none."""
    return "-" if when is None else when.strftime("%H:%M:%S.%f")[:12]


def arrow(before: object, after: object) -> str:
    """``before → after``."""
    return f"{before} {_ARROW} {after}"


def delta(c: Comparison) -> str:
    """The candidate's cost against the baseline's, as ``-83.5% (-$0.60)``."""
    sign = "-" if c.delta_usd < 0 else "+"
    money = f"{sign}{usd(abs(c.delta_usd))}"
    return money if c.delta_pct is None else f"{c.delta_pct:+.1f}% ({money})"


def jsonable(value: Any) -> Any:
    """Figures as plain JSON values: dataclasses to objects, enums to their values,
    datetimes to ISO 8601."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in fields(value)}
    # Before str: the states are ``str`` enums, whose str() is ``RunStatus.finished``.
    if isinstance(value, Enum):
        return jsonable(value.value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {_key(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def _key(key: object) -> str:
    return str(key.value) if isinstance(key, Enum) else str(key)
