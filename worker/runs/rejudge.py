"""A session's verdicts judged again: each handed-off workspace, against its recorded verdict.

Replay proves the artifacts come back byte for byte; this proves what the verifier said of
them. Each recorded verdict's workspace (the handed-off version, and every other file as the
handoff's turn left it) is checked again by the task's static checks, and, when a judge is
given (``replay --browser``: Chromium for a page, the sandbox for Python), by the task's
verifier as a whole. Static checks are compared check by check with the recorded ones of the
same name; a whole judgement, as a verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from worker.agent.events import EventKind
from worker.profiles import Profile
from worker.reads.recorded import LoggedEvent, RecordedVerdict, RecordedVersion
from worker.tasks.base import Check, Instance, Submission, Task, passed

__all__ = ["Judge", "VerdictCheck", "rejudge"]

#: A whole judgement of a submission (the verifier of the task): passed, and its checks.
Judge = Callable[[Task, Submission], tuple[bool, Sequence[Check]]]


@dataclass(frozen=True)
class VerdictCheck:
    """One recorded verdict, judged again."""

    round: int
    name: str
    version: int
    method: str
    """How it was judged again: ``static`` (the task's static checks), or ``verifier``."""
    recorded: bool
    """Whether the recorded verdict passed."""
    rejudged: bool
    """Whether what was judged again passed."""
    match: bool
    detail: str | None = None
    """What differs, in words; None when it matches."""

    @property
    def problem(self) -> str | None:
        """Why this verdict does not replay, in words; None when it does."""
        if self.match:
            return None
        return f"verdict of round {self.round} ({self.name} v{self.version}): {self.detail}"


def rejudge(
    *,
    task: Task,
    profile: Profile,
    instance: Instance,
    log: Sequence[LoggedEvent],
    versions: Sequence[RecordedVersion],
    verdicts: Sequence[RecordedVerdict],
    judge: Judge | None = None,
) -> list[VerdictCheck]:
    """Judge each recorded verdict's workspace again and compare.

    Args:
        task: The session's task.
        profile: Its run's profile (the artifacts' ceilings).
        instance: The instance, with its hidden fields when ``judge`` needs them.
        log: The session's events (they say which turn each handoff was in).
        versions: Every recorded version of the session's artifacts.
        verdicts: The recorded verdicts, by round.
        judge: The task's whole verifier; None compares the static checks alone.
    """
    handoffs = _handoff_turns(log)
    checked = []
    for verdict in verdicts:
        turn = handoffs[verdict.round] if verdict.round < len(handoffs) else None
        files = _workspace(versions, verdict, turn)
        spec = task.artifact_for(verdict.name)
        limit = profile.max_bytes(spec.max_bytes) if spec else len(files[verdict.name])
        submission = Submission(instance, files, verdict.name, limit)
        if judge is not None:
            ok, checks = judge(task, submission)
            checked.append(_compare(verdict, "verifier", ok, checks, whole=True))
        else:
            checks = task.static_checks(
                Submission(instance.without_hidden(), files, verdict.name, limit)
            )
            checked.append(
                _compare(
                    verdict, "static", passed(checks), checks, whole=verdict.method == "static"
                )
            )
    return checked


def _handoff_turns(log: Sequence[LoggedEvent]) -> list[int]:
    """The turn of each accepted handoff, in order: round r's verdict judged the r-th."""
    return [
        e.turn_no
        for e in log
        if e.kind == EventKind.tool_result.value and e.payload.get("name") == "handoff"
    ]


def _workspace(
    versions: Sequence[RecordedVersion], verdict: RecordedVerdict, turn: int | None
) -> dict[str, str]:
    """The files as the handoff's turn left them, the handed-off version among them."""
    latest: dict[str, RecordedVersion] = {}
    for v in versions:
        if v.name == verdict.name or (turn is not None and v.turn_no > turn):
            continue
        if v.name not in latest or v.version > latest[v.name].version:
            latest[v.name] = v
    files = {name: v.content for name, v in latest.items()}
    main = next(v for v in versions if v.name == verdict.name and v.version == verdict.version)
    files[verdict.name] = main.content
    return files


def _compare(
    verdict: RecordedVerdict, method: str, ok: bool, checks: Sequence[Check], *, whole: bool
) -> VerdictCheck:
    recorded: dict[str, Any] = {}
    for check in verdict.checks:
        recorded.setdefault(str(check.get("name")), check)
    differs = [
        f"{c.name} {'passes' if c.passed else 'fails'} now, "
        f"{'passed' if recorded[c.name].get('passed') else 'failed'} then"
        for c in checks
        if c.name in recorded and bool(recorded[c.name].get("passed")) != c.passed
    ]
    if whole and ok != verdict.passed and not differs:
        differs.append(
            f"the verdict {'passes' if ok else 'fails'} now, "
            f"{'passed' if verdict.passed else 'failed'} then"
        )
    return VerdictCheck(
        round=verdict.round,
        name=verdict.name,
        version=verdict.version,
        method=method,
        recorded=verdict.passed,
        rejudged=ok,
        match=not differs,
        detail="; ".join(differs) or None,
    )
