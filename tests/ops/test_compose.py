"""docker-compose.yml is valid, fails fast without secrets, and runs only real commands."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from scheduler.cli import cli
from tests.conftest import ROOT

COMPOSE = shutil.which("docker-compose")
pytestmark = pytest.mark.skipif(
    COMPOSE is None and not os.environ.get("CI"), reason="Debian's docker-compose not installed"
)


def _config(**env: str) -> subprocess.CompletedProcess[str]:
    assert COMPOSE is not None, "docker-compose is required in CI"
    clean = {
        k: v for k, v in os.environ.items() if k not in ("POSTGRES_PASSWORD", "FLOWER_BASIC_AUTH")
    }
    return subprocess.run(
        [COMPOSE, "-f", str(ROOT / "docker-compose.yml"), "config"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    result = _config(POSTGRES_PASSWORD="pw-for-test", FLOWER_BASIC_AUTH="admin:pw")
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = yaml.safe_load(result.stdout)
    return parsed


def test_required_secrets_fail_fast() -> None:
    result = _config()
    assert result.returncode != 0
    assert "Variable not set" in result.stderr


def test_services_and_health_ordering(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == {"redis", "postgres", "migrate", "sessions", "verify", "flower"}
    for name in ("redis", "postgres", "sessions", "verify"):
        assert services[name]["healthcheck"]["test"], name
    for name in ("sessions", "verify"):
        deps = services[name]["depends_on"]
        assert deps["redis"]["condition"] == "service_healthy"
        assert deps["postgres"]["condition"] == "service_healthy"
        assert deps["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    # Flower is behind basic auth and only on loopback
    assert services["flower"]["environment"]["FLOWER_BASIC_AUTH"] == "admin:pw"
    assert all(str(p).startswith("127.0.0.1:") for p in services["flower"]["ports"])


def test_flower_requires_its_credentials_alone() -> None:
    result = _config(POSTGRES_PASSWORD="pw-for-test")
    assert result.returncode != 0
    assert "FLOWER_BASIC_AUTH" in result.stderr


def test_flower_runs_the_shipped_configuration(config: dict[str, Any]) -> None:
    command = config["services"]["flower"]["command"]
    confs = [arg.removeprefix("--conf=") for arg in command if arg.startswith("--conf=")]
    assert confs == ["ops/flowerconfig.py"], command
    # the image copies ops/ into its working directory, where the path is resolved
    assert (ROOT / confs[0]).is_file()
    assert "COPY ops ops" in (ROOT / "Dockerfile").read_text(encoding="utf-8")
    # credentials come from the environment only, never from the command line
    assert not any("basic_auth" in arg or "basic-auth" in arg for arg in command), command


def _commands(config: dict[str, Any]) -> list[list[str]]:
    found = []
    for service in config["services"].values():
        if "build" in service:
            found.append(service["command"])
            test = service.get("healthcheck", {}).get("test")
            if test:
                found.append(test[1:])  # drop "CMD"
    return found


def test_every_project_command_exists(config: dict[str, Any]) -> None:
    for command in _commands(config):
        if command[:3] == ["python", "-m", "scheduler"]:
            result = CliRunner().invoke(cli, [*command[3:4], "--help"])
            assert result.exit_code == 0, (command, result.output)
        else:
            assert command[:3] == ["celery", "-A", "worker"], command
            sub = command[3]
            help_args = [sub, "--help"] if sub != "inspect" else ["inspect", "ping", "--help"]
            result_p = subprocess.run(
                [sys.executable, "-m", "celery", "-A", "worker", *help_args],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result_p.returncode == 0, (command, result_p.stderr[-2000:])
            if sub == "worker":
                queues = command[command.index("-Q") + 1].split(",")
                assert set(queues) <= {"sessions", "verify"}
