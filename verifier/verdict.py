"""A verdict on one handoff, whatever judged it: every check, and what the judging saw."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from worker.tasks.base import Check

__all__ = ["Verdict"]


@dataclass(frozen=True)
class Verdict:
    """Whether an artifact passed, with every check that was run.

    Attributes:
        passed: True when every check passed.
        checks: Static checks, then browser checks (absent when a static check failed).
        fps: The page's own animation frame rate, or None if it was not measured.
        screenshot_png: The viewport at the end of the measurement, if one was taken.
        sandbox: Whether the judging ran sandboxed (Chromium's sandbox, or the Python
            sandbox); None when nothing ran.
    """

    passed: bool
    checks: list[Check]
    fps: float | None
    screenshot_png: bytes | None = field(default=None, repr=False)
    sandbox: bool | None = None

    @property
    def failed(self) -> list[str]:
        """Names of the checks that failed, in order."""
        return [check.name for check in self.checks if not check.passed]

    def to_dict(self) -> dict[str, object]:
        """The verdict as JSON-compatible data, without the screenshot."""
        return {
            "passed": self.passed,
            "checks": [
                {"name": c.name, "passed": c.passed, "value": c.value, "detail": c.detail}
                for c in self.checks
            ],
            "fps": self.fps,
            "sandbox": self.sandbox,
        }

    def to_json(self) -> str:
        """The verdict as one JSON object: ``passed``, ``checks``, ``fps`` and ``sandbox``."""
        return json.dumps(self.to_dict())
