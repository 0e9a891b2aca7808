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
