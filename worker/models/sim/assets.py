"""Templates of the generated dashboards: page skeleton, CSS and the JavaScript panels.

Kept apart from ``worker.models.sim.dashboards`` so that the generator reads as Python.
The ``$NAME`` placeholders are filled in there.
"""

from __future__ import annotations

PAGE = """<!DOCTYPE html>
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

CSS = """* { box-sizing: border-box; margin: 0; padding: 0; }
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

JS_CORE = """'use strict';
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

JS_PANELS = {
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

JS_RUN = """const panels = CFG.panels.map((p) => ({
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
JS_LOOPS = {
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

#: A compact single-canvas card, for contracts that cap an artifact at a few kilobytes.
LITE_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<link rel="icon" href="data:,">__HEAD__<style>
body{margin:0;background:__BG__;color:__FG__;font:13px __FONT__}
h1{font-size:15px;margin:10px 14px}#card{display:block;width:100%;height:260px}
</style></head><body><main id="card-main"><h1>__TITLE__</h1>
<section id="chart"><canvas id="card"></canvas></section></main><script>
'use strict';
const CFG = __CFG__;
let s = CFG.seed >>> 0;
const rnd = () => ((s = (s * 1664525 + 1013904223) >>> 0) / 4294967296);
const cv = document.getElementById('card'), ctx = cv.getContext('2d');
const series = CFG.metrics.map((name, i) => ({ name, v: 50, hist: [], col: CFG.cols[i] }));
function step() {
  for (const m of series) {
    m.v = Math.max(0, Math.min(100, m.v + (rnd() - 0.5) * 8));
    m.hist.push(m.v); if (m.hist.length > 120) m.hist.shift();
  }
}
function draw() {
  const w = cv.width = cv.clientWidth, h = cv.height = cv.clientHeight;
  ctx.fillStyle = CFG.panel; ctx.fillRect(0, 0, w, h);
  series.forEach((m, i) => {
    ctx.strokeStyle = m.col; ctx.lineWidth = 2; ctx.beginPath();
    m.hist.forEach((v, x) => {
      const px = x * w / 119, py = h - 20 - v * (h - 40) / 100;
      x ? ctx.lineTo(px, py) : ctx.moveTo(px, py);
    });
    ctx.stroke(); ctx.fillStyle = m.col;
    ctx.fillText(m.name + ' ' + m.v.toFixed(1), 10 + i * 150, 14);
  });
}
__LOOP__</script></body></html>
"""

#: The lite card's animation loops: the real one, and the flawed drafts it can have.
LITE_LOOPS = {
    "": "function frame() { step(); draw(); requestAnimationFrame(frame); }\n"
    "requestAnimationFrame(frame);\n",
    "set_interval": "setInterval(() => { step(); draw(); }, 16);\n",
    "js_error": "function frame() { step(); draw(); series[9].v++; requestAnimationFrame(frame); }"
    "\nrequestAnimationFrame(frame);\n",
    "static_canvas": "step(); requestAnimationFrame(draw);\n",
}
