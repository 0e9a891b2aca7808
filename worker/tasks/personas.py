"""Which persona each session of a run plays: a weighted mix, drawn per session."""

from __future__ import annotations

import random
from collections.abc import Mapping

from worker.errors import InputError

__all__ = ["check_mix", "pick_persona"]


def pick_persona(mix: Mapping[str, float], seed: int, index: int) -> str:
    """A persona for session ``index`` from a weighted mix, deterministically."""
    rng = random.Random(f"persona:{seed}:{index}")
    names = sorted(mix)
    return str(rng.choices(names, weights=[mix[n] for n in names])[0])


def check_mix(mix: Mapping[str, float], personas: tuple[str, ...], *, task: str) -> None:
    """Refuse a mix that names a persona the task does not play, or weighs nothing.

    Raises:
        InputError: with the personas the task plays.
    """
    unknown = sorted(set(mix) - set(personas))
    if unknown:
        raise InputError(
            f"unknown persona(s) {', '.join(unknown)} for task {task}; it plays "
            f"{', '.join(personas)}"
        )
    if not mix or any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
        raise InputError("persona weights must be non-negative and not all zero")
