"""The dashboard's personas, and which first-draft flaw each session's page carries."""

from __future__ import annotations

import random

from worker.tasks.base import STANDARD_PERSONAS
from worker.tasks.dashboard.pages import FLAWS

__all__ = ["PERSONAS", "flaw_for"]

#: ``diligent`` (the default), ``explorer``, ``markdown`` and ``sloppy``, then the standard
#: four (``sloppy`` is one of both).
PERSONAS = ("diligent", "explorer", "markdown", *STANDARD_PERSONAS)


def flaw_for(rate: float, seed: int, index: int) -> str | None:
    """With probability ``rate``, a first-draft defect for a session, deterministically."""
    rng = random.Random(f"flaw:{seed}:{index}")
    return rng.choice(FLAWS) if rng.random() < rate else None
