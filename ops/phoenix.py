"""Arize Phoenix, a trace receiver people run, started on 127.0.0.1 for tests and benchmarks.

Phoenix lives in a virtualenv of its own (its dependencies clash with Swarm's):
``python3 -m venv ~/.cache/swarm/phoenix && ~/.cache/swarm/phoenix/bin/pip install
arize-phoenix``. It takes OTLP/HTTP traces at ``<url>/v1/traces`` and serves what it
stored at ``<url>/v1/projects/default/spans``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: Where Phoenix's virtualenv is looked for, unless told.
DEFAULT_VENV = Path("~/.cache/swarm/phoenix").expanduser()
#: Seconds Phoenix may take to start (it migrates its own database first).
START_TIMEOUT_S = 180.0


class PhoenixUnavailable(RuntimeError):
    """Phoenix is not installed, or did not start."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    """The JSON document at ``url``."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def stored_spans(url: str, project: str = "default") -> list[dict[str, Any]]:
    """Every span Phoenix at ``url`` stored in ``project``, newest first."""
    found: list[dict[str, Any]] = []
    cursor = ""
    while True:
        page = get_json(f"{url}/v1/projects/{project}/spans?limit=1000{cursor}")
        found += page["data"]
        if not page.get("next_cursor"):
            return found
        cursor = f"&cursor={page['next_cursor']}"


@contextmanager
def phoenix(venv: Path = DEFAULT_VENV, *, path: str = "/usr/bin:/bin") -> Iterator[str]:
    """Run ``phoenix serve`` with a scratch working directory; yields its base URL.

    Raises:
        PhoenixUnavailable: it is not installed in ``venv``, or it did not start.
    """
    binary = venv / "bin" / "phoenix"
    if not binary.exists():
        raise PhoenixUnavailable(f"Phoenix is not installed at {binary}")
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="swarm-phoenix-") as workdir:
        log_path = Path(workdir) / "phoenix.log"
        env = {
            "PATH": path,
            "HOME": workdir,
            "PHOENIX_WORKING_DIR": workdir,
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(port),
            "PHOENIX_GRPC_PORT": str(_free_port()),
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [str(binary), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir
            )
            url = f"http://127.0.0.1:{port}"
            try:
                _wait_until_up(url, proc, log_path)
                yield url
            finally:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _wait_until_up(url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            get_json(f"{url}/v1/projects")
            return
        except (OSError, urllib.error.URLError):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text()[-2000:]
                raise PhoenixUnavailable(f"Phoenix did not start:\n{tail}") from None
            time.sleep(0.5)
