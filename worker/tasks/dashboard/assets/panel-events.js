const LEVELS = ['INFO', 'WARN', 'CRIT'];
const NOTES = ['nominal', 'above soft limit', 'breach, paging on-call'];
function newEvent(p, at) {
  const s = p.series[Math.floor(rnd() * p.series.length)];
  const v = s.hist[Math.max(0, s.hist.length - 1 - (ticks - at))], sev = severity(s, v);
  const lvl = sev > 0.85 ? 2 : sev > 0.7 || rnd() < 0.12 ? 1 : 0;
  const host = CFG.hosts[Math.floor(rnd() * CFG.hosts.length)];
  return { at, lvl, text: `${host}  ${s.m.name} ${fmt(s, v)}  ${NOTES[lvl]}` };
}
function drawEvents(p, c, t, f) {
  const st = p.state, lh = 18, rows = Math.max(1, Math.floor(p.h / lh));
  st.log = st.log || []; st.seen = st.seen || 0;
  while (st.seen < ticks) {
    st.seen++;
    if (rnd() < 0.3) st.log.push(newEvent(p, st.seen));
    if (st.log.length > 60) st.log.shift();
  }
  const shown = st.log.slice(-rows), colors = [T.accent, T.warn, T.crit];
  shown.forEach((e, i) => {
    const y = p.h - 6 - (shown.length - 1 - i) * lh, fresh = clamp((ticks - e.at + f) / 3, 0, 1);
    c.globalAlpha = Math.min(fresh, 0.35 + (0.65 * (i + 1)) / shown.length);
    label(c, clock(e.at), 0, y, 'left', T.muted, 11);
    c.fillStyle = rgba(colors[e.lvl], 0.18); c.fillRect(66, y - 11, 40, 15);
    label(c, LEVELS[e.lvl], 86, y, 'center', colors[e.lvl], 10, 700);
    const x = 114 + (1 - fresh) * 20;
    label(c, e.text, x, y, 'left', e.lvl ? colors[e.lvl] : T.text, 11, p.w - x);
  });
  c.globalAlpha = 1;
}
