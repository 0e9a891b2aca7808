"""``python -m verifier record``: a page as an H.264 MP4 grabbed from Xvfb by ffmpeg."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from verifier.chromium.record import FRAME_RATE, SCREEN_SIZE
from verifier.cli import EXIT_UNJUDGED, cli

PAGES = Path(__file__).parent / "pages"
#: Length of the test's video: short, the machine may be busy.
SECONDS = 2.0


def probe(path: Path) -> dict[str, Any]:
    """The first video stream of ``path`` as ffprobe reports it, frames counted."""
    out = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-count_frames",
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=codec_name,width,height,pix_fmt,r_frame_rate,avg_frame_rate,nb_read_frames"
            ":format=duration",
            "-of",
            "json",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    stream: dict[str, Any] = data["streams"][0]
    stream["duration"] = float(data["format"]["duration"])
    return stream


def distinct_frames(path: Path) -> int:
    """How many different pictures the video holds (by the MD5 of each decoded frame)."""
    out = subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(path), "-f", "framemd5", "-"],
        capture_output=True,
        text=True,
        check=True,
    )
    return len({line.rsplit(",", 1)[-1] for line in out.stdout.splitlines() if line[:1] != "#"})


def mean_luma_range(path: Path) -> float:
    """Mean over frames of (brightest - darkest) luma: 0 for a screen of one colour."""
    out = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-f",
            "lavfi",
            f"movie={path},signalstats",
            "-show_entries",
            "frame_tags=lavfi.signalstats.YMIN,lavfi.signalstats.YMAX",
            "-of",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    frames = json.loads(out.stdout)["frames"]
    spans = [
        float(f["tags"]["lavfi.signalstats.YMAX"]) - float(f["tags"]["lavfi.signalstats.YMIN"])
        for f in frames
    ]
    return sum(spans) / len(spans)


@pytest.mark.browser
def test_record_writes_a_60fps_h264_video_of_the_page(tmp_path: Path) -> None:
    if shutil.which("ffmpeg") is None:
        pytest.fail("Debian's ffmpeg is required (.ci/run installs it)")
    # Given an animated dashboard
    out, master = tmp_path / "page.mp4", tmp_path / "page.mkv"
    # When it is recorded for two seconds, with a master
    result = CliRunner().invoke(
        cli,
        [
            "record",
            str(PAGES / "good.html"),
            "--seconds",
            str(SECONDS),
            "--out",
            str(out),
            "--master",
            str(master),
        ],
    )
    assert result.exit_code == 0, result.output
    # Then the MP4 is H.264 in yuv420p, full HD at 60 fps, two seconds within a frame or two
    video = probe(out)
    assert video["codec_name"] == "h264"
    assert video["pix_fmt"] == "yuv420p"
    assert (video["width"], video["height"]) == SCREEN_SIZE
    assert video["r_frame_rate"] == video["avg_frame_rate"] == f"{FRAME_RATE}/1"
    assert abs(int(video["nb_read_frames"]) - SECONDS * FRAME_RATE) <= 2
    assert abs(video["duration"] - SECONDS) <= 2 / FRAME_RATE
    # And it is not blank: the pictures change, and each one has more than one colour
    assert distinct_frames(out) >= 3
    assert mean_luma_range(out) > 50
    # And the master is lossless FFV1 of the same length
    kept = probe(master)
    assert kept["codec_name"] == "ffv1"
    assert abs(int(kept["nb_read_frames"]) - SECONDS * FRAME_RATE) <= 2


def test_record_refuses_a_missing_page(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["record", str(tmp_path / "missing.html"), "--out", str(tmp_path / "x.mp4")]
    )
    assert result.exit_code == EXIT_UNJUDGED
    assert result.stderr.splitlines() == [
        f"error: cannot read {tmp_path / 'missing.html'}: No such file or directory"
    ]
    assert not (tmp_path / "x.mp4").exists()


def test_record_without_ffmpeg_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a machine where ffmpeg is not on PATH
    monkeypatch.setenv("PATH", str(tmp_path))
    # When a page is recorded
    result = CliRunner().invoke(
        cli, ["record", str(PAGES / "good.html"), "--out", str(tmp_path / "x.mp4")]
    )
    # Then one error line says what is missing
    assert result.exit_code == EXIT_UNJUDGED
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "ffmpeg" in lines[0], lines
