"""An HTTP server on 127.0.0.1 that answers ``generateContent`` like the Gemini API.

The sim personas play the model: each session is recognised by its first user message,
so a session gets the same persona and dashboard on every request. Like the real API the
server insists on thought signatures in the current turn, serves the prefix of a completed
request from its implicit cache (:mod:`.implicit`), and fails in the ways listed in
:class:`Fault` on demand.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import socket
import threading
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ops.fake_gemini import wire
from ops.fake_gemini.caches import NOT_FOUND, PREFIX_FIELDS, CacheStore, body_field
from ops.fake_gemini.faults import (
    FAULT_HEADER,
    RATE_LIMITS,
    Fault,
    FaultPlan,
    FaultRule,
    rate_limit_body,
    server_error_body,
)
from ops.fake_gemini.implicit import DEFAULT_TTL_S, ImplicitCache
from worker.models.base import TokenUsage
from worker.models.sim.model import SimModel
from worker.tasks.personas import pick_persona
from worker.tasks.registry import DEFAULT_TASK, load_task

logger = logging.getLogger(__name__)

_PATH = re.compile(r"^/(v1|v1beta)/models/([A-Za-z0-9._-]+):generateContent$")
_CACHES = re.compile(r"^/(v1|v1beta)/cachedContents$")
_CACHE = re.compile(r"^/(v1|v1beta)/(cachedContents/[A-Za-z0-9_-]+)$")


@dataclass(frozen=True)
class SimConfig:
    """How the sim personas behave behind the fake API, and which task they play."""

    seed: int = 0
    mix: dict[str, float] | None = None
    """Persona weights (None: the task's default persona)."""
    flaw_rate: float = 0.0
    latency_ms: int = 200
    task: str = DEFAULT_TASK
    """The task the conversations are about (a reference ``--task`` takes)."""


@dataclass(frozen=True)
class Served:
    """One request the server answered (never with its API key)."""

    at: float
    """``time.monotonic()`` when it arrived."""
    model: str
    session: str
    """Short hash of the session's first user message."""
    turn: int
    """Model contents in the request: the turn being asked for."""
    status: int
    fault: str | None
    key_sha256: str
    """SHA-256 of the API key the request carried: proof of the key, not the key."""
    cache: str | None = None
    """The explicit cache the request used, if any."""


class FakeGemini:
    """The server; ``start()`` serves on a background thread, ``stop()`` ends it.

    Args:
        port: TCP port on 127.0.0.1 (0 picks a free one).
        sim: The personas' configuration.
        faults: Fault rules in force from the start.
        hang_s: How long a ``hang`` fault holds its request.
        implicit_ttl_s: How long the implicit cache keeps a prefix without a hit.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        sim: SimConfig | None = None,
        faults: list[FaultRule] | None = None,
        hang_s: float = 600.0,
        implicit_ttl_s: float = DEFAULT_TTL_S,
    ) -> None:
        self.sim = sim or SimConfig()
        self.faults = FaultPlan(faults, seed=self.sim.seed)
        self.caches = CacheStore()
        self.hang_s = hang_s
        self._secret = hashlib.sha256(f"fake-gemini:{self.sim.seed}".encode()).digest()
        self.implicit = ImplicitCache(ttl_s=implicit_ttl_s)
        self._served: list[Served] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL to give the SDK (``HttpOptions(base_url=...)``)."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def served(self) -> list[Served]:
        """Every request answered so far, in order."""
        with self._lock:
            return list(self._served)

    def start(self) -> FakeGemini:
        """Serve on a daemon thread."""
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="fake-gemini", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on the calling thread until interrupted."""
        self._httpd.serve_forever()

    def stop(self) -> None:
        """Stop serving and release held requests."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FakeGemini:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- answering -------------------------------------------------------------------

    def answer(
        self, model: str, body: Any, *, api_key: str, forced: str | None = None
    ) -> tuple[int, Any, Fault | None]:
        """Status, JSON body and the fault injected, for one ``generateContent``."""
        cache_name = body_field(body, "cachedContent") if isinstance(body, dict) else None
        cache = self.caches.get(cache_name) if cache_name else None
        if cache_name and cache is None:
            # Expired, deleted or never made: the API answers 403 for all three, never 404.
            self._record(model, body, 403, None, api_key, cache_name)
            return 403, wire.error_body(403, "PERMISSION_DENIED", NOT_FOUND), None
        try:
            if cache is not None:
                if any(body_field(body, f) is not None for f in PREFIX_FIELDS):
                    raise wire.BadRequest(
                        "CachedContent can not be used with GenerateContent request setting "
                        "system_instruction, tools or tool_config."
                    )
                body = {**body, **cache["prefix"]}
            parsed = wire.parse(model, body)
        except wire.BadRequest as exc:
            return 400, wire.error_body(400, "INVALID_ARGUMENT", str(exc)), None
        key = hashlib.sha256(parsed.brief.encode()).hexdigest()
        turn = sum(1 for c in parsed.contents if c.role == "model")
        missing = self._unsigned(parsed)
        rule = None if missing else self.faults.pick(forced)
        status, out = self._respond(
            parsed, key, turn, rule, missing, cache["tokens"] if cache else 0
        )
        with self._lock:
            self._served.append(
                Served(
                    time.monotonic(),
                    model,
                    key[:12],
                    turn,
                    status,
                    rule.fault.value if rule else None,
                    hashlib.sha256(api_key.encode()).hexdigest(),
                    cache_name or None,
                )
            )
        return status, out, rule.fault if rule else None

    def _record(
        self, model: str, body: Any, status: int, fault: str | None, api_key: str, cache: str
    ) -> None:
        """Record a request refused before it was parsed in full."""
        contents = body.get("contents") if isinstance(body, dict) else None
        contents = contents if isinstance(contents, list) else []
        brief = next(
            (
                str(p.get("text"))
                for c in contents
                if isinstance(c, dict) and c.get("role") == "user"
                for p in c.get("parts") or ()
                if isinstance(p, dict) and p.get("text")
            ),
            "",
        )
        turn = sum(1 for c in contents if isinstance(c, dict) and c.get("role") == "model")
        served = Served(
            time.monotonic(),
            model,
            hashlib.sha256(brief.encode()).hexdigest()[:12],
            turn,
            status,
            fault,
            hashlib.sha256(api_key.encode()).hexdigest(),
            cache,
        )
        with self._lock:
            self._served.append(served)

    def _respond(
        self,
        parsed: wire.Parsed,
        key: str,
        turn: int,
        rule: FaultRule | None,
        missing: str | None,
        cached_tokens: int,
    ) -> tuple[int, Any]:
        model = parsed.request.model
        if missing:
            return 400, wire.error_body(400, "INVALID_ARGUMENT", missing)
        if rule is not None and rule.fault in RATE_LIMITS:
            return 429, rate_limit_body(rule, model)
        if rule is not None and rule.fault in (Fault.internal, Fault.unavailable):
            return server_error_body(rule.fault)
        hashes = wire.prefix_hashes(parsed)
        cold = rule is not None and rule.fault is Fault.cache_cold
        implicit = 0 if cold else self.implicit.lookup(model, hashes)
        # An explicit cache is always served from cache, whatever its size.
        usage_in = TokenUsage(
            prompt_tokens=hashes[-1][1], cached_tokens=max(implicit, cached_tokens)
        )
        if rule is not None and rule.fault is Fault.malformed:
            self.implicit.complete(model, hashes)
            return 200, wire.response_body(
                None,
                finish_reason="MALFORMED_FUNCTION_CALL",
                usage=usage_in,
                model=model,
                finish_message="Malformed function call: print(default_api.manage_artifact(",
            )
        index = int(key[:8], 16)
        task = load_task(self.sim.task)
        instance = task.instance_for(parsed.brief)
        if instance is None:
            self.implicit.complete(model, hashes)
            return 400, wire.error_body(
                400, "INVALID_ARGUMENT", f"no instance of task {task.name} opens with this brief"
            )
        mix = self.sim.mix or {task.default_persona: 1.0}
        player = task.player(
            instance,
            pick_persona(mix, self.sim.seed, index),
            seed=self.sim.seed,
            index=index,
            flaw_rate=self.sim.flaw_rate,
        )
        sim = SimModel(player, seed=self.sim.seed, index=index, latency_ms=self.sim.latency_ms)
        answer = sim.generate(parsed.request)
        # Only now, with the answer complete, may later requests be served this prefix.
        self.implicit.complete(model, hashes)
        content = self._sign(answer.content, key, turn, ids=not model.startswith("gemini-2"))
        usage = TokenUsage(
            prompt_tokens=usage_in.prompt_tokens,
            cached_tokens=usage_in.cached_tokens,
            output_tokens=answer.usage.output_tokens,
            thoughts_tokens=answer.usage.thoughts_tokens,
        )
        return 200, wire.response_body(
            content, finish_reason=answer.finish_reason, usage=usage, model=model
        )

    def _signature(self, key: str, turn: int) -> bytes:
        """An opaque signature of 96 to 320 bytes, as long as the API's own ones run."""
        seed = hmac.new(self._secret, f"{key}:{turn}".encode(), hashlib.sha256).digest()
        size = 96 + seed[0] % 225
        blocks = (
            hmac.new(self._secret, seed + bytes([i]), hashlib.sha256).digest()
            for i in range(size // 32 + 1)
        )
        return (seed + b"".join(blocks))[:size]

    def _sign(
        self, content: dict[str, Any], key: str, turn: int, *, ids: bool = True
    ) -> dict[str, Any]:
        """The API's signatures on a content: on its first function call, else on its last
        text part; function call ids only from models that send them (Gemini 3)."""
        parts = [dict(p) for p in content["parts"]]
        for part in parts:
            part.pop("thought_signature", None)
            if not ids and "function_call" in part:
                part["function_call"] = {
                    k: v for k, v in part["function_call"].items() if k != "id"
                }
        first = next((p for p in parts if "function_call" in p), None)
        if first is None:
            first = next((p for p in reversed(parts) if "text" in p), None)
        if first is not None:
            first["thought_signature"] = self._signature(key, turn)
        return {"role": "model", "parts": parts}

    def _unsigned(self, parsed: wire.Parsed) -> str | None:
        """Why the current turn's function calls fail the signature check, if they do."""
        key = hashlib.sha256(parsed.brief.encode()).hexdigest()
        valid = {self._signature(key, n) for n in range(len(parsed.contents) + 1)}
        for part in wire.current_turn_calls(parsed.contents):
            name = part.function_call.name if part.function_call else "?"
            if not part.thought_signature:
                return (
                    f"Function call {name} in the current turn is missing a "
                    "thought_signature in functionCall parts."
                )
            if bytes(part.thought_signature) not in valid:
                return f"Function call {name} carries a thought_signature this API never issued."
        return None


def _handler(fake: FakeGemini) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("%s " + format, self.address_string(), *args)

        def do_GET(self) -> None:
            if self.path == "/_fake/served":
                self._json(200, [asdict(s) for s in fake.served])
            elif self.path == "/_fake/health":
                self._json(200, {"ok": True, "faults_fired": fake.faults.fired})
            else:
                self._json(404, wire.error_body(404, "NOT_FOUND", f"no route {self.path}"))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/_fake/faults":
                self._set_faults(raw)
                return
            path = self.path.split("?", 1)[0]
            match = _PATH.match(path)
            if match is None and not _CACHES.match(path):
                self._json(404, wire.error_body(404, "NOT_FOUND", f"no route {self.path}"))
                return
            api_key = self._api_key()
            if not api_key:
                return
            try:
                body = json.loads(raw)
            except ValueError as exc:
                self._json(400, wire.error_body(400, "INVALID_ARGUMENT", f"bad JSON: {exc}"))
                return
            if match is None:
                try:
                    self._json(200, fake.caches.create(body))
                except wire.BadRequest as exc:
                    self._json(400, wire.error_body(400, "INVALID_ARGUMENT", str(exc)))
                return
            forced = self.headers.get(FAULT_HEADER)
            if forced and forced not in {f.value for f in Fault}:
                known = ", ".join(f.value for f in Fault)
                message = f"unknown {FAULT_HEADER} {forced!r}; the faults are: {known}"
                self._json(400, wire.error_body(400, "INVALID_ARGUMENT", message))
                return
            status, out, fault = fake.answer(match.group(2), body, api_key=api_key, forced=forced)
            if fault is Fault.hang:
                fake._stopping.wait(fake.hang_s)
                self.close_connection = True
                return
            self._json(status, out, truncate=fault is Fault.truncate)

        def do_DELETE(self) -> None:
            match = _CACHE.match(self.path.split("?", 1)[0])
            if match is None:
                self._json(404, wire.error_body(404, "NOT_FOUND", f"no route {self.path}"))
            elif self._api_key():
                if fake.caches.delete(match.group(2)):
                    self._json(200, {})
                else:
                    self._json(403, wire.error_body(403, "PERMISSION_DENIED", NOT_FOUND))

        def _api_key(self) -> str:
            """The request's API key; answers 403 and returns '' when there is none."""
            query = parse_qs(urlsplit(self.path).query)
            api_key = self.headers.get("x-goog-api-key") or query.get("key", [""])[0]
            if not api_key:
                self._json(
                    403,
                    wire.error_body(
                        403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers."
                    ),
                )
            return api_key

        def _set_faults(self, raw: bytes) -> None:
            try:
                rules = [FaultRule(Fault(r.pop("fault")), **r) for r in json.loads(raw)]
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                self._json(400, wire.error_body(400, "INVALID_ARGUMENT", str(exc)))
                return
            fake.faults.set(rules)
            self._json(200, {"rules": len(rules)})

        def _json(self, status: int, body: Any, *, truncate: bool = False) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json; charset=UTF-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2] if truncate else data)
                if truncate:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
            except OSError:  # the client gave up (a timeout); nothing left to tell it
                self.close_connection = True

    return Handler
