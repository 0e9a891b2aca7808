"""The systemd unit that keeps workers running on a bare host."""

from __future__ import annotations

import configparser
import socket

from tests.chaos.services import WORKER_UNIT, unit_worker_args

SESSIONS_UNIT = WORKER_UNIT.with_name("swarm-sessions@.service")


def _service() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read(WORKER_UNIT)
    return parser["Service"]


def test_the_unit_restarts_its_worker_whatever_the_exit() -> None:
    service = _service()
    assert service["restart"] == "always"
    assert 0 < float(service["restartsec"]) <= 5
    assert service["killsignal"] == "SIGTERM"


def test_the_unit_starts_one_queue_per_instance_named_after_it() -> None:
    host = socket.gethostname()
    args = unit_worker_args("verify", host)
    assert args[args.index("-Q") + 1] == "verify"
    assert args[args.index("-n") + 1] == f"verify@{host}"
    assert _service()["execstart"].split()[1:3] == ["-m", "worker"]


def _sessions_args(instance: str, host: str) -> list[str]:
    """The worker arguments of the per-core unit for ``instance``, as systemd fills them in."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    parser.read(SESSIONS_UNIT)
    service = parser["Service"]
    slots = service["Environment"].split("=", 1)[1]
    words = service["ExecStart"].split()
    start = words.index("worker", words.index("-m"))
    return [
        w.replace("%i", instance).replace("%H", host).replace("${SESSION_SLOTS}", slots)
        for w in words[start + 1 :]
    ]


def test_the_per_core_unit_runs_one_gevent_sessions_worker_per_instance() -> None:
    # Given two instances of the per-core unit on one host
    host = socket.gethostname()
    first, second = _sessions_args("1", host), _sessions_args("2", host)
    # Then both consume the sessions queue on gevent, each under a node name of its own
    for args in (first, second):
        assert args[args.index("-Q") + 1] == "sessions"
        assert args[args.index("-P") + 1] == "gevent"
        assert int(args[args.index("-c") + 1]) >= 1000
    assert first[first.index("-n") + 1] == f"sessions-1@{host}"
    assert second[second.index("-n") + 1] == f"sessions-2@{host}"
