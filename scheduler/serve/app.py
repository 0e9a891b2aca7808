"""The ASGI application of ``serve``: its routes, over the read model, read-only.

Every page reads the store through :mod:`worker.reads` and nothing else; no route writes.
The store is synchronous SQLAlchemy, so the endpoints are plain functions, which Starlette
runs in its thread pool.
"""

from __future__ import annotations

from pydantic import SecretStr
from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from scheduler.serve.artifacts import artifact_raw, artifact_viewer, screenshot, video
from scheduler.serve.auth import HEALTH_PATH, BasicAuth
from scheduler.serve.context import ServeContext, environment
from scheduler.serve.live import run_live, run_page
from scheduler.serve.pages import favicon, healthz, index, ladder_page, transcript_page
from scheduler.serve.policy import SecurityHeaders
from worker.models.pricing import PriceTable

__all__ = ["DEFAULT_REFRESH_S", "create_app"]

#: Seconds between two looks at a run's figures while its page is open.
DEFAULT_REFRESH_S = 2.0


def create_app(
    *,
    engine: Engine,
    prices: PriceTable,
    basic_auth: SecretStr | None,
    refresh_s: float = DEFAULT_REFRESH_S,
) -> Starlette:
    """The application over the store of ``engine``.

    Args:
        engine: The store, at the latest schema; the caller disposes of it.
        prices: Prices that split each wave's dollars by token kind.
        basic_auth: ``user:password`` every page asks for; None asks for none.
        refresh_s: How often a run's page asks for its figures again.
    """
    routes = [
        Route("/", index),
        Route(HEALTH_PATH, healthz),
        Route("/favicon.ico", favicon),
        Route("/runs/{run_id:int}", run_page),
        Route("/runs/{run_id:int}/live", run_live),
        Route("/ladders/{ladder_id:int}", ladder_page),
        Route("/sessions/{session_id:int}", transcript_page),
        Route("/sessions/{session_id:int}/artifacts/{version:int}/{name:path}", artifact_viewer),
        Route("/raw/sessions/{session_id:int}/artifacts/{version:int}/{name:path}", artifact_raw),
        Route("/verifications/{verification_id:int}/screenshot.png", screenshot),
        Route("/verifications/{verification_id:int}/video.mp4", video),
        Mount("/static", StaticFiles(packages=[("scheduler.serve", "static")]), name="static"),
    ]
    # The headers go on every response, a 401 too; so their middleware comes first.
    middleware = [Middleware(SecurityHeaders)]
    if basic_auth is not None:
        middleware.append(Middleware(BasicAuth, credentials=basic_auth))
    app = Starlette(routes=routes, middleware=middleware)
    app.state.swarm = ServeContext(
        engine=engine, prices=prices, env=environment(), refresh_s=refresh_s
    )
    return app
