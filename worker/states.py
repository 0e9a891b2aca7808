"""Where runs, waves and sessions stand, and the outcome every ended session records.

A leaf: it imports nothing from the project, so every layer may name these states.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["TERMINAL", "CostBucket", "Outcome", "RunStatus", "SessionStatus", "WaveStatus"]


class RunStatus(str, Enum):
    """Lifecycle of a run."""

    #: created, first wave not started yet
    pending = "pending"
    #: at least one wave started and sessions remain
    running = "running"
    #: every session ended
    finished = "finished"
    #: cancelled by a user
    cancelled = "cancelled"
    #: ended early by a guard: its budget forecast said the next wave could not be paid
    stopped = "stopped"


class WaveStatus(str, Enum):
    """Lifecycle of a wave."""

    #: waiting for the previous wave to finish
    pending = "pending"
    #: its sessions are running
    running = "running"
    #: every session of the wave ended
    finished = "finished"


class SessionStatus(str, Enum):
    """Lifecycle of a session; the last five are terminal."""

    #: its wave has not started
    pending = "pending"
    #: a turn is due or in flight
    running = "running"
    #: an artifact was handed off and waits for its verdict
    verifying = "verifying"
    #: the artifact passed verification
    succeeded = "succeeded"
    #: the artifact failed verification after the last repair round
    failed = "failed"
    #: a guard ended it (turns, tokens, cost, loop, run budget)
    stopped = "stopped"
    #: a user cancelled its run
    cancelled = "cancelled"
    #: the provider refused it for good, or a turn kept crashing
    error = "error"


#: Session states after which nothing more happens.
TERMINAL = frozenset(
    {
        SessionStatus.succeeded,
        SessionStatus.failed,
        SessionStatus.stopped,
        SessionStatus.cancelled,
        SessionStatus.error,
    }
)


class Outcome(str, Enum):
    """Why a session ended; each outcome belongs to exactly one terminal status."""

    #: the verifier passed the artifact
    verified = "verified"
    #: the artifact failed verification after the last repair round
    failed_verification = "failed_verification"
    #: the session reached its turn limit
    max_turns = "max_turns"
    #: the session spent its token limit
    max_tokens = "max_tokens"
    #: the session spent its dollar limit
    max_cost = "max_cost"
    #: the run spent its budget
    budget = "budget"
    #: the loop detector stopped the session after a warning
    loop = "loop"
    #: the model's daily quota is spent, and the model is paused fleet-wide
    quota = "quota"
    #: a user cancelled the run
    cancelled = "cancelled"
    #: the provider refused the request for good, or the settings cannot work
    model_error = "model_error"
    #: the model stayed unavailable through every retry
    retries_exhausted = "retries_exhausted"
    #: one turn kept being claimed and never committed (a crashing worker)
    poison_turn = "poison_turn"
    #: its wave never started: the run's budget forecast stopped the run
    forecast = "forecast"
    #: the session's task cannot be loaded, or is not the one its run recorded
    task_error = "task_error"

    @property
    def status(self) -> SessionStatus:
        """The terminal status a session with this outcome ends in."""
        return _STATUS_OF[self]

    @property
    def bucket(self) -> CostBucket:
        """Where reports put the dollars of a session that ended so."""
        if self is Outcome.verified:
            return CostBucket.verified
        if self is Outcome.failed_verification:
            return CostBucket.failed_verification
        if self is Outcome.cancelled:
            return CostBucket.cancelled
        if self in (Outcome.retries_exhausted, Outcome.poison_turn):
            return CostBucket.lost_to_retries
        if self in (Outcome.model_error, Outcome.task_error):
            return CostBucket.other_errors
        return CostBucket.stopped


class CostBucket(str, Enum):
    """Where a run's dollars went, by how each session ended, in report order."""

    #: sessions whose artifact passed
    verified = "verified"
    #: sessions whose artifact failed its last repair round
    failed_verification = "failed_verification"
    #: sessions a guard stopped (limits, budget, loop, quota)
    stopped = "stopped"
    #: sessions that retries or a crashing turn used up
    lost_to_retries = "lost_to_retries"
    #: sessions the provider refused
    other_errors = "other_errors"
    #: sessions of a cancelled run
    cancelled = "cancelled"
    #: sessions that have not ended
    unfinished = "unfinished"


_STATUS_OF = {
    Outcome.verified: SessionStatus.succeeded,
    Outcome.failed_verification: SessionStatus.failed,
    Outcome.max_turns: SessionStatus.stopped,
    Outcome.max_tokens: SessionStatus.stopped,
    Outcome.max_cost: SessionStatus.stopped,
    Outcome.budget: SessionStatus.stopped,
    Outcome.loop: SessionStatus.stopped,
    Outcome.quota: SessionStatus.stopped,
    Outcome.cancelled: SessionStatus.cancelled,
    Outcome.model_error: SessionStatus.error,
    Outcome.retries_exhausted: SessionStatus.error,
    Outcome.poison_turn: SessionStatus.error,
    Outcome.forecast: SessionStatus.stopped,
    Outcome.task_error: SessionStatus.error,
}
