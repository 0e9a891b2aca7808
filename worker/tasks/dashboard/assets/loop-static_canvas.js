// Draw the snapshot once on the next requestAnimationFrame.
function frame(now) { drawAll(now); frameNo++; }
requestAnimationFrame(frame);
