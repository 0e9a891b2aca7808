"""``scheduler replay SESSION``: re-enact a session from its event log and check every
artifact version byte for byte.

The work is :func:`worker.runs.replay.replay_session`; this command prints its report.
"""

from __future__ import annotations

import json
import sys
import time

import click

from scheduler.cli.services import OperatorError, open_store
from scheduler.report.format import jsonable
from worker.errors import InputError
from worker.runs.replay import ReplayReport, replay_session
from worker.settings import Settings
from worker.store.engine import utcnow

__all__ = ["EXIT_MISMATCH", "replay"]

#: The replay did not give back what was recorded.
EXIT_MISMATCH = 1


@click.command()
@click.argument("session_id", metavar="SESSION", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.pass_obj
def replay(settings: Settings, session_id: int, as_json: bool) -> None:
    """Re-run a session's recorded model turns through the tools, without the model, in a
    scratch workspace, and check that every artifact version comes out byte for byte as
    recorded (exit 1 if one does not)."""
    with open_store(settings) as engine:
        started = time.monotonic()
        with engine.connect() as conn:
            try:
                report = replay_session(conn, session_id=session_id, now=utcnow())
            except InputError as exc:
                raise OperatorError(str(exc)) from None
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
    if report.elided:
        lines.append(
            f"  {report.elided} calls had arguments too long to keep; their recorded refusals stand"
        )
    if report.ok:
        lines.append(
            f"session {report.session_id} replays byte for byte: {report.matched} of "
            f"{len(report.versions)} artifact versions match, every tool result as recorded"
        )
    return lines
