"""The sim's personas, and which one (and which first-draft flaw) each session gets."""

from __future__ import annotations

import random
from enum import Enum

from worker.tasks.dashboard.pages import FLAWS

__all__ = ["Persona", "flaw_for", "persona_for"]


class Persona(str, Enum):
    """How a simulated agent behaves."""

    #: plans, publishes, refines one region, hands off
    diligent = "diligent"
    #: probes the tools for a while before doing the work (a loop to catch)
    explorer = "explorer"
    #: first answers with the page in a markdown code block instead of calling a tool
    markdown = "markdown"
    #: sends bad arguments, stale versions, oversize content, unknown tools, then recovers
    sloppy = "sloppy"


def persona_for(mix: dict[str, float], seed: int, index: int) -> Persona:
    """Pick a persona for a session from a weighted mix, deterministically."""
    rng = random.Random(f"persona:{seed}:{index}")
    names = sorted(mix)
    return Persona(rng.choices(names, weights=[mix[n] for n in names])[0])


def flaw_for(rate: float, seed: int, index: int) -> str | None:
    """With probability ``rate``, a first-draft defect for a session, deterministically."""
    rng = random.Random(f"flaw:{seed}:{index}")
    return rng.choice(FLAWS) if rng.random() < rate else None
