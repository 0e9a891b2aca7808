"""Flower's configuration: ``celery -A worker flower --conf=ops/flowerconfig.py``.

Flower executes this file (``tornado.options.parse_config_file``) after it has read the
``FLOWER_*`` environment variables and the command line once, then reads the command line
again. So a command-line flag overrides a value set here, and a value set here overrides
the same option's ``FLOWER_*`` variable. Every top-level name that matches a Flower option
sets it, which is why the helpers below start with an underscore. It imports nothing from
the project, so it reads as a plain Flower configuration file.

What it guarantees:

* Flower refuses to start without HTTP basic auth. Flower reads ``FLOWER_BASIC_AUTH``
  (``user:password``, several pairs separated by commas, so no comma inside a password)
  itself; keeping it in the environment keeps it out of the process list.
* ``/metrics`` asks for the same credentials. Flower (2.2 here) exempts ``/metrics`` and
  ``/healthcheck`` from authentication and has no option to change that, so this file puts
  Flower's own ``web.authenticated`` guard on the metrics handler. ``/healthcheck`` stays
  open: it answers ``OK`` and nothing else, for probes.
* It listens on loopback unless told otherwise (``--address=0.0.0.0`` in a container whose
  port is published on the host's loopback only).
* The task list in memory is bounded (``max_tasks``), and shows each task's kwargs, which
  are the session's id and the turn or round number (the task ids read ``turn:<session>:<n>``).
"""

from __future__ import annotations

from flower.views import monitor
from tornado import web
from tornado.options import options

#: Interface Flower listens on; Flower's own default ('') is every interface.
address = "127.0.0.1"
#: Tasks Flower keeps in memory; older ones are dropped first.
max_tasks = 10_000
#: Columns of the /tasks page, in order.
tasks_columns = "name,uuid,state,kwargs,result,received,runtime,worker"


def _is_credential(pair: str) -> bool:
    user, colon, password = pair.partition(":")
    return bool(user.strip() and colon and password)


def _require_basic_auth() -> None:
    """Exit unless every configured basic-auth entry is a ``user:password`` pair."""
    pairs = list(options.basic_auth or [])
    if not pairs or not all(_is_credential(pair) for pair in pairs):
        raise SystemExit(
            "flowerconfig: set FLOWER_BASIC_AUTH=user:password (both non-empty); "
            "Flower does not start without basic auth"
        )


def _protect_metrics() -> None:
    """Ask for credentials on /metrics, as on every other page of Flower."""
    # Flower's own pages carry this same guard: with basic auth it answers 401 and a
    # WWW-Authenticate challenge unless the request has valid credentials.
    monitor.Metrics.get = web.authenticated(monitor.Metrics.get)


_require_basic_auth()
_protect_metrics()
