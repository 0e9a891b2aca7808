"""``scheduler replay SESSION``: re-enact a session from its event log and check every
artifact version byte for byte, and every verdict.

The work is :func:`worker.runs.replay.replay_session`; this command prints its report.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from scheduler.cli.services import OperatorError, open_store
from scheduler.report.format import jsonable
from worker.errors import InputError, TransientError
from worker.runs.rejudge import Judge
from worker.runs.replay import ReplayReport, replay_session
from worker.settings import Settings
from worker.store.engine import utcnow
from worker.tasks.base import Check, Submission, Task

__all__ = ["EXIT_MISMATCH", "replay"]

#: The replay did not give back what was recorded.
EXIT_MISMATCH = 1


@click.command()
@click.argument("session_id", metavar="SESSION", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option(
    "--browser",
    "--verify",
    "whole",
    is_flag=True,
    help="Judge each recorded verdict again with the task's whole verifier (Chromium for a "
    "page, the sandbox for Python), not only its static checks.",
)
@click.pass_obj
def replay(settings: Settings, session_id: int, as_json: bool, whole: bool) -> None:
    """Re-run a session's recorded model turns through the tools, without the model, in a
    scratch workspace, and check that every artifact version comes out byte for byte as
    recorded, and that every verdict is what its workspace gets again (exit 1 if one is
    not)."""
    with open_store(settings) as engine, _judge(settings, whole) as judge:
        started = time.monotonic()
        with engine.connect() as conn:
            try:
                report = replay_session(conn, session_id=session_id, now=utcnow(), judge=judge)
            except (InputError, TransientError) as exc:
                raise OperatorError(str(exc).splitlines()[0]) from None
        wall_s = time.monotonic() - started
    if as_json:
        out = jsonable(report)
        out.update(ok=report.ok, matched=report.matched, problem=report.problem, wall_s=wall_s)
        click.echo(json.dumps(out, indent=2))
    else:
        for line in _lines(report, wall_s):
            click.echo(line)
    if not report.ok:
        click.echo(f"error: session {session_id} does not replay: {report.problem}", err=True)
        sys.exit(EXIT_MISMATCH)


@contextmanager
def _judge(settings: Settings, whole: bool) -> Iterator[Judge | None]:
    """The task's whole verifier, with a browser launched only if a page is judged."""
    if not whole:
        yield None
        return
    # Imported here: the verifier (and Playwright with it) loads only when asked for.
    from verifier.verify import judge_submission

    browsers: list[Any] = []

    def browser() -> Any:
        if not browsers:
            from verifier.chromium.browser import Browser

            browsers.append(Browser(max_pages=1))
        return browsers[0]

    def judge(task: Task, submission: Submission) -> tuple[bool, list[Check]]:
        verdict, _ = judge_submission(task, submission, settings=settings, browser=browser)
        return verdict.passed, verdict.checks

    try:
        yield judge
    finally:
        for made in browsers:
            made.close()


def _lines(report: ReplayReport, wall_s: float) -> list[str]:
    lines = [
        f"replay of session {report.session_id} (run {report.run_id}, {report.status}): "
        f"{report.turns} turns, {report.calls} tool calls re-enacted without the model "
        f"in {wall_s:.2f} s",
        f"  {'artifact version':<28} {'turn':>4} {'bytes':>8}  {'sha256':<12}  result",
    ]
    for v in report.versions:
        sha = (v.replayed_sha256 or v.recorded_sha256 or "")[:12]
        label = f"{v.name} v{v.version}"
        verdict = "match" if v.match else "MISMATCH"
        lines.append(f"  {label:<28} {v.turn_no:>4} {v.size_bytes:>8,}  {sha:<12}  {verdict}")
    lines += [
        f"  turn {d.turn_no}, call {d.call_no} ({d.name}): {d.detail}" for d in report.divergences
    ]
    if report.verdicts:
        lines.append(f"  {'verdict':<28} {'round':>5} {'then':>6} {'now':>6}  {'how':<8}  result")
    for j in report.verdicts:
        then, now = ("pass" if j.recorded else "FAIL"), ("pass" if j.rejudged else "FAIL")
        result = "match" if j.match else f"MISMATCH: {j.detail}"
        label = f"{j.name} v{j.version}"
        lines.append(f"  {label:<28} {j.round:>5} {then:>6} {now:>6}  {j.method:<8}  {result}")
    if report.elided:
        lines.append(
            f"  {report.elided} calls had arguments too long to keep; their recorded refusals stand"
        )
    if report.ok:
        lines.append(
            f"session {report.session_id} replays byte for byte: {report.matched} of "
            f"{len(report.versions)} artifact versions match, every tool result as recorded, "
            f"{len(report.verdicts)} verdicts as recorded"
        )
    return lines
