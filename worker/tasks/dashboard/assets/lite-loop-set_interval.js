setInterval(() => { step(); draw(); }, 16);
