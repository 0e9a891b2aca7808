function drawHeatmap(p, c, t, f) {
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
