"""A turn's hold on its run's budget: each model call's worst case, reserved before it is sent.

The worst case of a call is its prompt at the input rate, uncached, plus every output token
the request allows (``maxOutputTokens``, which the API counts thinking against) at the
output rate, at the price tier the prompt's length falls in. The prompt is counted before
sending from its characters, at :data:`CHARS_PER_TOKEN_FLOOR`: fewer characters a token
than Gemini's tokenizer takes on text, code or JSON, so the count is an upper bound.

A call whose reservation does not fit is not sent. When only the holds of calls in flight
keep it out and its session is under way (past its first turn), the turn waits for them to
settle (:class:`~worker.errors.BudgetHeld`, which uses no retry): they hold their worst
case and are billed far less. Otherwise (a session yet to start, or no room left once
the calls in flight settled) the session ends ``stopped`` (``budget``). The turn's commit
settles the reservation (:mod:`worker.store.turns`); :class:`CallHold` releases it when the
call failed unbilled, and keeps it when the call may have been billed with no usage to show
for it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from worker.errors import BudgetHeld, CallOverBudget
from worker.fleet.runtime import Runtime
from worker.models.base import CHARS_PER_TOKEN_FLOOR, ModelRequest, prompt_tokens_bound
from worker.models.pricing import PriceTable
from worker.store import claims, reservations

logger = logging.getLogger(__name__)

__all__ = ["CHARS_PER_TOKEN_FLOOR", "CallHold", "prompt_tokens_bound", "worst_case_usd"]


def worst_case_usd(prices: PriceTable, request: ModelRequest, *, max_output_tokens: int) -> float:
    """The most one call of ``request`` can be billed."""
    return prices.worst_case_usd(
        request.model, prompt_tokens=prompt_tokens_bound(request), output_tokens=max_output_tokens
    )


@dataclass
class CallHold:
    """The reservations of one turn's model calls against its run's budget.

    Args:
        rt: The worker's runtime.
        claim: The turn's lease.
        run_id: The session's run (it has a budget).
        amount_usd: The worst case of one call of the turn.
    """

    rt: Runtime
    claim: claims.Claim
    run_id: int
    amount_usd: float
    calls: int = 0
    """Calls of the turn reserved so far."""

    def first(self) -> None:
        """Reserve the turn's first call.

        Raises:
            BudgetHeld: a session under way whose call does not fit only because calls in
                flight hold the rest of the budget; nothing was reserved, and the turn waits
                for them.
            CallOverBudget: it does not fit in what the budget has left once every call in
                flight settled (outcome ``budget``); nothing was reserved.
        """
        hold = self._reserve()
        if hold.settles_to_fit and self.claim.turn_no > 0:
            # Calls in flight hold their worst case and are mostly billed far less: once
            # they settle this one may fit, so a session under way waits rather than end
            # with its spending sunk. A session yet to start does not start: what is left
            # goes to the sessions under way so that they finish, rather than spread over
            # every session of a wide wave until none does.
            raise BudgetHeld(
                f"budget: ${hold.reserved_usd:.4f} held by calls in flight; a call of up to "
                f"${self.amount_usd:.4f} waits for them to settle",
                delay_s=self.rt.settings.retry_backoff_s,
            )
        if not hold.fits:
            raise CallOverBudget(
                spent_usd=hold.spent_usd,
                reserved_usd=hold.reserved_usd,
                call_usd=self.amount_usd,
                budget_usd=hold.budget_usd,
            )

    def again(self) -> bool:
        """Reserve one more call of the turn; False when it does not fit."""
        fits = self._reserve().fits
        if not fits:
            logger.info(
                "turn %s/%s: no second call, the budget cannot hold it",
                self.claim.session_id,
                self.claim.turn_no,
            )
        return fits

    def _reserve(self) -> reservations.Hold:
        with self.rt.engine.connect() as conn:
            hold = reservations.reserve(
                conn,
                run_id=self.run_id,
                session_id=self.claim.session_id,
                turn_no=self.claim.turn_no,
                epoch=self.claim.epoch,
                amount_usd=self.amount_usd,
                now=self.rt.clock(),
                again=self.calls > 0,
                # A claim whose attempts were not given back may find a dead worker's hold.
                stale=self.calls == 0 and self.claim.attempts > 1,
            )
        if hold.fits:
            self.calls += 1
        return hold
