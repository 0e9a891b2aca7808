
(() => {
  const W = window;
  if (Object.prototype.hasOwnProperty.call(W, "__GLOBAL__")) return;
  const raf = W.requestAnimationFrame.bind(W);
  const setTimer = W.setTimeout;
  const sleep = (ms) => new Promise((resolve) => setTimer.call(W, resolve, ms));
  const now = performance.now.bind(performance);
  const qsa = Document.prototype.querySelectorAll;
  const toDataURL = HTMLCanvasElement.prototype.toDataURL;
  const C2D = CanvasRenderingContext2D.prototype;
  const getImageData = C2D.getImageData;
  const stringify = JSON.stringify;
  const rec = { on: false, frozen: false, callbacks: 0, pageTs: new Set(), probeTs: [], draws: 0,
                cbMs: 0 };
  const log = { ctx2d: 0, opens: [], sockets: [] };
  const contexts = new WeakMap();

  const getContext = HTMLCanvasElement.prototype.getContext;
  HTMLCanvasElement.prototype.getContext = function getContext2(type, ...rest) {
    const ctx = getContext.call(this, type, ...rest);
    if (type === "2d") {
      log.ctx2d++;
      if (ctx) contexts.set(this, ctx);
    }
    return ctx;
  };

  W.requestAnimationFrame = function requestAnimationFrame(cb) {
    if (typeof cb !== "function") return raf(cb);
    return raf((ts) => {
      if (rec.frozen) return undefined;
      if (!rec.on) return cb(ts);
      rec.callbacks++;
      rec.pageTs.add(ts);
      const start = now();
      try {
        return cb(ts);
      } finally {
        rec.cbMs += now() - start;
      }
    });
  };

  for (const name of __DRAWS__) {
    const orig = C2D[name];
    if (typeof orig !== "function") continue;
    C2D[name] = function (...args) {
      if (rec.on) rec.draws++;
      return orig.apply(this, args);
    };
  }

  W.open = function open(url) {
    log.opens.push(url === undefined ? "" : String(url));
    return null;
  };

  for (const kind of __SOCKETS__) {
    if (typeof W[kind] !== "function") continue;
    const blocked = function (target) {
      let shown;
      try { shown = typeof target === "string" ? target : stringify(target); }
      catch (e) { shown = String(target); }
      log.sockets.push(kind + " " + shown);
      throw new DOMException(kind + " is blocked: the artifact must work offline", "NetworkError");
    };
    blocked.prototype = W[kind].prototype;
    W[kind] = blocked;
  }

  const largestCanvas = () => {
    let best = null, area = 0;
    for (const c of qsa.call(document, "canvas")) {
      if (c.width * c.height > area) { best = c; area = c.width * c.height; }
    }
    return best;
  };

  // Hash the pixels through the page's own 2D context when it has one: asking for a
  // context ourselves would create one and could break a page that wants WebGL later.
  const sample = () => {
    const c = largestCanvas();
    if (!c) return null;
    const ctx = contexts.get(c);
    try {
      if (!ctx) return toDataURL.call(c);
      const px = new Uint32Array(getImageData.call(ctx, 0, 0, c.width, c.height).data.buffer);
      let h = 0x811c9dc5 | 0;
      for (let i = 0; i < px.length; i++) h = Math.imul(h ^ px[i], 16777619);
      return c.width + "x" + c.height + ":" + (h >>> 0).toString(16);
    } catch (e) {
      return "unreadable:" + String(e);
    }
  };

  const probe = (ts) => {
    if (!rec.on) return;
    rec.probeTs.push(ts);
    raf(probe);
  };

  const measure = async (warmupMs, windowMs, samples) => {
    await sleep(warmupMs);
    Object.assign(rec, { callbacks: 0, pageTs: new Set(), probeTs: [], draws: 0 });
    const keys = [sample()];
    rec.on = true;
    raf(probe);
    const t0 = now();
    for (let i = 0; i < samples; i++) {
      await sleep(windowMs / samples);
      keys.push(sample());
    }
    rec.on = false;
    // The window is over: stop the page's loop so its last frame stays on screen for the
    // screenshot and the page stops using CPU while the verifier finishes with it.
    rec.frozen = true;
    const elapsedMs = now() - t0;
    // A setTimeout task never runs inside a frame's rAF batch, so every frame the probe
    // saw has all of the page's callbacks recorded by now.
    let shared = 0;
    for (const ts of rec.probeTs) if (rec.pageTs.has(ts)) shared++;
    const c = largestCanvas();
    return {
      elapsedMs,
      displayFrames: rec.probeTs.length,
      pageFrames: rec.pageTs.size,
      sharedFrames: shared,
      callbacks: rec.callbacks,
      callbackMs: rec.cbMs,
      draws: rec.draws,
      contexts2d: log.ctx2d,
      canvas: c ? [c.width, c.height] : null,
      canvasChanged: new Set(keys.filter((k) => k !== null)).size > 1,
      opens: log.opens.slice(),
      sockets: log.sockets.slice(),
    };
  };

  Object.defineProperty(W, "__GLOBAL__", { value: Object.freeze({ measure }) });
})();
