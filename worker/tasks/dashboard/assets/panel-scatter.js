function drawScatter(p, c, t, f) {
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
