"""Deterministic context: the run-wide prefix and each session's brief.

The prefix (system instruction, tool declarations in fixed order, profile name) is
byte-identical across a run's sessions so providers can cache it; the run records its
SHA-256. No time, id or random value goes into it. The brief, the task's instructions for the
session's instance, comes after it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass

from worker.agent.tools import tool_specs
from worker.models.base import Content, ToolSpec
from worker.profiles import Profile
from worker.tasks.base import Instance, Task

__all__ = ["Prefix", "brief_message", "build_prefix"]


@dataclass(frozen=True)
class Prefix:
    """The run-wide part of every request."""

    system_instruction: str
    tools: tuple[ToolSpec, ...]
    sha256: str


@functools.cache
def build_prefix(task: Task, profile: Profile) -> Prefix:
    """The prefix of ``task`` under ``profile``, with its hash (computed once per process)."""
    tools = tool_specs(task)
    system_instruction = task.system_prompt(profile)
    canonical = json.dumps(
        {
            "profile": profile.name,
            "system_instruction": system_instruction,
            "tools": [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in tools
            ],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return Prefix(system_instruction, tools, hashlib.sha256(canonical.encode()).hexdigest())


def brief_message(task: Task, instance: Instance) -> Content:
    """The first user message of a session: the task's instructions for its instance."""
    return {"role": "user", "parts": [{"text": task.instructions(instance.without_hidden())}]}
