"""What every page of ``serve`` needs: the store, the prices and the templates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from sqlalchemy import Engine
from starlette.requests import Request
from starlette.responses import HTMLResponse

from scheduler.report.format import clock, duration, ms, pct, usd
from worker.models.pricing import PriceTable

__all__ = ["ServeContext", "context_of", "environment", "render"]


@dataclass(frozen=True)
class ServeContext:
    """The application's dependencies, kept on ``app.state.swarm``."""

    engine: Engine
    prices: PriceTable
    env: Environment
    refresh_s: float
    """How often a run's page asks for its figures again while the run goes on."""


def environment() -> Environment:
    """The Jinja environment of ``serve``'s templates, autoescaping everything."""
    env = Environment(
        loader=PackageLoader("scheduler.serve", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters.update(usd=usd, pct=pct, ms=ms, duration=duration, clock=clock)
    return env


def context_of(request: Request) -> ServeContext:
    """The context the application was built with."""
    ctx = request.app.state.swarm
    assert isinstance(ctx, ServeContext)
    return ctx


def render(
    request: Request, template: str, *, status_code: int = 200, **values: Any
) -> HTMLResponse:
    """A page drawn from ``template`` with ``values``."""
    page = context_of(request).env.get_template(template).render(**values)
    return HTMLResponse(page, status_code=status_code)
