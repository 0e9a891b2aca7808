"""A session worker imports only what it uses: its memory at a thousand sessions depends on it.

Playwright, pyvirtualdisplay, google-genai, OpenTelemetry and Alembic (with Mako, Pygments and
Pillow behind them) are imported where they are needed: the browser verifier, a Gemini model,
a worker told an OTLP endpoint, a migration.
SQLAlchemy's ORM is imported by nothing: the tables are Core tables.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import enqueue
from worker.settings import Settings
from worker.store.tables import sessions, verifications

ROOT = Path(__file__).resolve().parents[2]
#: Libraries a worker running sim sessions, judged statically, never needs.
HEAVY = (
    "playwright",
    "pyvirtualdisplay",
    "google.genai",
    "alembic",
    "mako",
    "pygments",
    "PIL",
    "sqlalchemy.orm",
    # redis-py imports OpenTelemetry's API and metrics SDK itself wherever they are
    # installed; the tracing SDK, the OTLP exporter and protobuf behind it are Swarm's.
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter",
    "google.protobuf",
)
#: Those a worker process (``python -m worker``) must not load either, with the rest of the
#: ``celery`` command line: its REPL and its plugins' commands (Flower's, Tornado behind it).
#: Celery's worker command imports Pygments (``celery.bin.base``) to colour its output, so
#: that one is left out.
HEAVY_BESIDE_CELERY = (
    *(h for h in HEAVY if h != "pygments"),
    "click_repl",
    "prompt_toolkit",
    "flower",
    "tornado",
)
#: Seconds a fresh interpreter may take to import the worker.
IMPORT_TIMEOUT_S = 120
#: Seconds the run of the worker test may take.
RUN_TIMEOUT_S = 120
#: One line of ``-X importtime`` (``PYTHONPROFILEIMPORTTIME``): its last field is the module.
_IMPORT_LINE = re.compile(r"import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)")


def _leaked(modules: Iterable[str], heavy: Iterable[str] = HEAVY) -> list[str]:
    """The ``heavy`` packages that ``modules`` contain, themselves or by a submodule."""
    loaded = set(modules)
    return [h for h in heavy if h in loaded or any(m.startswith(h + ".") for m in loaded)]


def _modules_after(code: str) -> list[str]:
    """``sys.modules`` of a fresh interpreter after running ``code``."""
    result = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=IMPORT_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    modules: list[str] = json.loads(result.stdout.splitlines()[-1])
    return modules


def test_importing_the_worker_loads_no_heavy_library() -> None:
    # When a fresh interpreter imports what a worker (`python -m worker`) imports
    modules = _modules_after("import worker.celery, verifier.tasks")
    # Then none of the heavy libraries came with it
    assert "worker.agent.turn" in modules  # the import did reach the turn loop
    leaked = _leaked(modules)
    assert not leaked, f"importing the worker loaded {', '.join(leaked)}"
    assert "tree_sitter" not in modules, "the static checks' grammars loaded before any page"


def test_the_browser_verifier_and_gemini_still_bring_their_libraries() -> None:
    # When the modules that use them are imported
    modules = _modules_after(
        "import verifier.chromium.browser, worker.models.gemini.client, worker.fleet.tracing"
    )
    # Then they are loaded (the lazy imports above name modules that exist)
    wanted = ["playwright", "pyvirtualdisplay", "google.genai", "opentelemetry.exporter"]
    assert _leaked(modules, wanted) == wanted


@pytest.mark.services
def test_a_sim_run_judged_statically_loads_no_heavy_library(
    start_worker: Callable[..., WorkerProcess], settings: Settings, engine: Engine
) -> None:
    # Given a session worker that judges statically and logs every module it imports,
    # at start-up and after
    worker = start_worker(concurrency=4, PYTHONPROFILEIMPORTTIME="1", SWARM_VERIFIER="static")
    # When it plays a sim run to the end, its artifacts verified
    run_id = enqueue(settings, "--wave", "1x2", "--sim-latency-ms", "50")
    until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    with engine.connect() as conn:
        methods = conn.execute(
            select(verifications.c.method)
            .join(sessions, sessions.c.id == verifications.c.session_id)
            .where(sessions.c.run_id == run_id)
        ).scalars()
        assert set(methods) == {"static"}
    # Then it never imported a heavy library
    imported = [m.group(1) for line in worker.log if (m := _IMPORT_LINE.search(line))]
    ready = next(i for i, line in enumerate(worker.log) if " ready." in line)
    after = [m.group(1) for line in worker.log[ready:] if (m := _IMPORT_LINE.search(line))]
    # (the log shows imports made after start-up: the sim reads its page assets then)
    assert "importlib.resources.readers" in after, worker.log[-20:]
    leaked = _leaked(imported, HEAVY_BESIDE_CELERY)
    assert not leaked, f"a worker running sim sessions loaded {', '.join(leaked)}"
