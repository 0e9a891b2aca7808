"""The task seam: what a session works on, and one room per built-in task.

A task package needs only what this module exports (see :mod:`worker.tasks.base`)::

    from worker.tasks import Artifact, HiddenTest, Instance, Task, VerifierKind
"""

from worker.tasks.base import (
    Artifact,
    Check,
    HiddenTest,
    Instance,
    Submission,
    Task,
    TaskTool,
    ToolArgs,
    VerifierKind,
    Workspace,
)

__all__ = [
    "Artifact",
    "Check",
    "HiddenTest",
    "Instance",
    "Submission",
    "Task",
    "TaskTool",
    "ToolArgs",
    "VerifierKind",
    "Workspace",
]
