
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
  const addListener = EventTarget.prototype.addEventListener;
  const rec = { on: false, frozen: false, callbacks: 0, pageTs: new Set(), probeTs: [], draws: 0,
                cbMs: 0, lastTs: null };
  const log = { ctx2d: 0, opens: [], sockets: [], inputs: 0, listens: new Set() };
  const contexts = new WeakMap();
  // Canvases narrower or lower than this many pixels are not watched for changes.
  const MIN_CANVAS_SIDE = 16;

  // Input must not start or drive the page while it is judged: headless Chromium moves a
  // trusted pointer to (0,0) just after load, which would start a loop that waits for the
  // first mousemove. The capturing listener on window is registered before any of the
  // page's, so stopping the event there keeps it from every handler of the page.
  const inputTypes = new Set(__INPUTS__);
  for (const type of inputTypes) {
    addListener.call(W, type, (e) => {
      if (!e.isTrusted) return;
      log.inputs++;
      e.stopImmediatePropagation();
    }, true);
  }
  EventTarget.prototype.addEventListener = function addEventListener(type, ...rest) {
    if (inputTypes.has(type)) log.listens.add(type);
    return addListener.call(this, type, ...rest);
  };

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
      rec.lastTs = ts;
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
  const hashCanvas = (c) => {
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

  // One key for every canvas big enough to show something: a dashboard is alive when any
  // of its panels moves, as a person looking at it would see, not only its largest one.
  const sample = () => {
    const keys = [];
    for (const c of qsa.call(document, "canvas")) {
      if (c.width >= MIN_CANVAS_SIDE && c.height >= MIN_CANVAS_SIDE) keys.push(hashCanvas(c));
    }
    return keys.length ? keys.join("|") : null;
  };

  const probe = (ts) => {
    if (!rec.on) return;
    rec.probeTs.push(ts);
    raf(probe);
  };

  // Input handlers the page set as properties (onmousemove = ...) or attributes.
  const handlerListens = () => {
    const targets = [W, document, document.body, ...qsa.call(document, "canvas")];
    for (const type of inputTypes) {
      if (targets.some((t) => t && typeof t["on" + type] === "function")) log.listens.add(type);
    }
  };

  // Judge the page over its life: from the end of the warm-up to the end of the judged
  // time, count display frames (the probe's own rAF loop) and the frames the page's own
  // callbacks ran in, and hash every canvas every `hashEveryMs`. The last `lateMs` of that
  // time are the late window in which the loop must still be running, and some canvas
  // must change between two hashes taken in the last `changeSpanMs`.
  const measure = async (warmupMs, judgedMs, lateMs, hashEveryMs, changeSpanMs) => {
    const loadTs = now();
    await sleep(warmupMs);
    Object.assign(rec, { callbacks: 0, pageTs: new Set(), probeTs: [], draws: 0, cbMs: 0 });
    const keys = [[now(), sample()]];
    rec.on = true;
    raf(probe);
    const t0 = now();
    const end = t0 + judgedMs;
    for (let left = judgedMs; left > 1; left = end - now()) {
      await sleep(Math.min(hashEveryMs, left));
      keys.push([now(), sample()]);
    }
    rec.on = false;
    // The judged time is over: stop the page's loop so its last frame stays on screen for
    // the screenshot and the page stops using CPU while the verifier finishes with it.
    rec.frozen = true;
    const t1 = now();
    const lateFrom = t1 - lateMs;
    // A setTimeout task never runs inside a frame's rAF batch, so every frame the probe
    // saw has all of the page's callbacks recorded by now.
    // The page's loop is judged on the frames from its first to its last one: a loop that
    // starts late or stops early is the business of the fps and late-window figures.
    let sharedRunning = 0, displayRunning = 0, lateDisplay = 0, latePage = 0;
    let firstPage = Infinity, lastPage = -Infinity;
    for (const ts of rec.pageTs) {
      if (ts < firstPage) firstPage = ts;
      if (ts > lastPage) lastPage = ts;
      if (ts >= lateFrom) latePage++;
    }
    for (const ts of rec.probeTs) {
      if (ts >= lateFrom) lateDisplay++;
      if (ts < firstPage || ts > lastPage) continue;
      displayRunning++;
      if (rec.pageTs.has(ts)) sharedRunning++;
    }
    let lastChangeTs = null, changedLate = false;
    for (let i = 1; i < keys.length; i++) {
      const [[before, was], [at, is]] = [keys[i - 1], keys[i]];
      if (was === null || is === null || was === is) continue;
      lastChangeTs = at;
      if (before >= t1 - changeSpanMs - 1) changedLate = true;
    }
    handlerListens();
    const c = largestCanvas();
    const sinceLoad = (ts) => (ts === null || ts === -Infinity ? null : ts - loadTs);
    return {
      elapsedMs: t1 - t0,
      warmupMs: t0 - loadTs,
      lateMs: t1 - lateFrom,
      changeSpanMs,
      displayFrames: rec.probeTs.length,
      pageFrames: rec.pageTs.size,
      displayFramesRunning: displayRunning,
      sharedFramesRunning: sharedRunning,
      lateDisplayFrames: lateDisplay,
      latePageFrames: latePage,
      lastFrameMs: sinceLoad(rec.lastTs),
      lastChangeMs: sinceLoad(lastChangeTs),
      callbacks: rec.callbacks,
      callbackMs: rec.cbMs,
      draws: rec.draws,
      contexts2d: log.ctx2d,
      canvas: c ? [c.width, c.height] : null,
      canvasChanged: lastChangeTs !== null,
      canvasChangedLate: changedLate,
      inputsBlocked: log.inputs,
      inputListeners: [...log.listens].sort(),
      opens: log.opens.slice(),
      sockets: log.sockets.slice(),
    };
  };

  Object.defineProperty(W, "__GLOBAL__", { value: Object.freeze({ measure }) });
})();
