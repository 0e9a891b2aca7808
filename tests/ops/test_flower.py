"""Flower, the fleet's dashboard, as ``ops/flowerconfig.py`` runs it.

A real worker runs a small sim run on the test Redis and PostgreSQL while a real Flower
watches its events: every page, the API and /metrics answer 401 without the credentials;
with them the workers and tasks pages render in headless Chromium, show readable tasks and
never a secret of the worker's.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import Engine, select

from scheduler.cli.follow import until_finished
from tests.conftest import ROOT, WorkerProcess, service_env
from tests.factories import enqueue
from verifier.chromium.binary import CHROMIUM_ARGS, DEFAULT_CHROMIUM_PATH
from verifier.chromium.png import png_is_blank
from worker.settings import Settings
from worker.store.tables import sessions

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.browser]

T = TypeVar("T")

#: The configuration the project ships, relative to the repository root.
FLOWER_CONF = "ops/flowerconfig.py"
#: Seconds Flower may take to start listening.
FLOWER_READY_TIMEOUT_S = 60
#: Seconds Flower may take, after the run has ended, to have seen all of its events.
FLOWER_CATCH_UP_TIMEOUT_S = 30
#: Seconds the sim run may take.
RUN_TIMEOUT_S = 120
#: Time between two looks at Flower's API while waiting for a condition (a polling rate).
POLL_INTERVAL_S = 0.2
#: Longest wait for one page, selector or request in Chromium.
PAGE_TIMEOUT_MS = 30_000
VIEWPORT = {"width": 1280, "height": 800}
#: The verifier's Chromium switches, its dead DNS letting Flower's loopback address through,
#: so that any request beyond Flower fails here as it would on an offline host.
BROWSER_ARGS = [
    *(a for a in CHROMIUM_ARGS if not a.startswith("--host-resolver-rules=")),
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
#: Pages and API endpoints that must ask for credentials (``{worker}``, ``{task}`` filled in).
PROTECTED_PATHS = (
    "/",
    "/workers",
    "/tasks",
    "/broker",
    "/worker/{worker}",
    "/task/{task}",
    "/api/workers",
    "/api/tasks",
    "/api/task/types",
    "/api/queues/length",
    "/metrics",
)
#: Asks Flower whether the worker is alive, from the events it has seen.
WORKERS_STATUS = "/api/workers?status=1"
#: What a worker logs when Flower's ``enable_events`` command turns its task events on.
TASK_EVENTS_ENABLED = "Events of group {task} enabled by remote."
#: Lists the turn tasks Flower has seen succeed.
SUCCEEDED_TURNS = "/api/tasks?taskname=swarm.turn&state=SUCCESS"

_BANNER = re.compile(r"Visit me at http://127\.0\.0\.1:(\d+)")
_READY = re.compile(r"(\S+@\S+) ready\.")
_SESSION_KWARG = re.compile(r"'session_id': (\d+)")
_TURN_KWARG = re.compile(r"'turn_no': (\d+)")
# Flower and these tests talk over loopback; a proxy from the environment must not interfere.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _flower_env(base: Mapping[str, str], **extra: str) -> dict[str, str]:
    """``base`` without any FLOWER_* variable of the caller's, plus ``extra``."""
    return {**{k: v for k, v in base.items() if not k.startswith("FLOWER_")}, **extra}


def _flower_command(*args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "worker",
        "flower",
        f"--conf={FLOWER_CONF}",
        *args,
    ]


class FlowerProcess:
    """A real ``celery -A worker flower`` process on a port the kernel picked."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.log: list[str] = []
        self.port: int | None = None
        self._bound = threading.Event()
        self.proc = subprocess.Popen(
            _flower_command("--port=0"),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        if not self._bound.wait(FLOWER_READY_TIMEOUT_S):
            self.stop()
            raise RuntimeError("Flower did not start:\n" + "\n".join(self.log[-40:]))

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line.rstrip())
            found = _BANNER.search(line)
            if found:
                self.port = int(found.group(1))
                self._bound.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@dataclass(frozen=True)
class Response:
    status: int
    headers: Message
    body: str


def _get(url: str, credentials: tuple[str, str] | None = None) -> Response:
    request = urllib.request.Request(url)
    if credentials is not None:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with _OPENER.open(request, timeout=10) as response:
            return Response(
                response.status, response.headers, response.read().decode(errors="replace")
            )
    except urllib.error.HTTPError as exc:
        with exc:
            return Response(exc.code, exc.headers, exc.read().decode(errors="replace"))


def _get_json(url: str, credentials: tuple[str, str]) -> Any:
    response = _get(url, credentials)
    assert response.status == 200, (url, response.status, response.body[:500])
    return json.loads(response.body)


def _until(condition: Callable[[], T | None], *, timeout_s: float, what: Callable[[], str]) -> T:
    """Poll ``condition`` until it returns something truthy, for at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what()}: not within {timeout_s:g}s")
        time.sleep(POLL_INTERVAL_S)


@dataclass(frozen=True)
class Fleet:
    """A Flower watching a worker that has run a finished sim run."""

    flower: FlowerProcess
    credentials: tuple[str, str]
    worker_name: str
    session_ids: frozenset[int]
    #: Secret planted in the worker's environment.
    canary: str

    def get(self, path: str, *, authenticated: bool = True) -> Response:
        return _get(self.flower.url + path, self.credentials if authenticated else None)


def _worker_name(worker: WorkerProcess) -> str:
    for line in worker.log:
        found = _READY.search(line)
        if found:
            return found.group(1)
    raise AssertionError("no ready line in the worker's log")


@pytest.fixture
def fleet(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> Iterator[Fleet]:
    """A 1x2 sim run, ended, with a Flower that has seen every one of its turns."""
    canary = f"canary-{secrets.token_hex(12)}"
    credentials = (f"ops-{secrets.token_hex(3)}", secrets.token_hex(16))
    worker = start_worker(GEMINI_API_KEY=canary)
    worker_name = _worker_name(worker)
    flower = FlowerProcess(
        _flower_env(service_env(settings), FLOWER_BASIC_AUTH=":".join(credentials))
    )
    try:
        # Flower subscribes to the events only after it has started listening, and events
        # sent before that are lost; a heartbeat of the worker's shows the subscription.
        _until(
            lambda: _get_json(flower.url + WORKERS_STATUS, credentials).get(worker_name),
            timeout_s=FLOWER_CATCH_UP_TIMEOUT_S,
            what=lambda: f"Flower saw {worker_name} alive",
        )
        # The worker sends no task events of its own accord; Flower asks it to.
        _until(
            lambda: any(TASK_EVENTS_ENABLED in line for line in worker.log),
            timeout_s=FLOWER_CATCH_UP_TIMEOUT_S,
            what=lambda: "Flower enabled the worker's task events",
        )
        run_id = enqueue(settings, "--wave", "1x2", "--sim-latency-ms", "50", seed=11)
        status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
        assert status.sessions.succeeded == 2, status
        with engine.connect() as conn:
            rows = conn.execute(
                select(sessions.c.id, sessions.c.next_turn).where(sessions.c.run_id == run_id)
            ).all()
        turns: dict[int, int] = {sid: next_turn for sid, next_turn in rows}
        missing = {f"turn:{sid}:{n}" for sid, next_turn in turns.items() for n in range(next_turn)}

        def caught_up() -> bool:
            missing.difference_update(_get_json(flower.url + SUCCEEDED_TURNS, credentials))
            return not missing

        _until(
            caught_up,
            timeout_s=FLOWER_CATCH_UP_TIMEOUT_S,
            what=lambda: f"Flower saw every turn succeed; missing {sorted(missing)}",
        )
        yield Fleet(flower, credentials, worker_name, frozenset(turns), canary)
    finally:
        flower.stop()
    assert worker.errors() == []


@pytest.mark.parametrize("basic_auth", [None, "", "admin", "admin:", ":secret"])
def test_flower_refuses_to_start_without_basic_auth(basic_auth: str | None) -> None:
    # Given no credentials, or a malformed pair
    env = _flower_env(os.environ)
    if basic_auth is not None:
        env["FLOWER_BASIC_AUTH"] = basic_auth
    # When Flower is started with the project's configuration
    result = subprocess.run(
        _flower_command("--port=0"),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=FLOWER_READY_TIMEOUT_S,
    )
    # Then it exits at once and says why
    assert result.returncode != 0
    assert "FLOWER_BASIC_AUTH" in result.stderr, result.stderr[-2000:]


def test_pages_api_and_metrics_need_credentials(fleet: Fleet) -> None:
    # Given a Flower that has seen a whole run, its worker and one of its turns
    task = f"turn:{min(fleet.session_ids)}:0"
    paths = [p.format(worker=fleet.worker_name, task=task) for p in PROTECTED_PATHS]
    wrong = (fleet.credentials[0], "not-" + fleet.credentials[1])
    for path in paths:
        # When a page is asked for without credentials, or with a wrong password: 401
        anonymous = fleet.get(path, authenticated=False)
        assert anonymous.status == 401, (path, anonymous.status)
        assert fleet.canary not in anonymous.body
        assert _get(fleet.flower.url + path, wrong).status == 401, path
        # Then with them: the page, and no secret of the worker's in it
        response = fleet.get(path)
        assert response.status == 200, (path, response.status, response.body[:500])
        assert fleet.canary not in response.body, path
    # Pages challenge a browser for basic auth
    challenge = fleet.get("/workers", authenticated=False).headers["WWW-Authenticate"]
    assert challenge is not None and challenge.startswith("Basic")
    # A scraper with the credentials gets the metrics, labelled with the task names
    assert 'task="swarm.turn"' in fleet.get("/metrics").body
    # Only the health probe is open, and it says nothing
    health = fleet.get("/healthcheck", authenticated=False)
    assert (health.status, health.body) == (200, "OK")


@pytest.mark.skipif(
    not os.path.exists(DEFAULT_CHROMIUM_PATH) and not os.environ.get("CI"),
    reason=f"Debian's Chromium is not installed at {DEFAULT_CHROMIUM_PATH}",
)
def test_workers_and_tasks_pages_render_in_chromium(fleet: Fleet, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    user, password = fleet.credentials
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=DEFAULT_CHROMIUM_PATH, args=BROWSER_ARGS, headless=True
        )
        try:
            # Given a browser without the credentials: 401
            anonymous = chromium.new_context(viewport=VIEWPORT)
            for path in ("/workers", "/tasks"):
                assert _status_without_credentials(anonymous, fleet.flower.url + path) == 401
            anonymous.close()

            # When a browser with them opens the workers and tasks pages
            context = chromium.new_context(
                viewport=VIEWPORT, http_credentials={"username": user, "password": password}
            )
            context.set_default_timeout(PAGE_TIMEOUT_MS)
            seen = _watch(context)
            page = context.new_page()
            page.goto(fleet.flower.url + "/workers")
            page.locator("#workers-table tbody tr", has_text=fleet.worker_name).wait_for()
            workers_png = page.screenshot(full_page=True)
            workers_html = page.content()
            page.goto(fleet.flower.url + "/tasks")
            page.locator("#tasks-table tbody tr", has_text="swarm.turn").first.wait_for()
            tasks = _task_rows(page)
            tasks_png = page.screenshot(full_page=True)
            tasks_html = page.content()
            context.close()
        finally:
            chromium.close()
    (tmp_path / "workers.png").write_bytes(workers_png)
    (tmp_path / "tasks.png").write_bytes(tasks_png)

    # Then nothing failed, and everything came from Flower itself: no CDN, nothing offline
    assert seen.page_errors == [] and seen.console_errors == []
    assert seen.failed == [] and seen.bad_status == []
    assert any(url.endswith("/tasks/datatable") for url in seen.requests), seen.requests
    assert [url for url in seen.requests if not url.startswith(fleet.flower.url + "/")] == []
    # and the worker is listed
    assert fleet.worker_name in workers_html
    # and each turn row names its session and turn, in its kwargs and in its id
    turns = [row for row in tasks if row["name"] == "swarm.turn"]
    assert turns, tasks
    for row in turns:
        session_ids = {int(s) for s in _SESSION_KWARG.findall(row["kwargs"])}
        turn_nos = _TURN_KWARG.findall(row["kwargs"])
        assert len(session_ids) == 1 and session_ids <= fleet.session_ids, row
        assert row["uuid"] == f"turn:{session_ids.pop()}:{turn_nos[0]}", row
    # and no page shows the worker's secret
    assert fleet.canary not in workers_html and fleet.canary not in tasks_html
    assert all(fleet.canary not in str(row) for row in tasks)
    # and the screenshots show something
    assert png_is_blank(workers_png) is False
    assert png_is_blank(tasks_png) is False


@dataclass
class _Seen:
    """What the pages of one browser context did."""

    requests: list[str]
    failed: list[str]
    bad_status: list[str]
    page_errors: list[str]
    console_errors: list[str]


def _watch(context: Any) -> _Seen:
    """Record the requests, failures and errors of every page ``context`` opens."""
    seen = _Seen([], [], [], [], [])

    def on_console(message: Any) -> None:
        if message.type == "error":
            seen.console_errors.append(message.text)

    def on_page(page: Any) -> None:
        page.on("pageerror", lambda exc: seen.page_errors.append(str(exc)))
        page.on("console", on_console)

    def on_response(response: Any) -> None:
        # A 401 is the challenge that makes Chromium send the credentials, not a failure.
        if response.status >= 400 and response.status != 401:
            seen.bad_status.append(f"{response.status} {response.url}")

    context.on("page", on_page)
    context.on("request", lambda request: seen.requests.append(request.url))
    context.on(
        "requestfailed", lambda request: seen.failed.append(f"{request.url} {request.failure}")
    )
    context.on("response", on_response)
    return seen


def _status_without_credentials(context: Any, url: str) -> int:
    """Status of ``url`` in a context that has no credentials to answer the challenge with.

    Chromium under Playwright may turn the unanswered challenge into a navigation error
    (``net::ERR_INVALID_AUTH_CREDENTIALS``) rather than show the 401 page, so the status is
    taken from the response itself.
    """
    from playwright.sync_api import Error as PlaywrightError

    page = context.new_page()
    with page.expect_response(url) as response:
        try:
            page.goto(url)
        except PlaywrightError as exc:
            assert "ERR_INVALID_AUTH_CREDENTIALS" in str(exc), exc
    status: int = response.value.status
    page.close()
    return status


def _task_rows(page: Any) -> list[dict[str, str]]:
    """The rows of the tasks table as a person sees them, by column slug."""
    columns = page.eval_on_selector_all(
        "#tasks-table thead th", "ths => ths.map(th => th.dataset.column)"
    )
    cells = page.eval_on_selector_all(
        "#tasks-table tbody tr", "trs => trs.map(tr => Array.from(tr.cells, td => td.innerText))"
    )
    assert "kwargs" in columns, columns
    return [dict(zip(columns, row, strict=True)) for row in cells]
