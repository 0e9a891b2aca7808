// A fixed 16 ms timer drives every panel.
function frame(now) { advance(now); drawAll(now); frameNo++; }
setInterval(() => frame(performance.now()), 16);
