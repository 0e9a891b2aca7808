"""``python -m ops.fake_gemini --port 8089``: serve the fake Gemini API until interrupted."""

from __future__ import annotations

import contextlib
import logging

import click

from ops.fake_gemini.faults import Fault, FaultRule
from ops.fake_gemini.server import FakeGemini, SimConfig
from worker.config import RunConfig, parse_mix
from worker.errors import SwarmError
from worker.tasks.personas import check_mix
from worker.tasks.registry import DEFAULT_TASK, load_task


def _faults(_: click.Context, __: click.Parameter, values: tuple[str, ...]) -> list[FaultRule]:
    try:
        return [FaultRule.parse(v) for v in values]
    except ValueError as exc:
        raise click.BadParameter(f"{exc}; modes: {', '.join(f.value for f in Fault)}") from exc


@click.command()
@click.option("--port", default=8089, show_default=True, help="TCP port on 127.0.0.1.")
@click.option("--seed", default=0, show_default=True, help="Seeds the personas.")
@click.option(
    "--task",
    default=DEFAULT_TASK,
    show_default=True,
    help="The task the sessions play: a name or package.module:factory.",
)
@click.option(
    "--sim-mix",
    default=None,
    help="Persona weights, e.g. oracle=3,sloppy [default: the task's default persona].",
)
@click.option(
    "--sim-flaw-rate",
    default=0.0,
    show_default=True,
    help="Share of sessions whose first draft has a defect.",
)
@click.option("--latency-ms", default=200, show_default=True, help="Mean latency of a call.")
@click.option(
    "--fault",
    "faults",
    multiple=True,
    callback=_faults,
    metavar="MODE[:RATE]",
    help="Inject a fault into a share of requests (repeatable), e.g. 429:0.1.",
)
def main(
    port: int,
    seed: int,
    task: str,
    sim_mix: str | None,
    sim_flaw_rate: float,
    latency_ms: int,
    faults: list[FaultRule],
) -> None:
    """Serve generateContent on 127.0.0.1 in the Gemini API's wire format."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        mix = parse_mix(sim_mix) if sim_mix else None
        played = load_task(task)
        if mix is not None:
            check_mix(mix, played.personas, task=played.name)
        config = RunConfig(waves="1", sim_mix=mix, sim_flaw_rate=sim_flaw_rate)
    except (SwarmError, ValueError) as exc:
        raise click.BadParameter(str(exc)) from exc
    fake = FakeGemini(
        port=port,
        faults=faults,
        sim=SimConfig(
            seed=seed,
            mix=config.sim_mix,
            flaw_rate=config.sim_flaw_rate,
            latency_ms=latency_ms,
            task=task,
        ),
    )
    click.echo(f"fake Gemini API on {fake.url} (SWARM_GEMINI_BASE_URL={fake.url})")
    with contextlib.suppress(KeyboardInterrupt):
        fake.serve_forever()


if __name__ == "__main__":
    main()
