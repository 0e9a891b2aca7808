"""An artifact in the viewer runs in a sandbox: no network, no parent, no navigation."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.factories import call, make_run, model_turn, run_script
from tests.scheduler.serve.conftest import Served
from worker.fleet.runtime import Runtime

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

#: A page that tries, in turn, to reach the network, its parent, and the top window; each
#: attempt's outcome is written into its own page, and ``done`` last.
HOSTILE = """<!doctype html><html><body><pre id="log"></pre>
<img src="http://127.0.0.1:{port}/img" alt="">
<script>
const log = (what, how) => {{
  document.getElementById("log").textContent += what + ": " + how + "\\n";
}};
(async () => {{
  try {{ await fetch("http://127.0.0.1:{port}/fetch", {{mode: "no-cors"}}); log("fetch", "sent"); }}
  catch (e) {{ log("fetch", "blocked " + e.name); }}
  try {{ parent.document.body.innerHTML = "<h1>owned</h1>"; log("parent", "reached"); }}
  catch (e) {{ log("parent", "blocked " + e.name); }}
{top}  try {{ document.cookie = "a=b"; log("cookie", document.cookie ? "set" : "none"); }}
  catch (e) {{ log("cookie", "blocked " + e.name); }}
  log("origin", self.origin);
  document.body.dataset.done = "1";
}})();
</script></body></html>"""
#: A page that tries the network and says its origin, ``done`` last.
ALONE = """<!doctype html><html><body><pre id="log"></pre>
<img src="http://127.0.0.1:{port}/img" alt="">
<script>
fetch("http://127.0.0.1:{port}/fetch", {{mode: "no-cors"}})
  .then(() => "sent", (e) => "blocked " + e.name)
  .then((how) => {{
    document.getElementById("log").textContent = "fetch: " + how + "\\norigin: " + self.origin;
    document.body.dataset.done = "1";
  }});
</script></body></html>"""
#: The attempt on the top window: in a frame only (a page on its own is its own top).
TOP = """  try {{ top.location = "http://127.0.0.1:{port}/top"; log("top", "no error"); }}
  catch (e) {{ log("top", "blocked " + e.name); }}
"""


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.heard: list[bytes] = []
        self.changed = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    first = conn.recv(200)
                except OSError:
                    first = b"?"
            with self.changed:
                self.heard.append(first)
                self.changed.notify_all()

    def probe(self) -> list[bytes]:
        """Send a marked request and wait until it is heard: what was heard before it came
        in first, since the listener takes its connections in order."""
        with socket.create_connection(("127.0.0.1", self.port)) as probe:
            probe.sendall(b"PROBE\r\n")
            with self.changed:
                assert self.changed.wait_for(lambda: b"PROBE\r\n" in self.heard, timeout=10)
                return list(self.heard)


@pytest.fixture
def listener() -> Iterator[Listener]:
    heard = Listener()
    yield heard
    heard.sock.close()


def test_an_artifact_reaches_no_network_no_parent_and_no_top_window(
    runtime: Runtime, serve_app: Callable[..., Served], chromium: Any, listener: Listener
) -> None:
    # Given a session that wrote a page trying to reach a listener, its parent and the top
    _, (sid,) = make_run(runtime.engine)
    hostile = HOSTILE.format(port=listener.port, top=TOP.format(port=listener.port))
    create = call("manage_artifact", action="create", name="dashboard.html", content=hostile)
    assert run_script(runtime, sid, [model_turn(create)])
    served = serve_app(engine=runtime.engine)
    viewer = f"{served.url}/sessions/{sid}/artifacts/1/dashboard.html"
    # When the artifact viewer shows it, and the page has tried everything
    tab = chromium.new_page()
    navigations: list[str] = []
    tab.on("framenavigated", lambda f: navigations.append(f.url) if f == tab.main_frame else None)
    tab.goto(viewer)
    frame = tab.frame_locator("#artifact")
    frame.locator("body[data-done='1']").wait_for(state="attached")
    log = dict(
        line.split(": ", 1) for line in frame.locator("#log").inner_text().strip().splitlines()
    )
    # Then each attempt was refused inside the frame, whose origin is opaque
    assert log["fetch"] == "blocked TypeError", log
    assert log["parent"] == "blocked SecurityError", log
    assert log["top"].startswith("blocked"), log
    assert log["cookie"].startswith("blocked"), log
    assert log["origin"] == "null", log
    # and the listener heard nothing but its own probe: no fetch, no image, no navigation
    assert listener.probe() == [b"PROBE\r\n"]
    # and the application's page is still itself: not navigated, its DOM untouched
    assert tab.url == viewer and navigations == [viewer]
    assert "owned" not in tab.content()
    assert tab.locator("h1").inner_text() == f"Session {sid}: dashboard.html v1"
    tab.close()


def test_the_artifact_opened_on_its_own_is_sandboxed_too(
    runtime: Runtime, serve_app: Callable[..., Served], chromium: Any, listener: Listener
) -> None:
    # Given a page that tries the network, opened at its raw address rather than in the
    # viewer (on its own, it is its own parent and top)
    _, (sid,) = make_run(runtime.engine)
    hostile = ALONE.format(port=listener.port)
    create = call("manage_artifact", action="create", name="dashboard.html", content=hostile)
    assert run_script(runtime, sid, [model_turn(create)])
    served = serve_app(engine=runtime.engine)
    tab = chromium.new_page()
    # When it has tried everything
    tab.goto(f"{served.url}/raw/sessions/{sid}/artifacts/1/dashboard.html")
    tab.locator("body[data-done='1']").wait_for(state="attached")
    log = tab.locator("#log").inner_text()
    # Then its origin is opaque and it reached no network
    assert "origin: null" in log and "fetch: blocked TypeError" in log
    assert listener.probe() == [b"PROBE\r\n"]
    tab.close()
