"""The project's exceptions, one rooted tree.

::

    SwarmError
    ├── ConfigError            bad settings or CLI input
    │   └── TaskChanged        a task is not the one a run recorded
    ├── InputError             a value from a user that cannot be used
    ├── NotMigrated            the database is not at the latest revision
    ├── RunNotFound            no run with that id
    │   └── LadderNotFound     no ladder with that id
    ├── TransientError         worth retrying after a while
    │   ├── ModelUnavailable   the model provider failed, may work later
    │   │   ├── RateLimited    the provider asked us to slow down
    │   │   ├── Throttled      the fleet's own limiter asks the call to wait (uses no retry)
    │   │   └── LimiterUnavailable  the limiter's Redis cannot be reached
    │   ├── BudgetHeld         a call fits once the calls in flight settle (uses no retry)
    │   ├── BrowserUnavailable the verifier's browser failed to launch or died
    │   ├── SandboxUnavailable the Python sandbox could not be built, or failed before the test
    │   └── VerifierUnavailable the verify worker cannot judge this task here
    ├── ModelFatal             the provider refused the request for good
    │   └── CacheNotFound      the explicit cache a request named has expired or is gone
    ├── ToolError              shown to the model as a tool result, never raised past a tool
    └── SessionStopped         the session ends now, with a typed ``Outcome``
        ├── LimitExceeded      a limit tripped: turns, tokens, cost or the run's budget
        │   └── CallOverBudget a model call's worst case does not fit in the budget left
        └── ModelPaused        the model's daily quota is spent; it is paused fleet-wide

Every way a session ends early is a :class:`SessionStopped` carrying a
:class:`~worker.states.Outcome`; the turn loop catches that one family and records it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from worker.states import Outcome

if TYPE_CHECKING:
    from worker.models.base import TokenUsage


class SwarmError(Exception):
    """Root of every error Swarm raises on purpose."""


class ConfigError(SwarmError):
    """Settings or CLI options that cannot work."""


class TaskChanged(ConfigError):
    """A task loaded again is not the version, or the configuration, its run recorded."""


class InputError(SwarmError):
    """A user-supplied value that cannot be used as given."""


class NotMigrated(SwarmError):
    """The database schema is missing or older than this code."""


class RunNotFound(SwarmError):
    """No run has the requested id."""


class LadderNotFound(RunNotFound):
    """No ladder has the requested id."""


class TransientError(SwarmError):
    """A failure that may go away; retry after ``delay_s`` seconds if given.

    ``counts`` is False for a wait that is no failure (a turn throttled by the fleet's own
    limiter), so that it does not use up the turn's retries.
    """

    def __init__(self, message: str, *, delay_s: float | None = None, counts: bool = True) -> None:
        super().__init__(message)
        self.delay_s = delay_s
        self.counts = counts


class ModelUnavailable(TransientError):
    """The model provider failed in a way that may work on a later attempt.

    ``maybe_billed`` says the request may have reached the provider and been billed with no
    usage reported (a timeout after sending, an answer cut off): its cost stays reserved.
    """

    def __init__(
        self,
        message: str,
        *,
        delay_s: float | None = None,
        counts: bool = True,
        maybe_billed: bool = False,
    ) -> None:
        super().__init__(message, delay_s=delay_s, counts=counts)
        self.maybe_billed = maybe_billed


class Throttled(ModelUnavailable):
    """No permit from the fleet's limiter within the wait; ``reason`` names the limit.

    A wait is no failure of the model, so it does not use up the turn's retries.
    """

    delay_s: float

    def __init__(self, message: str, *, delay_s: float, reason: str) -> None:
        super().__init__(message, delay_s=delay_s, counts=False)
        self.reason = reason


class LimiterUnavailable(ModelUnavailable):
    """The limiter's Redis could not be reached, so no model call may start yet."""


class RateLimited(ModelUnavailable):
    """The provider asked us to slow down (HTTP 429 or RESOURCE_EXHAUSTED)."""

    def __init__(
        self, message: str, *, delay_s: float | None = None, quota: str = "minute"
    ) -> None:
        super().__init__(message, delay_s=delay_s)
        self.quota = quota


class BrowserUnavailable(TransientError):
    """The verifier's browser could not launch or died: an infrastructure fault."""


class SandboxUnavailable(TransientError):
    """The Python sandbox could not be built, or broke before the hidden test began.

    An infrastructure fault, never a score: nothing is recorded, and the check is retried.
    """


class VerifierUnavailable(TransientError):
    """This verify worker cannot judge the task (it cannot load it, or has another version)."""


class ModelFatal(SwarmError):
    """The provider rejected the request and retrying would not help.

    ``usage`` is what the provider billed for it anyway (a blocked prompt reports its
    tokens), if it said.
    """

    def __init__(self, message: str, *, usage: TokenUsage | None = None) -> None:
        super().__init__(message)
        self.usage = usage


class CacheNotFound(ModelFatal):
    """The explicit cache a request named has expired or was evicted (HTTP 403 or 404).

    Fatal for that request as sent; the provider recreates the cache and sends it again.
    """


class ToolError(SwarmError):
    """A tool call the model got wrong; goes back to the model as the tool result.

    Args:
        message: What was wrong with the call.
        kind: A short stable label used to count errors (``bad_arguments``, ``conflict``...).
        hint: What the model should do instead.
        data: Extra structured facts for the model (for a conflict: the current version).
    """

    def __init__(
        self, message: str, *, kind: str, hint: str = "", data: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.hint = hint
        self.data = data or {}

    def to_result(self) -> dict[str, Any]:
        """The structured error the model sees."""
        result: dict[str, Any] = {"kind": self.kind, "message": str(self)}
        if self.hint:
            result["hint"] = self.hint
        result.update(self.data)
        return result


class SessionStopped(SwarmError):
    """The session must end now; ``outcome`` says why, and so which status it ends in.

    ``billed`` is the usage of a model call the turn made before it stopped (a refusal the
    provider bills), recorded with the ending.
    """

    def __init__(self, message: str, *, outcome: Outcome, billed: TokenUsage | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.billed = billed


class LimitExceeded(SessionStopped):
    """A limit tripped: the ``outcome`` it stands for, the ``value`` reached and the ``limit``."""

    def __init__(self, outcome: Outcome, *, value: float, limit: float) -> None:
        super().__init__(f"{outcome.value} limit reached: {value:g} of {limit:g}", outcome=outcome)
        self.value = value
        self.limit = limit


class BudgetHeld(TransientError):
    """A model call does not fit now only because calls in flight hold the rest of the
    budget: once they settle (their worst cases become what they were billed) it may fit,
    so the turn waits instead of ending its session. A wait uses no retry."""

    def __init__(self, message: str, *, delay_s: float) -> None:
        super().__init__(message, delay_s=delay_s, counts=False)


class CallOverBudget(LimitExceeded):
    """A model call's worst-case cost does not fit in what its run's budget has left.

    ``value`` is what the run would then owe at worst, ``limit`` the budget.
    """

    def __init__(
        self, *, spent_usd: float, reserved_usd: float, call_usd: float, budget_usd: float
    ) -> None:
        SessionStopped.__init__(
            self,
            f"spent ${spent_usd:.4f} and ${max(reserved_usd, 0.0):.4f} held by calls in "
            f"flight of ${budget_usd:.4f}: a call of up to ${call_usd:.4f} does not fit",
            outcome=Outcome.budget,
        )
        self.value = spent_usd + reserved_usd + call_usd
        self.limit = budget_usd
        self.spent_usd = spent_usd
        self.reserved_usd = reserved_usd
        self.call_usd = call_usd


class ModelPaused(SessionStopped):
    """The model is paused fleet-wide until ``until`` (UTC): sessions stop, never retry."""

    def __init__(self, *, model: str, until: datetime, reason: str) -> None:
        until = until.astimezone(UTC)
        super().__init__(
            f"{model} paused until {until:%Y-%m-%d %H:%M:%S}Z: {reason}", outcome=Outcome.quota
        )
        self.model = model
        self.until = until
        self.reason = reason
