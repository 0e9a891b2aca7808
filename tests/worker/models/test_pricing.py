"""Prices: a dated table in the code, a file on top, and no silent $0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from scheduler.cli import cli
from worker.errors import ConfigError
from worker.models.base import TokenUsage
from worker.models.pricing import PriceTable
from worker.models.registry import check_model


def test_cost_counts_cached_input_and_thinking_at_their_prices() -> None:
    usage = TokenUsage(
        prompt_tokens=1_000_000,
        cached_tokens=400_000,
        output_tokens=100_000,
        thoughts_tokens=50_000,
        tool_use_tokens=10_000,
    )
    # gemini-3-flash-preview: $0.50 input, $0.05 cached input, $3.00 output per million
    expected = 0.610 * 0.50 + 0.400 * 0.05 + 0.150 * 3.00
    assert PriceTable.load().cost_usd("gemini-3-flash-preview", usage) == pytest.approx(expected)


def test_a_price_file_overrides_and_extends_the_table(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "gemini-3-flash-preview": {
                    "input_per_m": 1.0,
                    "output_per_m": 2.0,
                    "cached_input_per_m": 0.1,
                    "as_of": "2026-11-01",
                },
                "gemini-4-nano": {
                    "input_per_m": 0.01,
                    "output_per_m": 0.02,
                    "cached_input_per_m": 0.001,
                    "as_of": "2026-11-02",
                },
            }
        )
    )
    table = PriceTable.load(path)
    assert table.price("gemini-3-flash-preview").as_of == "2026-11-01"
    assert table.price("gemini-4-nano").input_per_m == 0.01
    assert table.price("gemini-2.5-pro") == PriceTable.load().price("gemini-2.5-pro")
    check_model("gemini-4-nano", table)


@pytest.mark.parametrize("text", ["{not json", '{"m": {"input_per_m": 1}}'])
def test_a_bad_price_file_is_a_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match="cannot read price table"):
        PriceTable.load(path)


def test_an_unknown_model_is_refused_at_enqueue_not_billed_at_zero() -> None:
    with pytest.raises(ConfigError, match="no price for model 'gemini-9-ultra'"):
        check_model("gemini-9-ultra", PriceTable.load())
    with pytest.raises(ConfigError, match="no provider serves model 'gpt-5'"):
        check_model("gpt-5", PriceTable.load())
    # the CLI says so before touching any service
    result = CliRunner().invoke(
        cli,
        [
            "--database-url",
            "postgresql://nobody@127.0.0.1:1/x",
            "enqueue",
            "--model",
            "gemini-9-ultra",
        ],
    )
    assert result.exit_code != 0
    assert "no price for model 'gemini-9-ultra'" in str(result.exception) + result.output


def test_a_prompt_above_200k_tokens_is_billed_at_the_long_prompt_rates() -> None:
    # Given a 323k-token prompt, 300k of it served from the cache, on gemini-3-pro-preview
    usage = TokenUsage(
        prompt_tokens=323_000, cached_tokens=300_000, output_tokens=2_000, thoughts_tokens=1_000
    )
    # Then every kind of token is billed at the rates above 200k: $4.00 input, $0.40
    # cached input, $18.00 output per million (against $2.00, $0.20, $12.00 below)
    expected = 0.023 * 4.00 + 0.300 * 0.40 + 0.003 * 18.00
    table = PriceTable.load()
    assert table.cost_usd("gemini-3-pro-preview", usage) == pytest.approx(expected)
    # and 2.5 Pro likewise ($2.50, $0.25, $15.00)
    expected = 0.023 * 2.50 + 0.300 * 0.25 + 0.003 * 15.00
    assert table.cost_usd("gemini-2.5-pro", usage) == pytest.approx(expected)


def test_the_long_prompt_tier_starts_above_200k_and_only_where_a_model_has_one() -> None:
    table = PriceTable.load()
    at = TokenUsage(prompt_tokens=200_000, output_tokens=1_000)
    above = TokenUsage(prompt_tokens=200_001, output_tokens=1_000)
    assert table.cost_usd("gemini-3-pro-preview", at) == pytest.approx(0.2 * 2.00 + 0.001 * 12.00)
    assert table.cost_usd("gemini-3-pro-preview", above) == pytest.approx(
        0.200001 * 4.00 + 0.001 * 18.00
    )
    # Flash has one rate at every length
    assert table.cost_usd("gemini-3-flash-preview", above) == pytest.approx(
        0.200001 * 0.50 + 0.001 * 3.00
    )


def test_a_price_file_may_give_long_prompt_and_storage_rates(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "gemini-4-pro": {
                    "input_per_m": 1.0,
                    "output_per_m": 2.0,
                    "cached_input_per_m": 0.1,
                    "as_of": "2026-11-01",
                    "long_input_per_m": 3.0,
                    "long_output_per_m": 4.0,
                    "long_cached_input_per_m": 0.3,
                    "cache_storage_per_m_hour": 5.0,
                }
            }
        )
    )
    table = PriceTable.load(path)
    usage = TokenUsage(prompt_tokens=1_000_000, cached_tokens=500_000, output_tokens=100_000)
    assert table.cost_usd("gemini-4-pro", usage) == pytest.approx(0.5 * 3.0 + 0.5 * 0.3 + 0.1 * 4)
    assert table.storage_usd("gemini-4-pro", tokens=200_000, hours=1.5) == pytest.approx(1.5)


def test_explicit_cache_storage_is_priced_per_token_hour() -> None:
    table = PriceTable.load()
    # $4.50 per million tokens per hour on the Pro models, $1.00 on Flash
    assert table.storage_usd("gemini-2.5-pro", tokens=40_000, hours=3) == pytest.approx(0.54)
    assert table.storage_usd("gemini-3-flash-preview", tokens=40_000, hours=0.5) == pytest.approx(
        0.02
    )
    assert table.storage_usd("gemini-3-flash-preview", tokens=40_000, hours=-1) == 0.0
