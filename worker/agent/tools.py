"""The tools the model sees. Schemas are generated from the pydantic models below.

A tool either returns a result or raises :class:`~worker.errors.ToolError`, which goes
back to the model as a structured error with a hint. Nothing a model sends can crash a
worker: arguments are validated before any tool runs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.engine import Connection

from worker.agent import workspace
from worker.agent.regions import RegionNotFound, region_ids, replace_region
from worker.errors import ConfigError, ToolError
from worker.models.base import FunctionCall, ToolSpec
from worker.profiles import Profile
from worker.tasks.base import Check, Instance, Submission, Task, TaskTool, Workspace, passed

#: Artifact names: a plain file name, never a path.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


#: What neither PostgreSQL text nor UTF-8 can hold: NUL, and halves of surrogate pairs.
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def _storable(value: str) -> str:
    # A regex scan reads the string where it lies: content may be megabytes.
    found = _UNSTORABLE.search(value)
    if found is not None:
        raise ValueError(
            f"contains U+{ord(found.group()):04X} at index {found.start()}, which text cannot hold"
        )
    return value


#: Text the workspace can store.
Text = Annotated[str, AfterValidator(_storable)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class ManageArtifact(_Args):
    """Create, edit, read or delete one artifact (a file) in your workspace."""

    action: Literal["create", "edit", "get", "delete"]
    """create a new artifact, edit one in place, get its content and version, or delete it."""
    name: str = Field(pattern=NAME_PATTERN)
    """File name of the artifact, one the workspace policy allows (e.g. dashboard.html)."""
    content: Text | None = None
    """For create: the whole file. For edit: the whole file, or with region_id (HTML) only the
    new inside of that element."""
    region_id: Text | None = Field(default=None, min_length=1, max_length=100)
    """For edit: replace only the inside of the element with this id, keeping its tag."""
    expected_version: int | None = Field(default=None, ge=0)
    """For edit and delete: the version you last saw (compare-and-swap); a file you start
    with is at version 0."""


class PlanManage(_Args):
    """Set, check off or list the items of your plan."""

    action: Literal["set", "done", "list"]
    """set replaces the plan with items, done marks item_id done, list shows the plan."""
    items: list[Annotated[Text, Field(min_length=1, max_length=500)]] | None = Field(
        default=None, min_length=1, max_length=20
    )
    """For set: the plan items in order (1 to 20 short sentences)."""
    item_id: int | None = Field(default=None, ge=1)
    """For done: the number of the item to mark done (from 1)."""


class Handoff(_Args):
    """Hand a finished artifact over for verification. Ends your work unless it fails."""

    summary: Text = Field(min_length=1, max_length=2000)
    """What the artifact shows, in a sentence or two."""
    artifact_name: str = Field(pattern=NAME_PATTERN)
    """Name of the artifact to verify."""


@dataclass
class ToolContext:
    """What a tool may touch: one session's workspace, inside the turn's transaction."""

    conn: Connection
    session_id: int
    turn_no: int
    profile: Profile
    now: datetime
    task: Task
    instance: Instance
    """The session's instance, public fields only."""
    handed_off: int | None = None
    """Artifact version id accepted by handoff during this turn."""
    handed_off_as: Submission | None = None
    """What that handoff submitted, as its static checks saw it (public fields only)."""
    handoff_checks: list[Check] = field(default_factory=list)
    """The task's static checks of that submission, all passed."""
    progress: bool = False
    """The current call created or edited an artifact, or handed it off."""
    snapshot: workspace.Snapshot | None = None
    """The session's workspace as the turn read it with its lease, kept as its calls change
    it (None: each call reads what it needs)."""
    _plan: list[workspace.PlanEntry] | None = field(default=None, repr=False)

    def plan(self) -> list[workspace.PlanEntry]:
        """The session's plan as this turn's calls left it, read once a turn.

        Only the lease holder writes a session's plan, inside the turn's transaction, so
        the copy kept here is the plan until the turn commits.
        """
        if self.snapshot is not None:
            return self.snapshot.plan
        if self._plan is None:
            self._plan = workspace.get_plan(self.conn, session_id=self.session_id)
        return self._plan

    def keep_plan(self, plan: list[workspace.PlanEntry]) -> None:
        """Remember the plan a call has just written."""
        if self.snapshot is not None:
            self.snapshot.plan = plan
        self._plan = plan

    def artifact(self, name: str, *, text: bool) -> workspace.ArtifactState | None:
        """Artifact ``name`` as this turn's calls left it (None: it never existed), with
        its text when ``text`` asks for it."""
        held = self.snapshot
        current = held.artifacts.get(name) if held is not None else None
        if held is not None and (current is None or not text or held.has_content(name)):
            return current
        current = workspace.get_artifact(self.conn, session_id=self.session_id, name=name)
        if held is not None and current is not None:
            held.artifacts[name] = current
        return current

    def names(self) -> list[str]:
        """Names of the session's live artifacts."""
        if self.snapshot is not None:
            return sorted(n for n, a in self.snapshot.artifacts.items() if not a.deleted)
        return workspace.artifact_names(self.conn, session_id=self.session_id)

    def wrote(self, state: workspace.ArtifactState) -> None:
        """Remember what a call has just written to an artifact."""
        if self.snapshot is not None:
            self.snapshot.artifacts[state.name] = state

    def max_bytes(self, name: str) -> int:
        """The ceiling of artifact ``name`` under the task and the run's profile.

        Raises:
            ToolError: the task allows no artifact by that name.
        """
        spec = self.task.artifact_for(name)
        if spec is None:
            allowed = ", ".join(a.path for a in self.task.artifacts)
            raise ToolError(
                f"the workspace allows no artifact named {name}",
                kind="not_allowed",
                hint=f"use one of the names the workspace policy allows: {allowed}",
            )
        return self.profile.max_bytes(spec.max_bytes)

    def files(self) -> dict[str, str]:
        """The session's live files, as this turn's earlier calls left them."""
        held = self.snapshot.live_files() if self.snapshot is not None else None
        if held is not None:
            return held
        return workspace.live_files(self.conn, session_id=self.session_id)


Handler = Callable[[Any, ToolContext], dict[str, Any]]


#: Characters encoded at a time when measuring content, so no whole copy is ever made.
_SIZE_CHUNK_CHARS = 64 * 1024


def _utf8_size(content: str) -> int:
    # Content may be far over the ceiling: encoding it whole would copy all of it once more.
    if content.isascii():  # O(1) in CPython: one byte per character
        return len(content)
    return sum(
        len(content[i : i + _SIZE_CHUNK_CHARS].encode())
        for i in range(0, len(content), _SIZE_CHUNK_CHARS)
    )


def _size(content: str, ctx: ToolContext, name: str) -> int:
    limit = ctx.max_bytes(name)
    size = _utf8_size(content)
    if size > limit:
        raise ToolError(
            f"content is {size} bytes; the limit is {limit} bytes",
            kind="too_large",
            hint="make the file smaller: shorter code, less repetition, no embedded data",
            data={"size_bytes": size, "limit_bytes": limit},
        )
    return size


def _conflict(current: workspace.ArtifactState, expected: int | None) -> ToolError:
    return ToolError(
        f"{current.name} is at version {current.version}, not {expected}",
        kind="conflict",
        hint="edit again with expected_version set to current_version",
        data={"current_version": current.version},
    )


def _existing(ctx: ToolContext, name: str, *, text: bool) -> workspace.ArtifactState:
    current = ctx.artifact(name, text=text)
    if current is None or current.deleted:
        names = ctx.names()
        raise ToolError(
            f"no artifact named {name}",
            kind="not_found",
            hint="create it first" if not names else "use one of the names listed",
            data={"artifacts": names},
        )
    return current


def manage_artifact(args: ManageArtifact, ctx: ToolContext) -> dict[str, Any]:
    """Create, edit in place (compare-and-swap), read or delete an artifact."""
    if args.action == "get":
        current = _existing(ctx, args.name, text=True)
        assert current.content is not None, "read with its text"
        return {
            "name": current.name,
            "version": current.version,
            "content": current.content,
            "regions": region_ids(current.content),
        }
    if args.action == "delete":
        current = _existing(ctx, args.name, text=False)
        if args.expected_version != current.version:
            raise _conflict(current, args.expected_version)
        workspace.mark_deleted(
            ctx.conn, artifact_id=current.id, expected_version=current.version, now=ctx.now
        )
        ctx.wrote(replace(current, deleted=True, content=None))
        return {"name": args.name, "deleted": True}
    if args.content is None:
        raise ToolError(
            f"{args.action} needs content",
            kind="bad_arguments",
            hint="pass the page (or, with region_id, the region) as content",
        )
    if args.action == "create":
        return _create(args.name, args.content, ctx)
    return _edit(args, args.content, ctx)


def _written(
    ctx: ToolContext, name: str, content: str, written: workspace.Written
) -> workspace.ArtifactState:
    state = workspace.ArtifactState(
        written.artifact_id,
        name,
        written.version,
        content,
        False,
        written.version_id,
        sha256=written.sha256,
    )
    ctx.wrote(state)
    ctx.progress = True
    return state


def _create(name: str, content: str, ctx: ToolContext) -> dict[str, Any]:
    current = ctx.artifact(name, text=False)
    if current is not None and not current.deleted:
        raise ToolError(
            f"{name} already exists at version {current.version}",
            kind="exists",
            hint="edit it in place with expected_version",
            data={"current_version": current.version},
        )
    size = _size(content, ctx, name)
    # Re-creating a deleted artifact continues its version numbers, so history has no gaps.
    expected = current.version if current is not None else None
    written = workspace.write_artifact(
        ctx.conn,
        session_id=ctx.session_id,
        name=name,
        content=content,
        size_bytes=size,
        expected_version=expected,
        turn_no=ctx.turn_no,
        now=ctx.now,
    )
    assert written is not None, "only a fenced writer loses a swap, and a create is no swap"
    version = _written(ctx, name, content, written).version
    return {"name": name, "version": version, "size_bytes": size, "regions": region_ids(content)}


def _edit(args: ManageArtifact, content: str, ctx: ToolContext) -> dict[str, Any]:
    if args.expected_version is None:
        raise ToolError(
            "edit needs expected_version",
            kind="bad_arguments",
            hint="get the artifact to learn its version, then edit with it",
        )
    current = _existing(ctx, args.name, text=args.region_id is not None)
    if args.expected_version != current.version:
        raise _conflict(current, args.expected_version)
    if args.region_id is not None:
        assert current.content is not None, "read with its text"
        _size(content, ctx, args.name)  # a region over the ceiling is refused before it is copied
        try:
            content = replace_region(current.content, args.region_id, content)
        except RegionNotFound:
            raise ToolError(
                f"no element with id {args.region_id!r} in {args.name}",
                kind="region_not_found",
                hint="use one of the ids listed",
                data={"regions": region_ids(current.content)},
            ) from None
    size = _size(content, ctx, args.name)
    written = workspace.write_artifact(
        ctx.conn,
        session_id=ctx.session_id,
        name=args.name,
        content=content,
        size_bytes=size,
        expected_version=current.version,
        turn_no=ctx.turn_no,
        now=ctx.now,
    )
    if written is None:  # only a fenced writer can lose here; its transaction is discarded
        raise _conflict(current, args.expected_version)
    version = _written(ctx, args.name, content, written).version
    return {"name": args.name, "version": version, "size_bytes": size}


def plan_manage(args: PlanManage, ctx: ToolContext) -> dict[str, Any]:
    """Set, check off or list plan items."""
    if args.action == "set":
        if not args.items:
            raise ToolError(
                "set needs items",
                kind="bad_arguments",
                hint="pass the plan as a list of short strings",
            )
        workspace.set_plan(
            ctx.conn, session_id=ctx.session_id, items=args.items, turn_no=ctx.turn_no
        )
        ctx.keep_plan([workspace.PlanEntry(i, text, False) for i, text in enumerate(args.items, 1)])
    elif args.action == "done":
        if args.item_id is None:
            raise ToolError(
                "done needs item_id",
                kind="bad_arguments",
                hint="pass the number of the item, from 1",
            )
        plan = ctx.plan()
        if ctx.profile.strict_plan:
            first_open = next((p.item_no for p in plan if not p.done), None)
            if first_open is not None and args.item_id != first_open:
                raise ToolError(
                    f"item {first_open} must be done before item {args.item_id}",
                    kind="plan_locked",
                    hint="check items off in order",
                )
        at = next((i for i, p in enumerate(plan) if p.item_no == args.item_id), None)
        if at is None or not workspace.mark_plan_done(
            ctx.conn, session_id=ctx.session_id, item_no=args.item_id, turn_no=ctx.turn_no
        ):
            raise ToolError(
                f"no plan item {args.item_id}",
                kind="not_found",
                hint="list the plan to see item numbers",
                data={"items": len(plan)},
            )
        plan[at] = replace(plan[at], done=True)
    return {"items": [{"id": p.item_no, "text": p.text, "done": p.done} for p in ctx.plan()]}


def handoff(args: Handoff, ctx: ToolContext) -> dict[str, Any]:
    """Run the task's static checks and hand the artifact's current version to the verifier."""
    current = _existing(ctx, args.artifact_name, text=False)
    submission = Submission(
        instance=ctx.instance,
        files=ctx.files(),
        main=current.name,
        max_bytes=ctx.max_bytes(current.name),
    )
    checks = ctx.task.static_checks(submission)
    if not passed(checks):
        failed = [{"check": c.name, "detail": c.detail} for c in checks if not c.passed]
        raise ToolError(
            f"{args.artifact_name} v{current.version} fails the static checks",
            kind="checks_failed",
            hint="fix what each check reports, then hand off",
            data={"failed": failed},
        )
    if ctx.profile.strict_plan:
        open_items = [p.item_no for p in ctx.plan() if not p.done]
        if open_items:
            raise ToolError(
                "plan items are still open",
                kind="plan_locked",
                hint="mark every plan item done first",
                data={"open": open_items},
            )
    assert current.version_id is not None, "every artifact version has its row"
    ctx.handed_off = current.version_id
    ctx.handed_off_as, ctx.handoff_checks = submission, checks
    ctx.progress = True
    return {"status": "handed_off", "artifact_name": current.name, "version": current.version}


@dataclass(frozen=True)
class Tool:
    """A tool: its name, its argument model and its handler."""

    name: str
    args: type[BaseModel]
    handler: Handler

    @property
    def spec(self) -> ToolSpec:
        """Name, description and generated JSON schema, as the model sees them."""
        schema = self.args.model_json_schema()
        description = schema.pop("description", "")
        schema.pop("title", None)
        return ToolSpec(name=self.name, description=description, parameters=schema)


#: The artifact tools every task has, in the fixed order the prompt prefix lists them.
TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool("manage_artifact", ManageArtifact, manage_artifact),
        Tool("plan_manage", PlanManage, plan_manage),
        Tool("handoff", Handoff, handoff),
    )
}


def _task_tool(tool: TaskTool) -> Tool:
    def handler(args: Any, ctx: ToolContext) -> dict[str, Any]:
        seen = Workspace(
            instance_id=ctx.instance.id, public=dict(ctx.instance.public), files=ctx.files()
        )
        return tool.handler(args, seen)

    return Tool(tool.name, tool.args, handler)


@functools.cache
def tools_of(task: Task) -> dict[str, Tool]:
    """Every tool of a session of ``task``: the artifact tools, then the task's own."""
    own = {tool.name: _task_tool(tool) for tool in task.tools()}
    clash = sorted(set(own) & set(TOOLS))
    if clash:
        raise ConfigError(f"task {task.name}: its tool {clash[0]} has an artifact tool's name")
    return {**TOOLS, **own}


def tool_specs(task: Task) -> tuple[ToolSpec, ...]:
    """Declarations of every tool of ``task``, in fixed order."""
    return tuple(tool.spec for tool in tools_of(task).values())


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def texts_needed(calls: Iterable[FunctionCall], task: Task) -> workspace.ContentsWanted:
    """The artifacts whose text a turn's calls may read: those they get or edit by name, or
    (None) every live one, for a handoff or a task's own tool, which see the whole
    workspace. A call that names an artifact in arguments it cannot use reads nothing."""
    names: set[str] = set()
    for call in calls:
        args = call.args if isinstance(call.args, dict) else {}
        if call.name == "manage_artifact":
            name = args.get("name")
            if args.get("action") in ("get", "edit") and isinstance(name, str):
                names.add(name)
        elif call.name != "plan_manage" and call.name in tools_of(task):
            return None
    return frozenset(names)


def run_tool(call: FunctionCall, ctx: ToolContext) -> dict[str, Any]:
    """Validate and run one call.

    Raises:
        ToolError: unknown tool, bad arguments, or a refusal by the tool itself.
    """
    tools = tools_of(ctx.task)
    tool = tools.get(call.name)
    if tool is None:
        raise ToolError(
            f"there is no tool named {call.name!r}",
            kind="unknown_tool",
            hint=f"call one of: {', '.join(tools)}",
        )
    if not isinstance(call.args, dict):
        raise ToolError("arguments must be an object", kind="bad_arguments")
    try:
        args = tool.args.model_validate(call.args)
    except ValidationError as exc:
        raise ToolError(
            f"invalid arguments for {call.name}: {_describe(exc)}",
            kind="bad_arguments",
            hint="check the tool's parameter schema and call it again",
        ) from None
    return tool.handler(args, ctx)
