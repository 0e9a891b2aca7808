"""``python -m scheduler tasks`` lists the tasks; ``task check NAME`` tests one at $0.

``task check`` plays each standard persona on the task's instances with the ``sim`` model, on
an embedded fleet of its own (a scratch SQLite file, an in-process broker and worker), with
the verifier the task names: the reference solution (``oracle``) must pass every instance,
and doing nothing (``null``) or cheating (``cheat``) none. That is how a task author tests a
task before a model ever sees it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from scheduler.cli.embedded import embedded_worker
from scheduler.cli.follow import until_finished
from scheduler.cli.options import RunRequest
from scheduler.cli.services import EXIT_OK, EXIT_RUN_INCOMPLETE, OperatorError
from worker.celery import create_app
from worker.config import RunConfig
from worker.errors import ConfigError, SwarmError
from worker.models.registry import Providers
from worker.reads.queries import SessionRow, session_rows
from worker.settings import DEFAULT_BROKER_URL, Settings
from worker.store.engine import migrate
from worker.tasks.base import STANDARD_PERSONAS, Task, VerifierKind
from worker.tasks.registry import discover, load_task
from worker.tasks.selection import select

__all__ = ["task_group", "tasks"]

#: A task with more instances than this is checked on a sample unless told otherwise.
FULL_CHECK_INSTANCES = 200
#: The sample a larger task is checked on by default.
DEFAULT_CHECK_SAMPLE = 10
#: What each persona must do: pass every instance, or none; None asks nothing of it.
EXPECTED: dict[str, bool | None] = {"oracle": True, "null": False, "cheat": False, "sloppy": None}
#: Most sessions one persona's run holds at once.
CHECK_CONCURRENCY = 50


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def tasks(as_json: bool) -> None:
    """List the tasks the ``swarm.tasks`` entry points name, with versions and instance counts.

    A task that fails to load is one line naming it and why; then the exit code is 1.
    """
    found = discover()
    rows: list[dict[str, Any]] = [
        {
            "name": f.ref,
            "version": f.task.version,
            "verifier": f.task.verifier.value,
            "instances": len(f.task.instances()),
            "personas": list(f.task.personas),
        }
        for f in found
        if f.task is not None
    ]
    failed = [f for f in found if f.task is None]
    if as_json:
        click.echo(
            json.dumps(
                {"tasks": rows, "failed": [{"name": f.ref, "error": f.error} for f in failed]},
                indent=2,
            )
        )
    else:
        table = Table("task", "version", "verifier", "instances", "personas", box=None)
        for row in rows:
            table.add_row(
                row["name"],
                row["version"],
                row["verifier"],
                f"{row['instances']:,}",
                ", ".join(row["personas"]),
            )
        Console().print(table)
        for f in failed:
            click.echo(f"error: {f.error}", err=True)
    sys.exit(EXIT_RUN_INCOMPLETE if failed else EXIT_OK)


@click.group("task")
def task_group() -> None:
    """Test a task: ``task check NAME``."""


@dataclass(frozen=True)
class PersonaResult:
    """How one persona did on the instances checked."""

    persona: str
    sessions: int
    passed: int
    expected: str
    ok: bool
    wrong: list[str]
    """Instances that went against what the persona must do (first few)."""


@task_group.command("check")
@click.argument("name")
@click.option("--instances", default=None, help="Instances to check, by position or id.")
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    default=None,
    help=f"Check a seeded sample of this many [default: every instance, or "
    f"{DEFAULT_CHECK_SAMPLE} of a task with more than {FULL_CHECK_INSTANCES}].",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def check(
    settings: Settings,
    name: str,
    instances: str | None,
    sample: int | None,
    seed: int,
    as_json: bool,
) -> None:
    """Play the oracle, null, cheat and sloppy personas on NAME's instances, at $0.

    Prints a table and exits 0 when oracle passed every instance and null and cheat passed
    none, 1 otherwise.
    """
    try:
        task = load_task(name)
    except SwarmError as exc:
        raise OperatorError(str(exc)) from None
    if instances is None and sample is None and len(task.instances()) > FULL_CHECK_INSTANCES:
        sample = DEFAULT_CHECK_SAMPLE
        click.echo(
            f"checking a sample of {sample} of {len(task.instances()):,} instances "
            "(--instances or --sample to choose)",
            err=True,
        )
    try:
        chosen = select(task, instances=instances, sample=sample, seed=seed)
    except SwarmError as exc:
        raise OperatorError(str(exc)) from None
    refuse_without_sandbox(task, settings)
    results = _play(
        settings, name, task, len(chosen), instances=instances, sample=sample, seed=seed
    )
    passed = all(r.ok for r in results)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "task": task.name,
                    "version": task.version,
                    "instances": len(chosen),
                    "passed": passed,
                    "personas": [asdict(r) for r in results],
                },
                indent=2,
            )
        )
    else:
        Console().print(_table(task, len(chosen), results))
        if not passed:
            for r in results:
                if not r.ok:
                    click.echo(
                        f"error: {r.persona} should {r.expected}: {', '.join(r.wrong)}", err=True
                    )
    sys.exit(EXIT_OK if passed else EXIT_RUN_INCOMPLETE)


def refuse_unready_model(model: str, settings: Settings) -> None:
    """A run whose model is called in this process needs what the model needs here (a key).

    Raises:
        OperatorError: one line that says what is missing.
    """
    try:
        Providers(settings).check_ready(model)
    except ConfigError as exc:
        raise OperatorError(str(exc).replace("in the worker's environment", "here")) from None


def refuse_without_sandbox(task: Task, settings: Settings) -> None:
    """A Python task is checked only where its sandbox can be built."""
    if task.verifier is not VerifierKind.python:
        return
    from verifier.verify import shared_sandbox
    from worker.errors import SandboxUnavailable

    try:
        shared_sandbox(settings).probe()
    except SandboxUnavailable as exc:
        raise OperatorError(f"the Python sandbox cannot be built here: {exc}") from None


def _play(
    settings: Settings,
    ref: str,
    task: Task,
    count: int,
    *,
    instances: str | None,
    sample: int | None,
    seed: int,
) -> list[PersonaResult]:
    """One run per standard persona, each a wave of every chosen instance."""
    with tempfile.TemporaryDirectory(prefix="swarm-task-check-") as scratch:
        url = Settings(database_url=f"sqlite:///{Path(scratch) / 'check.db'}").database_url
        embedded = settings.model_copy(
            update={"database_url": url, "broker_url": DEFAULT_BROKER_URL}
        )
        migrate(embedded.database_url)
        app = create_app(embedded)
        rt = app.runtime
        try:
            with embedded_worker(app, concurrency=min(count, CHECK_CONCURRENCY)):
                results = []
                for persona in STANDARD_PERSONAS:
                    config = RunConfig(
                        waves=f"1x{count}",
                        seed=seed,
                        sim_mix={persona: 1.0},
                        sim_latency_ms=0,
                        sim_latency_jitter=0.0,
                        sim_flaw_rate=1.0 if persona == "sloppy" else 0.0,
                        instances=instances,
                        sample=sample,
                    )
                    request = RunRequest("sim", "candidate", config, None, ref)
                    run_id = request.create(rt)
                    until_finished(rt.engine, run_id, show=False, prices=rt.prices)
                    with rt.engine.connect() as conn:
                        rows = session_rows(conn, run_id)
                    results.append(_result(persona, rows))
        finally:
            rt.engine.dispose()
    return results


def _result(persona: str, rows: list[SessionRow]) -> PersonaResult:
    want = EXPECTED.get(persona)
    won = [r for r in rows if r.status.value == "succeeded"]
    if want is True:
        wrong = [
            f"{r.instance} ({r.outcome.value if r.outcome else r.status.value})"
            for r in rows
            if r not in won
        ]
        expected = "pass every instance"
    elif want is False:
        wrong = [r.instance for r in won]
        expected = "pass none"
    else:
        wrong, expected = [], "-"
    return PersonaResult(persona, len(rows), len(won), expected, not wrong, wrong[:10])


def _table(task: Task, count: int, results: list[PersonaResult]) -> Table:
    table = Table(
        "persona",
        "sessions",
        "passed",
        "pass rate",
        "must",
        "",
        title=f"task {task.name} {task.version}: {count} instances, verifier {task.verifier.value}",
        box=None,
    )
    for r in results:
        rate = f"{r.passed / r.sessions:.0%}" if r.sessions else "-"
        mark = "ok" if r.ok and r.expected != "-" else ("" if r.expected == "-" else "FAIL")
        table.add_row(r.persona, str(r.sessions), str(r.passed), rate, r.expected, mark)
    return table
