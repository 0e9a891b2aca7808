"""Creating a run: its waves, its sessions and their briefs, in one transaction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import insert
from sqlalchemy.engine import Connection

from worker.agent.events import Brief
from worker.agent.profiles import DEFAULT_PROFILE, get_profile
from worker.agent.prompt import brief_message, build_prefix, make_brief
from worker.errors import InputError
from worker.models.sim.model import DEFAULT_JITTER
from worker.models.sim.personas import Persona, persona_for
from worker.store.lifecycle import wave_start
from worker.store.tables import events, outbox, runs, sessions, waves

_WAVE_RE = re.compile(r"^\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*$")
#: Most sessions one run may hold.
MAX_SESSIONS = 10_000


@dataclass(frozen=True)
class WaveSpec:
    """``waves`` consecutive waves of ``size`` concurrent sessions."""

    waves: int
    size: int

    @classmethod
    def parse(cls, text: str) -> WaveSpec:
        """Parse ``NxM`` (N waves of M sessions) or ``N`` (one wave of N).

        Raises:
            InputError: not of that form, or out of range.
        """
        match = _WAVE_RE.match(text)
        if not match:
            raise InputError(f"wave spec {text!r} is not NxM (N waves of M sessions), e.g. 10x10")
        first, second = int(match[1]), match[2]
        spec = cls(first, int(second)) if second is not None else cls(1, first)
        if spec.waves < 1 or spec.size < 1:
            raise InputError(f"wave spec {text!r} needs at least one wave of one session")
        if spec.total > MAX_SESSIONS:
            raise InputError(
                f"wave spec {text!r} asks for {spec.total} sessions; the most is {MAX_SESSIONS}"
            )
        return spec

    @property
    def total(self) -> int:
        """Sessions in the run."""
        return self.waves * self.size

    def __str__(self) -> str:
        return f"{self.waves}x{self.size}"


class RunConfig(BaseModel):
    """Per-run behaviour, stored with the run so every worker applies the same rules."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    waves: str
    """The wave spec, e.g. ``10x10``."""
    seed: int = 0
    """Seeds briefs and the sim model; the same seed gives the same run."""
    max_turns: int = Field(default=40, ge=1)
    """Turns after which a session is stopped."""
    repair_rounds: int = Field(default=2, ge=0)
    """Verifier rejections a session may repair before it fails."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Tokens a session may spend before it is stopped (None: no limit)."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """Dollars a session may spend before it is stopped (None: no limit)."""
    loop_repeat: int = Field(default=3, ge=2)
    """The same calls this many turns in a row are a loop."""
    loop_errors: int = Field(default=4, ge=2)
    """This many tool errors in a row are a loop."""
    loop_idle_turns: int = Field(default=6, ge=2)
    """This many turns without writing the artifact are a loop."""
    sim_latency_ms: int = Field(default=1500, ge=0)
    """Mean latency of one sim model call."""
    sim_latency_jitter: float = Field(default=DEFAULT_JITTER, ge=0.0, le=1.0)
    """Share by which one sim call's latency varies either way of the mean (0: every call
    takes the mean exactly, so the model floor of a run is known to the millisecond)."""
    sim_mix: dict[str, float] = Field(default_factory=lambda: {"diligent": 1.0})
    """Weights of sim personas."""
    sim_flaw_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """Share of sim sessions whose first draft has a defect."""
    cache: Literal["implicit", "explicit"] = "implicit"
    """Gemini context caching: the API's implicit cache, or one explicit cache per run
    holding the stable prefix (system instruction and tools)."""
    record: bool = False
    """Record every artifact the run verifies in a browser as a video, kept with its
    verdict."""
    cache_warm: Literal["on", "off"] = "on"
    """Cache-warm dispatch: a wave that starts on a prefix the model has not cached lately
    sends one first turn, and the rest once it completes (``worker.store.warmup``)."""
    forecast: Literal["on", "off"] = "on"
    """With a budget, stop the run before a wave whose sessions the budget forecast says
    cannot all be paid (``worker.store.forecast``)."""
    cache_warm_cap_s: float = Field(default=8.0, ge=0)
    """Longest wait of a wave's other first turns for the warming one."""

    @field_validator("sim_mix")
    @classmethod
    def _known_personas(cls, mix: dict[str, float]) -> dict[str, float]:
        unknown = set(mix) - {p.value for p in Persona}
        if unknown:
            raise ValueError(
                f"unknown persona(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(p.value for p in Persona)}"
            )
        if not mix or any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
            raise ValueError("persona weights must be non-negative and not all zero")
        return mix


def parse_mix(text: str) -> dict[str, float]:
    """Parse ``diligent=3,sloppy=1`` (or ``sloppy``) into persona weights.

    Raises:
        InputError: malformed text.
    """
    mix: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, weight = item.partition("=")
        try:
            mix[name.strip()] = float(weight) if weight else 1.0
        except ValueError:
            raise InputError(f"persona weight {weight!r} in {text!r} is not a number") from None
    if not mix:
        raise InputError("the persona mix is empty")
    return mix


def create_run(
    conn: Connection,
    *,
    model: str,
    config: RunConfig,
    now: datetime,
    profile: str = DEFAULT_PROFILE,
    budget_usd: float | None = None,
    ladder_id: int | None = None,
    tier: str | None = None,
    start: bool = True,
) -> int:
    """Insert a run with its waves and sessions, and (``start``) the outbox row of wave 1.

    A ladder's later runs are created with ``start=False``: the run before them writes
    that row when it finishes.
    """
    spec = WaveSpec.parse(config.waves)
    prefix = build_prefix(get_profile(profile))
    run_id = conn.execute(
        insert(runs)
        .values(
            profile=profile,
            model=model,
            config=config.model_dump(mode="json"),
            prefix_sha256=prefix.sha256,
            budget_usd=budget_usd,
            status="pending",
            ladder_id=ladder_id,
            tier=tier,
            created_at=now,
        )
        .returning(runs.c.id)
    ).scalar_one()
    wave_ids = (
        conn.execute(
            insert(waves).returning(waves.c.id, sort_by_parameter_order=True),
            [
                {
                    "run_id": run_id,
                    "index": i,
                    "size": spec.size,
                    "status": "pending",
                    "done_count": 0,
                }
                for i in range(1, spec.waves + 1)
            ],
        )
        .scalars()
        .all()
    )
    rows = []
    for n in range(spec.total):
        rows.append(
            {
                "run_id": run_id,
                "wave_id": wave_ids[n // spec.size],
                "index": n,
                "persona": persona_for(config.sim_mix, config.seed, n).value,
                "brief": make_brief(config.seed, n),
                "status": "pending",
            }
        )
    session_ids = (
        conn.execute(insert(sessions).returning(sessions.c.id, sort_by_parameter_order=True), rows)
        .scalars()
        .all()
    )
    conn.execute(
        insert(events),
        [
            {
                "session_id": session_id,
                "turn_no": 0,
                "seq": 0,
                "kind": Brief.kind.value,
                "payload": Brief(brief_message(row["brief"])).to_payload(),
                "created_at": now,
            }
            for session_id, row in zip(session_ids, rows, strict=True)
        ],
    )
    if start:
        conn.execute(insert(outbox).values(wave_start(run_id, 1, now)))
    return int(run_id)
