"""Artifact versions as unified diffs, each against the version before it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["DIFF_CONTEXT_LINES", "VersionDiff", "unified_diff", "version_diffs"]

#: Lines of context around each change of a version diff.
DIFF_CONTEXT_LINES = 3


@dataclass(frozen=True)
class VersionDiff:
    """An artifact version, as a unified diff against the version before it."""

    name: str
    version: int
    size_bytes: int
    sha256: str
    previous: int | None
    """The version it is compared with; None for a new artifact."""
    diff: list[str]
    added: int
    removed: int


def unified_diff(before: str, after: str, *, old: str, new: str) -> list[str]:
    """The lines of a unified diff from ``before`` to ``after``, headers included."""
    return list(
        difflib.unified_diff(
            before.splitlines(),
            after.splitlines(),
            fromfile=old,
            tofile=new,
            lineterm="",
            n=DIFF_CONTEXT_LINES,
        )
    )


def version_diffs(rows: Iterable[dict[str, Any]]) -> list[tuple[int, VersionDiff]]:
    """Each version written by a turn (not a starting file), diffed against the one before;
    with the turn that wrote it.

    Args:
        rows: Versions by artifact name, then version: ``name``, ``version``, ``turn_no``
            (below 0 for a starting file), ``content``, ``sha256`` and ``size_bytes``.
    """
    out: list[tuple[int, VersionDiff]] = []
    before: dict[str, dict[str, Any]] = {}
    for row in rows:  # by name, then version
        name, prior = row["name"], before.get(row["name"])
        before[name] = row
        if row["turn_no"] < 0:
            continue
        lines = unified_diff(
            prior["content"] if prior else "",
            row["content"],
            old=f"{name} v{prior['version']}" if prior else "/dev/null",
            new=f"{name} v{row['version']}",
        )
        body = lines[2:]
        out.append(
            (
                row["turn_no"],
                VersionDiff(
                    name=name,
                    version=row["version"],
                    size_bytes=row["size_bytes"],
                    sha256=row["sha256"],
                    previous=prior["version"] if prior else None,
                    diff=lines,
                    added=sum(1 for line in body if line.startswith("+")),
                    removed=sum(1 for line in body if line.startswith("-")),
                ),
            )
        )
    return out
