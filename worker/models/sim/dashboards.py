"""Procedural standalone canvas dashboards, deterministic per seed.

The ``sim`` model uses these as the artifacts its sessions author, so the verifier has real
work: every page is a 12-25 KB self-contained HTML/Canvas telemetry dashboard whose panels
are drawn by their own JS functions from synthetic data (a seeded PRNG in the page) in one
``requestAnimationFrame`` loop. A ``flaw`` gives a first draft that verification must
reject, so repair rounds can be exercised. Only the stdlib is used.
"""

from __future__ import annotations

import html
import json
import random
from dataclasses import dataclass

from worker.models.sim.assets import (
    CSS,
    JS_CORE,
    JS_LOOPS,
    JS_PANELS,
    JS_RUN,
    LITE_LOOPS,
    LITE_PAGE,
    PAGE,
)

__all__ = ["FLAWS", "Dashboard", "render_dashboard", "render_lite", "render_region"]

#: Flaws a first draft can carry, each one a reason for verification to reject it.
FLAWS: tuple[str, ...] = ("set_interval", "external_font", "js_error", "static_canvas")


@dataclass(frozen=True)
class Dashboard:
    """One rendered dashboard page."""

    title: str  #: page title, shown in the top bar
    html: str  #: the whole standalone page
    regions: tuple[str, ...]  #: ids of the <section> elements wrapping each panel


@dataclass(frozen=True)
class _Metric:
    name: str
    unit: str
    lo: float
    hi: float
    inv: bool = False  #: high is good (cache hit ratio), so low values are the alarming ones


@dataclass(frozen=True)
class _Theme:
    bg: str
    panel: str
    grid: str
    text: str
    muted: str
    accent: str
    accent2: str
    warn: str
    crit: str
    extra: tuple[str, str]


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
    theme: _Theme
    areas: tuple[str, ...]
    font: str
    radius: int
    tick_ms: int
    panels: tuple[_Panel, ...]


# The palette and metric tables are kept dense on purpose (the formatter would put every
# field on its own line). Theme fields: bg, panel, grid, text, muted, accent, accent2, warn,
# crit, then two extra series colours.
# fmt: off
_THEMES = (
    _Theme("#0B0F1A", "#111827", "#1F2A40", "#E6F1FF", "#6B7A99", "#00E5FF", "#FF2BD6",
           "#FFC400", "#FF3D57", ("#7CFF6B", "#8B5CF6")),
    _Theme("#140A1F", "#1E1030", "#33204D", "#F5E9FF", "#8E7AA8", "#FF6EC7", "#7DF9FF",
           "#FFD166", "#FF4D6D", ("#B8FF5C", "#9D7BFF")),
    _Theme("#050A06", "#0B140D", "#17301C", "#D8FFE0", "#5C8A66", "#39FF14", "#00FFC6",
           "#E7FF3C", "#FF5F45", ("#4FC3F7", "#C6FF8A")),
    _Theme("#0F0B05", "#1A140A", "#33270F", "#FFF3DC", "#9C8660", "#FFB000", "#FF6A00",
           "#FFE066", "#FF3B30", ("#00D1FF", "#C0FF3E")),
    _Theme("#07121C", "#0C1D2B", "#183349", "#E3F6FF", "#6F8FA6", "#7FDBFF", "#3D9BFF",
           "#FFD23F", "#FF5470", ("#A0FFE6", "#C792EA")),
    _Theme("#0D0608", "#180B0F", "#36161F", "#FFE8EC", "#9A6B76", "#FF1744", "#FF9100",
           "#FFEA00", "#FF5252", ("#18FFFF", "#E040FB")),
    _Theme("#0A0818", "#141028", "#2A2350", "#ECE8FF", "#7D74A8", "#B388FF", "#00E5FF",
           "#FFCA28", "#FF5370", ("#69F0AE", "#FF80AB")),
)
_METRICS = (
    _Metric("cpu", "%", 0, 100), _Metric("mem", "%", 0, 100), _Metric("io wait", "%", 0, 40),
    _Metric("queue depth", "", 0, 500), _Metric("p99 latency", "ms", 0, 800),
    _Metric("p50 latency", "ms", 0, 200), _Metric("error rate", "%", 0, 5),
    _Metric("cache hit ratio", "%", 40, 100, inv=True), _Metric("net rx", "MB/s", 0, 900),
    _Metric("net tx", "MB/s", 0, 600), _Metric("disk util", "%", 0, 100),
    _Metric("gc pause", "ms", 0, 120), _Metric("req/s", "", 0, 12000),
    _Metric("open conns", "", 0, 4000), _Metric("replication lag", "ms", 0, 1500),
    _Metric("thread pool", "%", 0, 100), _Metric("swap", "%", 0, 30),
    _Metric("slo budget", "%", 0, 100, inv=True),
)
# fmt: on
#: Stacked-area groups: title, unit, ceiling per layer, layer names.
_STACKS = (
    ("cpu split", "%", 25, ("user", "system", "io wait", "steal")),
    ("traffic by region", "req/s", 3000, ("eu-west", "us-east", "ap-south")),
    ("memory", "GB", 16, ("heap", "page cache", "buffers", "mapped")),
    ("errors by class", "/s", 40, ("4xx", "5xx", "timeout")),
)
_ENTITIES = ("sh", "n", "pg", "q", "w", "az")
_HOSTS = ("edge-1", "edge-2", "api-3", "api-7", "db-0", "db-1", "cache-2", "mq-4", "gw-9")
#: Panel kind -> (title choices, metrics drawn).
_KINDS: dict[str, tuple[tuple[str, ...], int]] = {
    "gauges": (("Saturation", "Core Vitals", "Host Pressure"), 3),
    "sparklines": (("Live Signals", "Rolling Telemetry", "Trend Lines"), 4),
    "bars": (("Load by Shard", "Per-Node Pressure", "Hot Spots"), 10),
    "heatmap": (("Fleet Heatmap", "Node Matrix", "Thermal Grid"), 7),
    "events": (("Event Stream", "Alert Ticker", "Ops Log"), 3),
    "rings": (("Budgets", "Ratios", "Ring Meters"), 3),
    "scatter": (("Latency vs Load", "Request Cloud", "Correlation"), 2),
    "area": (("Stacked Load", "Composition", "Flow Mix"), 0),
}
#: grid-template-areas per panel count; letter i is panel i.
_LAYOUTS = {
    4: (("a a b", "c d d"), ("a b", "c d"), ("a a b", "a a c", "d d d")),
    5: (("a a b c", "a a d e"), ("a b c", "d d e"), ("a b b", "c d e")),
    6: (("a b c", "d e f"), ("a a b c", "d e f f"), ("a b c d", "a e f d")),
}
_FONTS = (
    "ui-monospace, 'JetBrains Mono', Menlo, Consolas, monospace",
    "system-ui, 'Segoe UI', Roboto, sans-serif",
    "'Eurostile', 'Bank Gothic', 'Segoe UI', Helvetica, sans-serif",
)
_TITLE_HEADS = ("Orbital", "Neon", "Edge", "Core", "Atlas", "Helios", "Kestrel", "Vanta", "Halo")
_TITLE_TAILS = ("Ops Grid", "Telemetry Deck", "Cluster Watch", "Fleet Monitor", "Control Room")
_ZONES = ("eu-west-2", "us-east-1", "ap-south-1", "sa-east-1", "lab", "prod", "staging")
_EXTERNAL_FONT = (
    '<link rel="preconnect" href="https://fonts.gstatic.com">\n'
    '<link href="https://fonts.googleapis.com/css2?family=Orbitron:wght@400;700&display=swap"'
    ' rel="stylesheet">\n'
)


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
    page = (
        PAGE.replace("__HEAD__", _EXTERNAL_FONT if flaw == "external_font" else "")
        .replace("__TITLE__", html.escape(page_title))
        .replace("__CSS__", _css(spec, font))
        .replace("__KPIS__", kpis)
        .replace("__SECTIONS__", sections)
        .replace(
            "__FOOT__",
            f"seed {seed} &middot; {len(spec.panels)} panels &middot; {spec.tick_ms} ms ticks",
        )
        .replace("__SCRIPT__", _script(spec, font, flaw))
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
    loop = LITE_LOOPS["" if flaw in (None, "external_font") else flaw]
    return (
        LITE_PAGE.replace("__HEAD__", _EXTERNAL_FONT if flaw == "external_font" else "")
        .replace("__TITLE__", html.escape(title))
        .replace("__BG__", theme.bg)
        .replace("__FG__", theme.text)
        .replace("__FONT__", spec.font)
        .replace("__CFG__", blob)
        .replace("__LOOP__", loop)
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
    theme = rng.choice(_THEMES)
    count = rng.choice((4, 5, 5, 6, 6))
    kinds = rng.sample(sorted(_KINDS), count)
    areas = rng.choice(_LAYOUTS[count])
    title = f"{rng.choice(_TITLE_HEADS)} {rng.choice(_TITLE_TAILS)} · {rng.choice(_ZONES)}"
    panels = tuple(_panel(rng, kind) for kind in kinds)
    return _Spec(
        seed,
        title,
        theme,
        areas,
        rng.choice(_FONTS),
        rng.choice((4, 8, 14)),
        rng.choice((80, 100, 120, 150)),
        panels,
    )


def _panel(rng: random.Random, kind: str) -> _Panel:
    titles, count = _KINDS[kind]
    title = rng.choice(titles)
    if kind == "area":
        name, unit, ceiling, layers = rng.choice(_STACKS)
        metrics = [_Metric(layer, unit, 0, ceiling) for layer in layers]
        subtitle = f"{name}, {unit}"
    elif kind in ("bars", "heatmap"):
        base = rng.choice(_METRICS)
        prefix = rng.choice(_ENTITIES)
        metrics = [
            _Metric(f"{prefix}{i:02d}", base.unit, base.lo, base.hi, base.inv)
            for i in range(1, count + rng.randint(0, 2) + 1)
        ]
        subtitle = f"{base.name} per {'node' if kind == 'heatmap' else 'shard'}"
    else:
        metrics = rng.sample(_METRICS, count + (rng.randint(0, 1) if count > 2 else 0))
        subtitle = " / ".join(m.name for m in metrics)
    return _Panel(kind, title, subtitle, tuple(_metric_config(rng, m) for m in metrics))


def _metric_config(rng: random.Random, m: _Metric) -> dict[str, object]:
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
        title = rng.choice(_KINDS[panel.kind][0])
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


def _legend(theme: _Theme, panel: _Panel) -> list[tuple[str, str]]:
    """Legend entries (label, colour) matching how the panel's JS colours its marks."""
    if panel.kind in ("gauges", "bars", "heatmap", "events"):
        return [("nominal", theme.accent), ("soft limit", theme.warn), ("breach", theme.crit)]
    if panel.kind == "scatter":
        return list(zip(("core", "spread", "tail"), _series(theme), strict=False))
    names = [str(m["name"]) for m in panel.metrics]
    return list(zip(names, _series(theme), strict=False))


def _series(theme: _Theme) -> list[str]:
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
    css = CSS
    for key in sorted(values, key=len, reverse=True):  # $ACCENT2 before $ACCENT
        css = css.replace(f"${key}", values[key])
    return css


def _colours(theme: _Theme) -> dict[str, str]:
    """The theme's named colours (everything but the extra series colours)."""
    return {key: value for key, value in vars(theme).items() if isinstance(value, str)}


def _script(spec: _Spec, font: str, flaw: str | None) -> str:
    t = spec.theme
    config = {
        "seed": spec.seed % 2**32,
        "tickMs": spec.tick_ms,
        "font": font,
        "hosts": _HOSTS,
        "theme": _colours(t) | {"series": _series(t)},
        "panels": [{"id": p.kind, "metrics": list(p.metrics)} for p in spec.panels],
    }
    blob = json.dumps(config, separators=(",", ":")).replace("</", "<\\/")
    kinds = [p.kind for p in spec.panels]
    draws = "".join(JS_PANELS[kind] for kind in kinds)
    table = ", ".join(f"{kind}: draw{kind.capitalize()}" for kind in kinds)
    loop = JS_LOOPS.get(flaw or "", JS_LOOPS[""])
    return (
        JS_CORE.replace("__CFG__", blob) + draws + f"const DRAW = {{ {table} }};\n" + JS_RUN + loop
    )
