"""A replay server: recorded Gemini API bodies, served as they were published, to the SDK.

Unlike the fake Gemini server it plays no model and checks nothing: it answers every request
with the next recorded status and body (the last one again once they run out) and keeps the
requests it was sent.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: The recorded bodies, one JSON file per case.
CORPUS = Path(__file__).parent / "corpus"


@dataclass(frozen=True)
class Case:
    """One recorded body, with where it was published and what it shows."""

    name: str
    source: str
    note: str
    model: str
    """The model the replayed request asks for."""
    kind: str
    """``generate``, ``cache_create`` or ``usage`` (only a ``usageMetadata`` was published)."""
    status: int
    body: Any


def load(name: str) -> Case:
    """The corpus case ``name`` (its file name without ``.json``)."""
    raw = json.loads((CORPUS / f"{name}.json").read_text())
    return Case(name=name, **raw)


def names() -> list[str]:
    """Every case in the corpus, sorted."""
    return sorted(p.stem for p in CORPUS.glob("*.json"))


class Replay:
    """Serve ``answers`` (status, body) in order on 127.0.0.1; ``with Replay(...) as r``."""

    def __init__(self, answers: list[tuple[int, Any]]) -> None:
        self._answers = list(answers)
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        """Method and path of every request served."""
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """Base URL for the SDK."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> Replay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def _next(self, method: str, path: str) -> tuple[int, Any]:
        with self._lock:
            self.requests.append((method, path))
            return self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        replay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                status, body = replay._next(self.command, self.path.split("?", 1)[0])
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json; charset=UTF-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _answer

        return Handler
