"""What a run is asked to do: its wave spec and its per-run behaviour, stored with it.

A leaf: every layer may read a run's configuration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from worker.errors import InputError

_WAVE_RE = re.compile(r"^\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*$")
#: Most sessions one run may hold.
MAX_SESSIONS = 10_000
#: Output tokens one model call of a run that reserves its calls may produce, thinking
#: included, unless the run says: room for a 25 KB page in one call (about 6,000 tokens) and
#: the thinking before it.
DEFAULT_MAX_OUTPUT_TOKENS = 8192
#: Share by which one sim call's latency varies either way of the mean, unless the run says.
DEFAULT_JITTER = 0.2


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
    sim_mix: dict[str, float] | None = None
    """Weights of sim personas (None: the task's default persona)."""
    sim_flaw_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """Share of sim sessions whose first draft has a defect."""
    cache: Literal["implicit", "explicit"] = "implicit"
    """Gemini context caching: the API's implicit cache, or one explicit cache per run
    holding the stable prefix (system instruction and tools)."""
    verify: Literal["task", "static"] = "task"
    """How handoffs are judged: by the task's own verifier (Chromium for a page, the sandbox
    for Python), or by the task's static checks alone, recorded in the handoff's own commit
    (no verification task; a static task is always judged that way)."""
    record: bool = False
    """Record every artifact the run verifies in a browser as a video, kept with its
    verdict."""
    cache_warm: Literal["on", "off"] = "on"
    """Cache-warm dispatch: a wave that starts on a prefix the model has not cached lately
    sends one first turn, and the rest once it completes (``worker.store.warmup``)."""
    forecast: Literal["on", "off"] = "on"
    """With a budget, stop the run before a wave whose sessions the budget forecast says
    cannot all be paid (``worker.store.forecast``)."""
    reserve: Literal["on", "off"] = "on"
    """With a budget, reserve each model call's worst-case cost against it before the call
    is sent, so that the run never spends more than its budget (``worker.store.reservations``);
    off: the budget is checked when a turn starts, and turns in flight may pass it."""
    max_output_tokens: int | None = Field(default=None, ge=1)
    """Most output tokens, thinking included, one model call may produce: sent with every
    request as its ``maxOutputTokens``, and the output a reservation holds dollars for.
    None: the model's own limit, or :data:`DEFAULT_MAX_OUTPUT_TOKENS` when the run reserves
    its calls (:meth:`output_limit`)."""
    cache_warm_cap_s: float = Field(default=8.0, ge=0)
    """Longest wait of a wave's other first turns for the warming one."""
    instances: str | None = None
    """The task's instances the run plays, by position or id (``0-19,25``); None: all."""
    sample: int | None = Field(default=None, ge=1)
    """Play a seeded sample of this many of them."""
    epochs: int = Field(default=1, ge=1)
    """Times the run plays each instance it picked."""

    def output_limit(self, *, reserved: bool) -> int | None:
        """The ``maxOutputTokens`` of the run's calls: its own, or, when its calls are
        reserved against a budget (which needs a bound), the default; otherwise none."""
        if reserved or self.max_output_tokens is not None:
            return self.reserved_output_limit()
        return None

    def reserved_output_limit(self) -> int:
        """The output a reservation holds dollars for: the run's limit, or the default."""
        return self.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS


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
