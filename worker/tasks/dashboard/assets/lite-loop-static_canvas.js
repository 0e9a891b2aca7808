step(); requestAnimationFrame(draw);
