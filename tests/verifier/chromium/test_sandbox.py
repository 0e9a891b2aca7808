"""Chromium's sandbox: on wherever it can run, off only as root or where the kernel refuses."""

from __future__ import annotations

import json
import logging
import os
import pwd
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from click.testing import CliRunner

import verifier.chromium.binary
from tests.conftest import WorkerProcess
from tests.verifier.chromium.test_browser import on_loaded
from verifier.chromium.binary import resolve_sandbox, sandbox_support
from verifier.chromium.browser import Browser
from verifier.chromium.judge import judge
from verifier.cli import cli

#: The unprivileged user the compose image runs the verify worker as.
WORKER_USER = "nobody"
#: Longest wait for a line in a worker's log.
LOG_TIMEOUT_S = 30.0


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _renderers(browser: Browser) -> list[dict[str, Any]]:
    """What confines each renderer: seccomp mode, PID namespace depth, user namespace."""
    found = []
    for pid in browser.browser_pids()[1:]:
        try:
            if "--type=renderer" not in psutil.Process(pid).cmdline():
                continue
            status = _status(pid)
            found.append(
                {
                    "seccomp": int(status["Seccomp"]),
                    "pid_namespaces": len(status["NSpid"].split()),
                    "user_namespace": os.readlink(f"/proc/{pid}/ns/user"),
                }
            )
        except (psutil.Error, OSError, KeyError):
            continue
    return found


def _judge_as_this_user(html: str) -> dict[str, Any]:
    """Judge ``html`` in a fresh Browser and say how Chromium was confined meanwhile."""
    with Browser(max_pages=1) as browser:
        seen: list[list[dict[str, Any]]] = []
        with on_loaded(lambda: seen.append(_renderers(browser))):
            verdict = judge(html, browser=browser, min_fps=1)
        root = browser.browser_pids()[0]
        return {
            "uid": os.geteuid(),
            "support": sandbox_support().available,
            "sandboxed": browser.sandboxed,
            "verdict": verdict.to_dict(),
            "renderers": seen[0] if seen else [],
            "browser_user_namespace": os.readlink(f"/proc/{root}/ns/user"),
        }


def _as_unprivileged_user(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``work`` in a child process as WORKER_USER (this process may be root) and return
    its result. A fork, because the interpreter itself may not be readable by that user."""
    user = pwd.getpwnam(WORKER_USER)
    home = tempfile.mkdtemp(prefix="swarm-sandbox-")
    os.chown(home, user.pw_uid, user.pw_gid)
    read, write = os.pipe()
    pid = os.fork()
    payload: dict[str, Any]
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        code, payload = 0, {}
        try:
            os.close(read)
            os.environ["HOME"] = home
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(user.pw_gid)
                os.setuid(user.pw_uid)
            payload["result"] = work()
        except BaseException as exc:
            payload["error"], code = f"{type(exc).__name__}: {exc}", 1
        with os.fdopen(write, "w") as out:
            json.dump(payload, out)
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as answer:
        data = answer.read()
    os.waitpid(pid, 0)
    payload = json.loads(data) if data else {"error": "the child died without an answer"}
    assert "error" not in payload, payload["error"]
    result: dict[str, Any] = payload["result"]
    return result


@pytest.mark.browser
def test_sandbox_is_on_when_the_worker_is_not_root(page_html: Callable[[str], str]) -> None:
    # Given a verifier process running as an unprivileged user, as in the compose image
    if os.geteuid() != 0 and not sandbox_support().available:
        pytest.fail(f"this kernel refuses Chromium's sandbox: {sandbox_support().reason}")
    html = page_html("good.html")
    # When it judges a page
    seen = _as_unprivileged_user(lambda: _judge_as_this_user(html))
    # Then Chromium ran sandboxed: the verdict says so, and the renderer was in its own user
    # and PID namespaces under a seccomp-bpf filter
    assert seen["uid"] != 0
    assert seen["support"] is True
    assert seen["sandboxed"] is True
    assert seen["verdict"]["sandbox"] is True
    assert seen["verdict"]["passed"] is True
    assert seen["renderers"], "no renderer was running while the page was measured"
    for renderer in seen["renderers"]:
        assert renderer["seccomp"] == 2
        assert renderer["pid_namespaces"] >= 2
        assert renderer["user_namespace"] != seen["browser_user_namespace"]


@pytest.mark.browser
def test_root_falls_back_to_no_sandbox_with_a_warning(
    page_html: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root is refused the sandbox on a kernel that allows it")
    # Given a verifier running as root, that has not warned yet
    monkeypatch.setattr(verifier.chromium.binary, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="verifier.chromium.binary"):
        # When it starts its browser and judges a page
        seen = _judge_as_this_user(page_html("good.html"))
    # Then it warned at start-up, rendered without the sandbox, and says so
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("WITHOUT its sandbox" in w and "root" in w for w in warnings), warnings
    assert seen["sandboxed"] is False
    assert seen["verdict"]["sandbox"] is False
    assert all(r["seccomp"] == 0 for r in seen["renderers"])


def test_the_no_sandbox_warning_is_logged_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sandbox_support().available:
        pytest.skip("Chromium can sandbox here: there is nothing to warn of")
    # Given a process that has not warned yet
    monkeypatch.setattr(verifier.chromium.binary, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="verifier.chromium.binary"):
        # When its worker start-up, its browser and a recording each ask for the sandbox
        asked = [resolve_sandbox(None) for _ in range(3)]
    # Then each is told no, and the warning is logged once
    assert asked == [False, False, False]
    warnings = [r.getMessage() for r in caplog.records if "WITHOUT its sandbox" in r.getMessage()]
    assert len(warnings) == 1, warnings


@pytest.mark.services
@pytest.mark.browser
def test_a_verify_worker_says_at_start_up_whether_it_sandboxes(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    # When a worker of the verify queue starts
    worker = start_worker("-Q", "verify", SWARM_VERIFIER="browser")
    # Then its log says, before any page, whether Chromium will sandbox
    said = (
        "Chromium renders artifacts in its sandbox"
        if sandbox_support().available
        else "WITHOUT its sandbox"
    )
    deadline = time.monotonic() + LOG_TIMEOUT_S
    while not any(said in line for line in worker.log) and time.monotonic() < deadline:
        time.sleep(0.1)  # polls the log the worker is writing
    line = next((line for line in worker.log if said in line), None)
    assert line is not None, worker.log[-20:]
    assert said == "Chromium renders artifacts in its sandbox" or "WARNING" in line


@pytest.mark.browser
def test_check_json_reports_the_sandbox(tmp_path: Path, page_html: Callable[[str], str]) -> None:
    # Given a page on disk
    page = tmp_path / "page.html"
    page.write_text(page_html("good.html"), encoding="utf-8")
    # When it is checked with --json
    result = CliRunner().invoke(cli, ["check", str(page), "--json", "--min-fps", "1"])
    # Then the JSON says whether Chromium's sandbox was on
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["sandbox"] is sandbox_support().available
