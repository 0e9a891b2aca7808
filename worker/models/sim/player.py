"""What the ``sim`` model plays: a scripted agent, given by the session's task.

A :class:`Player` reads the conversation so far and decides the next move; the sim model
around it adds the latency, the thought signatures and the usage a real model would report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from worker.models.base import FunctionCall, ModelRequest

__all__ = ["Move", "Player"]


@dataclass(frozen=True)
class Move:
    """One model turn: the calls it makes, and any text it says first."""

    calls: tuple[FunctionCall, ...] = ()
    text: str = ""


class Player(Protocol):
    """A scripted agent for one session, deterministic in what it has read."""

    def play(self, request: ModelRequest) -> Move:
        """The next move, given everything the model would be sent."""
        ...
