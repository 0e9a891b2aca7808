"""docker-compose.yml is valid, fails fast without secrets, runs only real commands, and its
healthchecks pass against the services they check (and fail without them).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from scheduler.cli import cli
from tests.conftest import ROOT, WorkerProcess, service_env
from tests.ops.test_flower import FlowerProcess, _flower_env
from worker.settings import QUEUES, Settings

COMPOSE = shutil.which("docker-compose")
needs_compose = pytest.mark.skipif(
    COMPOSE is None and not os.environ.get("CI"), reason="Debian's docker-compose not installed"
)
COMPOSE_FILE = ROOT / "docker-compose.yml"
#: Seconds one healthcheck may take here (compose gives each 3 to 10 s; we start cold).
HEALTHCHECK_TIMEOUT_S = 60


def _config(**env: str) -> subprocess.CompletedProcess[str]:
    assert COMPOSE is not None, "docker-compose is required in CI"
    secrets = ("POSTGRES_PASSWORD", "VERIFY_DB_PASSWORD", "FLOWER_BASIC_AUTH", "SERVE_BASIC_AUTH")
    clean = {k: v for k, v in os.environ.items() if k not in secrets}
    return subprocess.run(
        [COMPOSE, "-f", str(ROOT / "docker-compose.yml"), "config"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    result = _config(
        POSTGRES_PASSWORD="pw-for-test",
        VERIFY_DB_PASSWORD="vpw",
        FLOWER_BASIC_AUTH="admin:pw",
        SERVE_BASIC_AUTH="viewer:pw",
    )
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = yaml.safe_load(result.stdout)
    return parsed


@needs_compose
def test_required_secrets_fail_fast() -> None:
    result = _config()
    assert result.returncode != 0
    assert "Variable not set" in result.stderr


@needs_compose
def test_services_and_health_ordering(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == {
        "redis",
        "postgres",
        "migrate",
        "sessions",
        "verify",
        "sandbox",
        "flower",
        "serve",
        "scheduler",
    }
    # the scheduler service is for `docker compose run` only, never started by `up`
    assert services["scheduler"]["profiles"] == ["cli"]
    for name in ("redis", "postgres", "sessions", "verify", "sandbox", "flower", "serve"):
        assert services[name]["healthcheck"]["test"], name
    for name in ("sessions", "verify", "sandbox"):
        deps = services[name]["depends_on"]
        assert deps["redis"]["condition"] == "service_healthy"
        assert deps["postgres"]["condition"] == "service_healthy"
        assert deps["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    # Flower is behind basic auth and only on loopback
    assert services["flower"]["environment"]["FLOWER_BASIC_AUTH"] == "admin:pw"
    assert all(str(p).startswith("127.0.0.1:") for p in services["flower"]["ports"])
    # and so is the web view, which waits for the schema
    assert services["serve"]["environment"]["SWARM_SERVE_BASIC_AUTH"] == "viewer:pw"
    assert all(str(p).startswith("127.0.0.1:") for p in services["serve"]["ports"])
    deps = services["serve"]["depends_on"]
    assert deps["postgres"]["condition"] == "service_healthy"
    assert deps["migrate"]["condition"] == "service_completed_successfully"


@needs_compose
def test_flower_requires_its_credentials_alone() -> None:
    result = _config(
        POSTGRES_PASSWORD="pw-for-test", VERIFY_DB_PASSWORD="vpw", SERVE_BASIC_AUTH="viewer:pw"
    )
    assert result.returncode != 0
    assert "FLOWER_BASIC_AUTH" in result.stderr


@needs_compose
def test_serve_requires_its_credentials_alone() -> None:
    result = _config(
        POSTGRES_PASSWORD="pw-for-test", VERIFY_DB_PASSWORD="vpw", FLOWER_BASIC_AUTH="admin:pw"
    )
    assert result.returncode != 0
    assert "SERVE_BASIC_AUTH" in result.stderr


@needs_compose
def test_the_verify_worker_holds_only_its_own_role(config: dict[str, Any]) -> None:
    services = config["services"]
    verify_url = "postgresql://swarm_verify:vpw@postgres:5432/swarm"
    # the verify and sandbox workers have the verify role's URL, no owner URL, no model key
    for name in ("verify", "sandbox"):
        env = services[name]["environment"]
        assert env["SWARM_VERIFY_DATABASE_URL"] == verify_url
        assert not {"SWARM_DATABASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY"} & set(env)
        assert not any("pw-for-test" in str(value) for value in env.values())
    # the migration gives that role its password; the session workers keep the owner's
    assert services["migrate"]["environment"]["SWARM_VERIFY_DATABASE_URL"] == verify_url
    assert "swarm:pw-for-test@" in services["sessions"]["environment"]["SWARM_DATABASE_URL"]
    # and the role cannot be started without its password
    result = _config(
        POSTGRES_PASSWORD="pw-for-test", FLOWER_BASIC_AUTH="admin:pw", SERVE_BASIC_AUTH="v:pw"
    )
    assert result.returncode != 0 and "VERIFY_DB_PASSWORD" in result.stderr


@needs_compose
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
                argv = _argv(test)
                found.append(shlex.split(argv[2]) if test[0] == "CMD-SHELL" else argv)
    return found


def _argv(test: list[str]) -> list[str]:
    """The process compose starts for a healthcheck ``test``, after its ``$$`` unescaping."""
    kind, *args = test
    args = [arg.replace("$$", "$") for arg in args]
    assert not any("${" in arg for arg in args), test
    if kind == "CMD-SHELL":
        # Compose hands the string to the container's shell, which expands its variables.
        (line,) = args
        return ["/bin/sh", "-c", line]
    assert kind == "CMD", test
    return args


@needs_compose
def test_every_project_command_exists(config: dict[str, Any]) -> None:
    for command in _commands(config):
        if command[:2] == ["python", "-c"]:
            continue  # Flower's and serve's healthchecks: run by their tests below
        if command[:3] == ["python", "-m", "scheduler"]:
            result = CliRunner().invoke(cli, [*command[3:4], "--help"])
            assert result.exit_code == 0, (command, result.output)
        elif command[:3] == ["python", "-m", "worker"]:
            result_w = subprocess.run(
                [sys.executable, "-m", "worker", "--help"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result_w.returncode == 0, (command, result_w.stderr[-2000:])
            assert "--concurrency" in result_w.stdout
            queues = command[command.index("-Q") + 1].split(",")
            assert set(queues) <= set(QUEUES)
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
                assert set(queues) <= set(QUEUES)


# Each healthcheck runs here exactly as compose runs it in its container: the same argv,
# the service's environment, HOSTNAME set to the host name (Docker sets it to the
# container's, which is also what the worker's `-n name@%h` expands to), in the image's
# working directory (the checkout). Redis and PostgreSQL are the local test services on
# 127.0.0.1, where each container checks its own server too. Flower listens on a port the
# kernel picked, so its check is aimed there instead of 5555.


def _healthchecks() -> dict[str, list[str]]:
    """Every service's healthcheck ``test``, as written in docker-compose.yml."""
    services = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["services"]
    return {
        name: service["healthcheck"]["test"]
        for name, service in services.items()
        if "healthcheck" in service
    }


def _service_command(name: str) -> list[str]:
    command: list[str] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["services"][name][
        "command"
    ]
    return command


def _run_check(
    argv: list[str], env: dict[str, str], *, hostname: str | None = None
) -> subprocess.CompletedProcess[str]:
    bin_dir = str(Path(sys.executable).parent)
    # No proxy inside the containers; one in this environment must not intercept loopback.
    clean = {k: v for k, v in env.items() if k.lower() not in ("http_proxy", "https_proxy")}
    return subprocess.run(
        argv,
        cwd=ROOT,
        env={
            **clean,
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "HOSTNAME": hostname or socket.gethostname(),
        },
        capture_output=True,
        text=True,
        timeout=HEALTHCHECK_TIMEOUT_S,
    )


def test_every_healthcheck_is_exercised() -> None:
    assert set(_healthchecks()) == {
        "redis",
        "postgres",
        "sessions",
        "verify",
        "sandbox",
        "flower",
        "serve",
    }


@pytest.fixture
def compose_worker(settings: Settings) -> Iterator[Any]:
    """Factory: start a worker with the compose service's own command line."""
    started: list[WorkerProcess] = []

    def start(service: str) -> WorkerProcess:
        command = _service_command(service)
        assert command[:3] == ["python", "-m", "worker"], command
        worker = WorkerProcess(service_env(settings), command[3:]).start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.mark.services
@pytest.mark.slow
def test_worker_healthchecks_pass_only_against_their_worker(
    settings: Settings, compose_worker: Any
) -> None:
    checks = _healthchecks()
    env = service_env(settings)
    # Given no verify worker, Then the verify healthcheck fails
    assert _run_check(_argv(checks["verify"]), env).returncode != 0
    # Given the sessions and verify workers started as compose starts them
    workers = {name: compose_worker(name) for name in ("sessions", "verify", "sandbox")}
    for name in ("sessions", "verify", "sandbox"):
        # When compose runs each healthcheck, Then it passes
        result = _run_check(_argv(checks[name]), env)
        assert result.returncode == 0, (name, result.stdout, result.stderr)
        assert f"{name}@{socket.gethostname()}: OK" in result.stdout
    # and it is the expanded $HOSTNAME that names the node: another host's check fails
    assert _run_check(_argv(checks["sessions"]), env, hostname="elsewhere").returncode != 0
    # and the exec form, which no shell expands, found no node (why CMD-SHELL)
    exec_form = shlex.split(_argv(checks["sessions"])[2])
    assert "sessions@$HOSTNAME" in exec_form
    assert _run_check(exec_form, env).returncode != 0
    # When the sessions worker stops, Then its healthcheck fails
    workers["sessions"].stop()
    assert _run_check(_argv(checks["sessions"]), env).returncode != 0


@pytest.mark.services
def test_redis_and_postgres_healthchecks(redis_url: str, pg_url: str) -> None:
    checks = _healthchecks()
    env = dict(os.environ)
    for name in ("redis", "postgres"):
        # When compose runs the check against a server on 127.0.0.1, Then it passes
        result = _run_check(_argv(checks[name]), env)
        assert result.returncode == 0, (name, result.stdout, result.stderr)
    # and against no server (the same check aimed at a closed port) it fails
    redis_down = _argv(checks["redis"])
    redis_down[2] = redis_down[2].replace("-h 127.0.0.1", "-h 127.0.0.1 -p 1")
    assert redis_down[2] != _argv(checks["redis"])[2]
    assert _run_check(redis_down, env).returncode != 0
    assert _run_check([*_argv(checks["postgres"]), "-p", "1"], env).returncode != 0


@pytest.mark.services
def test_flower_healthcheck(settings: Settings) -> None:
    argv = _argv(_healthchecks()["flower"])
    assert any("127.0.0.1:5555/healthcheck" in arg for arg in argv)
    env = _flower_env(service_env(settings), FLOWER_BASIC_AUTH="ops:health-check-pw")
    flower = FlowerProcess(env)
    try:
        aimed = [arg.replace(":5555/", f":{flower.port}/") for arg in argv]
        # When compose runs the check against a running Flower, Then it passes
        result = _run_check(aimed, env)
        assert result.returncode == 0, result.stderr
    finally:
        flower.stop()
    # and once Flower has stopped, it fails
    assert _run_check(aimed, env).returncode != 0


@pytest.mark.services
def test_serve_healthcheck(settings: Settings) -> None:
    argv = _argv(_healthchecks()["serve"])
    assert any("127.0.0.1:8700/healthz" in arg for arg in argv)
    command = _service_command("serve")
    assert command[:4] == ["python", "-m", "scheduler", "serve"], command
    # Given serve started as compose starts it (on every interface, so with credentials),
    # on a free port rather than 8700
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [str(port) if arg == "8700" else arg for arg in command[1:]]
    env = service_env(settings, SWARM_SERVE_BASIC_AUTH="ops:health-check-pw")
    serve = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert serve.stderr is not None
        # It says where it listens once its socket is open: the check may run from then on
        assert "serving " in serve.stderr.readline()
        aimed = [arg.replace(":8700/", f":{port}/") for arg in argv]
        # When compose runs the check against it, Then it passes
        result = _run_check(aimed, env)
        assert result.returncode == 0, result.stderr
    finally:
        serve.terminate()
        serve.wait(30)
        if serve.stderr is not None:
            serve.stderr.close()
    # and once serve has stopped, it fails
    assert _run_check(aimed, env).returncode != 0
