"""Debian's Chromium: where it is installed, the switches it runs with, and whether it can
sandbox the pages it renders.

Apart from :mod:`verifier.chromium.browser` so that a worker can answer these questions (at
start-up, and for every verification it judges statically) without importing Playwright.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "CHROMIUM_ARGS",
    "DEFAULT_CHROMIUM_PATH",
    "HEADLESS_SHELL_PATH",
    "DisplayMode",
    "SandboxSupport",
    "default_executable",
    "launch_options",
    "resolve_sandbox",
    "sandbox_support",
]

logger = logging.getLogger(__name__)

#: Debian's Chromium; Playwright's own download is not available in the image.
DEFAULT_CHROMIUM_PATH = "/usr/bin/chromium"
#: Debian's headless build of the same Chromium (package ``chromium-headless-shell``). It
#: renders a page's frames for about 40% less CPU than the full browser in headless mode,
#: so headless measurements use it when it is installed; headed rendering needs the full one.
HEADLESS_SHELL_PATH = "/usr/bin/chromium-headless-shell"
#: Switches that keep Chromium quiet and cut it off from the network (dead DNS).
CHROMIUM_ARGS = (
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)
#: Switch that turns Chromium's sandbox off; only where it cannot run (see
#: :func:`sandbox_support`).
NO_SANDBOX = "--no-sandbox"
#: util-linux's ``unshare``, present on every Debian system: asked to make a user namespace,
#: it answers whether this user may (Chromium's sandbox needs one). A child process, because
#: a multi-threaded process cannot enter a new user namespace and one would stick to it.
UNSHARE = "unshare"
#: Kernel switches that can forbid unprivileged user namespaces, named in the warning.
_USERNS_SYSCTLS = (
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
)

DisplayMode = Literal["headless", "xvfb"]

_warn_lock = threading.Lock()
_warned = False


@dataclass(frozen=True)
class SandboxSupport:
    """Whether Chromium's sandbox can run for this process, and why not."""

    available: bool
    reason: str = ""
    """Why the sandbox cannot run; empty when it can."""


def sandbox_support() -> SandboxSupport:
    """Whether Chromium can sandbox its renderers when started by this process.

    Debian's Chromium ships no setuid ``chrome-sandbox``: its sandbox is built from
    unprivileged user namespaces (plus PID and network namespaces and seccomp-bpf). It
    refuses to sandbox itself as root, and a kernel, an AppArmor policy or a container's
    seccomp profile (Docker's default one) may refuse user namespaces to everyone else.

    Returns:
        ``available`` with no reason, or not available with the reason.
    """
    if os.geteuid() == 0:
        return SandboxSupport(False, "running as root, where Chromium refuses its sandbox")
    unshare = shutil.which(UNSHARE)
    if unshare is None:
        return SandboxSupport(False, f"cannot test for user namespaces: no {UNSHARE} command")
    try:
        probe = subprocess.run(
            [unshare, "--user", "true"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return SandboxSupport(False, f"could not test for user namespaces: {exc}")
    if probe.returncode == 0:
        return SandboxSupport(True)
    switches = []
    for path in _USERNS_SYSCTLS:
        with contextlib.suppress(OSError):
            value = Path(path).read_text(encoding="utf-8").strip()
            switches.append(f"{path.removeprefix('/proc/sys/').replace('/', '.')}={value}")
    error = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "refused"
    return SandboxSupport(
        False,
        f"the kernel refuses this user a user namespace ({error}"
        + (f"; {', '.join(switches)}" if switches else "")
        + ")",
    )


def default_executable(display: DisplayMode) -> str:
    """The Chromium binary for ``display``: the headless shell if installed, else Chromium."""
    if display == "headless" and os.path.exists(HEADLESS_SHELL_PATH):
        return HEADLESS_SHELL_PATH
    return DEFAULT_CHROMIUM_PATH


def resolve_sandbox(sandbox: bool | None) -> bool:
    """``sandbox`` as asked, or (None) whether it can run here, warning when it cannot.

    The warning is logged once per process: a verify worker gives it at start-up, and its
    browser and every recording would otherwise repeat it.
    """
    global _warned
    if sandbox is not None:
        return sandbox
    support = sandbox_support()
    with _warn_lock:
        warn = not support.available and not _warned
        _warned = _warned or warn
    if warn:
        logger.warning(
            "Chromium renders untrusted pages WITHOUT its sandbox (--no-sandbox): %s",
            support.reason,
        )
    return support.available


def launch_options(sandboxed: bool, *args: str) -> dict[str, Any]:
    """Playwright launch options for Chromium: its quiet, offline switches, the sandbox
    (Playwright adds ``--no-sandbox`` itself unless told to sandbox) and ``args``."""
    return {
        "chromium_sandbox": sandboxed,
        "args": [*CHROMIUM_ARGS, *(() if sandboxed else (NO_SANDBOX,)), *args],
    }
