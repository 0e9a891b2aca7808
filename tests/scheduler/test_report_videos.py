"""A run with ``--record``: every verified artifact's video, played from the report's gallery."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import enqueue, passed_verdicts
from tests.scheduler.test_report import report
from verifier.chromium.binary import DEFAULT_CHROMIUM_PATH
from verifier.chromium.page import VIEWPORT
from worker.settings import Settings

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.browser]

#: Seconds of each artifact's video: short, the machine may be busy.
RECORD_S = 2
#: Seconds the run may take: each recording launches a headed Chromium and encodes 1080p.
RUN_TIMEOUT_S = 420
#: Longest wait for a video to load and play in the reader's browser.
PLAY_TIMEOUT_MS = 30_000


@pytest.fixture
def reader() -> Iterator[Any]:
    """A Chromium to open the report in, as a reader would."""
    if not os.path.exists(DEFAULT_CHROMIUM_PATH) and not os.environ.get("CI"):
        pytest.skip(f"{DEFAULT_CHROMIUM_PATH} is not installed")
    if shutil.which("ffmpeg") is None:
        pytest.fail("Debian's ffmpeg is required (.ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=DEFAULT_CHROMIUM_PATH, headless=True)
        yield browser
        browser.close()


_PLAYBACK = """async (video) => {
    await video.play();
    const started = video.currentTime;
    await new Promise((done) => {
        const tick = () => (video.currentTime > started + 0.5 ? done() : setTimeout(tick, 50));
        tick();
    });
    return {
        readyState: video.readyState,
        duration: video.duration,
        width: video.videoWidth,
        height: video.videoHeight,
        advanced: video.currentTime - started,
        error: video.error && video.error.message,
    };
}"""


@pytest.mark.timeout(RUN_TIMEOUT_S + 180)
def test_a_recorded_runs_gallery_links_screenshots_and_plays_every_video(
    settings: Settings,
    engine: Engine,
    tmp_path: Path,
    start_worker: Callable[..., WorkerProcess],
    reader: Any,
) -> None:
    # Given a run started with --record, verified in Chromium
    worker = start_worker(SWARM_VERIFIER="browser", SWARM_VERIFY_RECORD_S=str(RECORD_S))
    run_id = enqueue(settings, "--wave", "1x2", "--sim-latency-ms", "20", "--record")
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    assert status.sessions.succeeded == 2, status
    videos = passed_verdicts(engine, run_id, "video_mp4")
    assert len(videos) == 2 and all(video and video[4:8] == b"ftyp" for video in videos)
    assert worker.errors() == []
    # When its HTML report is written and opened in Chromium
    path = tmp_path / "report.html"
    result = report(settings, str(run_id), "--html", str(path))
    assert result.exit_code == 0, result.output
    page = reader.new_page(viewport={"width": 1280, "height": 900})
    page.goto(path.resolve().as_uri(), wait_until="load")
    # Then each session's video plays in the gallery: it loads, lasts the recorded length
    # and its clock advances
    clips = page.locator("video.clip")
    assert clips.count() == 2
    for index in range(clips.count()):
        clip = clips.nth(index)
        clip.scroll_into_view_if_needed()
        played = clip.evaluate(_PLAYBACK, timeout=PLAY_TIMEOUT_MS)
        assert played["error"] is None
        assert played["readyState"] >= 2
        assert (played["width"], played["height"]) == (1920, 1080)
        assert abs(played["duration"] - RECORD_S) <= 2 / 60
        assert played["advanced"] > 0.5
    # And each thumbnail links its full-size screenshot
    hrefs = page.eval_on_selector_all(
        ".shot a[title='full-size screenshot']", "(links) => links.map((a) => a.href)"
    )
    assert len(hrefs) == 2
    for href in hrefs:
        page.goto(href)
        size = page.evaluate("[document.images[0].naturalWidth, document.images[0].naturalHeight]")
        assert size == [VIEWPORT["width"], VIEWPORT["height"]]
    page.close()
