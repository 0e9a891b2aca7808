"""A task's identity: the SHA-256 of everything about it that decides what a session does.

A run records it; a replay or a fork, and every worker that plays the run, loads the task
again and refuses one whose fingerprint changed (a new instance, other instructions, another
hidden test), since the recorded sessions would no longer say what the task does.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

from worker.errors import TaskChanged
from worker.profiles import PROFILES
from worker.tasks.base import Task, VerifierKind
from worker.tasks.registry import load_task

__all__ = ["fingerprint", "recorded_task"]

_cache: dict[int, str] = {}
_lock = threading.Lock()


def fingerprint(task: Task) -> str:
    """The hex SHA-256 of ``task``'s configuration, computed once per process."""
    with _lock:
        found = _cache.get(id(task))
    if found is not None:
        return found
    digest = hashlib.sha256()
    digest.update(_canonical(_head(task)))
    for instance in task.instances():
        public = instance.without_hidden()
        part: dict[str, Any] = {
            "id": instance.id,
            "public": instance.public,
            "hidden": instance.hidden,
            "instructions": task.instructions(public),
            "files": task.files(public),
        }
        if task.verifier is VerifierKind.python:
            test = task.hidden_test(instance)
            part["test"] = [test.module, test.source, test.setup, test.timeout_s]
        digest.update(_canonical(part))
    value = digest.hexdigest()
    with _lock:
        # Tasks are loaded once per process and kept, so their ids stay theirs.
        return _cache.setdefault(id(task), value)


def recorded_task(ref: str, *, version: str, sha256: str | None) -> Task:
    """The task a run recorded, loaded again.

    Raises:
        ConfigError: it cannot be loaded.
        TaskChanged: it is not the version, or not the configuration, the run recorded.
    """
    task = load_task(ref)
    if task.version != version:
        raise TaskChanged(
            f"task {task.name} is at version {task.version}, the run recorded {version}"
        )
    if sha256 is not None and fingerprint(task) != sha256:
        raise TaskChanged(
            f"task {task.name} {version} changed since the run was made (its fingerprint "
            f"{fingerprint(task)[:12]} is not the recorded {sha256[:12]})"
        )
    return task


def _head(task: Task) -> dict[str, Any]:
    # The artifact tools are the engine's, and the run's prefix hash covers them.
    return {
        "name": task.name,
        "version": task.version,
        "verifier": task.verifier.value,
        "artifacts": [[a.path, a.media_type, a.max_bytes] for a in task.artifacts],
        "personas": list(task.personas),
        "prompts": {name: task.system_prompt(p) for name, p in sorted(PROFILES.items())},
        "tools": [[t.name, t.args.model_json_schema()] for t in task.tools()],
    }


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
