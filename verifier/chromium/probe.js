
(() => {
  const W = window;
  if (Object.prototype.hasOwnProperty.call(W, "__GLOBAL__")) return;
  // The controlled clock (clock.js) runs just before this script and hands itself over.
  const clock = W.__CLOCK__;
  delete W.__CLOCK__;
  const realNow = clock.realNow;
  const rect = Element.prototype.getBoundingClientRect;
  const Offscreen = W.OffscreenCanvas;
  const qsa = Document.prototype.querySelectorAll;
  const toDataURL = HTMLCanvasElement.prototype.toDataURL;
  const C2D = CanvasRenderingContext2D.prototype;
  const getImageData = C2D.getImageData;
  const stringify = JSON.stringify;
  const addListener = EventTarget.prototype.addEventListener;
  const rec = { draws: 0, nextAt: null, stepped: 0 };
  const log = { ctx2d: 0, opens: [], sockets: [], inputs: 0, listens: new Set(), leaving: false,
                leaves: new Set(), consoleErrors: [] };
  // Distinct console.error texts kept per document.
  const MAX_CONSOLE_ERRORS = 50;
  // A tab judges several artifacts one after the other (page.py): each starts with the
  // window name a fresh tab has (a frame's name is its own, and stays).
  if (W === W.top && W.name) W.name = "";
  // A navigation the page starts (a reload, a link) commits only after the stepping task
  // that fired it has ended; beforeunload tells at once that this document is leaving.
  addListener.call(W, "beforeunload", () => { log.leaving = true; }, true);
  // Tells this document from the next one, should the page navigate between two calls.
  const documentId = String(Math.random());
  const contexts = new WeakMap();
  // Canvases narrower or lower than this many pixels are not watched for changes.
  const MIN_CANVAS_SIDE = 16;
  // Microtask turns granted between two frames.
  const SETTLE_TURNS = 8;

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
  // Handlers that run when the document is left: the tab that judged it is not reused, so
  // none of them can delay or disturb the next artifact's load.
  const leaveTypes = new Set(__LEAVES__);
  EventTarget.prototype.addEventListener = function addEventListener(type, ...rest) {
    if (inputTypes.has(type)) log.listens.add(type);
    if (leaveTypes.has(type)) log.leaves.add(type);
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

  // A frame that starts by clearing or filling its whole canvas makes everything drawn
  // before it invisible. Chromium then drops the drawing it recorded but has not yet
  // rasterised, but only for a rectangle that covers the canvas exactly; a dashboard that
  // clears in CSS pixels (412.5 of a 413-pixel canvas) makes it raster every frame it
  // drew, where a display would have shown each frame once. Stepped frames are rastered
  // only when the verifier reads the canvas, so such a clear is widened here to the exact
  // canvas, without a clip or a rotation: what is on screen stays the same, to within the
  // fraction of an edge pixel, and the frames in between cost no raster.
  const clips = new WeakMap();
  const depth = (ctx) => clips.get(ctx) || [0];
  for (const [name, op] of [["save", 1], ["restore", -1], ["clip", 0], ["reset", 2]]) {
    const orig = C2D[name];
    if (typeof orig !== "function") continue;
    C2D[name] = function () {
      const d = depth(this);
      if (op === 1) d.push(d[d.length - 1]);
      else if (op === -1 && d.length > 1) d.pop();
      else if (op === 0) d[d.length - 1] = 1;
      else if (op === 2) d.splice(0, d.length, 0);
      clips.set(this, d);
      return orig.apply(this, arguments);
    };
  }
  const setTransform = C2D.setTransform, getTransform = C2D.getTransform;
  const save = C2D.save, restore = C2D.restore, clearRect = C2D.clearRect;
  const widen = (ctx, x, y, w, h) => {
    const c = ctx.canvas, d = depth(ctx);
    if (d[d.length - 1] || !c || !(c.width > 0)) return;
    const m = getTransform.call(ctx);
    if (m.b !== 0 || m.c !== 0) return;
    const x0 = Math.min(m.a * x, m.a * (x + w)) + m.e, x1 = Math.max(m.a * x, m.a * (x + w)) + m.e;
    const y0 = Math.min(m.d * y, m.d * (y + h)) + m.f, y1 = Math.max(m.d * y, m.d * (y + h)) + m.f;
    if (x0 > 0 || y0 > 0 || x1 < c.width - 1 || y1 < c.height - 1) return;
    if (x0 === 0 && y0 === 0 && x1 >= c.width && y1 >= c.height) return;  // exact already
    save.call(ctx);
    setTransform.call(ctx, 1, 0, 0, 1, 0, 0);
    clearRect.call(ctx, 0, 0, c.width, c.height);
    restore.call(ctx);
  };
  // A frame hides its canvas's earlier frames with its first clear or fill; the many fills
  // after it are bars and cells, and reading the context's state for each would cost the
  // page about as much again as the fills themselves. So only the first few clears and
  // fills of each canvas in each frame are looked at (the rest are drawn as they are).
  const LOOKED_AT_PER_FRAME = 2;
  const lookedAt = new WeakMap();
  const firstInFrame = (ctx) => {
    let seen = lookedAt.get(ctx);
    if (seen === undefined || seen.frame !== rec.stepped) {
      seen = { frame: rec.stepped, count: 0 };
      lookedAt.set(ctx, seen);
    }
    return seen.count++ < LOOKED_AT_PER_FRAME;
  };
  C2D.clearRect = function (x, y, w, h) {
    if (firstInFrame(this)) widen(this, x, y, w, h);
    return clearRect.call(this, x, y, w, h);
  };
  const fillRect = C2D.fillRect;
  C2D.fillRect = function (x, y, w, h) {
    if (firstInFrame(this)) {
      // Only an opaque plain colour hides what was there (a canvas gives it as #rrggbb).
      const style = this.fillStyle;
      if (typeof style === "string" && style[0] === "#" && this.globalAlpha === 1 &&
          this.globalCompositeOperation === "source-over" && (this.filter || "none") === "none") {
        widen(this, x, y, w, h);
      }
    }
    return fillRect.call(this, x, y, w, h);
  };

  for (const name of __DRAWS__) {
    const orig = C2D[name];
    if (typeof orig !== "function") continue;
    C2D[name] = function () {
      rec.draws++;
      return orig.apply(this, arguments);
    };
  }

  // The page's console writes nothing out: every call of a console method would otherwise
  // go to the verifier over DevTools, and a page that logs in a tight loop (hundreds of
  // thousands of calls) would swamp it and the browser for every artifact after it. Errors
  // are kept here, the first few of each text, for no_page_errors.
  const con = W.console;
  for (const name of Object.keys(con)) {
    if (typeof con[name] === "function") con[name] = function () {};
  }
  con.error = function error(...args) {
    const text = args.map((a) => {
      if (typeof a === "string") return a;
      if (a instanceof Error) return String(a);
      try { return stringify(a) ?? String(a); } catch (e) { return String(a); }
    }).join(" ");
    if (log.consoleErrors.length < MAX_CONSOLE_ERRORS && !log.consoleErrors.includes(text)) {
      log.consoleErrors.push(text);
    }
  };

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

  // Input handlers the page set as properties (onmousemove = ...) or attributes.
  const handlerListens = () => {
    const targets = [W, document, document.body, ...qsa.call(document, "canvas")];
    for (const type of inputTypes) {
      if (targets.some((t) => t && typeof t["on" + type] === "function")) log.listens.add(type);
    }
    for (const type of leaveTypes) {
      if (targets.some((t) => t && typeof t["on" + type] === "function")) log.leaves.add(type);
    }
  };

  // Between two frames the page's promise callbacks run (a few microtask turns, enough
  // for an async loop's awaits); its other tasks (messages, events) run where the canvases
  // are hashed.
  const settle = async () => {
    for (let i = 0; i < SETTLE_TURNS; i++) await null;
  };
  // One turn of the page's task queue, through a channel of the probe's own (a message is
  // not clamped as nested timers are, and the page cannot reach this port).
  const channel = new MessageChannel();
  const postMessage = MessagePort.prototype.postMessage;
  const NativePromise = Promise;
  const yielded = [];
  channel.port1.onmessage = () => yielded.shift()();
  const yieldTask = () => new NativePromise((resolve) => {
    yielded.push(resolve);
    postMessage.call(channel.port2, null);
  });

  // Step up to `count` frames of page time at 60 Hz. Page time inside a frame runs at
  // `rate` page ms per real ms (see clock.js). For every frame: the real milliseconds its
  // timers, rAF callbacks and forced style and layout took, and how many of the page's rAF
  // callbacks ran. The canvases are hashed after each frame whose number (counting every
  // frame stepped so far, from 1; 0 is before the first) is in `sampleAt`, and the page's
  // other tasks (messages, events, and the rendering) get a turn; there the call returns
  // early once `budgetMs` real milliseconds have passed, so that one call steps many frames
  // of a cheap page and few of a slow one.
  const step = async (count, rate, budgetMs, sampleAt) => {
    clock.setRate(rate);
    const keys = [];
    if (rec.nextAt === null) {
      rec.nextAt = Math.ceil(clock.pageNow() / clock.FRAME_MS + 1e-6) * clock.FRAME_MS;
      if (sampleAt.includes(0)) keys.push([-1, sample()]);
    }
    rec.draws = 0;
    const costs = [], ran = [], started = realNow();
    let at = rec.nextAt;
    for (let i = 0; i < count; i++) {
      at = rec.nextAt;
      rec.nextAt += clock.FRAME_MS;
      const t0 = realNow();
      ran.push(clock.frame(at));
      // The style and layout the frame's changes need, now rather than at the next
      // rendering, which in stepped time may come many frames later.
      if (document.documentElement) rect.call(document.documentElement);
      costs.push(realNow() - t0);
      await settle();
      rec.stepped++;
      if (sampleAt.includes(rec.stepped)) {
        keys.push([at, sample()]);
        await yieldTask();
        // Only here: the page's tasks and rendering then come at the same page times
        // however fast this machine steps it.
        if (realNow() - started >= budgetMs) break;
      }
      if (log.leaving) break;
    }
    return { costs, ran, atMs: at, wallMs: realNow() - started, draws: rec.draws, keys,
             documentId, leaving: log.leaving };
  };

  // A fixed piece of script and canvas work, the same on every machine, whose CPU time
  // tells how fast this machine runs pages (see clock.py).
  let sink = 0;
  const bench = (runs) => {
    const c = new Offscreen(256, 256), ctx = c.getContext("2d");
    for (let r = 0; r < runs; r++) {
      let x = 0;
      for (let i = 1; i < 60000; i++) x += Math.sqrt(i) * Math.sin(i);
      for (let i = 0; i < 400; i++) {
        ctx.fillStyle = i % 2 ? "#4da3ff" : "#ff5d73";
        ctx.beginPath();
        ctx.arc((i * 37) % 256, (i * 91) % 256, 6 + (i % 20), 0, Math.PI * 2);
        ctx.fill();
      }
      sink += x + ctx.getImageData(0, 0, 1, 1).data[0];
    }
    return sink;
  };

  const summary = () => {
    handlerListens();
    const c = largestCanvas();
    return {
      contexts2d: log.ctx2d,
      canvas: c ? [c.width, c.height] : null,
      inputsBlocked: log.inputs,
      inputListeners: [...log.listens].sort(),
      leaveListeners: [...log.leaves].sort(),
      opens: log.opens.slice(),
      sockets: log.sockets.slice(),
      consoleErrors: log.consoleErrors.slice(),
      leaving: log.leaving,
    };
  };

  Object.defineProperty(W, "__GLOBAL__", { value: Object.freeze({ step, bench, sample, summary }) });
})();
