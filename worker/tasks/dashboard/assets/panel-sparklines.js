function drawSparklines(p, c, t, f) {
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
