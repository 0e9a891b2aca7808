"""Dated per-model prices, and the cost of a model call."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from worker.errors import ConfigError
from worker.models.base import TokenUsage


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens, and the date the figures were published."""

    input_per_m: float
    output_per_m: float
    """Output, thinking included."""
    cached_input_per_m: float
    as_of: str


#: Standard paid-tier text prices of the Gemini API (prompts up to 200k tokens).
DEFAULT_PRICES: dict[str, Price] = {
    "gemini-3-pro-preview": Price(2.00, 12.00, 0.20, "2025-11-18"),
    "gemini-3-flash-preview": Price(0.50, 3.00, 0.05, "2025-12-17"),
    "gemini-2.5-pro": Price(1.25, 10.00, 0.125, "2025-06-17"),
    "gemini-2.5-flash": Price(0.30, 2.50, 0.03, "2025-06-17"),
    "gemini-2.5-flash-lite": Price(0.10, 0.40, 0.01, "2025-07-22"),
    # The offline stand-in is billed like the model it imitates, so its runs cost what a
    # real run of the same shape would.
    "sim": Price(0.50, 3.00, 0.05, "2025-12-17"),
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
        """Dollars billed for one call of ``model``."""
        p = self.price(model)
        uncached = max(usage.prompt_tokens - usage.cached_tokens, 0) + usage.tool_use_tokens
        dollars = (
            uncached * p.input_per_m
            + usage.cached_tokens * p.cached_input_per_m
            + (usage.output_tokens + usage.thoughts_tokens) * p.output_per_m
        )
        return dollars / 1_000_000
