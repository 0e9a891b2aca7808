(() => {
  // The page's clocks, replaced before any of its scripts runs by one the verifier steps:
  // requestAnimationFrame runs only when the verifier steps a frame, timers fire when page
  // time reaches them, and performance.now and Date read page time. See clock.py.
  const W = window;
  if (Object.prototype.hasOwnProperty.call(W, "__CLOCK__")) return;
  const realNow = performance.now.bind(performance);
  const nativeRaf = W.requestAnimationFrame.bind(W);
  const RealDate = Date;
  const reportError = W.reportError.bind(W);
  const FRAME_MS = 1000 / 60;
  // Timers nested deeper than this are clamped to TIMER_MIN_MS, as browsers do.
  const NESTING_LEVEL = 5, TIMER_MIN_MS = 4;
  // At most this many timers fire before one frame; the rest wait for the next.
  const MAX_TIMERS_PER_FRAME = 1000;
  const epochMs = RealDate.now();

  // Page time advances at `rate` page ms per real ms from the anchor, never backwards.
  // Loading runs in real time (rate 1); once stepped, the verifier sets the rate to the
  // share of a CPU the page's thread gets, so page time inside a frame follows the CPU the
  // page spends, whatever else the machine runs.
  let anchorPage = 0, anchorReal = realNow(), rate = 1, last = 0;
  const pageNow = () => {
    const t = anchorPage + (realNow() - anchorReal) * rate;
    if (t > last) last = t;
    return last;
  };
  const anchor = (page) => {
    anchorPage = Math.max(page, last);
    anchorReal = realNow();
  };

  let nextId = 1;
  let frames = new Map();
  const timers = new Map();
  let nesting = 0;

  const guarded = (fn, args) => {
    try {
      fn(...args);
    } catch (e) {
      // Uncaught, as it would be from a real frame or timer: the console and the page's
      // onerror see it, and the step goes on.
      reportError(e);
    }
  };

  const requestAnimationFrame = function requestAnimationFrame(cb) {
    if (typeof cb !== "function") return nativeRaf(cb);  // the native TypeError
    const id = nextId++;
    frames.set(id, cb);
    return id;
  };
  const cancelAnimationFrame = function cancelAnimationFrame(id) {
    frames.delete(id);
  };

  const addTimer = (handler, delay, args, repeat) => {
    const fn = typeof handler === "function" ? handler : () => (0, eval)(String(handler));
    let ms = Number(delay) || 0;
    if (ms < 0) ms = 0;
    if (nesting >= NESTING_LEVEL && ms < TIMER_MIN_MS) ms = TIMER_MIN_MS;
    const id = nextId++;
    timers.set(id, { fn, args, ms, repeat, due: pageNow() + ms, level: nesting + 1, seq: id });
    return id;
  };
  const clearTimer = (id) => { timers.delete(Number(id)); };

  // The next timer due at or before `until`, in due order, then in order of creation.
  const nextDue = (until) => {
    let best = null, bestId = 0;
    for (const [id, t] of timers) {
      if (t.due > until) continue;
      if (best === null || t.due < best.due || (t.due === best.due && t.seq < best.seq)) {
        best = t;
        bestId = id;
      }
    }
    return best === null ? null : [bestId, best];
  };

  const fireTimers = (until) => {
    let fired = 0;
    for (let next = nextDue(until); next && fired < MAX_TIMERS_PER_FRAME; next = nextDue(until)) {
      const [id, t] = next;
      const at = t.due;
      if (t.repeat) {
        t.due = at + Math.max(t.ms, TIMER_MIN_MS);
        t.seq = nextId++;
      } else {
        timers.delete(id);
      }
      anchor(at);
      nesting = t.level;
      guarded(t.fn, t.args);
      nesting = 0;
      fired++;
    }
    return fired;
  };

  // Run one frame at page time `at`: the timers due by then, then every rAF callback
  // requested before the frame began, with `at` as their timestamp. Returns the number of
  // the page's callbacks that ran.
  const frame = (at) => {
    fireTimers(at);
    anchor(at);
    const due = frames;
    frames = new Map();
    for (const cb of due.values()) guarded(cb, [at]);
    return due.size;
  };

  const replace = (target, name, value) => {
    Object.defineProperty(target, name, { value, writable: true, configurable: true });
  };
  replace(W, "requestAnimationFrame", requestAnimationFrame);
  replace(W, "cancelAnimationFrame", cancelAnimationFrame);
  replace(W, "setTimeout", function setTimeout(handler, delay, ...args) {
    return addTimer(handler, delay, args, false);
  });
  replace(W, "setInterval", function setInterval(handler, delay, ...args) {
    return addTimer(handler, delay, args, true);
  });
  replace(W, "clearTimeout", function clearTimeout(id) { clearTimer(id); });
  replace(W, "clearInterval", function clearInterval(id) { clearTimer(id); });
  if (typeof W.requestIdleCallback === "function") {
    const idle = { didTimeout: false, timeRemaining: () => 0 };
    replace(W, "requestIdleCallback", function requestIdleCallback(cb) {
      return addTimer(() => cb(idle), 0, [], false);
    });
    replace(W, "cancelIdleCallback", function cancelIdleCallback(id) { clearTimer(id); });
  }
  replace(Performance.prototype, "now", function now() { return pageNow(); });

  const PageDate = function Date(...args) {
    if (!new.target) return new RealDate(epochMs + pageNow()).toString();
    return args.length ? new RealDate(...args) : new RealDate(epochMs + pageNow());
  };
  PageDate.prototype = RealDate.prototype;
  PageDate.now = function now() { return Math.floor(epochMs + pageNow()); };
  PageDate.parse = RealDate.parse;
  PageDate.UTC = RealDate.UTC;
  replace(W, "Date", PageDate);

  const control = Object.freeze({
    FRAME_MS,
    realNow,
    frame,
    pageNow,
    setRate: (r) => { anchor(pageNow()); rate = r; },
  });
  Object.defineProperty(W, "__CLOCK__", { value: control, configurable: true });
})();
