"""The Python sandbox: hidden tests pass only when they run to their end, and cheats fail.

Each cheat is a real solution file run in a real bubblewrap sandbox, and each test then
looks for what it might have left behind: a process, a file outside the scratch directory,
a connection to a listener on the host's loopback.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from verifier.sandbox.bubblewrap import Limits, Sandbox
from verifier.sandbox.judge import judge_python
from worker.errors import SandboxUnavailable
from worker.settings import Settings
from worker.tasks.base import HiddenTest, Instance, Submission
from worker.tasks.cheats import CHEATS
from worker.tasks.humaneval.task import task as humaneval

#: A hidden test of ``add``, with a helper the solution cannot change.
TEST = HiddenTest(
    module="solution.py",
    setup="def twice(x):\n    return 2 * x\n",
    source=(
        "from solution import add\n"
        "assert add(2, 3) == 5\n"
        "assert twice(add(1, 1)) == 4\n"
        "assert add(-1, 1) == 0\n"
    ),
    timeout_s=5,
)
GOOD = "def add(a, b):\n    return a + b\n"
STUBS = "\ndef add(a, b):\n    return None\n"


def _judge(sandbox: Sandbox, text: str, test: HiddenTest = TEST) -> tuple[bool, str]:
    verdict = judge_python(
        Submission(Instance("add"), {"solution.py": text}, "solution.py"), test, sandbox=sandbox
    )
    return verdict.passed, verdict.checks[0].detail


def _sandboxed() -> set[int]:
    """Processes of bubblewrap or of the harness running now."""
    found = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if "bwrap" in cmdline or "/sandbox/harness.py" in cmdline:
            found.add(proc.info["pid"])
    return found


def _scratch() -> set[Path]:
    """The sandboxes' own directories in the temporary directory now."""
    return set(Path(tempfile.gettempdir()).glob("swarm-sandbox-*"))


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener on the host's 127.0.0.1: its port, and what every connection sent."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    heard: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                heard.append(conn.recv(100) or b"<connected>")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], heard
    stop.set()
    thread.join()
    server.close()


def test_a_solution_that_solves_passes(sandbox: Sandbox) -> None:
    # Given a correct solution, When its hidden test runs in the sandbox
    ok, detail = _judge(sandbox, GOOD)
    # Then it passes, the test having run to its end
    assert ok, detail
    assert "ran to its end (3 calls" in detail


def test_a_wrong_answer_is_told_what_was_called_not_the_test(sandbox: Sandbox) -> None:
    ok, detail = _judge(sandbox, "def add(a, b):\n    return a - b\n")
    assert not ok
    # The failing call and what it returned, never a line of the hidden test
    assert "solution.add(2, 3) returned -1" in detail
    assert "assert" not in detail and "twice" not in detail


def test_a_solution_s_exception_comes_back_as_its_own_traceback(sandbox: Sandbox) -> None:
    ok, detail = _judge(sandbox, "def add(a, b):\n    return a / 0\n")
    assert not ok
    assert "solution.py line 2, in add" in detail and "ZeroDivisionError" in detail


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_every_cheat_fails_and_leaves_nothing_behind(
    sandbox: Sandbox, cheat: str, tmp_path: Path
) -> None:
    # Given a solution that tries to pass without solving
    text = CHEATS[cheat].format(
        functions=STUBS, functions_returning_anything=("\ndef add(a, b):\n    return _Anything()\n")
    )
    before, scratch = _sandboxed(), _scratch()
    # When it is judged
    ok, detail = _judge(sandbox, text)
    # Then it fails
    assert not ok, detail
    # And no process of it is left, no file outside its scratch directory
    assert _sandboxed() - before == set()
    for stray in ("/tmp/swarm-cheat", "/swarm-cheat", "/usr/swarm-cheat"):
        assert not Path(stray).exists(), stray
    assert _scratch() == scratch


def test_no_connection_reaches_a_listener_on_the_host_loopback(
    sandbox: Sandbox, listener: tuple[int, list[bytes]]
) -> None:
    # Given a listener on 127.0.0.1 and a solution that connects to it
    port, heard = listener
    text = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')\n"
        "    REACHED = True\n"
        "except OSError:\n"
        "    REACHED = False\n"
        "def add(a, b):\n"
        "    return a + b if not REACHED else None\n"
    )
    # When it is judged
    ok, _ = _judge(sandbox, text)
    # Then the connection failed inside (so the sum is right) and nothing reached the host
    assert ok
    assert heard == []


def test_the_solution_sees_no_environment_and_no_files_but_its_own(sandbox: Sandbox) -> None:
    text = (
        "import os\n"
        "def add(a, b):\n"
        "    return [sorted(os.environ), sorted(os.listdir('/')), sorted(os.listdir('/work'))]\n"
    )
    test = HiddenTest(
        module="solution.py",
        source=(
            "from solution import add\n"
            "env, root, work = add(1, 2)\n"
            "assert env == ['HOME', 'LANG', 'PATH', 'PWD'], env\n"
            "assert 'etc' not in root and 'home' not in root and 'root' not in root, root\n"
            "assert work == ['solution.py'], work\n"
        ),
    )
    ok, detail = _judge(sandbox, text, test)
    assert ok, detail


def test_the_solution_sees_no_installed_package(sandbox: Sandbox) -> None:
    # Given a solution that looks where installed packages live: a worker installed there (as
    # in the project's image, under /usr/local) and the packages that ship a task's data
    text = (
        "import glob, os, sys\n"
        "def add(a, b):\n"
        "    places = ['/usr/local', '/usr/lib/python3*/dist-packages',\n"
        "              '/usr/lib/python3*/site-packages',\n"
        "              sys.base_prefix + '/lib/python3*/site-packages']\n"
        "    return sorted(n for p in places for d in glob.glob(p) for n in os.listdir(d))\n"
    )
    test = HiddenTest(
        module="solution.py",
        source="from solution import add\nseen = add(1, 2)\nassert seen == [], seen\n",
    )
    # When it is judged, Then it saw nothing there, though the host has packages there
    assert any(
        os.listdir(d) for d in ("/usr/lib/python3/dist-packages", "/usr/local") if os.path.isdir(d)
    )
    ok, detail = _judge(sandbox, text, test)
    assert ok, detail


def test_an_endless_loop_is_stopped_by_the_deadline(sandbox: Sandbox) -> None:
    quick = HiddenTest(module="solution.py", source=TEST.source, setup=TEST.setup, timeout_s=1)
    ok, detail = _judge(sandbox, "def add(a, b):\n    while True:\n        pass\n", quick)
    assert not ok
    assert "did not finish within 1 s" in detail
    # and the deadline's kill left no process behind
    assert _sandboxed() == set()


def test_memory_and_processes_are_limited(sandbox: Sandbox) -> None:
    hog = "def add(a, b):\n    return len(bytearray(4 * 1024 ** 3))\n"
    ok, detail = _judge(sandbox, hog)
    assert not ok and "MemoryError" in detail
    bomb = "import os\nfor _ in range(500):\n    os.fork()\n" + STUBS
    ok, detail = _judge(sandbox, bomb)
    assert not ok


def test_output_is_capped(tmp_path: Path) -> None:
    small = Sandbox(user=Sandbox.from_settings(Settings()).user, limits=Limits(output_bytes=1000))
    run = small.run(
        {"solution.py": "print('x' * 10_000_000)\n" + GOOD},
        {"module": "solution.py", "setup": "", "source": TEST.source},
        timeout_s=10,
    )
    assert len(run.output) <= 1000


def test_a_sandbox_that_cannot_start_is_no_verdict(tmp_path: Path) -> None:
    broken = Sandbox(python=tmp_path / "no-python", user=Sandbox.from_settings(Settings()).user)
    with pytest.raises(SandboxUnavailable):
        broken.probe()
    with pytest.raises(SandboxUnavailable):
        judge_python(
            Submission(Instance("add"), {"solution.py": GOOD}, "solution.py"),
            TEST,
            sandbox=broken,
        )


def test_the_sandbox_runs_unprivileged(sandbox: Sandbox) -> None:
    test = HiddenTest(
        module="solution.py",
        source="from solution import ids\nassert ids() == [65534, 65534], ids()\n",
    )
    ok, detail = _judge(
        sandbox, "import os\ndef ids():\n    return [os.getuid(), os.geteuid()]\n", test
    )
    assert ok, detail


def test_every_humaneval_reference_solution_passes_and_its_prompt_fails(sandbox: Sandbox) -> None:
    # Given the 164 problems, their reference solutions and their starting files
    failures = []
    for instance in humaneval.instances():
        test = humaneval.hidden_test(instance)
        for files, want in (
            (humaneval.solution(instance), True),
            (humaneval.files(instance), False),
        ):
            verdict = judge_python(
                Submission(instance, dict(files), "solution.py"), test, sandbox=sandbox
            )
            if verdict.passed != want:
                failures.append((instance.id, want, verdict.checks[0].detail))
    # Then every reference passes and every untouched prompt fails
    assert failures == []


def test_a_worker_running_as_root_runs_sandboxes_as_nobody() -> None:
    want = 65534 if os.geteuid() == 0 else None
    assert Sandbox.from_settings(Settings()).user == want
