function roundTop(c, x, y, w, h, r) {
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
