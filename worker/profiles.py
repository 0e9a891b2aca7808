"""Profiles: the engine rules and the tool contract a run is held to, in one readable place.

``candidate`` is the default. ``baseline`` keeps the rules the seed engine started with, so
that the two can be compared on the same ladder. A profile says how the tools are used; the
task says what the work is (``worker.tasks``), and the system prompt is the task's, written
with the profile's contract.

A leaf: it imports nothing from the project but its errors.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.errors import ConfigError

__all__ = ["BASELINE", "CANDIDATE", "DEFAULT_PROFILE", "PROFILES", "Profile", "get_profile"]


@dataclass(frozen=True)
class Profile:
    """Engine rules and tool contract of a run."""

    name: str
    contract: str
    """How the agent is to use the tools, as the system prompt says it."""
    max_bytes_cap: int | None
    """A ceiling on every artifact, below the task's own (None: the task's)."""
    strict_plan: bool
    """When true, handoff is refused until every plan item is done, in order."""
    tool_mode: str
    """Function-calling mode sent to the model (AUTO lets it answer in text)."""

    def max_bytes(self, task_max_bytes: int) -> int:
        """The ceiling of an artifact the task allows ``task_max_bytes`` for."""
        cap = self.max_bytes_cap
        return task_max_bytes if cap is None else min(cap, task_max_bytes)


#: The baseline contract's demand that the work also be pasted into the answer.
MARKDOWN_CLAUSE = "Provide the complete app in a markdown code block, and save it as an artifact."

CANDIDATE = Profile(
    name="candidate",
    contract="""\
Contract:
1. Optionally set a short plan with plan_manage(action="set"). Items can be marked done in
   any order and never block handoff.
2. Write files directly with manage_artifact: action="create" for a new one, "get" to read
   one (a file you start with is at version 0). Never paste a file into a chat message or a
   markdown code block: text answers are not read.
3. Every edit is in place and carries expected_version, the version you last saw. If the
   tool reports a conflict, use the current_version it returns and edit again.
4. When the work is complete, call handoff(summary, artifact_name). A verifier judges it;
   if it fails, you get its findings and repair the same files in place.
""",
    max_bytes_cap=None,
    strict_plan=False,
    tool_mode="AUTO",
)

BASELINE = Profile(
    name="baseline",
    contract=f"""\
Contract:
1. Set a plan with plan_manage(action="set") and check items off strictly in order; handoff
   is refused while any item is open.
2. {MARKDOWN_CLAUSE}
3. To repair a draft, delete it and create it again.
Limits: an artifact may be at most 8 KB.
""",
    max_bytes_cap=8 * 1024,
    strict_plan=True,
    tool_mode="AUTO",
)

PROFILES = {p.name: p for p in (CANDIDATE, BASELINE)}
#: Profile used when a run names none.
DEFAULT_PROFILE = CANDIDATE.name


def get_profile(name: str) -> Profile:
    """Look a profile up by name.

    Raises:
        ConfigError: no profile has that name.
    """
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(
            f"unknown profile {name!r}; choose one of {', '.join(sorted(PROFILES))}"
        ) from None
