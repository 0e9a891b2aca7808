"""``sim``: an offline model that behaves like an agent, deterministically.

It reads the conversation the way a model would (tool results, runtime notices, verifier
findings), decides its next step from its persona and a random stream seeded by
(run seed, session index, turn), and authors real canvas dashboards. Usage is reported
the way Gemini reports it, with the repeated prefix counted as cached.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

from worker.agent.profiles import MARKDOWN_CLAUSE
from worker.agent.prompt import ARTIFACT_NAME, FEEDBACK_OPENING, LOOP_HINT
from worker.config import DEFAULT_JITTER
from worker.models.base import Content, FunctionCall, ModelRequest, ModelTurn, TokenUsage, calls_of
from worker.tasks.dashboard.pages import render_dashboard, render_lite, render_region
from worker.tasks.dashboard.personas import Persona

#: Smallest prefix, in tokens, that the provider caches implicitly.
MIN_CACHED_TOKENS = 1024
#: Approximate characters per token.
CHARS_PER_TOKEN = 4


@dataclass
class _Facts:
    """What the conversation so far tells the agent."""

    turns: int = 0
    plan_set: bool = False
    version: int | None = None
    edits: int = 0
    errors: int = 0
    last_errors: list[dict[str, Any]] = field(default_factory=list)
    feedback: bool = False
    warned: bool = False
    """The runtime told the agent it is going round in circles."""
    too_large: bool = False
    """A write was refused for its size."""
    name: str = ARTIFACT_NAME


def _read(history: tuple[Content, ...]) -> _Facts:
    facts = _Facts()
    # Each function response answers the call at the same position in the model's turn.
    calls: list[FunctionCall] = []
    for content in history:
        if content["role"] == "model":
            facts.turns += 1
            facts.last_errors = []
            facts.feedback = False
            calls = list(calls_of(content))
            continue
        for part in content.get("parts") or ():
            if "text" in part and part["text"].startswith(FEEDBACK_OPENING):
                facts.feedback = True
            if "text" in part and LOOP_HINT in part["text"]:
                facts.warned = True
            response = part.get("function_response")
            if not response:
                continue
            call = calls.pop(0) if calls else None
            body = response["response"]
            if "error" in body:
                facts.errors += 1
                facts.last_errors.append(body["error"])
                facts.too_large = facts.too_large or body["error"].get("kind") == "too_large"
                if "current_version" in body["error"]:
                    facts.version = body["error"]["current_version"]
                continue
            out = body.get("output", {})
            if response["name"] == "plan_manage":
                facts.plan_set = facts.plan_set or bool(out.get("items"))
            elif call is not None and _writes(call):
                # the first write created the artifact, later ones edited it
                if facts.version is not None:
                    facts.edits += 1
                facts.version = out["version"]
    return facts


def _writes(call: FunctionCall) -> bool:
    return call.name == "manage_artifact" and call.args.get("action") in ("create", "edit")


class SimModel:
    """A deterministic agent for one session.

    Args:
        seed: The run's seed.
        index: The session's index within the run.
        persona: How it behaves.
        latency_ms: Mean wall time of one call.
        jitter: Share by which one call's wall time varies either way of the mean.
        design_seed: Seed of the dashboard it authors.
        title: Title of that dashboard.
        flaw: A defect of its first draft (see ``worker.tasks.dashboard.pages.FLAWS``), repaired on
            the verifier's findings.
        metrics: What the brief asks the dashboard to show (used by the compact card).
    """

    def __init__(
        self,
        *,
        seed: int,
        index: int,
        persona: Persona,
        latency_ms: int,
        jitter: float = DEFAULT_JITTER,
        design_seed: int,
        title: str,
        flaw: str | None = None,
        metrics: tuple[str, ...] = ("cpu load", "p99 latency", "error rate"),
    ) -> None:
        self.seed = seed
        self.index = index
        self.persona = persona
        self.latency_ms = latency_ms
        self.jitter = jitter
        self.design_seed = design_seed
        self.title = title
        self.flaw = flaw
        self.metrics = list(metrics)
        plan_rng = random.Random(f"sim:{seed}:{index}")
        self.markdown_turns = plan_rng.randint(1, 3) if persona is Persona.markdown else 0
        self.explore_turns = plan_rng.randint(6, 14) if persona is Persona.explorer else 0
        self.max_mistakes = plan_rng.randint(2, 4) if persona is Persona.sloppy else 0
        # Told it is looping, an explorer gets on with the work half of the time.
        self.heeds_warnings = plan_rng.random() < 0.5
        # Under a tight size limit, half of the agents first try their full page anyway.
        self.ambitious = plan_rng.random() < 0.5

    def generate(self, request: ModelRequest) -> ModelTurn:
        """Wait the configured latency, then decide and return the next turn.

        The turn is decided after the wait, as a real model's reply arrives at its end: a
        call in flight holds nothing of its answer (at a thousand calls, their pages would
        be some 20 MB). The wait draws from a stream of its own, so the turn decided and
        its usage do not depend on whether there is one.
        """
        if self.latency_ms:
            wait = random.Random(f"latency:{self.seed}:{self.index}:{len(request.history)}")
            time.sleep(self.latency_ms * wait.uniform(1 - self.jitter, 1 + self.jitter) / 1000)
        facts = _read(request.history)
        rng = random.Random(f"turn:{self.seed}:{self.index}:{facts.turns}")
        if facts.turns < self.markdown_turns:
            content = self._markdown_answer()
        elif MARKDOWN_CLAUSE in request.system_instruction:
            calls, text = self._baseline(facts, rng)
            content = self._content(calls, facts.turns, text=text)
        else:
            calls = self._decide(facts, rng)
            content = self._content(calls, facts.turns)
        usage = self._usage(request, content, rng)
        text = "".join(p.get("text", "") for p in content["parts"])
        return ModelTurn(content=content, calls=calls_of(content), text=text, usage=usage)

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

    def _markdown_answer(self) -> Content:
        page = self._page(flawed=False)
        return {
            "role": "model",
            "parts": [{"text": f"Here is the dashboard:\n\n```html\n{page}\n```\n"}],
        }

    def _content(self, calls: list[FunctionCall], turn: int, text: str = "") -> Content:
        parts: list[dict[str, Any]] = [{"text": text}] if text else []
        for i, call in enumerate(calls):
            part: dict[str, Any] = {
                "function_call": {"id": f"call-{turn}-{i}", "name": call.name, "args": call.args}
            }
            if i == 0:
                # Like Gemini 3, only the first function call of a turn carries a signature.
                digest = hashlib.sha256(f"{self.seed}:{self.index}:{turn}".encode()).digest()
                part["thought_signature"] = base64.b64encode(digest).decode()
            parts.append(part)
        return {"role": "model", "parts": parts}

    def _usage(self, request: ModelRequest, content: Content, rng: random.Random) -> TokenUsage:
        prefix = (
            len(request.system_instruction)
            + len(json.dumps([t.parameters for t in request.tools]))
            + sum(len(t.description) for t in request.tools)
        )
        sizes = [len(json.dumps(c)) for c in request.history]
        prompt = (prefix + sum(sizes)) // CHARS_PER_TOKEN
        # The previous call sent everything before the last model turn, so that is cached;
        # the model turn itself came back as its output and was never a prompt.
        last_model = max(
            (i for i, c in enumerate(request.history) if c["role"] == "model"), default=-1
        )
        seen = (prefix + sum(sizes[: max(last_model, 0)])) // CHARS_PER_TOKEN
        first_call_of_run = self.index == 0 and last_model < 0
        cached = 0 if first_call_of_run or seen < MIN_CACHED_TOKENS else seen
        output = len(json.dumps(content)) // CHARS_PER_TOKEN
        return TokenUsage(
            prompt_tokens=prompt,
            cached_tokens=min(cached, prompt),
            output_tokens=output,
            thoughts_tokens=rng.randint(64, 512),
        )
