"""What ``enqueue``, ``run`` and ``ladder`` are asked to create, and their shared options."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

import click
from pydantic import ValidationError

from scheduler.cli.services import send_or_raise
from worker.config import DEFAULT_MAX_OUTPUT_TOKENS, RunConfig, WaveSpec, parse_mix
from worker.errors import SwarmError
from worker.fleet.runtime import Runtime
from worker.models.pricing import PriceTable
from worker.models.registry import check_model
from worker.profiles import DEFAULT_PROFILE, PROFILES
from worker.runs.create import create_run
from worker.runs.ladders import DEFAULT_TIERS, create_ladder, parse_tiers
from worker.settings import Settings
from worker.store.engine import utcnow
from worker.store.waves import take_outbox
from worker.tasks.personas import check_mix
from worker.tasks.registry import DEFAULT_TASK, load_task
from worker.tasks.selection import select


@dataclass(frozen=True)
class RunRequest:
    """A run that ``enqueue`` or ``run`` was asked to create."""

    model: str
    profile: str
    config: RunConfig
    budget_usd: float | None = None
    task: str = DEFAULT_TASK

    def create(self, rt: Runtime) -> int:
        """Create the run and dispatch its first wave; returns the run id."""
        with rt.engine.begin() as conn:
            run_id = create_run(
                conn,
                model=self.model,
                config=self.config,
                profile=self.profile,
                now=utcnow(),
                budget_usd=self.budget_usd,
                task=self.task,
            )
        _start_first_wave(rt, run_id)
        return run_id


@dataclass(frozen=True)
class LadderRequest:
    """A ladder that ``ladder`` was asked to create: every tier, once per profile."""

    model: str
    profiles: tuple[str, ...]
    tiers: tuple[str, ...]
    config: RunConfig
    budget_usd: float | None = None
    task: str = DEFAULT_TASK

    def create(self, rt: Runtime) -> tuple[int, list[int]]:
        """Create the ladder and its runs and dispatch the first; returns (ladder, runs)."""
        with rt.engine.begin() as conn:
            ladder_id, run_ids = create_ladder(
                conn,
                model=self.model,
                tiers=self.tiers,
                profiles=self.profiles,
                config=self.config,
                now=utcnow(),
                budget_usd=self.budget_usd,
                task=self.task,
            )
        _start_first_wave(rt, run_ids[0])
        return ladder_id, run_ids


def _start_first_wave(rt: Runtime, run_id: int) -> None:
    """Start the run's first wave and send its turns, or say that the run is resumable.

    Raises:
        NotDispatched: the broker refused a send; the sessions stay due.
    """
    with rt.engine.begin() as conn:
        dispatches = take_outbox(conn, now=rt.clock(), run_id=run_id)
    send_or_raise(rt.dispatcher, dispatches, run_id=run_id)


def _config(waves: str, seed: int | None, mix: str | None, **fields: Any) -> RunConfig:
    try:
        return RunConfig(
            waves=str(WaveSpec.parse(waves)),
            seed=seed if seed is not None else random.randrange(1 << 31),
            sim_mix=parse_mix(mix) if mix else None,
            **fields,
        )
    except ValidationError as exc:
        raise click.BadParameter("; ".join(e["msg"] for e in exc.errors())) from None


def _check_task(task_ref: str, mix: str | None) -> None:
    """Refuse, before anything is made, a task that does not load or a mix it cannot play.

    Raises:
        click.BadParameter: with the one line that says why.
    """
    try:
        task = load_task(task_ref)
        if mix:
            check_mix(parse_mix(mix), task.personas, task=task.name)
    except SwarmError as exc:
        raise click.BadParameter(str(exc)) from None


def _waves(task_ref: str, given: str | None, fields: dict[str, Any], seed: int | None) -> str:
    """The run's wave spec: as given, or one wave an epoch of every instance picked.

    Raises:
        click.BadParameter: the given spec does not hold the epochs asked for.
    """
    epochs = fields["epochs"]
    picking = fields["instances"] is not None or fields["sample"] is not None or epochs > 1
    if given is not None and not (picking and epochs > 1):
        return given
    if not picking:
        return "1x1"
    try:
        task = load_task(task_ref)
        chosen = select(
            task, instances=fields["instances"], sample=fields["sample"], seed=seed or 0
        )
    except SwarmError as exc:
        raise click.BadParameter(str(exc)) from None
    wanted = f"{epochs}x{len(chosen)}"
    if given is not None and WaveSpec.parse(given).total != epochs * len(chosen):
        raise click.BadParameter(
            f"--wave {given} makes {WaveSpec.parse(given).total} sessions; {len(chosen)} "
            f"instances x {epochs} epochs need {epochs * len(chosen)} (or leave --wave out: "
            f"{wanted})",
            param_hint="--wave",
        )
    return given or wanted


def run_options(*, ladder: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Options shared by ``enqueue`` and ``run`` (``ladder``: by ``ladder``), handed to the
    command as one ``request``."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(
            *args: Any,
            model: str,
            seed: int | None,
            sim_mix: str | None,
            budget_usd: float | None,
            task: str,
            **kwargs: Any,
        ) -> Any:
            fields = {name: kwargs.pop(name) for name in _CONFIG_FIELDS}
            settings = click.get_current_context().find_object(Settings)
            check_model(model, PriceTable.load(settings.prices_file if settings else None))
            if seed is None:
                seed = random.randrange(1 << 31)
            _check_task(task, sim_mix)
            if not ladder:
                waves = _waves(task, kwargs.pop("waves"), fields, seed)
                config = _config(waves, seed, sim_mix, **fields)
                request: Any = RunRequest(model, kwargs.pop("profile"), config, budget_usd, task)
                return fn(*args, request=request, **kwargs)
            try:
                tiers = parse_tiers(kwargs.pop("tiers"))
            except SwarmError as exc:
                raise click.BadParameter(str(exc), param_hint="--tiers") from None
            profiles = tuple(kwargs.pop("profiles")) or (DEFAULT_PROFILE,)
            config = _config(tiers[0], seed, sim_mix, **fields)
            request = LadderRequest(model, profiles, tiers, config, budget_usd, task)
            return fn(*args, request=request, **kwargs)

        options = _ladder_options() if ladder else _run_only_options()
        decorated: Callable[..., Any] = wrapper
        for option in reversed([*options, *_shared_options()]):
            decorated = option(decorated)
        return decorated

    return decorate


def _default(name: str) -> Any:
    """The default of :class:`RunConfig` field ``name``: a flag's default is the config's."""
    return RunConfig.model_fields[name].get_default(call_default_factory=True)


def _choice(field: str, help: str) -> Callable[..., Any]:
    """``--field`` (dashes for underscores): one of the values :class:`RunConfig` allows."""
    return click.option(
        f"--{field.replace('_', '-')}",
        type=click.Choice(get_args(RunConfig.model_fields[field].annotation)),
        default=_default(field),
        show_default=True,
        help=help,
    )


#: Options that become :class:`RunConfig` fields as they are.
_CONFIG_FIELDS = (
    "max_turns",
    "max_tokens",
    "max_cost_usd",
    "repair_rounds",
    "sim_latency_ms",
    "sim_latency_jitter",
    "sim_flaw_rate",
    "cache",
    "record",
    "verify",
    "cache_warm",
    "forecast",
    "reserve",
    "max_output_tokens",
    "instances",
    "sample",
    "epochs",
)


def _run_only_options() -> list[Callable[..., Any]]:
    return [
        click.option(
            "--wave",
            "waves",
            default=None,
            help="N waves of M concurrent sessions, as NxM [default: 1x1, or with "
            "--instances, --sample or --epochs one wave an epoch of every instance picked].",
        ),
        click.option(
            "--profile",
            type=click.Choice(sorted(PROFILES)),
            default=DEFAULT_PROFILE,
            show_default=True,
            help="Prompt contract and engine rules.",
        ),
    ]


def _ladder_options() -> list[Callable[..., Any]]:
    return [
        click.option(
            "--tiers",
            default=",".join(DEFAULT_TIERS),
            show_default=True,
            help="Wave specs run one after the other; 5x1 is five sessions in a row.",
        ),
        click.option(
            "--profile",
            "profiles",
            type=click.Choice(sorted(PROFILES)),
            multiple=True,
            help="Profile to climb the ladder with; repeat for an A/B "
            f"comparison [default: {DEFAULT_PROFILE}].",
        ),
    ]


def _shared_options() -> list[Callable[..., Any]]:
    return [
        click.option(
            "--task",
            default=DEFAULT_TASK,
            show_default=True,
            envvar="SWARM_TASK",
            help="The task the sessions work on: a name `python -m scheduler tasks` lists, "
            "or package.module:factory.",
        ),
        click.option(
            "--instances",
            default=None,
            help="The task's instances to play, by position or id: 0-19,25 or HumanEval/3 "
            "[default: all, in order].",
        ),
        click.option(
            "--sample",
            type=click.IntRange(min=1),
            default=None,
            help="Play a sample of this many instances, drawn with the seed.",
        ),
        click.option(
            "--epochs",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            help="Times each instance is played (pass@k needs k or more).",
        ),
        click.option(
            "--model",
            default="sim",
            show_default=True,
            help="'sim' (the offline stand-in) or a Gemini model, e.g. gemini-3-flash-preview.",
        ),
        _choice(
            "cache",
            "Gemini context caching: the API's implicit cache, "
            "or one explicit cache of the run's prompt prefix.",
        ),
        _choice(
            "verify",
            "Judge handoffs with the task's verifier (Chromium, the sandbox), or by the "
            "task's static checks alone, in the handoff's own commit.",
        ),
        _choice(
            "cache_warm",
            "Send one first turn of a wave that starts on an uncached prompt prefix, "
            "and the rest once it completes, so they are served from the implicit cache.",
        ),
        click.option(
            "--seed",
            type=int,
            default=None,
            help="Seed of briefs and sim behaviour [default: random].",
        ),
        click.option(
            "--max-turns",
            type=click.IntRange(min=1),
            default=_default("max_turns"),
            show_default=True,
            help="Turns after which a session is stopped.",
        ),
        click.option(
            "--max-tokens",
            type=click.IntRange(min=1),
            default=_default("max_tokens"),
            help="Tokens a session may spend before it is stopped.",
        ),
        click.option(
            "--max-cost-usd",
            type=click.FloatRange(min=0, min_open=True),
            default=_default("max_cost_usd"),
            help="Dollars a session may spend before it is stopped.",
        ),
        click.option(
            "--budget-usd",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help="Dollars a run may spend: each model call's worst case is reserved "
            "before it is sent; a session under way whose call does not fit waits for the "
            "calls in flight, and one with no room left ends stopped.",
        ),
        _choice(
            "reserve",
            "With --budget-usd: reserve each model call's worst-case cost before it is "
            "sent, so the run never spends more than its budget (off: check the budget "
            "as each turn starts; turns in flight may pass it).",
        ),
        click.option(
            "--max-output-tokens",
            type=click.IntRange(min=1),
            default=_default("max_output_tokens"),
            show_default=True,
            help="Output tokens, thinking included, one model call may produce; sent with "
            "every request, and what a reservation holds dollars for (default: the model's "
            f"own limit, or {DEFAULT_MAX_OUTPUT_TOKENS} when calls are reserved against a "
            "budget).",
        ),
        _choice(
            "forecast",
            "With --budget-usd: project the run's spend from the sessions that ended, "
            "and start no new wave once the projection's upper bound passes the budget.",
        ),
        click.option(
            "--repair-rounds",
            type=click.IntRange(min=0),
            default=_default("repair_rounds"),
            show_default=True,
            help="Verifier rejections a session may repair.",
        ),
        click.option(
            "--sim-latency-ms",
            type=click.IntRange(min=0),
            default=_default("sim_latency_ms"),
            show_default=True,
            help="Mean latency of one sim model call.",
        ),
        click.option(
            "--sim-latency-jitter",
            type=click.FloatRange(0, 1),
            default=_default("sim_latency_jitter"),
            show_default=True,
            help="Share by which one sim call's latency varies either way of the mean.",
        ),
        click.option(
            "--sim-mix",
            default=None,
            help="Sim personas and weights, e.g. oracle=3,sloppy [default: the task's "
            "default persona].",
        ),
        click.option(
            "--sim-flaw-rate",
            type=click.FloatRange(0, 1),
            default=_default("sim_flaw_rate"),
            show_default=True,
            help="Share of sim first drafts with a defect.",
        ),
        click.option(
            "--record",
            is_flag=True,
            default=_default("record"),
            help="Record every artifact verified in the browser as a 1080p60 video, "
            "stored with its verdict and played in the report's gallery.",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print the status as JSON."),
    ]
