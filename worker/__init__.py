"""Swarm's core: the Celery app, the turn loop, tools, models and the store.

``celery -A worker worker`` finds :data:`app` here.
"""

from __future__ import annotations

from worker.app import app, create_app

__all__ = ["app", "create_app"]
