"""The dashboard task: one standalone HTML/Canvas telemetry card, judged in Chromium."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import ClassVar

from worker.models.sim.player import Player
from worker.profiles import Profile
from worker.tasks.base import Artifact, Check, Instance, Submission, Task, VerifierKind
from worker.tasks.dashboard import sim
from worker.tasks.dashboard.brief import ARTIFACT_NAME, INSTANCES, instructions, make_brief
from worker.tasks.dashboard.checks import DEFAULT_MAX_BYTES, static_checks
from worker.tasks.dashboard.pages import render_dashboard
from worker.tasks.dashboard.personas import PERSONAS, flaw_for

__all__ = ["DashboardTask", "task"]

#: What every dashboard session is told about its workspace. The load checks parse the page
#: for what a browser would fetch, so a credit link passes and a CDN script does not.
WORKSPACE_POLICY = """\
Workspace policy:
- You work alone in a private workspace; artifacts are files addressed by name.
- Every artifact is one standalone HTML file: inline CSS and JavaScript only. It may link to
  other pages, but it must load nothing from the network (no CDN script or stylesheet, web
  font, remote image, fetch, import or socket): a browser with the network cut judges it.
- The page draws with a 2D canvas context and animates with requestAnimationFrame at 60 fps,
  visualising synthetic telemetry generated in the page itself.
"""

_CANDIDATE_CONTRACT = """
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


class _Briefs(Sequence[Instance]):
    """The task's cards, made as they are asked for."""

    def __len__(self) -> int:
        return INSTANCES

    def __getitem__(self, index: int) -> Instance:  # type: ignore[override]
        if not -INSTANCES <= index < INSTANCES:
            raise IndexError(index)
        index %= INSTANCES
        return Instance(f"card-{index}", make_brief(index))


class DashboardTask(Task):
    """Build a live canvas dashboard card for a brief; Chromium judges its first seconds."""

    name: ClassVar[str] = "dashboard"
    version: ClassVar[str] = "1"
    verifier: ClassVar[VerifierKind] = VerifierKind.chromium
    artifacts: ClassVar[tuple[Artifact, ...]] = (Artifact("*", "text/html", DEFAULT_MAX_BYTES),)
    personas: ClassVar[tuple[str, ...]] = PERSONAS
    default_persona: ClassVar[str] = "diligent"

    @cached_property
    def _instances(self) -> _Briefs:
        return _Briefs()

    def instances(self) -> Sequence[Instance]:
        """A thousand cards: a title, three to five metrics and a design seed each."""
        return self._instances

    def instance(self, instance_id: str) -> Instance:
        """Card ``card-<n>``."""
        prefix, _, number = instance_id.partition("-")
        if prefix == "card" and number.isdigit() and int(number) < INSTANCES:
            return self._instances[int(number)]
        return super().instance(instance_id)

    def instance_for(self, instructions: str) -> Instance | None:
        """The card a conversation is about: one of the task's, or one made up from the text
        (a brief written by hand names a title the task's cards may not have)."""
        found = super().instance_for(instructions)
        if found is not None:
            return found
        title = instructions.partition('"')[2].partition('"')[0] or "Live Telemetry"
        seed = int(hashlib.sha256(instructions.encode()).hexdigest()[8:16], 16) >> 1
        return Instance("card-x", {**make_brief(0), "title": title, "design_seed": seed})

    def system_prompt(self, profile: Profile) -> str:
        """The front-end engineer's brief, with the profile's contract."""
        if profile.name == "baseline":
            return (
                "You are a front-end engineer. You build one standalone HTML/Canvas dashboard "
                "card.\n\n" + WORKSPACE_POLICY + "\n" + profile.contract
            )
        return (
            "You are a front-end engineer. You build one standalone HTML/Canvas dashboard card "
            "and hand it off.\n\n" + WORKSPACE_POLICY + _CANDIDATE_CONTRACT
        )

    def instructions(self, instance: Instance) -> str:
        """Build the card, publish it as ``dashboard.html`` and hand it off."""
        return instructions(dict(instance.public))

    def main_artifact(self, instance: Instance) -> str:
        """``dashboard.html``."""
        return str(instance.public.get("artifact_name", ARTIFACT_NAME))

    def static_checks(self, submission: Submission) -> list[Check]:
        """Size, a 2D canvas, an animation loop, nothing loaded from the network."""
        return static_checks(submission.content, max_bytes=submission.max_bytes)

    def solution(self, instance: Instance) -> Mapping[str, str]:
        """A generated dashboard for the card's title and design seed."""
        brief = instance.public
        page = render_dashboard(int(brief["design_seed"]), title=str(brief["title"])).html
        return {self.main_artifact(instance): page}

    def player(
        self, instance: Instance, persona: str, *, seed: int, index: int, flaw_rate: float
    ) -> Player:
        """The dashboard's own scripted authors (see :mod:`worker.tasks.dashboard.sim`)."""
        brief = instance.public
        title = str(brief["title"])
        if persona == "null":
            return sim.HandoffPlayer((sim.NULL_PAGE,), title=title)
        if persona == "cheat":
            return sim.HandoffPlayer(
                sim.CHEATS[index % len(sim.CHEATS) :] + sim.CHEATS, title=title
            )
        flaw = flaw_for(flaw_rate, seed, index) if persona != "oracle" else None
        return sim.DashboardPlayer(
            seed=seed,
            index=index,
            persona="diligent" if persona == "oracle" else persona,
            design_seed=int(brief["design_seed"]),
            title=title,
            flaw=flaw,
            metrics=tuple(brief["metrics"]),
        )


#: The built-in dashboard task (the ``swarm.tasks`` entry point ``dashboard``).
task = DashboardTask()
