"""``scheduler show SESSION``: a session's transcript, turn by turn.

The transcript is :func:`worker.reads.transcript.session_transcript`, the read model the
report's session pages draw too. In a terminal it is coloured and paged; piped, it is
plain text; ``--json`` prints it as one object with ``turns``, each with its
``tool_calls``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import click
from rich.console import Console
from rich.pager import Pager
from rich.text import Text

from scheduler.cli.services import OperatorError, open_store
from scheduler.report.format import duration, jsonable, usd
from worker.errors import InputError
from worker.reads.conversation import SHORT_ARG_CHARS
from worker.reads.transcript import (
    Message,
    ToolCall,
    Transcript,
    Turn,
    Verdict,
    VersionDiff,
    session_transcript,
)
from worker.settings import Settings

__all__ = ["show", "transcript_json", "transcript_lines"]

#: Characters of a tool's result that the text shows.
RESULT_CHARS = 240
#: Lines of a block of text (the model's, a thought, a brief) that the text shows, and
#: characters of each: a page the model answers with in a markdown block is read in --json.
BLOCK_LINES = 40
BLOCK_LINE_CHARS = 200
#: Style of each kind of line.
STYLES = {
    "turn": "bold cyan",
    "head": "bold",
    "add": "green",
    "remove": "red",
    "hunk": "cyan",
    "fail": "bold red",
    "pass": "bold green",
    "muted": "dim",
    "nudge": "yellow",
}


@click.command()
@click.argument("session_id", metavar="SESSION", type=int)
@click.option("--turn", "turn_no", type=click.IntRange(min=0), help="Show only turn N.")
@click.option("--json", "as_json", is_flag=True, help="Print the transcript as one JSON object.")
@click.option("--no-pager", is_flag=True, help="Never page, even in a terminal.")
@click.pass_obj
def show(
    settings: Settings, session_id: int, turn_no: int | None, as_json: bool, no_pager: bool
) -> None:
    """A session's transcript, turn by turn: what the model was sent and what it cost,
    what it said, each tool call and its result, each artifact version as a diff, each
    verdict with its checks, and how the session ended. SESSION is the session's id
    (``status --sessions --json`` and the report list them)."""
    with open_store(settings) as engine, engine.connect() as conn:
        try:
            transcript = session_transcript(conn, session_id=session_id)
        except InputError as exc:
            raise OperatorError(
                f"{exc} (`python -m scheduler status RUN --sessions --json` lists session ids)"
            ) from None
    try:
        turns = transcript.turns if turn_no is None else [transcript.turn(turn_no)]
    except InputError as exc:
        raise OperatorError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(transcript_json(transcript, turns), indent=2))
        return
    console = Console(soft_wrap=True, highlight=False)
    lines = transcript_lines(transcript, turns, whole=turn_no is None)
    if console.is_terminal and not no_pager:
        with console.pager(pager=_ClickPager(), styles=True):
            for line in lines:
                console.print(line)
    else:
        for line in lines:
            console.print(line)


class _ClickPager(Pager):
    """Click's pager: ``$PAGER`` or ``less``, told to pass colours through."""

    def show(self, content: str) -> None:
        """Page ``content``."""
        click.echo_via_pager(content)


def transcript_json(transcript: Transcript, turns: list[Turn]) -> dict[str, Any]:
    """The transcript as JSON, with ``turns`` as given and long call arguments shortened
    (``shortened`` gives the full length of each argument that was)."""
    out: dict[str, Any] = jsonable(transcript)
    out["turns"] = []
    for turn in turns:
        one = jsonable(turn)
        for call, shown in zip(turn.tool_calls, one["tool_calls"], strict=True):
            shown["args"], shown["shortened"] = call.shortened(SHORT_ARG_CHARS)
            shown["ok"] = call.ok
        out["turns"].append(one)
    return out


def transcript_lines(transcript: Transcript, turns: list[Turn], *, whole: bool) -> list[Text]:
    """The transcript as lines of styled text: a header, the turns, and (``whole``) the
    ending and the lease."""
    t = transcript
    lines = [
        Text(
            f"session {t.session_id}: run {t.run_id}, #{t.index} of wave {t.wave}; "
            f"{t.task} {t.instance}; persona {t.persona}; model {t.model}; "
            f"profile {t.profile}",
            style=STYLES["head"],
        ),
        Text(f"{_state(t)}; {len(t.turns)} turns, {t.tokens:,} tokens, {usd(t.cost_usd)}"),
    ]
    if t.start_files:
        files = ", ".join(f"{f.name} ({f.size_bytes:,} bytes)" for f in t.start_files)
        lines.append(Text(f"starting files: {files}"))
    for turn in turns:
        lines += _turn(turn)
    if whole:
        lines += [Text(""), *_end(t)]
    return lines


def _state(t: Transcript) -> str:
    took = (
        f" in {duration((t.finished_at - t.started_at).total_seconds())}"
        if t.started_at and t.finished_at
        else ""
    )
    if t.outcome is not None:
        return f"{t.status} ({t.outcome}){took}"
    if t.lease.held_by is not None:
        what = "verification" if t.status == "verifying" else f"turn {t.next_turn}"
        return f"{t.status}: {what} in flight on {t.lease.held_by}"
    return f"{t.status}: turn {t.next_turn} due" if t.status == "running" else t.status


def _turn(turn: Turn) -> Iterator[Text]:
    yield Text("")
    u = turn.usage
    cost = (
        f" · prompt {u.prompt_tokens:,} ({u.new_prompt_tokens:,} new), cached "
        f"{u.cached_tokens:,}, output {u.output_tokens:,}, thoughts {u.thoughts_tokens:,}"
        f" · {usd(u.cost_usd)} · {u.latency_ms:,} ms"
        if u is not None
        else " · no model call recorded"
    )
    yield Text(f"── turn {turn.number}{cost}", style=STYLES["turn"])
    if turn.results_sent:
        n = turn.results_sent
        yield Text(f"  sent back: {n} tool result{'s' * (n != 1)}", style=STYLES["muted"])
    for message in turn.request:
        yield from _message(message)
    for thought in turn.thoughts:
        yield from _block("thought", thought, STYLES["muted"])
    if turn.text:
        yield from _block("model", turn.text)
    for call in turn.tool_calls:
        yield from _call(call)
    for version in turn.versions:
        yield from _version(version)
    for verdict in turn.verdicts:
        yield from _verdict(verdict)
    for nudge in turn.nudges:
        yield from _message(nudge)
    if turn.ended is not None:
        e = turn.ended
        why = f": {e.error}" if e.error else ""
        yield Text(f"  ended {e.status} ({e.outcome}){why}", style=STYLES["fail"])


def _message(m: Message) -> Iterator[Text]:
    label = m.kind if m.reason is None else f"{m.kind} ({m.reason})"
    yield from _block(label, m.text, STYLES["nudge"] if m.kind == "nudge" else "")


def _block(label: str, text: str, style: str = "", *, indent: int = 2) -> Iterator[Text]:
    lines = [_cut(line) for line in text.splitlines()] or [""]
    first, *rest = lines[:BLOCK_LINES]
    yield Text(f"{' ' * indent}{label}: {first}", style=style)
    for line in rest:
        yield Text(f"{' ' * (indent + 2)}{line}".rstrip(), style=style)
    if len(lines) > BLOCK_LINES or any(line.endswith("…") for line in lines[:BLOCK_LINES]):
        more = len(lines) - BLOCK_LINES
        left = f"{more:,} more lines, " if more > 0 else ""
        yield Text(
            f"{' ' * (indent + 2)}… ({left}{len(text):,} chars in all; --json has it whole)",
            style=STYLES["muted"],
        )


def _cut(line: str) -> str:
    return line if len(line) <= BLOCK_LINE_CHARS else line[:BLOCK_LINE_CHARS] + "…"


def _call(call: ToolCall) -> Iterator[Text]:
    args, sizes = call.shortened(SHORT_ARG_CHARS)
    shown = ", ".join(
        f"{k}={_json(v)}" + (f" ({sizes[k]:,} chars)" if k in sizes else "")
        for k, v in args.items()
    )
    yield Text(f"  call {call.name}({shown})", style=STYLES["head"])
    if call.elided:
        yield Text("    (an argument was too long to store)", style=STYLES["muted"])
    if call.error is not None:
        message = call.error.get("message", "")
        yield Text(f"    error {call.error_kind}: {message}", style=STYLES["fail"])
        if call.error.get("hint"):
            yield Text(f"    hint: {call.error['hint']}", style=STYLES["nudge"])
        extra = {k: v for k, v in call.error.items() if k not in ("kind", "message", "hint")}
        if extra:
            yield Text(f"    {_clip(_json(extra))}", style=STYLES["muted"])
    elif call.output is not None:
        yield Text(f"    ok: {_clip(_json(call.output))}")
    else:
        yield Text("    no result recorded", style=STYLES["muted"])


def _version(v: VersionDiff) -> Iterator[Text]:
    since = f"v{v.previous} → v{v.version}" if v.previous is not None else f"new, v{v.version}"
    yield Text(
        f"  {v.name} {since}: +{v.added} -{v.removed} lines, {v.size_bytes:,} bytes",
        style=STYLES["head"],
    )
    for line in v.diff:
        if line.startswith(("+++", "---")):
            style = STYLES["head"]
        elif line.startswith("@@"):
            style = STYLES["hunk"]
        elif line.startswith("+"):
            style = STYLES["add"]
        elif line.startswith("-"):
            style = STYLES["remove"]
        else:
            style = ""
        yield Text(f"    {line}", style=style)


def _verdict(v: Verdict) -> Iterator[Text]:
    fps = f", {v.fps:.0f} fps" if v.fps is not None else ""
    kept = [k for k, has in (("screenshot", v.has_screenshot), ("video", v.has_video)) if has]
    yield Text(
        f"  verdict round {v.round} on {v.name} v{v.version}: "
        f"{'PASS' if v.passed else 'FAIL'} ({v.method}, {v.elapsed_ms:,} ms{fps}"
        + (f"; {' and '.join(kept)} kept" if kept else "")
        + ")",
        style=STYLES["pass" if v.passed else "fail"],
    )
    for check in v.checks:
        mark = "pass" if check.passed else "FAIL"
        style = "" if check.passed else STYLES["fail"]
        yield from _block(f"{mark} {check.name}", check.detail, style, indent=4)


def _end(t: Transcript) -> list[Text]:
    lease = t.lease
    lines = [
        Text(
            f"lease: {lease.claims} claims ({lease.turns} turns, {lease.verdicts} verdicts, "
            f"{lease.model_retries} model retries, {lease.other_claims} other: taken over "
            "from a vanished worker, a limiter wait or a verifier retry)",
            style=STYLES["muted"],
        )
    ]
    if lease.next_turn_attempts > 1 and t.outcome is None:
        lines.append(
            Text(
                f"turn {t.next_turn} was claimed {lease.next_turn_attempts - 1} times "
                "without committing",
                style=STYLES["nudge"],
            )
        )
    if t.outcome is not None:
        why = f": {t.error}" if t.error else ""
        style = STYLES["pass" if t.status == "succeeded" else "fail"]
        lines.append(Text(f"ended: {t.status} ({t.outcome}){why}", style=style))
    else:
        lines.append(Text(f"not ended: {_state(t)}", style=STYLES["nudge"]))
    return lines


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _clip(text: str) -> str:
    return text if len(text) <= RESULT_CHARS else text[:RESULT_CHARS] + "…"
