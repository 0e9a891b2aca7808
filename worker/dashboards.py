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

__all__ = ["FLAWS", "Dashboard", "render_dashboard", "render_region"]

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
        _PAGE.replace("__HEAD__", _EXTERNAL_FONT if flaw == "external_font" else "")
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
    css = _CSS
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
    draws = "".join(_JS_PANELS[kind] for kind in kinds)
    table = ", ".join(f"{kind}: draw{kind.capitalize()}" for kind in kinds)
    loop = _JS_LOOPS.get(flaw or "", _JS_LOOPS[""])
    return (
        _JS_CORE.replace("__CFG__", blob)
        + draws
        + f"const DRAW = {{ {table} }};\n"
        + _JS_RUN
        + loop
    )


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<link rel="icon" href="data:,">
__HEAD__<style>
__CSS__</style>
</head>
<body>
<header id="topbar"><h1>__TITLE__</h1><div class="kpis">__KPIS__</div>
<time id="clock">T+00:00:00</time><span id="status">NOMINAL</span></header>
<main id="dashboard">
__SECTIONS__
</main>
<footer><span>__FOOT__</span><span>synthetic telemetry &middot; offline</span></footer>
<script>
__SCRIPT__</script>
</body>
</html>
"""

_CSS = """* { box-sizing: border-box; margin: 0; padding: 0; }
html, body { height: 100%; overflow: hidden; }
body { display: flex; flex-direction: column; gap: 10px; padding: 12px 16px 8px;
  color: $TEXT; font: 13px/1.4 $FONT;
  background: radial-gradient(1200px 600px at 80% -10%, $PANEL, $BG 60%) fixed, $BG; }
#topbar { display: flex; align-items: center; gap: 16px; min-height: 44px; }
#topbar h1 { font-size: 17px; letter-spacing: .12em; text-transform: uppercase;
  text-shadow: 0 0 12px $ACCENT; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.kpis { display: flex; gap: 8px; margin-left: auto; }
.kpi { min-width: 104px; padding: 3px 10px; background: $PANEL; border: 1px solid $GRID;
  border-radius: $RADIUSpx; }
.kpi span { display: block; font-size: 10px; color: $MUTED; text-transform: uppercase;
  letter-spacing: .1em; white-space: nowrap; }
.kpi b { font-size: 15px; color: $ACCENT; font-variant-numeric: tabular-nums; }
#clock { color: $MUTED; font-variant-numeric: tabular-nums; }
#status { padding: 3px 10px; border: 1px solid $ACCENT; border-radius: 999px; color: $ACCENT;
  font-size: 11px; letter-spacing: .14em; }
#status.warn { color: $WARN; border-color: $WARN; }
#status.crit { color: $CRIT; border-color: $CRIT; box-shadow: 0 0 12px $CRIT; }
#dashboard { flex: 1; min-height: 0; display: grid; gap: 10px;
  grid-template-columns: repeat($COLS, minmax(0, 1fr));
  grid-template-rows: repeat($ROWS, minmax(0, 1fr)); grid-template-areas: $AREAS; }
.panel { display: flex; flex-direction: column; min-width: 0; min-height: 0;
  padding: 8px 12px 10px; border: 1px solid $GRID; border-radius: $RADIUSpx;
  background: linear-gradient(180deg, $PANEL, $BG); box-shadow: 0 0 28px -18px $ACCENT; }
.panel header { display: flex; align-items: baseline; gap: 10px; margin-bottom: 4px; }
.panel h2 { font-size: 11px; font-weight: 600; letter-spacing: .16em; text-transform: uppercase;
  white-space: nowrap; }
.panel .sub { font-size: 11px; color: $MUTED; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; }
.panel .rev { flex: none; margin-left: auto; font-size: 10px; color: $ACCENT; white-space: nowrap; }
.legend { display: flex; flex-wrap: wrap; gap: 2px 12px; list-style: none; font-size: 10px;
  color: $MUTED; margin-bottom: 4px; }
.legend i { display: inline-block; width: 8px; height: 8px; margin-right: 5px; border-radius: 2px; }
.panel canvas { flex: 1 1 0; display: block; width: 100%; min-height: 0; }
footer { display: flex; justify-content: space-between; font-size: 10px; color: $MUTED;
  letter-spacing: .08em; }
"""

_JS_CORE = """'use strict';
const CFG = __CFG__;
const T = CFG.theme, HIST = 96;
// mulberry32: a tiny seeded PRNG, so each page replays its own synthetic telemetry.
function mulberry32(a) {
  return function () {
    a = (a + 0x6D2B79F5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rnd = mulberry32(CFG.seed);
function clamp(v, lo, hi) { return Math.min(hi, Math.max(lo, v)); }
function rgba(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${n >> 16},${(n >> 8) & 255},${n & 255},${a})`;
}
function mix(a, b, k) {
  const x = parseInt(a.slice(1), 16), y = parseInt(b.slice(1), 16);
  const ch = (s) => Math.round(((x >> s) & 255) * (1 - k) + ((y >> s) & 255) * k);
  return `rgb(${ch(16)},${ch(8)},${ch(0)})`;
}
// Heat ramp on the same thresholds as tone(): dark to accent, then warn, then crit.
function heat(v) {
  v = clamp(v, 0, 1);
  if (v < 0.7) return mix(T.grid, T.accent, v / 0.7);
  if (v < 0.85) return mix(T.accent, T.warn, (v - 0.7) / 0.15);
  return mix(T.warn, T.crit, (v - 0.85) / 0.15);
}
function frac(s, v) { return clamp((v - s.m.lo) / (s.m.hi - s.m.lo), 0, 1); }
function severity(s, v) { const x = frac(s, v); return s.m.inv ? 1 - x : x; }
function tone(sev) { return sev > 0.85 ? T.crit : sev > 0.7 ? T.warn : T.accent; }
function font(px, weight) { return `${weight || 500} ${px}px ${CFG.font}`; }
function fmt(s, v) {
  const a = Math.abs(v), u = s.m.unit;
  const txt = a >= 1000 ? (v / 1000).toFixed(1) + 'k' : a >= 100 ? v.toFixed(0)
    : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  return u === '%' ? txt + '%' : u ? txt + ' ' + u : txt;
}
function clock(ticks) {
  const sec = Math.floor((ticks * CFG.tickMs) / 1000), pad = (n) => String(n).padStart(2, '0');
  return `${pad(Math.floor(sec / 3600))}:${pad(Math.floor(sec / 60) % 60)}:${pad(sec % 60)}`;
}
// Mean-reverting random walk with rare spikes: reads like real host telemetry.
function makeSeries(m) {
  const span = m.hi - m.lo, s = { m, v: m.lo + span * m.base, d: 0, hist: [] };
  s.step = () => {
    let v = s.v + (m.lo + span * m.base - s.v) * 0.06 + (rnd() - 0.5) * span * m.vol;
    if (rnd() < 0.015) v += span * m.vol * 6 * (rnd() < 0.7 ? 1 : -1);
    s.v = clamp(v, m.lo, m.hi);
    s.hist.push(s.v);
    if (s.hist.length > HIST) s.hist.shift();
  };
  for (let i = 0; i < HIST; i++) s.step();
  s.d = s.v;
  return s;
}
// Eased display value, so needles and rings glide between samples.
function ease(s) { s.d += (s.v - s.d) * 0.12; return s.d; }
function gridLines(c, x, y, w, h, rows) {
  c.strokeStyle = T.grid; c.lineWidth = 1; c.beginPath();
  for (let i = 0; i <= rows; i++) {
    const yy = Math.round(y + (h * i) / rows) + 0.5;
    c.moveTo(x, yy); c.lineTo(x + w, yy);
  }
  c.stroke();
}
// Glowing arc: a wide translucent stroke under the real one (shadowBlur is slow without a GPU).
function glowArc(c, x, y, r, a0, a1, col, lw) {
  c.lineCap = 'round';
  c.strokeStyle = rgba(col, 0.18); c.lineWidth = lw * 2;
  c.beginPath(); c.arc(x, y, r, a0, a1); c.stroke();
  c.strokeStyle = col; c.lineWidth = lw;
  c.beginPath(); c.arc(x, y, r, a0, a1); c.stroke();
}
function label(c, text, x, y, align, color, px, weight, maxW) {
  c.textAlign = align; c.fillStyle = color; c.font = font(px, weight);
  if (maxW) c.fillText(text, x, y, Math.max(1, maxW)); else c.fillText(text, x, y);
}
"""

_JS_PANELS = {
    "gauges": """function drawGauges(p, c, t) {
  const n = p.series.length, a0 = Math.PI * 0.75, sweep = Math.PI * 1.5;
  let cols = 1, best = 0;
  for (let k = 1; k <= n; k++) {
    const size = Math.min(p.w / k, p.h / Math.ceil(n / k));
    if (size > best) { best = size; cols = k; }
  }
  const cw = p.w / cols, ch = p.h / Math.ceil(n / cols);
  const r = Math.max(10, Math.min(cw * 0.36, ch * 0.38));
  p.series.forEach((s, i) => {
    const row = Math.floor(i / cols), inRow = Math.min(cols, n - row * cols);
    const cx = cw * ((i % cols) + 0.5 + (cols - inRow) / 2), cy = ch * (row + 0.5) + r * 0.1;
    const v = ease(s), x = frac(s, v);
    const col = tone(severity(s, v)), na = a0 + sweep * x;
    c.lineCap = 'round'; c.lineWidth = r * 0.14; c.strokeStyle = T.grid;
    c.beginPath(); c.arc(cx, cy, r, a0, a0 + sweep); c.stroke();
    glowArc(c, cx, cy, r, a0, a0 + sweep * Math.max(0.002, x), col, r * 0.14);
    c.lineWidth = 1; c.strokeStyle = rgba(T.muted, 0.8);
    for (let k = 0; k <= 20; k++) {
      const a = a0 + (sweep * k) / 20, r1 = r * 0.74, r2 = r * (k % 5 ? 0.8 : 0.86);
      c.beginPath(); c.moveTo(cx + Math.cos(a) * r1, cy + Math.sin(a) * r1);
      c.lineTo(cx + Math.cos(a) * r2, cy + Math.sin(a) * r2); c.stroke();
    }
    c.strokeStyle = T.text; c.lineWidth = 2; c.beginPath(); c.moveTo(cx, cy);
    c.lineTo(cx + Math.cos(na) * r * 0.66, cy + Math.sin(na) * r * 0.66); c.stroke();
    c.fillStyle = col; c.beginPath(); c.arc(cx, cy, 4 + Math.sin(t * 4 + i), 0, Math.PI * 2);
    c.fill();
    label(c, fmt(s, v), cx, cy + r * 0.52, 'center', T.text, Math.max(10, r * 0.26), 700);
    label(c, s.m.name.toUpperCase(), cx, cy + r * 0.9, 'center', T.muted, 10, cw - 8);
  });
}
""",
    "sparklines": """function drawSparklines(p, c, t, f) {
  const n = p.series.length, rh = p.h / n, lw = Math.min(120, p.w * 0.26), vw = 84;
  p.series.forEach((s, i) => {
    const top = i * rh + rh * 0.18, h = rh * 0.64, w = Math.max(10, p.w - lw - vw);
    const col = T.series[i % T.series.length], hist = s.hist, dx = w / (hist.length - 2);
    let lo = Infinity, hi = -Infinity;
    for (const v of hist) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    const span = hi - lo || 1, X = (k) => lw + (k - 1 - f) * dx;
    const Y = (v) => top + h - ((v - lo) / span) * h;
    c.save(); c.beginPath(); c.rect(lw, top - 4, w, h + 8); c.clip();
    c.beginPath();
    hist.forEach((v, k) => (k ? c.lineTo(X(k), Y(v)) : c.moveTo(X(k), Y(v))));
    c.strokeStyle = col; c.lineWidth = 1.6; c.stroke();
    c.lineTo(X(hist.length - 1), top + h); c.lineTo(X(0), top + h); c.closePath();
    const g = c.createLinearGradient(0, top, 0, top + h);
    g.addColorStop(0, rgba(col, 0.35)); g.addColorStop(1, rgba(col, 0));
    c.fillStyle = g; c.fill(); c.restore();
    const ex = X(hist.length - 1), ey = Y(s.v);
    c.fillStyle = rgba(col, 0.25); c.beginPath(); c.arc(ex, ey, 7, 0, Math.PI * 2); c.fill();
    c.fillStyle = col; c.beginPath(); c.arc(ex, ey, 3, 0, Math.PI * 2); c.fill();
    label(c, s.m.name, 0, top + h * 0.45, 'left', T.muted, 11, lw - 8);
    const range = `${fmt(s, lo)} .. ${fmt(s, hi)}`;
    label(c, range, 0, top + h * 0.45 + 14, 'left', rgba(T.muted, 0.7), 9, lw - 8);
    label(c, fmt(s, s.v), p.w, top + h * 0.62, 'right', tone(severity(s, s.v)), 15, 700);
    if (!i) return;
    c.strokeStyle = rgba(T.grid, 0.7);
    c.beginPath(); c.moveTo(0, i * rh); c.lineTo(p.w, i * rh); c.stroke();
  });
}
""",
    "bars": """function roundTop(c, x, y, w, h, r) {
  c.beginPath(); c.moveTo(x, y + h); c.lineTo(x, y + r); c.quadraticCurveTo(x, y, x + r, y);
  c.lineTo(x + w - r, y); c.quadraticCurveTo(x + w, y, x + w, y + r); c.lineTo(x + w, y + h);
  c.closePath();
}
function drawBars(p, c) {
  const n = p.series.length, s0 = p.series[0], top = 8, h = p.h - top - 20;
  c.font = font(9);
  const padL = c.measureText(fmt(s0, s0.m.hi)).width + 12;
  const w = p.w - padL - 4, bw = w / n;
  const every = Math.ceil((c.measureText(s0.m.name).width + 8) / bw);
  gridLines(c, padL, top, w, h, 4);
  for (let i = 0; i <= 4; i++) {
    const v = s0.m.lo + ((s0.m.hi - s0.m.lo) * (4 - i)) / 4;
    label(c, fmt(s0, v), padL - 6, top + (h * i) / 4 + 3, 'right', T.muted, 9);
  }
  p.series.forEach((s, i) => {
    const v = ease(s), bh = Math.max(2, frac(s, v) * h), x = padL + i * bw + bw * 0.18;
    const y = top + h - bh, col = tone(severity(s, v));
    const g = c.createLinearGradient(0, y, 0, top + h);
    g.addColorStop(0, col); g.addColorStop(1, rgba(col, 0.12));
    c.fillStyle = g; roundTop(c, x, y, bw * 0.64, bh, Math.min(4, bw * 0.2)); c.fill();
    c.fillStyle = rgba(T.text, 0.9); c.fillRect(x, y, bw * 0.64, 1.5);
    if (i % every === 0) label(c, s.m.name, x + bw * 0.32, p.h - 5, 'center', T.muted, 9);
  });
  const ty = top + h * (s0.m.inv ? 0.7 : 0.2) + 0.5;
  c.setLineDash([5, 4]); c.strokeStyle = rgba(T.warn, 0.7); c.beginPath();
  c.moveTo(padL, ty); c.lineTo(padL + w, ty); c.stroke(); c.setLineDash([]);
}
""",
    "heatmap": """function drawHeatmap(p, c, t, f) {
  const rows = p.series.length, cols = 32, padL = 40, padB = 16;
  const cw = (p.w - padL) / cols, ch = (p.h - padB) / rows;
  c.save(); c.beginPath(); c.rect(padL, 0, cols * cw, p.h - padB); c.clip();
  let lo = Infinity, hi = -Infinity;
  for (const s of p.series) for (const v of s.hist) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  // Auto-range into the calm part of the ramp; only real threshold breaches turn warn/crit.
  const cell = (s, v) => {
    const sev = severity(s, v);
    return sev > 0.7 ? sev : 0.08 + (0.6 * (v - lo)) / (hi - lo || 1);
  };
  p.series.forEach((s, r) => {
    const hist = s.hist, start = hist.length - cols - 2;
    for (let k = 0; k <= cols + 1; k++) {
      c.fillStyle = heat(cell(s, hist[start + k]));
      c.fillRect(padL + (k - 1 - f) * cw, r * ch, cw - 1.5, ch - 1.5);
    }
  });
  c.restore();
  p.series.forEach((s, r) => {
    label(c, s.m.name, padL - 6, r * ch + ch / 2 + 3, 'right', T.muted, 10);
  });
  const lw = Math.min(160, p.w - padL - 30), g = c.createLinearGradient(padL, 0, padL + lw, 0);
  for (let k = 0; k <= 6; k++) g.addColorStop(k / 6, heat(k / 6));
  c.fillStyle = g; c.fillRect(padL, p.h - 8, lw, 5);
  label(c, 'now', p.w, p.h - 3, 'right', T.muted, 9);
}
""",
    "events": """const LEVELS = ['INFO', 'WARN', 'CRIT'];
const NOTES = ['nominal', 'above soft limit', 'breach, paging on-call'];
function newEvent(p, at) {
  const s = p.series[Math.floor(rnd() * p.series.length)];
  const v = s.hist[Math.max(0, s.hist.length - 1 - (ticks - at))], sev = severity(s, v);
  const lvl = sev > 0.85 ? 2 : sev > 0.7 || rnd() < 0.12 ? 1 : 0;
  const host = CFG.hosts[Math.floor(rnd() * CFG.hosts.length)];
  return { at, lvl, text: `${host}  ${s.m.name} ${fmt(s, v)}  ${NOTES[lvl]}` };
}
function drawEvents(p, c, t, f) {
  const st = p.state, lh = 18, rows = Math.max(1, Math.floor(p.h / lh));
  st.log = st.log || []; st.seen = st.seen || 0;
  while (st.seen < ticks) {
    st.seen++;
    if (rnd() < 0.3) st.log.push(newEvent(p, st.seen));
    if (st.log.length > 60) st.log.shift();
  }
  const shown = st.log.slice(-rows), colors = [T.accent, T.warn, T.crit];
  shown.forEach((e, i) => {
    const y = p.h - 6 - (shown.length - 1 - i) * lh, fresh = clamp((ticks - e.at + f) / 3, 0, 1);
    c.globalAlpha = Math.min(fresh, 0.35 + (0.65 * (i + 1)) / shown.length);
    label(c, clock(e.at), 0, y, 'left', T.muted, 11);
    c.fillStyle = rgba(colors[e.lvl], 0.18); c.fillRect(66, y - 11, 40, 15);
    label(c, LEVELS[e.lvl], 86, y, 'center', colors[e.lvl], 10, 700);
    const x = 114 + (1 - fresh) * 20;
    label(c, e.text, x, y, 'left', e.lvl ? colors[e.lvl] : T.text, 11, p.w - x);
  });
  c.globalAlpha = 1;
}
""",
    "rings": """function drawRings(p, c) {
  const n = p.series.length, R = Math.max(12, Math.min(p.h * 0.44, (p.w - 140) / 2.1));
  const cx = R + 12, cy = p.h / 2, lw = Math.max(4, R / (n * 1.9));
  let sum = 0;
  p.series.forEach((s, i) => {
    const r = R - i * lw * 1.45, v = ease(s), x = frac(s, v), col = T.series[i % T.series.length];
    sum += severity(s, v);
    if (r <= lw) return;
    c.lineWidth = lw; c.lineCap = 'round';
    c.strokeStyle = rgba(col, 0.14); c.beginPath(); c.arc(cx, cy, r, 0, Math.PI * 2); c.stroke();
    const a0 = -Math.PI / 2;
    glowArc(c, cx, cy, r, a0, a0 + Math.PI * 2 * Math.max(0.002, x), col, lw);
    const lx = cx + R + 24, ly = cy + (i - (n - 1) / 2) * 36;
    c.fillStyle = col; c.fillRect(lx, ly - 12, 8, 8);
    label(c, s.m.name, lx + 14, ly - 4, 'left', T.muted, 10, p.w - lx - 18);
    label(c, fmt(s, v), lx + 14, ly + 12, 'left', T.text, 14, 700);
  });
  const load = Math.round((100 * sum) / n) + '';
  label(c, load, cx, cy + 6, 'center', tone(sum / n), Math.max(10, R * 0.3), 700);
}
""",
    "scatter": """function drawScatter(p, c, t, f) {
  const st = p.state, [sx, sy] = p.series, pad = 34, w = p.w - pad - 8, h = p.h - 26;
  st.pts = st.pts || []; st.seen = st.seen || 0;
  while (st.seen < ticks) {
    st.seen++;
    for (let k = 0; k < 3; k++) {
      const x = clamp(frac(sx, sx.v) + (rnd() - 0.5) * 0.2 * (k + 1), 0, 1);
      const y = clamp(frac(sy, sy.v) + (rnd() - 0.5) * 0.2 * (k + 1), 0, 1);
      st.pts.push({ x, y, k, at: st.seen });
    }
    if (st.pts.length > 240) st.pts.splice(0, st.pts.length - 240);
  }
  gridLines(c, pad, 4, w, h, 4);
  c.setLineDash([4, 4]); c.strokeStyle = rgba(T.warn, 0.55);
  c.strokeRect(pad + 0.5, 4.5 + h * 0.3, w * 0.7, h * 0.7); c.setLineDash([]);
  for (const q of st.pts) {
    const a = clamp(1 - (ticks - q.at + f) / 70, 0, 1), col = T.series[q.k % T.series.length];
    c.fillStyle = rgba(col, 0.85 * a);
    c.beginPath(); c.arc(pad + q.x * w, 4 + (1 - q.y) * h, 2 + q.k * 0.6, 0, Math.PI * 2); c.fill();
  }
  const hx = pad + frac(sx, ease(sx)) * w, hy = 4 + (1 - frac(sy, ease(sy))) * h;
  c.strokeStyle = rgba(T.text, 0.6);
  c.beginPath(); c.arc(hx, hy, 7 + 2 * Math.sin(t * 5), 0, Math.PI * 2); c.stroke();
  label(c, `${sx.m.name} -> ${fmt(sx, sx.m.hi)}`, pad + w, p.h - 6, 'right', T.muted, 10);
  label(c, fmt(sy, sy.m.hi), pad, 14, 'left', T.muted, 9);
  c.save(); c.translate(11, 4 + h / 2); c.rotate(-Math.PI / 2);
  label(c, sy.m.name, 0, 0, 'center', T.muted, 10); c.restore();
}
""",
    "area": """function drawArea(p, c, t, f) {
  const st = p.state, pad = 4, top = 20, h = p.h - top - pad, w = p.w - pad * 2;
  const len = p.series[0].hist.length, dx = w / (len - 2), X = (k) => pad + (k - 1 - f) * dx;
  let max = 1;
  for (let k = 0; k < len; k++) max = Math.max(max, p.series.reduce((a, s) => a + s.hist[k], 0));
  st.max = st.max ? st.max + (max * 1.15 - st.max) * 0.05 : max * 1.15;
  const Y = (v) => top + h - (v / st.max) * h, base = new Array(len).fill(0);
  gridLines(c, pad, top, w, h, 4);
  c.save(); c.beginPath(); c.rect(pad, top, w, h); c.clip();
  p.series.forEach((s, i) => {
    const col = T.series[i % T.series.length], next = base.map((b, k) => b + s.hist[k]);
    c.beginPath();
    next.forEach((v, k) => (k ? c.lineTo(X(k), Y(v)) : c.moveTo(X(k), Y(v))));
    for (let k = len - 1; k >= 0; k--) c.lineTo(X(k), Y(base[k]));
    c.closePath(); c.fillStyle = rgba(col, 0.3); c.fill();
    c.beginPath();
    next.forEach((v, k) => (k ? c.lineTo(X(k), Y(v)) : c.moveTo(X(k), Y(v))));
    c.strokeStyle = col; c.lineWidth = 1.5; c.stroke();
    next.forEach((v, k) => (base[k] = v));
  });
  c.restore();
  const total = 'total ' + fmt(p.series[0], base[len - 1]);
  label(c, total, p.w - pad, 13, 'right', T.text, 11, 700);
  let lx = pad;
  const room = p.w - pad - c.measureText(total).width - 16;
  c.font = font(10);
  p.series.forEach((s, i) => {
    const col = T.series[i % T.series.length], txt = `${s.m.name} ${fmt(s, s.v)}`;
    const tw = c.measureText(txt).width;
    if (lx + tw + 12 > room) { lx = Infinity; return; }
    c.fillStyle = col; c.fillRect(lx, 5, 8, 8);
    label(c, txt, lx + 12, 13, 'left', T.muted, 10);
    lx += tw + 26;
  });
}
""",
}

_JS_RUN = """const panels = CFG.panels.map((p) => ({
  ...p, series: p.metrics.map(makeSeries), state: {}, w: 1, h: 1, ctx: null,
  canvas: document.querySelector(`canvas[data-panel="${p.id}"]`),
})).filter((p) => p.canvas);
// devicePixelRatio-aware backing store, so lines stay crisp on HiDPI screens.
function fit(p) {
  const r = p.canvas.getBoundingClientRect(), dpr = Math.min(window.devicePixelRatio || 1, 2);
  p.w = Math.max(1, r.width); p.h = Math.max(1, r.height);
  p.canvas.width = Math.round(p.w * dpr); p.canvas.height = Math.round(p.h * dpr);
  p.ctx = p.canvas.getContext('2d');
  p.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
}
const kpis = panels.slice(0, 3).map((p, i) => ({
  s: p.series[0], el: document.getElementById('kpi' + i),
}));
const clockEl = document.getElementById('clock'), statusEl = document.getElementById('status');
let last = performance.now(), acc = 0, ticks = HIST, frameNo = 0;
function updateHud() {
  let worst = 0;
  for (const p of panels) for (const s of p.series) worst = Math.max(worst, severity(s, s.v));
  for (const k of kpis) if (k.el) k.el.textContent = fmt(k.s, k.s.v);
  clockEl.textContent = 'T+' + clock(ticks - HIST);
  statusEl.textContent = worst > 0.85 ? 'CRITICAL' : worst > 0.7 ? 'DEGRADED' : 'NOMINAL';
  statusEl.className = worst > 0.85 ? 'crit' : worst > 0.7 ? 'warn' : '';
}
function advance(now) {
  acc += Math.min(250, now - last); last = now;
  while (acc >= CFG.tickMs) {
    acc -= CFG.tickMs; ticks++;
    for (const p of panels) for (const s of p.series) s.step();
    if (ticks % 4 === 0) updateHud();
  }
}
function drawAll(now) {
  const f = acc / CFG.tickMs;
  for (const p of panels) {
    p.ctx.save(); p.ctx.clearRect(0, 0, p.w, p.h);
    DRAW[p.id](p, p.ctx, now / 1000, f);
    p.ctx.restore();
  }
}
window.addEventListener('resize', () => { panels.forEach(fit); drawAll(last); });
panels.forEach(fit);
updateHud();
"""

#: How the page drives its frames: clean, or one of the flawed first drafts.
_JS_LOOPS = {
    "": """// One requestAnimationFrame loop drives every panel at the display's refresh rate.
function frame(now) { advance(now); drawAll(now); frameNo++; requestAnimationFrame(frame); }
requestAnimationFrame(frame);
""",
    "set_interval": """// A fixed 16 ms timer drives every panel.
function frame(now) { advance(now); drawAll(now); frameNo++; }
setInterval(() => frame(performance.now()), 16);
""",
    "js_error": """function frame(now) {
  advance(now); drawAll(now);
  const newest = panels[0].series[0].hist[frameNo ? HIST : HIST - 1];
  statusEl.dataset.peak = newest.toFixed(2);
  frameNo++; requestAnimationFrame(frame);
}
requestAnimationFrame(frame);
""",
    "static_canvas": """// Draw the snapshot once on the next requestAnimationFrame.
function frame(now) { drawAll(now); frameNo++; }
requestAnimationFrame(frame);
""",
}
