"""``scheduler report``: figures of real and hand-made runs, ladders, the HTML page, errors."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from rich.console import Console
from sqlalchemy import Engine, func, insert, select, update

from scheduler.cli import cli
from scheduler.cli.follow import until_finished
from scheduler.cli.views import status_view
from tests.conftest import WorkerProcess
from tests.factories import enqueue, make_run
from verifier.chromium.binary import CHROMIUM_ARGS, DEFAULT_CHROMIUM_PATH
from verifier.chromium.png import png_is_blank
from worker.errors import InputError
from worker.models.pricing import PriceTable
from worker.reads.figures import run_figures
from worker.reads.ladders import Target
from worker.settings import Settings
from worker.store.engine import utcnow
from worker.store.tables import caches, events, ladders, runs, samples, sessions, usage

#: Seconds a whole run in these tests may take.
RUN_TIMEOUT_S = 180
MIB = 1024 * 1024
#: A host name no real sampler reports.
HOST = "report-test-host"


def report(settings: Settings, *args: str) -> Result:
    """Run ``report`` in-process with the settings the CLI group would have built."""
    # The command is registered on the CLI group elsewhere; invoke it on its own here.
    from scheduler.cli.report import report as command

    return CliRunner().invoke(command, list(args), obj=settings)


def report_json(settings: Settings, target: str) -> dict[str, Any]:
    result = report(settings, target, "--json")
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def sample(run_id: int | None, pid: int, role: str, rss_mib: float, at: datetime) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "host": HOST,
        "pid": pid,
        "role": role,
        "at": at,
        "rss_bytes": int(rss_mib * MIB),
        "cpu_percent": 12.5,
        "threads": 8,
    }


def add_samples(engine: Engine, run_id: int) -> None:
    """Samples with known values around a finished run (the sampler is not in this test)."""
    with engine.begin() as conn:
        start, end = conn.execute(
            select(runs.c.started_at, runs.c.finished_at).where(runs.c.id == run_id)
        ).one()
        mid = start + (end - start) / 2
        before = start - timedelta(seconds=30)
        conn.execute(
            insert(samples),
            [
                # The session worker that peaks: idle 100, 130, 110 (median 110), peak 190.
                *(
                    sample(None, 4242, "sessions", v, before + timedelta(seconds=i))
                    for i, v in enumerate((100, 130, 110))
                ),
                sample(run_id, 4242, "sessions", 150, start),
                sample(run_id, 4242, "sessions", 190, mid),
                sample(run_id, 4242, "sessions", 170, end),
                # A second session worker below that peak; its idle figure must not be used.
                sample(None, 4243, "sessions", 10, before),
                sample(run_id, 4243, "sessions", 185, mid),
                sample(run_id, 5000, "browser", 300, start),
                sample(run_id, 5000, "browser", 420, mid),
                sample(run_id, 6000, "verify", 90, mid),
                # Another run's sample, larger than all of these.
                sample(run_id + 1000, 4242, "sessions", 999, mid),
            ],
        )


def usage_row(session_id: int, run_id: int, turn_no: int, cost_usd: float) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "run_id": run_id,
        "turn_no": turn_no,
        "model": "sim",
        "prompt_tokens": 1000,
        "cached_tokens": 800,
        "output_tokens": 50,
        "thoughts_tokens": 20,
        "tool_use_tokens": 0,
        "cost_usd": cost_usd,
        "price_date": "2025-12-17",
        "latency_ms": 5,
        "created_at": utcnow(),
    }


def tool_errors(session_id: int, kinds: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "session_id": session_id,
            "turn_no": 1,
            "seq": i + 1,
            "kind": "tool_error",
            "payload": {"kind": kind},
            "created_at": utcnow(),
        }
        for i, kind in enumerate(kinds)
    ]


# --- target parsing and CLI errors (SQLite, no services) --------------------------------


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("12", Target("run", 12)),
        (" 7 ", Target("run", 7)),
        ("L3", Target("ladder", 3)),
        ("l14", Target("ladder", 14)),
    ],
)
def test_targets_parse(text: str, target: Target) -> None:
    assert Target.parse(text) == target


@pytest.mark.parametrize("text", ["", "L", "run12", "12x", "L-2", "-1", "3L", "L 3", "1.5"])
def test_malformed_targets_are_refused(text: str) -> None:
    with pytest.raises(InputError, match="neither a run id"):
        Target.parse(text)


@pytest.fixture
def sqlite_settings(tmp_path: Path) -> Settings:
    url = f"sqlite:///{tmp_path / 'swarm.db'}"
    assert CliRunner().invoke(cli, ["--database-url", url, "migrate"]).exit_code == 0
    return Settings(database_url=url)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("42", "no run 42"),
        ("L7", "no ladder L7"),
        ("run12", "neither a run id (e.g. 12) nor a ladder id (e.g. L3)"),
        ("L", "neither a run id"),
    ],
)
def test_unknown_or_malformed_target_is_a_usage_error(
    sqlite_settings: Settings, target: str, message: str
) -> None:
    result = report(sqlite_settings, target, "--json")
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output and result.exception is not None
    assert isinstance(result.exception, SystemExit)


@pytest.mark.services
def test_unwritable_html_path_is_reported(
    settings: Settings, engine: Engine, tmp_path: Path
) -> None:
    # Given a run and a path in a folder that does not exist
    run_id, _ = make_run(engine, waves="1x1")
    result = report(settings, str(run_id), "--html", str(tmp_path / "missing" / "r.html"))
    assert result.exit_code != 0
    assert "r.html" in result.output and "Traceback" not in result.output


# --- figures of a real run ---------------------------------------------------------------


@pytest.mark.services
@pytest.mark.slow
def test_real_run_figures(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a finished 2x2 sim run on a real worker, and samples with known values (the
    # worker's own sampler waits past the test: a run slowed by a busy machine would
    # otherwise be sampled too)
    start_worker(SWARM_SAMPLE_INTERVAL_S="3600")
    run_id = enqueue(
        settings,
        "--wave",
        "2x2",
        "--sim-latency-ms",
        "50",
        "--sim-mix",
        "diligent=3,sloppy=1",
        seed=11,
    )
    until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    add_samples(engine, run_id)
    with engine.connect() as conn:
        rows = conn.execute(select(usage).where(usage.c.run_id == run_id)).all()
        n_errors = conn.execute(
            select(func.count())
            .select_from(events.join(sessions))
            .where(sessions.c.run_id == run_id, events.c.kind == "tool_error")
        ).scalar_one()
        succeeded = set(
            conn.execute(
                select(sessions.c.id).where(
                    sessions.c.run_id == run_id, sessions.c.status == "succeeded"
                )
            ).scalars()
        )
    # When the report is asked for as JSON
    figures = report_json(settings, str(run_id))
    # Then the cost is the sum of the usage rows, and the tokens their sums
    assert figures["run_id"] == run_id and figures["ladder_id"] is None
    assert figures["cost_usd"] == pytest.approx(math.fsum(r.cost_usd for r in rows), rel=1e-9)
    assert figures["cost_usd"] > 0
    for kind in ("prompt", "cached", "output", "thoughts", "tool_use"):
        assert figures["tokens"][kind] == sum(getattr(r, f"{kind}_tokens") for r in rows)
    tokens = figures["tokens"]
    assert tokens["cache_share"] == pytest.approx(tokens["cached"] / tokens["prompt"])
    # and the dollars by outcome add up to it
    by_outcome = figures["dollars_by_outcome"]
    assert math.fsum(by_outcome.values()) == pytest.approx(figures["cost_usd"], rel=1e-9)
    assert by_outcome["verified"] == pytest.approx(
        math.fsum(r.cost_usd for r in rows if r.session_id in succeeded), rel=1e-9
    )
    assert figures["verified"] == len(succeeded) > 0 and figures["sessions"]["total"] == 4
    assert figures["cost_per_verified_usd"] == pytest.approx(figures["cost_usd"] / len(succeeded))
    # and the peak is the largest sample of the run; RSS per session is (peak - idle) / 2
    memory = figures["memory"]
    assert memory["sessions_peak_rss_bytes"] == 190 * MIB
    assert (memory["peak_host"], memory["peak_pid"]) == (HOST, 4242)
    assert memory["idle_rss_bytes"] == 110 * MIB
    assert memory["concurrent_sessions"] == 2
    assert memory["rss_per_session_bytes"] == (190 - 110) * MIB / 2
    assert memory["browser_peak_rss_bytes"] == 420 * MIB
    assert memory["samples"] == 7
    # and the rest of the row
    assert (figures["tier"], figures["structure"]) == ("2x2", "2 waves \N{MULTIPLICATION SIGN} 2")
    assert (len(figures["waves"]), figures["wave_size"]) == (2, 2)
    assert figures["profile"] == "candidate"
    per_session = [sum(1 for r in rows if r.session_id == s) for s in {r.session_id for r in rows}]
    assert figures["turns"] == len(rows)
    assert figures["turns_per_session_median"] == statistics.median(per_session)
    assert figures["retries"] == 0
    assert figures["tool_errors"]["total"] == n_errors
    assert sum(figures["tool_errors"]["by_kind"].values()) == n_errors
    assert figures["elapsed_s"] > 0
    waves = figures["waves"]
    assert [w["index"] for w in waves] == [1, 2]
    assert math.fsum(w["cost_usd"] for w in waves) == pytest.approx(figures["cost_usd"])
    for wave in waves:
        assert math.fsum(wave["cost_by_kind_usd"].values()) == pytest.approx(wave["cost_usd"])
    # and the terminal table shows the same figures
    table = report(settings, str(run_id))
    assert table.exit_code == 0, table.output
    assert "190.0 MiB" in table.output and "40.0 MiB" in table.output


@pytest.mark.services
def test_dollars_by_outcome_cover_every_ending(settings: Settings, engine: Engine) -> None:
    # Given sessions that ended every way there is (and one still running), each with usage
    run_id, ids = make_run(engine, waves="1x8")
    endings = [
        ("succeeded", "verified"),
        ("failed", "failed_verification"),
        ("stopped", "max_turns"),
        ("error", "retries_exhausted"),
        ("error", "poison_turn"),
        ("error", "model_error"),
        ("cancelled", "cancelled"),
        ("running", None),
    ]
    with engine.begin() as conn:
        for (status, outcome), sid in zip(endings, ids, strict=True):
            conn.execute(
                update(sessions)
                .where(sessions.c.id == sid)
                .values(status=status, outcome=outcome, model_retries=2 if status == "error" else 0)
            )
        conn.execute(
            insert(usage),
            [
                usage_row(sid, run_id, turn, cost)
                for i, sid in enumerate(ids)
                for turn, cost in ((0, 0.01 * (i + 1)), (1, 0.001))
            ],
        )
        # a sample of a session worker with no idle samples at all
        conn.execute(insert(samples), [sample(run_id, 7777, "sessions", 300, utcnow())])
    # When the report is asked for
    figures = report_json(settings, str(run_id))
    # Then each ending has its own dollars and they add up to the run's cost
    cost = [0.01 * (i + 1) + 0.001 for i in range(8)]
    expected = {
        "verified": cost[0],
        "failed_verification": cost[1],
        "stopped": cost[2],
        "lost_to_retries": cost[3] + cost[4],
        "other_errors": cost[5],
        "cancelled": cost[6],
        "unfinished": cost[7],
    }
    assert figures["dollars_by_outcome"] == pytest.approx(expected)
    assert math.fsum(figures["dollars_by_outcome"].values()) == pytest.approx(
        figures["cost_usd"], rel=1e-12
    )
    assert figures["cost_usd"] == pytest.approx(math.fsum(cost))
    assert figures["retries"] == 6
    assert figures["verified"] == 1 and figures["sessions"]["total"] == 8
    assert figures["turns"] == 16 and figures["turns_per_session_median"] == 2
    # and RSS per session is unknown, not invented, without idle samples
    memory = figures["memory"]
    assert memory["sessions_peak_rss_bytes"] == 300 * MIB
    assert memory["idle_rss_bytes"] is None and memory["rss_per_session_bytes"] is None
    assert memory["browser_peak_rss_bytes"] is None
    table = report(settings, str(run_id)).output
    assert "unknown" in table and "no idle samples" in table


@pytest.mark.services
def test_ladder_groups_runs_by_profile_and_tier(
    settings: Settings, engine: Engine, tmp_path: Path
) -> None:
    # Given a two-profile ladder whose runs were created out of order, and a run outside it
    made = {}
    for profile, tier in (
        ("candidate", "1x2"),
        ("baseline", "1x1"),
        ("candidate", "1x1"),
        ("baseline", "1x2"),
    ):
        made[profile, tier] = make_run(engine, waves=tier)
    outsider, _ = make_run(engine, waves="1x1")
    costs = {
        ("baseline", "1x1"): 0.72,
        ("candidate", "1x1"): 0.12,
        ("baseline", "1x2"): 3.92,
        ("candidate", "1x2"): 0.42,
    }
    errors = {
        ("baseline", "1x1"): ["conflict"] * 4,
        ("baseline", "1x2"): ["not_found"] * 2,
        ("candidate", "1x2"): ["<b>bad</b>"],
    }
    with engine.begin() as conn:
        ladder_id = conn.execute(
            insert(ladders)
            .values(
                model="sim",
                tiers=["1x1", "1x2"],
                profiles=["baseline", "candidate"],
                config={},
                status="finished",
                created_at=utcnow(),
            )
            .returning(ladders.c.id)
        ).scalar_one()
        for (profile, tier), (run_id, ids) in made.items():
            conn.execute(
                update(runs)
                .where(runs.c.id == run_id)
                .values(ladder_id=ladder_id, tier=tier, profile=profile)
            )
            conn.execute(insert(usage), [usage_row(ids[0], run_id, 0, costs[profile, tier])])
            if (profile, tier) in errors:
                conn.execute(insert(events), tool_errors(ids[0], errors[profile, tier]))
    # When the ladder's report is asked for
    figures = report_json(settings, f"L{ladder_id}")
    # Then its runs are grouped by profile, tiers in ladder order, the outsider left out
    order = [(r["profile"], r["tier"]) for r in figures["runs"]]
    assert order == [
        ("baseline", "1x1"),
        ("baseline", "1x2"),
        ("candidate", "1x1"),
        ("candidate", "1x2"),
    ]
    assert outsider not in {r["run_id"] for r in figures["runs"]}
    assert (figures["baseline"], figures["candidate"]) == ("baseline", "candidate")
    # and each tier compares the candidate with the baseline in dollars and percent
    by_tier = {c["tier"]: c for c in figures["comparison"]}
    assert list(by_tier) == ["1x1", "1x2"]
    assert by_tier["1x1"]["delta_usd"] == pytest.approx(0.12 - 0.72)
    assert by_tier["1x1"]["delta_pct"] == pytest.approx((0.12 - 0.72) / 0.72 * 100)
    assert by_tier["1x2"]["delta_pct"] == pytest.approx((0.42 - 3.92) / 3.92 * 100)
    assert (by_tier["1x1"]["baseline_tool_errors"], by_tier["1x1"]["candidate_tool_errors"]) == (
        4,
        0,
    )
    assert (by_tier["1x2"]["baseline_run"], by_tier["1x2"]["candidate_run"]) == (
        made["baseline", "1x2"][0],
        made["candidate", "1x2"][0],
    )
    total = figures["comparison_total"]
    assert total["baseline_cost_usd"] == pytest.approx(4.64)
    assert total["candidate_cost_usd"] == pytest.approx(0.54)
    assert [(t["profile"], t["runs"], t["tool_errors"]) for t in figures["totals"]] == [
        ("baseline", 2, 6),
        ("candidate", 2, 1),
    ]
    # and the terminal shows errors as "baseline → candidate"
    table = report(settings, f"L{ladder_id}").output
    assert "4 \N{RIGHTWARDS ARROW} 0" in table and "-83.3%" in table
    # and the HTML page shows both profiles side by side, escaping what the runs recorded
    page = tmp_path / "ladder.html"
    assert report(settings, f"L{ladder_id}", "--html", str(page)).exit_code == 0
    html = page.read_text()
    assert html.count('class="cols" style="--n: 2"') == 3  # headline figures and 2 tiers
    assert "<b>bad</b>" not in html and "&lt;b&gt;bad&lt;/b&gt;" in html


# --- the HTML page in Chromium -------------------------------------------------------------


@pytest.fixture
def chromium() -> Iterator[Any]:
    if not os.path.exists(DEFAULT_CHROMIUM_PATH) and not os.environ.get("CI"):
        pytest.skip(f"{DEFAULT_CHROMIUM_PATH} is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=DEFAULT_CHROMIUM_PATH, args=list(CHROMIUM_ARGS), headless=True
        )
        yield browser
        browser.close()


@pytest.mark.services
@pytest.mark.slow
@pytest.mark.browser
def test_html_report_is_self_contained(
    settings: Settings,
    engine: Engine,
    tmp_path: Path,
    start_worker: Callable[..., WorkerProcess],
    chromium: Any,
) -> None:
    # Given a finished 2x2 run judged in Chromium (so it has screenshots), with samples
    start_worker(SWARM_VERIFIER="browser")
    run_id = enqueue(settings, "--wave", "2x2", "--sim-latency-ms", "50", seed=11)
    until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    add_samples(engine, run_id)
    # When its HTML report is written and opened in Chromium with every request recorded
    path = tmp_path / "report.html"
    result = report(settings, str(run_id), "--html", str(path))
    assert result.exit_code == 0, result.output
    url = path.resolve().as_uri()
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    page_errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda exc: page_errors.append(str(exc)))
    page.route(
        "**/*", lambda route: route.continue_() if route.request.url == url else route.abort()
    )
    page.goto(url, wait_until="load")
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")  # lazy images load
    page.wait_for_function("[...document.images].every((i) => i.complete)")
    decoded = page.evaluate("[...document.images].map((i) => i.naturalWidth)")
    shot = page.screenshot(full_page=True)
    n_charts = page.locator("svg.chart").count()
    page.close()
    # Then nothing but the file itself was requested, nothing threw, and it is not blank
    assert [r for r in requests if r != url and not r.startswith("data:")] == []
    assert page_errors == []
    assert png_is_blank(shot) is False
    # and every session's screenshot is in the gallery, decoded from its data: URI
    assert len(decoded) == 4 and all(w > 0 for w in decoded)
    assert n_charts >= 4  # dollars by outcome, cache, RSS, cost per wave (+ errors if any)
    html = path.read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html)
    assert "@import" not in html and not re.search(r"url\((?!#)", html)


@pytest.mark.services
def test_explicit_cache_storage_is_priced_per_token_hour_and_shown(
    settings: Settings, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run on gemini-2.5-pro whose explicit cache of 40,000 tokens lived two hours
    # before it was deleted (its TTL would have kept it three), and a model retry
    run_id, ids = make_run(engine, model="gemini-2.5-pro", cache="explicit")
    created = utcnow() - timedelta(hours=5)
    with engine.begin() as conn:
        conn.execute(
            insert(caches).values(
                run_id=run_id,
                model="gemini-2.5-pro",
                name="cachedContents/abc",
                tokens=40_000,
                created_at=created,
                expires_at=created + timedelta(hours=3),
                deleted_at=created + timedelta(hours=2),
            )
        )
        conn.execute(update(sessions).where(sessions.c.id == ids[0]).values(model_retries=1))
        conn.execute(insert(usage), [usage_row(ids[0], run_id, 0, 0.25)])
    # When its figures are asked for
    figures = report_json(settings, str(run_id))
    # Then the storage is 40,000 tokens x 2 h at $4.50 per million per hour, apart from calls
    assert figures["cache_token_hours"] == pytest.approx(80_000)
    assert figures["cache_storage_usd"] == pytest.approx(0.36)
    assert figures["cost_usd"] == pytest.approx(0.25)
    # and both status and report show it on its own line, status with the model retries
    with engine.connect() as conn:
        run = run_figures(conn, run_id, prices=PriceTable.load())
    assert run.total_usd == pytest.approx(0.61)
    console = Console(record=True, width=200)
    console.print(status_view(run))
    shown = console.export_text()
    assert "cache storage  $0.3600 (80,000 token-hours); total $0.6100" in shown
    assert "model retries  1" in shown
    monkeypatch.setenv("COLUMNS", "240")
    assert "cache storage" in report(settings, str(run_id)).output


@pytest.mark.services
def test_a_cache_still_alive_is_billed_up_to_now_and_never_past_its_expiry(
    settings: Settings, engine: Engine
) -> None:
    # Given one run whose cache is alive after 30 minutes, and one whose cache expired
    # unnoticed an hour after it was made
    alive, _ = make_run(engine, model="gemini-3-flash-preview", cache="explicit")
    expired, _ = make_run(engine, model="gemini-3-flash-preview", cache="explicit")
    now = utcnow()
    with engine.begin() as conn:
        for run_id, created in (
            (alive, now - timedelta(minutes=30)),
            (expired, now - timedelta(hours=4)),
        ):
            conn.execute(
                insert(caches).values(
                    run_id=run_id,
                    model="gemini-3-flash-preview",
                    name=f"cachedContents/{run_id}",
                    tokens=10_000,
                    created_at=created,
                    expires_at=created + timedelta(hours=1),
                )
            )
    # Then each is billed at $1.00 per million tokens per hour for the time it was kept
    assert report_json(settings, str(alive))["cache_storage_usd"] == pytest.approx(0.005, rel=0.01)
    assert report_json(settings, str(expired))["cache_storage_usd"] == pytest.approx(0.01)
