'use strict';
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
