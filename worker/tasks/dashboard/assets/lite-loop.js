function frame() { step(); draw(); requestAnimationFrame(frame); }
requestAnimationFrame(frame);
