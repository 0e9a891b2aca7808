// One requestAnimationFrame loop drives every panel at the display's refresh rate.
function frame(now) { advance(now); drawAll(now); frameNo++; requestAnimationFrame(frame); }
requestAnimationFrame(frame);
