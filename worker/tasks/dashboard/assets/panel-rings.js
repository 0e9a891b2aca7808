function drawRings(p, c) {
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
