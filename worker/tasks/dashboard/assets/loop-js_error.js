function frame(now) {
  advance(now); drawAll(now);
  const newest = panels[0].series[0].hist[frameNo ? HIST : HIST - 1];
  statusEl.dataset.peak = newest.toFixed(2);
  frameNo++; requestAnimationFrame(frame);
}
requestAnimationFrame(frame);
