"""Fixtures of the sandbox tests: one sandbox recipe, and the built-in Python task."""

from __future__ import annotations

import os

import pytest

from verifier.sandbox.bubblewrap import BWRAP, Sandbox
from worker.errors import SandboxUnavailable
from worker.settings import Settings


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    """The sandbox a worker with default settings builds; skipped (not in CI) without one."""
    made = Sandbox.from_settings(Settings())
    try:
        made.probe()
    except SandboxUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no sandbox here ({BWRAP}): {exc}")
    return made
