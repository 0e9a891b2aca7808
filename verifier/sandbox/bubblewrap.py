"""Running untrusted Python in bubblewrap: no network, no environment, limits, nothing left behind.

Each run gets a fresh scratch directory holding the session's files and nothing else, bound
at ``/work`` in a sandbox made by Debian's ``bwrap`` (the tool Flatpak builds its sandboxes
with) over ``prlimit`` (util-linux):

- its own user, PID, network, IPC, UTS and cgroup namespaces: the network has a loopback
  only, so nothing on the host (not even 127.0.0.1) can be reached;
- a filesystem of ``/usr`` read-only, a private ``/tmp``, ``/proc`` and a minimal ``/dev``:
  no ``/etc``, no home, no project or worker files, and no task data (the hidden test comes
  in on standard input). Every directory of installed packages under it is hidden behind an
  empty one (``/usr/local``, Debian's ``dist-packages``, an interpreter's ``site-packages``):
  a worker installed there (as in the project's image) would otherwise show the solution
  its own code and the packages that ship a task's data, its tests and reference solutions
  among them;
- an empty environment (no key, no database or broker URL);
- limits on CPU seconds, address space, processes, open files and file size, a wall-clock
  deadline, and its output kept to a few KiB;
- an unprivileged user when the worker runs as root;
- its process group killed at the end, and every process in its PID namespace with it
  (``--die-with-parent``, ``--unshare-pid``); the scratch directory is deleted.

A sandbox that cannot start is :class:`~worker.errors.SandboxUnavailable`: an infrastructure
fault, retried, never a failed check.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from worker.errors import SandboxUnavailable
from worker.settings import Settings

__all__ = ["BWRAP", "Limits", "Run", "Sandbox", "package_dirs"]

#: Debian's bubblewrap.
BWRAP = "/usr/bin/bwrap"
#: util-linux's prlimit, which sets the limits before bubblewrap starts.
PRLIMIT = "/usr/bin/prlimit"
#: Debian's interpreter, preferred for the sandbox: it lives under ``/usr`` with its library.
SYSTEM_PYTHON = Path("/usr/bin/python3")
#: Where the harness is bound inside the sandbox.
HARNESS_PATH = "/sandbox/harness.py"
#: Seconds a sandbox may take to start and stop, beyond its test's own wall time.
STARTUP_S = 5.0


def package_dirs(python: Path, prefix: Path | None) -> list[Path]:
    """Directories of installed packages the sandbox would see, to hide behind empty ones.

    The interpreter runs with ``-I -S`` and so imports none of them; they are hidden because
    they can be read: a worker installed under ``/usr/local`` (the project's image) or into
    an interpreter's prefix lays its own code and every package it installed there, with any
    task data they ship, open to the solution.

    Args:
        python: The sandbox's interpreter.
        prefix: The interpreter's prefix when it lives outside ``/usr``, bound as well.
    """
    patterns = ["/usr/lib/python3*/dist-packages", "/usr/lib/python3*/site-packages"]
    if str(python).startswith("/usr/local/"):
        patterns += [
            "/usr/local/lib/python3*/dist-packages",
            "/usr/local/lib/python3*/site-packages",
        ]
    else:
        patterns.append("/usr/local")
    if prefix is not None:
        patterns += [f"{prefix}/lib/python3*/site-packages", f"{prefix}/lib/python3*/dist-packages"]
    return sorted({Path(p) for pattern in patterns for p in glob.glob(pattern) if Path(p).is_dir()})


@dataclass(frozen=True)
class Limits:
    """What each sandbox may use."""

    cpu_s: int = 10
    """CPU seconds of each process."""
    address_space_bytes: int = 1 << 30
    """Address space of each process."""
    processes: int = 64
    """Processes and threads of the sandbox's user."""
    open_files: int = 64
    """Open files of each process."""
    file_size_bytes: int = 16 << 20
    """Largest file a process may write (its output included)."""
    output_bytes: int = 16 << 10
    """Output kept for the verdict."""


@dataclass(frozen=True)
class Run:
    """What one sandboxed run did."""

    ready: bool
    """The harness started inside the sandbox."""
    report: dict[str, Any] | None
    """The harness's report, if it wrote one carrying this run's nonce."""
    timed_out: bool
    exit_code: int | None
    """The sandbox's exit status (negative: the signal that ended it)."""
    output: str
    """The first bytes the sandbox wrote to its output."""
    wall_s: float
    cpu_s: float
    """CPU seconds of the sandbox's processes (user and system)."""


class Sandbox:
    """A factory of sandboxed runs of the harness.

    Args:
        python: The interpreter inside the sandbox.
        user: The user id to run as when this process is root (None: as this process).
        base_dir: Where scratch directories are made.
        limits: What each run may use.
    """

    def __init__(
        self,
        *,
        python: Path = SYSTEM_PYTHON,
        user: int | None = None,
        base_dir: Path | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.python = python
        self.user = user
        self.base_dir = base_dir
        self.limits = limits or Limits()

    @classmethod
    def from_settings(cls, settings: Settings) -> Sandbox:
        """The sandbox the settings describe."""
        python = settings.sandbox_python
        if python is None:
            python = (
                SYSTEM_PYTHON
                if SYSTEM_PYTHON.exists()
                else Path(getattr(sys, "_base_executable", sys.executable))
            )
        return cls(
            python=python,
            user=settings.sandbox_user if os.geteuid() == 0 else None,
            base_dir=settings.sandbox_dir,
            limits=Limits(
                cpu_s=settings.sandbox_cpu_s,
                address_space_bytes=settings.sandbox_memory_mb << 20,
            ),
        )

    def probe(self) -> None:
        """Build a sandbox once and run nothing in it.

        Raises:
            SandboxUnavailable: it cannot be built here, with why.
        """
        for tool in (BWRAP, PRLIMIT, str(self.python)):
            if not Path(tool).exists():
                raise SandboxUnavailable(f"{tool} is not installed")
        run = self.run({}, None, timeout_s=STARTUP_S)
        if not run.ready:
            raise SandboxUnavailable(
                f"bubblewrap cannot build a sandbox here ({_first_line(run.output)})"
            )

    def run(
        self, workspace: Mapping[str, str], job: dict[str, Any] | None, *, timeout_s: float
    ) -> Run:
        """Run the harness on ``workspace`` with ``job`` on its standard input.

        Args:
            workspace: The files of the scratch directory, by plain file name.
            job: What the harness is told (the module, the hidden test); a nonce is added.
                None runs a harness that only says it started (a probe).
            timeout_s: The wall time the run may take once the sandbox is up.
        """
        nonce = secrets.token_hex(16)
        # The run's own directory: the harness (readable, not writable, by the sandbox's
        # user) beside the scratch directory (the sandbox's user's alone).
        home = Path(tempfile.mkdtemp(prefix="swarm-sandbox-", dir=self.base_dir))
        try:
            home.chmod(0o755)
            harness = home / "harness.py"
            harness.write_bytes((files(__package__) / "harness.py").read_bytes())
            harness.chmod(0o644)
            scratch = home / "work"
            scratch.mkdir(mode=0o700)
            for name, text in workspace.items():
                if "/" in name or name in ("", ".", ".."):
                    raise ValueError(f"not a plain file name: {name!r}")
                (scratch / name).write_text(text, encoding="utf-8")
            if self.user is not None:
                for path in (scratch, *scratch.iterdir()):
                    os.chown(path, self.user, self.user)
            return self._run(scratch, harness, job, nonce, timeout_s)
        finally:
            shutil.rmtree(home, ignore_errors=True)

    def _command(
        self, scratch: Path, harness: Path, report_fd: int, info_fd: int, probe: bool
    ) -> list[str]:
        limits = self.limits
        binds = ["--ro-bind", "/usr", "/usr"]
        prefix = Path(sys.base_prefix) if not str(self.python).startswith("/usr/") else None
        if prefix is not None and prefix != Path("/usr"):
            binds += ["--ro-bind", str(prefix), str(prefix)]
        for hidden in package_dirs(self.python, prefix):
            binds += ["--tmpfs", str(hidden)]
        # Root that was not given a user to be is at least nobody, without capabilities,
        # inside the sandbox.
        as_root = self.user is None and os.geteuid() == 0
        inner = ["--uid", "65534", "--gid", "65534", "--cap-drop", "ALL"] if as_root else []
        script = (
            ["-c", f"import os; os.write({report_fd}, b'ready\\n')"]
            if probe
            else [HARNESS_PATH, str(report_fd)]
        )
        return [
            PRLIMIT,
            f"--cpu={limits.cpu_s}",
            f"--as={limits.address_space_bytes}",
            f"--nproc={limits.processes}",
            f"--nofile={limits.open_files}",
            f"--fsize={limits.file_size_bytes}",
            "--core=0",
            "--",
            BWRAP,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",
            "--info-fd",
            str(info_fd),
            *inner,
            *binds,
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--symlink",
            "usr/bin",
            "/bin",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
            "--ro-bind",
            str(harness),
            HARNESS_PATH,
            "--bind",
            str(scratch),
            "/work",
            "--chdir",
            "/work",
            "--hostname",
            "sandbox",
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/bin",
            "--setenv",
            "HOME",
            "/work",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--",
            str(self.python),
            "-I",
            "-S",
            "-B",
            *script,
        ]

    def _run(
        self,
        scratch: Path,
        harness: Path,
        job: dict[str, Any] | None,
        nonce: str,
        timeout_s: float,
    ) -> Run:
        read_fd, write_fd = os.pipe()
        info_read, info_write = os.pipe()
        output = tempfile.TemporaryFile()  # noqa: SIM115 - closed below, after the run
        started = time.monotonic()
        try:
            command = self._command(scratch, harness, write_fd, info_write, probe=job is None)
            try:
                proc = subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    pass_fds=(write_fd, info_write),
                    process_group=0,
                    user=self.user,
                    group=self.user,
                    extra_groups=[] if self.user is not None else None,
                    close_fds=True,
                )
            except OSError as exc:
                raise SandboxUnavailable(f"cannot start bubblewrap: {exc}") from exc
            os.close(write_fd)
            os.close(info_write)
            write_fd = info_write = -1
            timed_out = threading.Event()
            inside = _Inside(info_read)

            def expire() -> None:
                timed_out.set()
                # The sandbox's PID 1 first: its namespace goes with it, and bubblewrap
                # then ends on its own.
                inside.kill()
                _kill_group(proc.pid)

            deadline = threading.Timer(timeout_s + STARTUP_S, expire)
            deadline.daemon = True
            deadline.start()
            try:
                _feed(proc, job, nonce)
                _, status, usage = os.wait4(proc.pid, 0)
            finally:
                deadline.cancel()
            # Whatever is left of it goes with it, before the run counts as ended.
            inside.kill()
            _kill_group(proc.pid)
            proc.returncode = os.waitstatus_to_exitcode(status)
            ready, report = _read_channel(read_fd, nonce)
            output.seek(0)
            text = output.read(self.limits.output_bytes).decode("utf-8", "replace")
            return Run(
                ready=ready,
                report=report,
                timed_out=timed_out.is_set(),
                exit_code=proc.returncode,
                output=text,
                wall_s=time.monotonic() - started,
                cpu_s=usage.ru_utime + usage.ru_stime,
            )
        finally:
            for fd in (read_fd, info_read, write_fd, info_write):
                if fd >= 0:
                    os.close(fd)
            output.close()


class _Inside:
    """The sandbox's PID 1, as bubblewrap reports it on its info descriptor."""

    def __init__(self, info_fd: int) -> None:
        self.info_fd = info_fd
        self.pid: int | None = None

    def kill(self, wait_s: float = 5.0) -> None:
        """Kill the sandbox's PID 1 (and so its namespace), and wait until it is gone."""
        pid = self._pid()
        if pid is None:
            return
        try:
            handle = os.pidfd_open(pid)
        except ProcessLookupError:
            return  # gone already
        try:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(handle, signal.SIGKILL)
            # A pidfd reads as ready once its process has exited.
            select.select([handle], [], [], wait_s)
        finally:
            os.close(handle)

    def _pid(self) -> int | None:
        if self.pid is None:
            os.set_blocking(self.info_fd, False)
            with contextlib.suppress(BlockingIOError):
                data = os.read(self.info_fd, 4096)
                try:
                    self.pid = int(json.loads(data)["child-pid"])
                except (ValueError, KeyError, TypeError):
                    self.pid = None
        return self.pid


def _feed(proc: subprocess.Popen[bytes], job: dict[str, Any] | None, nonce: str) -> None:
    assert proc.stdin is not None
    try:
        if job is not None:
            proc.stdin.write(json.dumps({**job, "nonce": nonce}).encode())
        proc.stdin.close()
    except OSError:  # the harness is gone already; its report says so
        pass


def _read_channel(fd: int, nonce: str) -> tuple[bool, dict[str, Any] | None]:
    """Whether the harness said it started, and its report if the nonce is right."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    lines = b"".join(chunks).decode("utf-8", "replace").splitlines()
    ready = bool(lines) and lines[0] == "ready"
    for line in lines[1:]:
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict) and report.get("nonce") == nonce:
            return ready, report
    return ready, None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "no output"
