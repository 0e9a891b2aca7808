"""The systemd unit that keeps workers running on a bare host."""

from __future__ import annotations

import configparser
import socket

from tests.chaos.services import WORKER_UNIT, unit_worker_args


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
