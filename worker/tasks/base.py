"""What a task is: its instances, what the agent is told and starts with, and how it is judged.

A task is the work a session does. The runtime knows none by name: it asks a :class:`Task`
for an instance's instructions and starting files, for the artifacts a session may write
and their limits, for its tools, for the checks a handoff must pass, and for what its
verifier judges. An instance's ``public`` fields may reach a prompt; its ``hidden`` fields
(a hidden test, a reference answer) are read only by the verifier, so they are never stored
with a session, sent to a model, written to an event, a report, a replay or a fork.

A task also plays itself offline: :meth:`Task.player` gives the ``sim`` model a scripted agent
for each persona, so ``python -m scheduler task check NAME`` can show at $0 that the reference
solution passes every instance and that doing nothing, or cheating, passes none.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from worker.errors import ConfigError
from worker.profiles import Profile

if TYPE_CHECKING:
    from worker.models.sim.player import Player

__all__ = [
    "DEFAULT_ARTIFACT_MAX_BYTES",
    "STANDARD_PERSONAS",
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
    "passed",
]

#: Largest artifact a task allows unless it says otherwise, in UTF-8 bytes.
DEFAULT_ARTIFACT_MAX_BYTES = 65_536
#: The personas every task plays: the reference solution, nothing useful, an attempt to pass
#: without solving, and a wrong first answer repaired after the verifier's findings.
STANDARD_PERSONAS = ("oracle", "null", "cheat", "sloppy")


class VerifierKind(str, Enum):
    """How a task's handoffs are judged, and so which verify queue they go to."""

    #: the task's own checks decide, in the handoff's own commit (no browser, no sandbox)
    static = "static"
    #: a canvas page, rendered in Chromium over its first seconds of life
    chromium = "chromium"
    #: Python files, run with the instance's hidden test in a sandbox
    python = "python"


@dataclass(frozen=True)
class Instance:
    """One problem of a task.

    Attributes:
        id: Unique within the task, stable across versions (``HumanEval/3``).
        public: What prompts may show (JSON-serialisable).
        hidden: What only the verifier reads (JSON-serialisable): never stored with a
            session, never sent to a model.
    """

    id: str
    public: Mapping[str, Any] = field(default_factory=dict)
    hidden: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def without_hidden(self) -> Instance:
        """The instance as the session's side may see it."""
        return Instance(self.id, self.public) if self.hidden else self


@dataclass(frozen=True)
class Artifact:
    """A file a session may write: a name (or an ``fnmatch`` pattern), its type and size limit."""

    path: str
    media_type: str = "text/plain"
    max_bytes: int = DEFAULT_ARTIFACT_MAX_BYTES

    def matches(self, name: str) -> bool:
        """True when ``name`` is this artifact, or one of the files its pattern allows."""
        return name == self.path or fnmatch.fnmatchcase(name, self.path)


@dataclass(frozen=True)
class Check:
    """The outcome of one check of a handoff, as the agent and the report see it."""

    name: str  #: a short stable name (``size``, ``hidden_test``)
    passed: bool  #: whether the handoff passes this check
    value: object  #: the measured value, JSON-serialisable
    detail: str  #: one sentence: what was found and, when failing, what to do instead


def passed(checks: Sequence[Check]) -> bool:
    """True when no check failed."""
    return all(check.passed for check in checks)


@dataclass(frozen=True)
class Submission:
    """What a session handed off: its files as they stand, and the one it named.

    At handoff (in the worker) ``instance`` carries its public fields only; in the verifier
    it carries its hidden ones too.
    """

    instance: Instance
    files: Mapping[str, str]
    main: str
    """The artifact named in the handoff."""
    max_bytes: int = DEFAULT_ARTIFACT_MAX_BYTES
    """The main artifact's ceiling under the run's profile."""

    @property
    def content(self) -> str:
        """The handed-off artifact's text."""
        return self.files[self.main]


@dataclass(frozen=True)
class HiddenTest:
    """What the Python verifier runs for one instance, in a sandbox.

    ``source`` is ordinary Python that imports the module under test by its name (``import
    solution`` for ``solution.py``) and asserts. The handoff passes only when ``source``
    has run to its end: an exit, a crash or a kill of the harness is a failure, and so is any
    exception. Functions of the module are called across a process boundary: arguments and
    results are plain data (numbers, strings, bytes, lists, tuples, dicts, sets, None), so
    an object that claims to equal everything never reaches the test.
    """

    module: str
    """The workspace file under test, e.g. ``solution.py``."""
    source: str
    """The hidden test."""
    setup: str = ""
    """Trusted code run before ``source`` in the same namespace (helpers the test names)."""
    timeout_s: float = 10.0
    """Wall time the whole check may take."""


class ToolArgs(BaseModel):
    """The base of a task tool's arguments: unknown fields refused, each field's docstring
    its description in the schema the model sees."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Workspace(BaseModel):
    """What a task tool sees of the session: the instance's public fields and its files."""

    instance_id: str
    public: dict[str, Any]
    files: dict[str, str]
    """The session's live files, by name, as the turn's earlier calls left them."""


@dataclass(frozen=True)
class TaskTool:
    """A tool a task adds beside the artifact tools; it becomes one function declaration.

    The handler takes the call's validated arguments and a read-only :class:`Workspace`, and
    returns what the model is shown (a JSON object). Replay runs it again and compares, so
    it must depend on nothing else. It refuses a call by raising
    :class:`~worker.errors.ToolError`, which the model sees with its hint.
    """

    name: str
    args: type[BaseModel]
    """The arguments, as a pydantic model (a :class:`ToolArgs`, whose field docstrings
    describe them): the JSON schema the model sees is generated from it, and its docstring
    is the tool's description."""
    handler: Callable[[Any, Workspace], dict[str, Any]]


class Task:
    """A kind of work, with its instances. Subclass it, or build one with keyword arguments.

    Class attributes say what every instance shares; methods give each instance's part. Only
    :meth:`instances` and :meth:`instructions` are required; a ``python`` task also gives
    :meth:`hidden_test`, and every task should give :meth:`solution` so that its ``oracle``
    persona (and ``task check``) can prove the task is solvable.
    """

    #: The task's name, as ``--task`` and reports name it.
    name: ClassVar[str] = ""
    #: Bump it when instances, instructions, checks or tests change: a recorded session
    #: replays and forks only against the version it ran with.
    version: ClassVar[str] = "1"
    #: How handoffs are judged.
    verifier: ClassVar[VerifierKind] = VerifierKind.static
    #: The files a session may write. The first is the one it hands off by default.
    artifacts: ClassVar[tuple[Artifact, ...]] = (Artifact("*"),)
    #: The personas the ``sim`` model plays; the standard four at least.
    personas: ClassVar[tuple[str, ...]] = STANDARD_PERSONAS
    #: The persona a run plays when it names none.
    default_persona: ClassVar[str] = "oracle"
    #: Who the agent is, as the system prompt opens (one paragraph).
    role: ClassVar[str] = "You are a careful software engineer."

    # -- instances ------------------------------------------------------------------------

    def instances(self) -> Sequence[Instance]:
        """Every instance, in a stable order."""
        raise NotImplementedError(f"task {self.name!r} lists no instances")

    def instance(self, instance_id: str) -> Instance:
        """One instance by id.

        Raises:
            ConfigError: the task has no such instance.
        """
        found = self._by_id().get(instance_id)
        if found is None:
            raise ConfigError(f"task {self.name!r} has no instance {instance_id!r}")
        return found

    def instance_for(self, instructions: str) -> Instance | None:
        """The instance whose instructions are ``instructions`` (the fake Gemini API's way of
        telling which problem a conversation is about), or None."""
        return self._by_instructions().get(instructions)

    @functools.cache  # noqa: B019 - a task lives as long as its process
    def _by_id(self) -> dict[str, Instance]:
        return {i.id: i for i in self.instances()}

    @functools.cache  # noqa: B019 - a task lives as long as its process
    def _by_instructions(self) -> dict[str, Instance]:
        return {self.instructions(i.without_hidden()): i for i in self.instances()}

    # -- what the agent is told and starts with ------------------------------------------

    def system_prompt(self, profile: Profile) -> str:
        """The run-wide system instruction: the role, the workspace, and the profile's contract.

        It is the same for every session of a run (the provider caches it), so it names no
        instance.
        """
        files = "\n".join(
            f"- {a.path} ({a.media_type}, at most {profile.max_bytes(a.max_bytes):,} bytes)"
            for a in self.artifacts
        )
        return (
            f"{self.role}\n\nWorkspace policy:\n- You work alone in a private workspace; "
            "artifacts are files addressed by name. These are the files you may write:\n"
            f"{files}\n\n{profile.contract}"
        )

    def instructions(self, instance: Instance) -> str:
        """The session's first user message (public fields only)."""
        raise NotImplementedError(f"task {self.name!r} gives no instructions")

    def files(self, instance: Instance) -> Mapping[str, str]:
        """The files a session starts with, as version 0 of each (public fields only)."""
        return {}

    def tools(self) -> Sequence[TaskTool]:
        """Tools of the task's own, declared after the artifact tools."""
        return ()

    # -- judging -------------------------------------------------------------------------

    def static_checks(self, submission: Submission) -> list[Check]:
        """Checks a handoff must pass before it goes to the verifier (public fields only).

        They run in the session's worker and their findings go to the agent, so they must
        not read hidden fields. For a Python task every ``.py`` file must compile.
        """
        if self.verifier is not VerifierKind.python:
            return []
        return [_compiles(name, text) for name, text in sorted(submission.files.items())]

    def judge(self, submission: Submission) -> list[Check]:
        """The verdict of a ``static`` task, in the session worker as the handoff commits
        (hidden fields available).

        Artifacts are untrusted: read them as data, never run them here.
        """
        return []

    def hidden_test(self, instance: Instance) -> HiddenTest:
        """What a ``python`` task's verifier runs in the sandbox for ``instance``."""
        raise NotImplementedError(f"task {self.name!r} has no hidden test")

    # -- playing itself ------------------------------------------------------------------

    def solution(self, instance: Instance) -> Mapping[str, str]:
        """The reference solution's files (the ``oracle`` persona writes them)."""
        raise NotImplementedError(f"task {self.name!r} has no reference solution")

    def wrong(self, instance: Instance) -> Mapping[str, str]:
        """A first answer that fails (the ``sloppy`` persona's, before the verifier's findings).

        By default the files the session starts with, or an empty main artifact.
        """
        return dict(self.files(instance)) or {self.main_artifact(instance): ""}

    def cheats(self, instance: Instance) -> Sequence[Mapping[str, str]]:
        """Answers that try to pass without solving; the ``cheat`` persona hands one off.

        A Python task gets attempts on its sandbox by default (an early exit, output that
        looks like success, a connection out, reads outside the workspace, a kill of the
        harness, a value that equals anything).
        """
        if self.verifier is VerifierKind.python:
            from worker.tasks.cheats import python_cheats

            return python_cheats(self, instance)
        return [self.wrong(instance)]

    def player(
        self, instance: Instance, persona: str, *, seed: int, index: int, flaw_rate: float
    ) -> Player:
        """The scripted agent the ``sim`` model plays for ``persona`` on ``instance``.

        Args:
            instance: The session's instance, hidden fields included (a player may read the
                reference answer; what it writes is what the agent would).
            persona: One of :attr:`personas`.
            seed: The run's seed.
            index: The session's index within the run.
            flaw_rate: The run's share of sessions whose first answer is to carry a defect.
        """
        from worker.tasks.players import standard_player

        return standard_player(self, instance, persona, index=index)

    def main_artifact(self, instance: Instance) -> str:
        """The file a session hands off: its first starting file, or the first artifact's name."""
        start = self.files(instance)
        return next(iter(start)) if start else self.artifacts[0].path

    # -- identity ------------------------------------------------------------------------

    def artifact_for(self, name: str) -> Artifact | None:
        """The artifact ``name`` is, or None when the task does not allow that file."""
        return next((a for a in self.artifacts if a.matches(name)), None)

    def __repr__(self) -> str:
        return f"<Task {self.name} {self.version}>"


def _compiles(name: str, text: str) -> Check:
    """A Python file must compile (it is parsed, never run, in the worker)."""
    if not name.endswith(".py"):
        return Check("compiles", True, name, f"{name} is not Python; not compiled.")
    try:
        compile(text, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        return Check(
            "compiles",
            False,
            name,
            f"{name} does not compile{where}: {message}; fix the syntax and hand off again.",
        )
    return Check("compiles", True, name, f"{name} compiles.")
