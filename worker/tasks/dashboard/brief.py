"""The dashboard task's instances: a card's title, the metrics it shows and its design seed."""

from __future__ import annotations

import random
from typing import Any

__all__ = ["ARTIFACT_NAME", "INSTANCES", "instructions", "make_brief"]

#: Every session names its page this, so that reports can find it.
ARTIFACT_NAME = "dashboard.html"
#: How many cards the task has. A run of more sessions plays them again, as later epochs.
INSTANCES = 1000

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


def make_brief(index: int, *, seed: int = 0) -> dict[str, Any]:
    """Card ``index``'s assignment, deterministic per (seed, index)."""
    rng = random.Random(f"brief:{seed}:{index}")
    metrics = rng.sample(_METRICS, k=rng.randint(3, 5))
    return {
        "title": f"{rng.choice(_SUBJECTS)} {rng.choice(_VIEWS)}",
        "metrics": metrics,
        "artifact_name": ARTIFACT_NAME,
        "design_seed": rng.randrange(1 << 31),
    }


def instructions(brief: dict[str, Any]) -> str:
    """What the agent is asked to build."""
    metrics = ", ".join(brief["metrics"])
    return (
        f'Build the dashboard card "{brief["title"]}". Show live synthetic telemetry for: '
        f"{metrics}. Publish it as {brief['artifact_name']} and hand it off when it is done."
    )
