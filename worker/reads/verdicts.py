"""Verdicts as a transcript shows them: every check with its detail."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Check", "Verdict", "read_verdict"]


@dataclass(frozen=True)
class Check:
    """One check of a verdict."""

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Verdict:
    """A verdict on a handed-off version: every check, and what was kept with it."""

    round: int
    name: str
    version: int
    passed: bool
    method: str
    fps: float | None
    elapsed_ms: int
    checks: list[Check]
    verification_id: int
    has_screenshot: bool
    has_video: bool


def read_verdict(row: dict[str, Any], *, name: str, version: int) -> Verdict:
    """The verdict of one ``verifications`` row (``has_screenshot`` and ``has_video`` for
    its media), which judged version ``version`` of artifact ``name``."""
    return Verdict(
        round=row["round"],
        name=name,
        version=version,
        passed=bool(row["passed"]),
        method=row["method"],
        fps=row["fps"],
        elapsed_ms=row["elapsed_ms"],
        checks=[
            Check(str(c.get("name")), bool(c.get("passed")), str(c.get("detail", "")))
            for c in row["checks"] or []
        ],
        verification_id=row["id"],
        has_screenshot=bool(row["has_screenshot"]),
        has_video=bool(row["has_video"]),
    )
