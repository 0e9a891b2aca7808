"""Dated per-model prices, and the cost of a model call."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from worker.errors import ConfigError
from worker.models.base import TokenUsage

#: Prompts above this many tokens are billed at a model's long-prompt rates, if it has them.
LONG_PROMPT_TOKENS = 200_000


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens, and the date the figures were read.

    The ``long_*`` rates apply to a whole call whose prompt (cached part included) is above
    :data:`LONG_PROMPT_TOKENS`; ``None`` means the model has one rate at every length.
    """

    input_per_m: float
    output_per_m: float
    """Output, thinking included."""
    cached_input_per_m: float
    as_of: str
    long_input_per_m: float | None = None
    long_output_per_m: float | None = None
    long_cached_input_per_m: float | None = None
    cache_storage_per_m_hour: float = 0.0
    """An explicit cache's storage, per million tokens per hour."""

    def for_prompt(self, prompt_tokens: int) -> tuple[float, float, float]:
        """Input, cached input and output rates of a call with ``prompt_tokens``."""
        if prompt_tokens > LONG_PROMPT_TOKENS:
            return (
                self.long_input_per_m if self.long_input_per_m is not None else self.input_per_m,
                self.long_cached_input_per_m
                if self.long_cached_input_per_m is not None
                else self.cached_input_per_m,
                self.long_output_per_m if self.long_output_per_m is not None else self.output_per_m,
            )
        return self.input_per_m, self.cached_input_per_m, self.output_per_m


#: Standard paid-tier text prices of the Gemini API, from
#: https://ai.google.dev/gemini-api/docs/pricing as read on ``as_of``. The Pro models
#: charge more for prompts above 200k tokens; explicit cache storage is per token-hour.
DEFAULT_PRICES: dict[str, Price] = {
    "gemini-3-pro-preview": Price(2.00, 12.00, 0.20, "2026-12-01", 4.00, 18.00, 0.40, 4.50),
    "gemini-3-flash-preview": Price(0.50, 3.00, 0.05, "2026-12-01", None, None, None, 1.00),
    "gemini-2.5-pro": Price(1.25, 10.00, 0.125, "2026-12-01", 2.50, 15.00, 0.25, 4.50),
    "gemini-2.5-flash": Price(0.30, 2.50, 0.03, "2026-12-01", None, None, None, 1.00),
    "gemini-2.5-flash-lite": Price(0.10, 0.40, 0.01, "2026-12-01", None, None, None, 1.00),
    # The offline stand-in is billed like the model it imitates, so its runs cost what a
    # real run of the same shape would.
    "sim": Price(0.50, 3.00, 0.05, "2026-12-01", None, None, None, 1.00),
}


@dataclass(frozen=True)
class PriceTable:
    """Prices by model name."""

    prices: dict[str, Price]

    @classmethod
    def load(cls, path: Path | None = None) -> PriceTable:
        """The default table, with entries from a JSON file (``{model: {...}}``) on top."""
        prices = dict(DEFAULT_PRICES)
        if path is not None:
            try:
                raw = json.loads(path.read_text())
                prices.update({name: Price(**fields) for name, fields in raw.items()})
            except (OSError, ValueError, TypeError) as exc:
                raise ConfigError(f"cannot read price table {path}: {exc}") from exc
        return cls(prices)

    def price(self, model: str) -> Price:
        """The price of ``model``.

        Raises:
            ConfigError: the model is not in the table (no silent $0).
        """
        try:
            return self.prices[model]
        except KeyError:
            raise ConfigError(
                f"no price for model {model!r}; known: {', '.join(sorted(self.prices))}"
            ) from None

    def cost_usd(self, model: str, usage: TokenUsage) -> float:
        """Dollars billed for one call of ``model``, at the rates of its prompt's length."""
        input_per_m, cached_per_m, output_per_m = self.price(model).for_prompt(usage.prompt_tokens)
        uncached = max(usage.prompt_tokens - usage.cached_tokens, 0) + usage.tool_use_tokens
        dollars = (
            uncached * input_per_m
            + usage.cached_tokens * cached_per_m
            + (usage.output_tokens + usage.thoughts_tokens) * output_per_m
        )
        return dollars / 1_000_000

    def worst_case_usd(self, model: str, *, prompt_tokens: int, output_tokens: int) -> float:
        """The most one call of ``model`` can be billed: every prompt token uncached, at the
        rates of the prompt's length, and ``output_tokens`` of output (thinking included)."""
        input_per_m, _, output_per_m = self.price(model).for_prompt(prompt_tokens)
        return (prompt_tokens * input_per_m + output_tokens * output_per_m) / 1_000_000

    def storage_usd(self, model: str, *, tokens: int, hours: float) -> float:
        """Dollars billed for keeping an explicit cache of ``tokens`` for ``hours``."""
        return self.price(model).cache_storage_per_m_hour * tokens * max(hours, 0.0) / 1_000_000
