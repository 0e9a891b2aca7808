"""``report --html``: every session of the gallery links its transcript page, written beside
the report, self-contained, with its diffs highlighted and each verdict's screenshot and
video."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path
from urllib.parse import unquote

from click.testing import CliRunner
from PIL import Image
from sqlalchemy import create_engine, select, update

from scheduler.cli.commands import cli
from worker.store.tables import sessions, verifications

#: Links and sources that would leave the page for the network.
REMOTE = re.compile(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""")


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (1280, 720), (20, 90, 160)).save(out, format="PNG")
    return out.getvalue()


def test_the_report_links_every_session_to_its_transcript(
    sloppy_humaneval: str, tmp_path: Path
) -> None:
    # Given a finished run whose last verdict of session 1 kept a screenshot and a video
    database = tmp_path / "swarm.db"
    shutil.copy(sloppy_humaneval.removeprefix("sqlite:///"), database)
    url = f"sqlite:///{database}"
    engine = create_engine(url)
    with engine.begin() as conn:
        ids = list(conn.execute(select(sessions.c.id).order_by(sessions.c.id)).scalars())
        conn.execute(
            update(verifications)
            .where(verifications.c.session_id == 1, verifications.c.round == 1)
            .values(screenshot_png=_png(), video_mp4=b"\x00\x00\x00\x18ftypmp42 not a film")
        )
    engine.dispose()
    # When its HTML report is written
    page = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["--database-url", url, "report", "1", "--html", str(page)])
    # Then the gallery links each session to a transcript page that exists beside it
    assert result.exit_code == 0, result.output
    html = page.read_text()
    links = re.findall(r'href="(report_files/sessions/[^"]+)"', html)
    assert sorted(set(links)) == [f"report_files/sessions/session-{i}.html" for i in ids]
    for i in ids:
        transcript = (tmp_path / unquote(f"report_files/sessions/session-{i}.html")).read_text()
        # each self-contained, linking back to the report, with its turns, calls and diffs
        assert not REMOTE.search(transcript) and "@import" not in transcript
        assert '<a href="../../report.html">' in transcript
        assert f"<h1>Session {i}</h1>" in transcript
        assert 'id="turn-0"' in transcript and "<b>handoff</b>(" in transcript
        assert re.search(r'<span class="add">\+ {4}\S', transcript)
        assert '<span class="del">-    raise NotImplementedError</span>' in transcript
        assert "<b>hidden_test</b>" in transcript and "ended: succeeded (verified)" in transcript
    # and session 1's last verdict shows its screenshot inline and plays its video
    first = (tmp_path / "report_files/sessions/session-1.html").read_text()
    assert first.count('src="data:image/jpeg;base64,') == 1
    (video,) = re.findall(r'<video src="([^"]+)"', first)
    assert (tmp_path / "report_files/sessions" / unquote(video)).is_file()
