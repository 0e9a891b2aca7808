"""Finding tasks: the ``swarm.tasks`` entry points, or ``package.module:factory`` named directly.

A reference is what a run records to load its task again on any worker: an entry point's
name (``dashboard``), or an import path (``mytasks.wordcount:task``). Whatever it points at
may be a :class:`~worker.tasks.base.Task` instance, a ``Task`` subclass, or a callable that
returns one. A task is loaded once per process and kept.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from worker.errors import ConfigError
from worker.tasks.base import STANDARD_PERSONAS, Task, VerifierKind

__all__ = ["DEFAULT_TASK", "ENTRY_POINT_GROUP", "Found", "discover", "load_task"]

#: The entry-point group a task package registers its tasks in.
ENTRY_POINT_GROUP = "swarm.tasks"
#: The task a run works on when it names none.
DEFAULT_TASK = "dashboard"

_loaded: dict[str, Task] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Found:
    """One task the entry points name: loaded, or why it could not be."""

    ref: str
    task: Task | None
    error: str | None = None


def load_task(ref: str) -> Task:
    """The task ``ref`` names, loaded once per process.

    Raises:
        ConfigError: nothing by that name, or it does not load into a valid task (one line
            naming the task and why).
    """
    with _lock:
        found = _loaded.get(ref)
    if found is not None:
        return found
    task = _load(ref)
    with _lock:
        return _loaded.setdefault(ref, task)


def discover() -> list[Found]:
    """Every task registered under :data:`ENTRY_POINT_GROUP`, by name; failures included."""
    found = []
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        try:
            found.append(Found(point.name, load_task(point.name)))
        except ConfigError as exc:
            found.append(Found(point.name, None, str(exc)))
    return found


def _load(ref: str) -> Task:
    if ":" in ref:
        module_name, _, attr = ref.partition(":")
        try:
            target: Any = getattr(importlib.import_module(module_name), attr)
        except Exception as exc:  # a user's module may fail in any way; say which
            raise ConfigError(f"task {ref}: cannot load it ({_reason(exc)})") from None
    else:
        points = entry_points(group=ENTRY_POINT_GROUP, name=ref)
        if not points:
            known = ", ".join(sorted(p.name for p in entry_points(group=ENTRY_POINT_GROUP)))
            raise ConfigError(
                f"no task named {ref!r}: known tasks are {known or 'none'}, or pass "
                "--task package.module:factory"
            )
        try:
            target = next(iter(points)).load()
        except Exception as exc:
            raise ConfigError(f"task {ref}: cannot load it ({_reason(exc)})") from None
    task = _instantiate(ref, target)
    _validate(ref, task)
    return task


def _instantiate(ref: str, target: Any) -> Task:
    if isinstance(target, Task):
        return target
    if not callable(target):
        raise ConfigError(f"task {ref}: {target!r} is neither a Task nor a factory of one")
    factory: Callable[[], Any] = target
    try:
        made = factory()
    except Exception as exc:
        raise ConfigError(f"task {ref}: its factory failed ({_reason(exc)})") from None
    if not isinstance(made, Task):
        raise ConfigError(f"task {ref}: its factory returned {type(made).__name__}, not a Task")
    return made


def _validate(ref: str, task: Task) -> None:
    """Refuse at load what would fail later in a worker, each in words."""
    problems = []
    if not task.name:
        problems.append("it has no name")
    kind: object = task.verifier
    if isinstance(kind, str) and not isinstance(kind, VerifierKind):
        # A task may name its verifier as a plain string ("python").
        with contextlib.suppress(ValueError):
            task.verifier = VerifierKind(kind)  # type: ignore[misc]
    if not isinstance(task.verifier, VerifierKind):
        problems.append(f"verifier {task.verifier!r} is not one of static, chromium, python")
    if not task.artifacts:
        problems.append("it allows no artifact")
    missing = [p for p in STANDARD_PERSONAS if p not in task.personas]
    if missing:
        problems.append(f"it does not play the personas {', '.join(missing)}")
    if task.default_persona not in task.personas:
        problems.append(f"its default persona {task.default_persona!r} is not one it plays")
    try:
        count = len(task.instances())
    except Exception as exc:
        problems.append(f"its instances failed ({_reason(exc)})")
    else:
        if not count:
            problems.append("it has no instances")
    if problems:
        raise ConfigError(f"task {ref}: {'; '.join(problems)}")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
