"""Fixtures for the verifier tests: the page corpus and one shared Chromium."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from verifier.chromium.binary import DEFAULT_CHROMIUM_PATH
from verifier.chromium.browser import Browser

PAGES = Path(__file__).parent / "chromium" / "pages"
#: Frame rate the tests ask of a page. The machine running them may be busy with other work,
#: so it sits well below the 60 fps the looping pages reach when idle and well above the
#: 10 fps that timer_raf.html is capped at by construction.
TEST_MIN_FPS = 15.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip this directory's ``browser`` tests, with a reason, when Chromium is missing.

    In CI (``CI`` set) Chromium is required, so nothing is skipped and a missing one fails.
    """
    if os.path.exists(DEFAULT_CHROMIUM_PATH) or os.environ.get("CI"):
        return
    skip = pytest.mark.skip(reason=f"Debian's Chromium is not installed at {DEFAULT_CHROMIUM_PATH}")
    here = Path(__file__).parent
    for item in items:
        if "browser" in item.keywords and here in Path(str(item.path)).parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def page_html() -> Callable[[str], str]:
    """Read one page of the corpus by file name."""

    def read(name: str) -> str:
        return (PAGES / name).read_text(encoding="utf-8")

    return read


@pytest.fixture(scope="session")
def min_fps() -> float:
    """Frame rate the tests ask of a page (see TEST_MIN_FPS)."""
    return TEST_MIN_FPS


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One headless Chromium shared by the whole session, as in a verifier process."""
    with Browser() as shared:
        yield shared
