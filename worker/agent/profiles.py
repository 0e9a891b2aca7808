"""Profiles: the prompt contract and engine rules a run is held to, in one readable place.

``candidate`` is the default. ``baseline`` keeps the rules the seed engine started with,
so that the two can be compared on the same ladder.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.errors import ConfigError
from worker.tasks.dashboard.checks import DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class Profile:
    """Engine rules and prompt contract of a run."""

    name: str
    system_instruction: str
    artifact_max_bytes: int
    strict_plan: bool
    """When true, handoff is refused until every plan item is done, in order."""
    tool_mode: str
    """Function-calling mode sent to the model (AUTO lets it answer in text)."""


#: The baseline contract's demand that the page also be pasted into the answer.
MARKDOWN_CLAUSE = "Provide the complete app in a markdown code block, and save it as an artifact."

_WORKSPACE_POLICY = """\
Workspace policy:
- You work alone in a private workspace; artifacts are files addressed by name.
- Every artifact is one standalone HTML file: inline CSS and JavaScript only, no external
  URL of any kind (no CDN, web font, image, fetch, import or socket).
- The page draws with a 2D canvas context and animates with requestAnimationFrame at 60 fps,
  visualising synthetic telemetry generated in the page itself.
"""

CANDIDATE = Profile(
    name="candidate",
    system_instruction=(
        "You are a front-end engineer. You build one standalone HTML/Canvas dashboard card "
        "and hand it off.\n\n"
        + _WORKSPACE_POLICY
        + """
Contract:
1. Optionally set a short plan with plan_manage(action="set"). Items can be marked done in
   any order and never block handoff.
2. Publish the page directly with manage_artifact(action="create", name, content). Never
   paste the page into a chat message or a markdown code block: text answers are not read.
3. Wrap every panel in an element with a stable id, e.g. <section id="gauges">, so that a
   later edit can replace one region with manage_artifact(action="edit", region_id=...).
4. Every edit is in place and carries expected_version, the version you last saw. If the
   tool reports a conflict, use the current_version it returns and edit again.
5. When the page is complete, call handoff(summary, artifact_name). A verifier renders it
   in a browser; if it fails, you get its findings and repair the same artifact in place.
Limits: an artifact may be at most 64 KB.
"""
    ),
    artifact_max_bytes=DEFAULT_MAX_BYTES,
    strict_plan=False,
    tool_mode="AUTO",
)

BASELINE = Profile(
    name="baseline",
    system_instruction=(
        "You are a front-end engineer. You build one standalone HTML/Canvas dashboard card.\n\n"
        + _WORKSPACE_POLICY
        + f"""
Contract:
1. Set a plan with plan_manage(action="set") and check items off strictly in order; handoff
   is refused while any item is open.
2. {MARKDOWN_CLAUSE}
3. To repair a draft, delete it and create it again.
Limits: an artifact may be at most 8 KB.
"""
    ),
    artifact_max_bytes=8 * 1024,
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
