"""Procedural standalone canvas dashboards, deterministic per seed.

The ``sim`` model uses these as the artifacts its sessions author, so the verifier has real
work: every page is a 12-25 KB self-contained HTML/Canvas telemetry dashboard whose panels
are drawn by their own JS functions from synthetic data (a seeded PRNG in the page) in one
``requestAnimationFrame`` loop. A ``flaw`` gives a first draft that verification must
reject, so repair rounds can be exercised. Only the stdlib is used.

The page skeletons, CSS and JavaScript are real files in ``assets/`` next to this module
(``page.html``, ``dashboard.css``, ``core.js``, one ``panel-<kind>.js`` per panel kind,
``run.js``, ``loop[-<flaw>].js``, and ``lite*`` for the compact card), read once per process
with :mod:`importlib.resources`. They share one placeholder dialect: ``__NAME__``, two
underscores either side of an upper-case name (``__CFG__``, ``__ACCENT2__``, ``__TITLE__``).
Such a marker is a plain identifier to a JS or CSS parser and plain text to an HTML one, so
the files stay lintable as they stand (``node --check`` parses every ``.js``), which neither
``string.Template`` (``${host}`` already means something in a JS template literal) nor
comment markers (``const CFG = /*@cfg@*/;`` does not parse) would allow. Markers are filled
in one pass, so a value is never rescanned for markers, and a marker without a value raises
``KeyError``. ``verifier/chromium/probe.js`` uses the same dialect.
"""

from __future__ import annotations

import html
import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

from worker.tasks.dashboard import catalog

__all__ = ["FLAWS", "Dashboard", "render_dashboard", "render_lite", "render_region"]

#: Flaws a first draft can carry, each one a reason for verification to reject it.
FLAWS: tuple[str, ...] = ("set_interval", "external_font", "js_error", "static_canvas")
#: Flaws that live in the animation loop, each with its own ``loop-<flaw>.js`` asset.
_LOOP_FLAWS = ("set_interval", "js_error", "static_canvas")
_PLACEHOLDER = re.compile(r"__([A-Z][A-Z0-9]*)__")


@dataclass(frozen=True)
class Dashboard:
    """One rendered dashboard page."""

    title: str  #: page title, shown in the top bar
    html: str  #: the whole standalone page
    regions: tuple[str, ...]  #: ids of the <section> elements wrapping each panel


@dataclass(frozen=True)
class _Panel:
    kind: str  #: also the section id and the key of its JS draw function
    title: str
    subtitle: str
    metrics: tuple[dict[str, object], ...]


@dataclass(frozen=True)
class _Spec:
    seed: int
    title: str
    theme: catalog.Theme
    areas: tuple[str, ...]
    font: str
    radius: int
    tick_ms: int
    panels: tuple[_Panel, ...]


# The palette and metric tables are kept dense on purpose (the formatter would put every
# field on its own line). Theme fields: bg, panel, grid, text, muted, accent, accent2, warn,
# crit, then two extra series colours.
# fmt: off
def render_dashboard(seed: int, *, title: str | None = None, flaw: str | None = None) -> Dashboard:
    """Render the dashboard for ``seed``.

    Args:
        seed: Picks theme, layout, panels, metrics and the page's own telemetry seed.
        title: Page title; derived from the seed when omitted.
        flaw: One of :data:`FLAWS` for a first draft that verification must reject.

    Returns:
        The page with its title and region ids.

    Raises:
        ValueError: ``flaw`` is not one of :data:`FLAWS`.
    """
    if flaw is not None and flaw not in FLAWS:
        raise ValueError(f"unknown flaw {flaw!r}; expected one of {', '.join(FLAWS)}")
    spec = _spec(seed)
    page_title = spec.title if title is None else title
    font = "'Orbitron', " + spec.font if flaw == "external_font" else spec.font
    sections = "\n".join(
        f'<section id="{p.kind}" class="panel" style="grid-area:{chr(97 + i)}">'
        f"{_region_inner(spec, p, 0)}</section>"
        for i, p in enumerate(spec.panels)
    )
    kpis = "".join(
        f'<div class="kpi"><span>{html.escape(str(p.metrics[0]["name"]))}</span>'
        f'<b id="kpi{i}">--</b></div>'
        for i, p in enumerate(spec.panels[:3])
    )
    page = _fill(
        _asset("page.html"),
        {
            "HEAD": catalog.EXTERNAL_FONT if flaw == "external_font" else "",
            "TITLE": html.escape(page_title),
            "CSS": _css(spec, font),
            "KPIS": kpis,
            "SECTIONS": sections,
            "FOOT": f"seed {seed} &middot; {len(spec.panels)} panels &middot; "
            f"{spec.tick_ms} ms ticks",
            "SCRIPT": _script(spec, font, flaw),
        },
    )
    return Dashboard(page_title, page, tuple(p.kind for p in spec.panels))


def render_lite(seed: int, *, title: str, metrics: list[str], flaw: str | None = None) -> str:
    """A compact card (about 2 KB): one canvas of live sparklines, for tight size limits.

    Args:
        seed: Picks the theme and the page's telemetry seed.
        title: Page title.
        metrics: Names of the plotted series (at most four are drawn).
        flaw: One of :data:`FLAWS` for a first draft that verification must reject.

    Raises:
        ValueError: ``flaw`` is not one of :data:`FLAWS`.
    """
    if flaw is not None and flaw not in FLAWS:
        raise ValueError(f"unknown flaw {flaw!r}; expected one of {', '.join(FLAWS)}")
    spec = _spec(seed)
    theme = spec.theme
    config = {
        "seed": seed % 2**32,
        "metrics": metrics[:4],
        "cols": _series(theme)[:4],
        "panel": theme.panel,
    }
    blob = json.dumps(config, separators=(",", ":")).replace("</", "<\\/")
    css = _fill(_asset("lite.css"), {"BG": theme.bg, "FG": theme.text, "FONT": spec.font})
    script = _fill(_asset("lite.js"), {"CFG": blob}) + _asset(_loop("lite-loop", flaw))
    return _fill(
        _asset("lite.html"),
        {
            "HEAD": catalog.EXTERNAL_FONT if flaw == "external_font" else "",
            "TITLE": html.escape(title),
            "CSS": css,
            "SCRIPT": script,
        },
    )


def render_region(seed: int, region_id: str, *, revision: int) -> str:
    """Render new inner HTML for one panel's section, for an in-place region edit.

    Args:
        seed: The seed the dashboard was rendered from.
        region_id: One of that dashboard's ``regions``.
        revision: 0 reproduces the original; higher values refine the header and legend.

    Returns:
        The section's inner HTML; it keeps the panel's canvas, so the page stays valid.

    Raises:
        ValueError: ``region_id`` is not a region of this dashboard, or ``revision`` < 0.
    """
    if revision < 0:
        raise ValueError(f"revision must be >= 0, got {revision}")
    spec = _spec(seed)
    for panel in spec.panels:
        if panel.kind == region_id:
            return _region_inner(spec, panel, revision)
    ids = ", ".join(p.kind for p in spec.panels)
    raise ValueError(f"no region {region_id!r} in dashboard {seed}; regions are {ids}")


def _spec(seed: int) -> _Spec:
    rng = random.Random(seed)
    theme = rng.choice(catalog.THEMES)
    count = rng.choice((4, 5, 5, 6, 6))
    kinds = rng.sample(sorted(catalog.KINDS), count)
    areas = rng.choice(catalog.LAYOUTS[count])
    head, tail = rng.choice(catalog.TITLE_HEADS), rng.choice(catalog.TITLE_TAILS)
    title = f"{head} {tail} · {rng.choice(catalog.ZONES)}"
    panels = tuple(_panel(rng, kind) for kind in kinds)
    return _Spec(
        seed,
        title,
        theme,
        areas,
        rng.choice(catalog.FONTS),
        rng.choice((4, 8, 14)),
        rng.choice((80, 100, 120, 150)),
        panels,
    )


def _panel(rng: random.Random, kind: str) -> _Panel:
    titles, count = catalog.KINDS[kind]
    title = rng.choice(titles)
    if kind == "area":
        name, unit, ceiling, layers = rng.choice(catalog.STACKS)
        metrics = [catalog.Metric(layer, unit, 0, ceiling) for layer in layers]
        subtitle = f"{name}, {unit}"
    elif kind in ("bars", "heatmap"):
        base = rng.choice(catalog.METRICS)
        prefix = rng.choice(catalog.ENTITIES)
        metrics = [
            catalog.Metric(f"{prefix}{i:02d}", base.unit, base.lo, base.hi, base.inv)
            for i in range(1, count + rng.randint(0, 2) + 1)
        ]
        subtitle = f"{base.name} per {'node' if kind == 'heatmap' else 'shard'}"
    else:
        metrics = rng.sample(catalog.METRICS, count + (rng.randint(0, 1) if count > 2 else 0))
        subtitle = " / ".join(m.name for m in metrics)
    return _Panel(kind, title, subtitle, tuple(_metric_config(rng, m) for m in metrics))


def _metric_config(rng: random.Random, m: catalog.Metric) -> dict[str, object]:
    return {
        "name": m.name,
        "unit": m.unit,
        "lo": m.lo,
        "hi": m.hi,
        "inv": m.inv,
        "base": round(rng.uniform(0.25, 0.7), 3),
        "vol": round(rng.uniform(0.015, 0.05), 3),
    }


def _region_inner(spec: _Spec, panel: _Panel, revision: int) -> str:
    title, subtitle = panel.title, panel.subtitle
    extra = ""
    if revision:
        rng = random.Random(f"{spec.seed}:{panel.kind}:{revision}")
        title = rng.choice(catalog.KINDS[panel.kind][0])
        items = "".join(
            f'<li><i style="background:{colour}"></i>{html.escape(name)}</li>'
            for name, colour in _legend(spec.theme, panel)
        )
        extra = f'<ul class="legend">{items}</ul>'
        subtitle = f"{subtitle} · window {rng.choice((30, 60, 120))} s"
    badge = f'<span class="rev">rev {revision}</span>' if revision else ""
    return (
        f"<header><h2>{html.escape(title)}</h2>"
        f'<span class="sub">{html.escape(subtitle)}</span>{badge}</header>{extra}'
        f'<canvas id="cv-{panel.kind}" data-panel="{panel.kind}" role="img" '
        f'aria-label="{html.escape(title)}: {html.escape(subtitle)}"></canvas>'
    )


def _legend(theme: catalog.Theme, panel: _Panel) -> list[tuple[str, str]]:
    """Legend entries (label, colour) matching how the panel's JS colours its marks."""
    if panel.kind in ("gauges", "bars", "heatmap", "events"):
        return [("nominal", theme.accent), ("soft limit", theme.warn), ("breach", theme.crit)]
    if panel.kind == "scatter":
        return list(zip(("core", "spread", "tail"), _series(theme), strict=False))
    names = [str(m["name"]) for m in panel.metrics]
    return list(zip(names, _series(theme), strict=False))


def _series(theme: catalog.Theme) -> list[str]:
    """Series colours in the order the page's JS assigns them (T.series)."""
    return [theme.accent, theme.accent2, *theme.extra, theme.warn]


def _css(spec: _Spec, font: str) -> str:
    values = {key.upper(): value for key, value in _colours(spec.theme).items()}
    values |= {
        "FONT": font,
        "RADIUS": str(spec.radius),
        "COLS": str(len(spec.areas[0].split())),
        "ROWS": str(len(spec.areas)),
        "AREAS": " ".join(f'"{row}"' for row in spec.areas),
    }
    return _fill(_asset("dashboard.css"), values)


def _colours(theme: catalog.Theme) -> dict[str, str]:
    """The theme's named colours (everything but the extra series colours)."""
    return {key: value for key, value in vars(theme).items() if isinstance(value, str)}


def _script(spec: _Spec, font: str, flaw: str | None) -> str:
    t = spec.theme
    config = {
        "seed": spec.seed % 2**32,
        "tickMs": spec.tick_ms,
        "font": font,
        "hosts": catalog.HOSTS,
        "theme": _colours(t) | {"series": _series(t)},
        "panels": [{"id": p.kind, "metrics": list(p.metrics)} for p in spec.panels],
    }
    blob = json.dumps(config, separators=(",", ":")).replace("</", "<\\/")
    kinds = [p.kind for p in spec.panels]
    draws = "".join(_asset(f"panel-{kind}.js") for kind in kinds)
    table = ", ".join(f"{kind}: draw{kind.capitalize()}" for kind in kinds)
    return (
        _fill(_asset("core.js"), {"CFG": blob})
        + draws
        + f"const DRAW = {{ {table} }};\n"
        + _asset("run.js")
        + _asset(_loop("loop", flaw))
    )


def _loop(stem: str, flaw: str | None) -> str:
    """Asset name of the animation loop: the clean one, or the draft carrying ``flaw``."""
    return f"{stem}-{flaw}.js" if flaw in _LOOP_FLAWS else f"{stem}.js"


@cache
def _asset(name: str) -> str:
    """The text of ``assets/<name>``, read once per process."""
    return (files(__package__) / "assets" / name).read_text(encoding="utf-8")


def _fill(template: str, values: Mapping[str, str]) -> str:
    """Replace every ``__NAME__`` marker in ``template`` with ``values[NAME]``, in one pass.

    Raises:
        KeyError: ``template`` has a marker that ``values`` does not name.
    """
    return _PLACEHOLDER.sub(lambda match: values[match[1]], template)
