function frame() { step(); draw(); series[9].v++; requestAnimationFrame(frame); }
requestAnimationFrame(frame);
