function drawArea(p, c, t, f) {
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
