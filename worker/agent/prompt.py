"""Deterministic context: the run-wide prefix and each session's brief.

The prefix (system instruction, tool declarations in fixed order, profile name) is
byte-identical across a run's sessions so providers can cache it; the run records its
SHA-256. No time, id or random value goes into it. The brief comes after it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

from worker.agent.profiles import Profile
from worker.agent.tools import tool_specs
from worker.models.base import Content, ToolSpec

#: How every loop warning of the runtime begins its advice (see ``worker.agent.limits``).
LOOP_HINT = "Next: publish the page"
#: How the verifier's findings open when they are sent back to the agent.
FEEDBACK_OPENING = "The verifier rejected the artifact"
#: Every session names its artifact this, so that reports can find it.
ARTIFACT_NAME = "dashboard.html"

_SUBJECTS = (
    "Edge Cluster",
    "Ingest Pipeline",
    "Payments API",
    "Render Farm",
    "Search Tier",
    "Cache Fleet",
    "Build Grid",
    "Stream Router",
    "Auth Gateway",
    "Batch Scheduler",
    "Object Store",
    "Telemetry Bus",
    "GPU Pool",
    "Message Queue",
    "CDN Shield",
)
_VIEWS = ("Health", "Pulse", "Overview", "Vitals", "Control Room", "Live Status", "Monitor")
_METRICS = (
    "cpu load",
    "memory pressure",
    "io wait",
    "queue depth",
    "p99 latency",
    "error rate",
    "cache hit ratio",
    "requests per second",
    "disk throughput",
    "network egress",
    "gc pauses",
    "thread count",
    "open connections",
    "replication lag",
    "saturation",
)


@dataclass(frozen=True)
class Prefix:
    """The run-wide part of every request."""

    system_instruction: str
    tools: tuple[ToolSpec, ...]
    sha256: str


@functools.cache
def build_prefix(profile: Profile) -> Prefix:
    """The prefix for ``profile``, with its hash (computed once per profile and process)."""
    tools = tool_specs()
    canonical = json.dumps(
        {
            "profile": profile.name,
            "system_instruction": profile.system_instruction,
            "tools": [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in tools
            ],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return Prefix(profile.system_instruction, tools, hashlib.sha256(canonical.encode()).hexdigest())


def make_brief(seed: int, index: int) -> dict[str, Any]:
    """A session's assignment, deterministic per (run seed, session index)."""
    rng = random.Random(f"brief:{seed}:{index}")
    metrics = rng.sample(_METRICS, k=rng.randint(3, 5))
    return {
        "title": f"{rng.choice(_SUBJECTS)} {rng.choice(_VIEWS)}",
        "metrics": metrics,
        "artifact_name": ARTIFACT_NAME,
        "design_seed": rng.randrange(1 << 31),
    }


def brief_message(brief: dict[str, Any]) -> Content:
    """The first user message of a session."""
    metrics = ", ".join(brief["metrics"])
    text = (
        f'Build the dashboard card "{brief["title"]}". Show live synthetic telemetry for: '
        f"{metrics}. Publish it as {brief['artifact_name']} and hand it off when it is done."
    )
    return {"role": "user", "parts": [{"text": text}]}


def feedback_text(checks: list[dict[str, Any]], *, round_no: int, rounds: int) -> str:
    """The verifier's findings as the agent's next user message."""
    lines = [f"- {c['name']}: {c['detail']}" for c in checks if not c.get("passed")]
    return (
        f"{FEEDBACK_OPENING} (repair round {round_no + 1} of {rounds}). "
        "Findings:\n"
        + "\n".join(lines)
        + '\nRepair the same artifact in place with manage_artifact(action="edit", '
        "expected_version=...) and hand it off again."
    )


def user_text(text: str) -> Content:
    """A user message carrying plain text (runtime notices, verifier findings)."""
    return {"role": "user", "parts": [{"text": text}]}
