const panels = CFG.panels.map((p) => ({
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
