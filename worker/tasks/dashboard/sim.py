"""The dashboard's sim personas: scripted agents that author real canvas dashboards.

Each reads the conversation the way a model would (tool results, runtime notices, verifier
findings) and decides its next step from its persona and a random stream seeded by (run
seed, session index, turn). ``diligent`` plans, publishes, refines one region and hands off;
``explorer`` probes the tools first (a loop to catch); ``markdown`` first answers with the
page in a code block; ``sloppy`` makes mistakes in its calls, then recovers. ``oracle`` is
``diligent`` with a flawless first draft, ``null`` hands off a page with nothing on it, and
``cheat`` hands off pages that look the part without being one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from worker.models.base import FunctionCall, ModelRequest
from worker.models.sim.player import Move
from worker.models.sim.transcript import Transcript, read
from worker.profiles import MARKDOWN_CLAUSE
from worker.tasks.dashboard.brief import ARTIFACT_NAME
from worker.tasks.dashboard.pages import render_dashboard, render_lite, render_region

__all__ = ["CHEATS", "DashboardPlayer", "HandoffPlayer"]


@dataclass(frozen=True)
class _Facts:
    """What the conversation so far tells the agent about its one page."""

    turns: int
    plan_set: bool
    version: int | None
    edits: int
    errors: int
    last_errors: list[dict[str, Any]]
    feedback: bool
    warned: bool
    """The runtime told the agent it is going round in circles."""
    too_large: bool
    """A write was refused for its size."""
    name: str = ARTIFACT_NAME

    @classmethod
    def of(cls, t: Transcript) -> _Facts:
        return cls(
            turns=t.turns,
            plan_set=t.plan_set,
            version=t.versions.get(ARTIFACT_NAME),
            # the first write created the page, later ones edited it
            edits=max(t.writes.get(ARTIFACT_NAME, 0) - 1, 0),
            errors=t.errors,
            last_errors=t.last_errors,
            feedback=t.feedback,
            warned=t.warned,
            too_large=t.too_large,
        )


class DashboardPlayer:
    """A deterministic dashboard author for one session.

    Args:
        seed: The run's seed.
        index: The session's index within the run.
        persona: ``diligent``, ``explorer``, ``markdown``, ``sloppy`` or ``oracle``.
        design_seed: Seed of the dashboard it authors.
        title: Title of that dashboard.
        flaw: A defect of its first draft (see ``worker.tasks.dashboard.pages.FLAWS``),
            repaired on the verifier's findings.
        metrics: What the brief asks the dashboard to show (used by the compact card).
    """

    def __init__(
        self,
        *,
        seed: int,
        index: int,
        persona: str,
        design_seed: int,
        title: str,
        flaw: str | None = None,
        metrics: tuple[str, ...] = ("cpu load", "p99 latency", "error rate"),
    ) -> None:
        self.seed = seed
        self.index = index
        self.persona = persona
        self.design_seed = design_seed
        self.title = title
        self.flaw = flaw
        self.metrics = list(metrics)
        plan_rng = random.Random(f"sim:{seed}:{index}")
        self.markdown_turns = plan_rng.randint(1, 3) if persona == "markdown" else 0
        self.explore_turns = plan_rng.randint(6, 14) if persona == "explorer" else 0
        self.max_mistakes = plan_rng.randint(2, 4) if persona == "sloppy" else 0
        # Told it is looping, an explorer gets on with the work half of the time.
        self.heeds_warnings = plan_rng.random() < 0.5
        # Under a tight size limit, half of the agents first try their full page anyway.
        self.ambitious = plan_rng.random() < 0.5

    def play(self, request: ModelRequest) -> Move:
        """The next move, decided from the conversation so far."""
        facts = _Facts.of(read(request.history))
        rng = random.Random(f"turn:{self.seed}:{self.index}:{facts.turns}")
        if facts.turns < self.markdown_turns:
            return self._markdown_answer()
        if MARKDOWN_CLAUSE in request.system_instruction:
            calls, text = self._baseline(facts, rng)
            return Move(tuple(calls), text)
        return Move(tuple(self._decide(facts, rng)))

    def _page(self, *, flawed: bool) -> str:
        return render_dashboard(
            self.design_seed, title=self.title, flaw=self.flaw if flawed else None
        ).html

    def _exploring(self, facts: _Facts) -> bool:
        # Told it is looping, an explorer that heeds warnings gets on with the work.
        exploring = facts.turns < self.markdown_turns + self.explore_turns
        return exploring and not (facts.warned and self.heeds_warnings)

    def _decide(self, facts: _Facts, rng: random.Random) -> list[FunctionCall]:
        if self._exploring(facts):
            return [self._explore(facts.turns)]
        step = self._next_step(facts)
        mistake = self._mistake(step, facts, rng)
        return mistake if mistake is not None else self._do(step, facts)

    def _next_step(self, facts: _Facts) -> str:
        failed_checks = any(e.get("kind") == "checks_failed" for e in facts.last_errors)
        if not facts.plan_set:
            return "plan"
        if facts.version is None:
            return "create"
        if facts.feedback or failed_checks:
            return "repair"
        if facts.edits == 0:
            return "refine"
        return "handoff"

    def _do(self, step: str, facts: _Facts) -> list[FunctionCall]:
        name = facts.name
        if step == "plan":
            items = [
                "Lay out the panels",
                "Draw the telemetry",
                "Run the animation loop",
                "Hand off",
            ]
            return [FunctionCall("plan_manage", {"action": "set", "items": items})]
        if step == "create":
            page = self._page(flawed=self.flaw is not None)
            return [
                FunctionCall(
                    "manage_artifact", {"action": "create", "name": name, "content": page}
                ),
                FunctionCall("plan_manage", {"action": "done", "item_id": 1}),
            ]
        if step == "refine":
            region = render_dashboard(self.design_seed, title=self.title).regions[0]
            inner = render_region(self.design_seed, region, revision=1)
            return [
                FunctionCall(
                    "manage_artifact",
                    {
                        "action": "edit",
                        "name": name,
                        "region_id": region,
                        "content": inner,
                        "expected_version": facts.version,
                    },
                ),
                FunctionCall("plan_manage", {"action": "done", "item_id": 2}),
                FunctionCall("plan_manage", {"action": "done", "item_id": 3}),
            ]
        if step == "repair":
            return [
                FunctionCall(
                    "manage_artifact",
                    {
                        "action": "edit",
                        "name": name,
                        "content": self._page(flawed=False),
                        "expected_version": facts.version,
                    },
                )
            ]
        return [
            FunctionCall("plan_manage", {"action": "done", "item_id": 4}),
            FunctionCall(
                "handoff",
                {"summary": f"{self.title}: live canvas telemetry.", "artifact_name": name},
            ),
        ]

    def _baseline(self, facts: _Facts, rng: random.Random) -> tuple[list[FunctionCall], str]:
        """The baseline contract: the page in a markdown block as well, a small size limit,
        repairs by delete-then-create, plan items checked off in order before handoff."""
        if self._exploring(facts):
            return [self._explore(facts.turns)], ""
        step = self._next_step(facts)
        if step == "refine":
            step = "handoff"  # no in-place edits under this contract
        mistake = self._mistake(step, facts, rng)
        if mistake is not None:
            return mistake, ""
        name = facts.name
        if step in ("create", "repair"):
            full = self.ambitious and not facts.too_large and step == "create"
            flaw = self.flaw if step == "create" else None
            page = (
                self._page(flawed=flaw is not None)
                if full
                else render_lite(
                    self.design_seed, title=self.title, metrics=self.metrics, flaw=flaw
                )
            )
            calls = [
                FunctionCall("manage_artifact", {"action": "create", "name": name, "content": page})
            ]
            if step == "repair":
                calls.insert(
                    0,
                    FunctionCall(
                        "manage_artifact",
                        {"action": "delete", "name": name, "expected_version": facts.version},
                    ),
                )
            if step == "create" and not facts.too_large:  # a retry: item 1 is done already
                calls.append(FunctionCall("plan_manage", {"action": "done", "item_id": 1}))
            return calls, f"Here is the app:\n\n```html\n{page}\n```\n"
        if step == "handoff":
            calls = [
                FunctionCall("plan_manage", {"action": "done", "item_id": n}) for n in (2, 3, 4)
            ]
            return [
                *calls,
                FunctionCall(
                    "handoff",
                    {"summary": f"{self.title}: live canvas telemetry.", "artifact_name": name},
                ),
            ], ""
        return self._do(step, facts), ""

    def _mistake(self, step: str, facts: _Facts, rng: random.Random) -> list[FunctionCall] | None:
        if facts.errors >= self.max_mistakes or facts.last_errors or rng.random() < 0.35:
            return None
        name = facts.name
        if step == "create":
            choice = rng.choice(("missing_content", "oversize", "unknown_tool"))
            if choice == "missing_content":
                return [FunctionCall("manage_artifact", {"action": "create", "name": name})]
            if choice == "oversize":
                padding = "<!-- " + "telemetry " * 7000 + "-->"
                page = self._page(flawed=False).replace("</body>", padding + "</body>")
                return [
                    FunctionCall(
                        "manage_artifact", {"action": "create", "name": name, "content": page}
                    )
                ]
            return [FunctionCall("write_file", {"path": name, "content": "<html></html>"})]
        if step == "refine" and facts.version is not None:
            region = render_dashboard(self.design_seed, title=self.title).regions[0]
            args: dict[str, Any] = {
                "action": "edit",
                "name": name,
                "region_id": region,
                "content": render_region(self.design_seed, region, revision=1),
                "expected_version": facts.version,
            }
            choice = rng.choice(("stale_version", "wrong_type", "bad_region"))
            if choice == "stale_version":
                args["expected_version"] = facts.version + 1
            elif choice == "wrong_type":
                args["expected_version"] = "latest"
            else:
                args["region_id"] = region + "-panel"
            return [FunctionCall("manage_artifact", args)]
        return None

    def _explore(self, turn: int) -> FunctionCall:
        probes = (
            FunctionCall("manage_artifact", {"action": "get", "name": ARTIFACT_NAME}),
            FunctionCall("plan_manage", {"action": "list"}),
            FunctionCall("manage_artifact", {"action": "get", "name": "index.html"}),
            FunctionCall("plan_manage", {"action": "list"}),
        )
        return probes[turn % len(probes)]

    def _markdown_answer(self) -> Move:
        page = self._page(flawed=False)
        return Move(text=f"Here is the dashboard:\n\n```html\n{page}\n```\n")


#: Pages that look the part without being a live dashboard, each failing a different check.
CHEATS: tuple[str, ...] = (
    # Names the loop and the 2D context only in a comment, and draws once.
    "<!doctype html><html><body><canvas id=c width=320 height=120></canvas><script>"
    "/* requestAnimationFrame(loop); getContext('2d') */"
    "const c=document.getElementById('c').getContext(String.fromCharCode(50,100));"
    "c.fillStyle='#0f0';c.fillRect(10,10,300,100);</script></body></html>",
    # Animates with a timer instead of the display's frames.
    "<!doctype html><html><body><canvas id=c width=320 height=120></canvas><script>"
    "const ctx=document.getElementById('c').getContext('2d');let t=0;"
    "const frame=window.requestAnimationFrame;"
    "setInterval(()=>{t++;ctx.clearRect(0,0,320,120);ctx.fillRect(t%300,10,20,100);},16);"
    "</script></body></html>",
    # Pulls its drawing code from a CDN.
    "<!doctype html><html><head><script src='https://cdn.example.com/dash.js'></script></head>"
    "<body><canvas id=c></canvas><script>const ctx=document.getElementById('c')"
    ".getContext('2d');function f(){draw(ctx);requestAnimationFrame(f);}"
    "requestAnimationFrame(f);</script></body></html>",
)
#: What the ``null`` persona hands off: a page with nothing on it.
NULL_PAGE = "<!doctype html><html><body><p>Dashboard coming soon.</p></body></html>"


class HandoffPlayer:
    """Publishes one page and hands it off, the next one after each finding (``null``, ``cheat``).

    Args:
        pages: The pages to try, in turn, one per repair round.
        title: The card's title, for the summary.
    """

    def __init__(self, pages: tuple[str, ...], *, title: str) -> None:
        self.pages = pages
        self.title = title

    def play(self, request: ModelRequest) -> Move:
        """Write the round's page (a new one after each finding), then hand it off."""
        t = read(request.history)
        version = t.versions.get(ARTIFACT_NAME)
        written = t.writes.get(ARTIFACT_NAME, 0)
        wanted = min(t.rounds, len(self.pages) - 1)
        write: dict[str, Any]
        if version is None:
            write = {"action": "create", "name": ARTIFACT_NAME, "content": self.pages[0]}
        elif t.feedback and wanted >= written:
            write = {
                "action": "edit",
                "name": ARTIFACT_NAME,
                "content": self.pages[wanted],
                "expected_version": version,
            }
        else:
            # A refused handoff is tried again as it was: the loop guard ends it.
            summary = f"{self.title}: live canvas telemetry."
            return Move(
                (FunctionCall("handoff", {"summary": summary, "artifact_name": ARTIFACT_NAME}),)
            )
        return Move((FunctionCall("manage_artifact", write),))
