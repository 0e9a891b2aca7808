"""``python -m worker``: a worker as ``celery -A worker worker`` starts one, lighter.

It takes the options of ``celery worker``: ``python -m worker -Q sessions -P gevent -c 1000``.
The ``celery`` command builds its whole command line before it starts a worker: its REPL
(prompt_toolkit) and every installed plugin's command (Flower's, with Tornado and the
Prometheus client behind it). A worker never runs them, and they cost every worker process
about 15 MiB. This entry point runs Celery's own ``worker`` command on its own.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """Start a worker of the Swarm app with ``celery worker``'s options."""
    args = sys.argv[1:] if argv is None else argv
    # Before anything else is imported, as `celery` does: a green pool (-P gevent) patches
    # the standard library, and a module imported earlier would keep what it replaces.
    from celery import maybe_patch_concurrency

    maybe_patch_concurrency(["worker", *args])

    from celery.bin.base import CLIContext
    from celery.bin.worker import worker as worker_command

    from worker.celery import app

    context = CLIContext(app=app, no_color=None, workdir=None)
    worker_command.main(args=args, prog_name="python -m worker", obj=context)


if __name__ == "__main__":
    main()
