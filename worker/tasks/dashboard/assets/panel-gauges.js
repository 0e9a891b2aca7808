function drawGauges(p, c, t) {
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
