"""The in-page probe: an init script that watches an artifact from inside its own page.

Installed with ``context.add_init_script`` so it runs before any of the artifact's scripts.
It starts with ``clock.js``, the controlled clock that replaces the page's
``requestAnimationFrame``, timers, ``performance.now`` and ``Date`` (see
:mod:`verifier.chromium.clock`), which hands its controls to the probe and to no one else.
The probe wraps the other APIs the verifier cares about, keeping references to the
originals so the artifact cannot disturb the measurement by replacing them later:

* ``HTMLCanvasElement.getContext``: counts ``'2d'`` contexts and remembers them for hashing;
* ``CanvasRenderingContext2D`` drawing methods: counts draw calls;
* ``console``: its methods write nothing; ``console.error`` texts are kept for the report
  (a page logging in a tight loop would otherwise flood DevTools, the driver and the
  verifier, and hold up every artifact after it);
* ``window.open``: recorded and refused (returns ``null``, as a popup blocker does);
* ``WebSocket`` / ``EventSource`` / ``RTCPeerConnection``: recorded, then the constructor
  throws a ``NetworkError`` ``DOMException`` so no socket is ever attempted;
* ``clearRect``/``fillRect`` that cover the whole canvas but for a fraction of a pixel
  (a clear in CSS pixels): widened to the exact canvas, so Chromium drops the drawing of the
  frames they hide instead of rasterising every stepped frame (``save``/``restore``/``clip``
  are tracked to leave clipped clears alone; only a canvas's first two clears or fills of
  each frame are looked at, so that the many fills of a chart cost no more than they do);
* trusted input events (:data:`INPUT_EVENTS`): stopped in the capture phase on ``window``
  before any handler of the page sees them, and counted, so no pointer or key can start or
  drive the page (headless Chromium moves its pointer to (0,0) just after load); the input
  events the page listens for are recorded.

``window.__swarmProbe`` offers ``step(count, rate, budgetMs, sampleAt)``, which steps up
to ``count`` frames of page time and returns each frame's real cost and how many of the
page's rAF callbacks ran, hashing every canvas of at least 16x16 pixels after the frames
named in ``sampleAt`` (and letting the page's other tasks run there); ``bench(runs)``, a
fixed piece of work whose CPU time calibrates frame costs; ``sample()``, the canvases' hash
now; and ``summary()``, what the page did besides frames (contexts, canvas size, input,
popups, sockets, handlers that run when the document is left).

The scripts are ``clock.js`` and ``probe.js``, next to this module, so JavaScript tools can
check them. Their ``__NAME__`` markers (``__GLOBAL__``, ``__CLOCK__``, ``__DRAWS__``,
``__SOCKETS__``, ``__INPUTS__``, ``__LEAVES__``; the
placeholder dialect of ``worker.tasks.dashboard.pages``) are plain JS identifiers or string
contents, so the file parses as it stands; they are filled in here, once per process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from importlib.resources import files

from verifier.chromium.clock import clock_script

#: Name of the global the probe exposes (non-writable, non-enumerable).
PROBE_GLOBAL = "__swarmProbe"
#: Name of the global through which the clock hands itself to the probe (deleted at once).
CLOCK_GLOBAL = "__swarmClock"

#: Canvas drawing and path methods whose calls count as draw calls.
DRAW_METHODS = (
    "fillRect",
    "strokeRect",
    "fill",
    "stroke",
    "drawImage",
    "fillText",
    "strokeText",
    "putImageData",
    "arc",
    "arcTo",
    "ellipse",
    "lineTo",
    "bezierCurveTo",
    "quadraticCurveTo",
    "rect",
    "roundRect",
)

#: Constructors that would open a socket; the probe records and refuses them.
SOCKET_CONSTRUCTORS = ("WebSocket", "EventSource", "RTCPeerConnection", "webkitRTCPeerConnection")

#: Input events kept from the page while it is judged (trusted ones only: events the page
#: dispatches itself are its own doing).
INPUT_EVENTS = (
    *("mousemove", "mousedown", "mouseup", "mouseover", "mouseout", "mouseenter", "mouseleave"),
    *("click", "dblclick", "contextmenu", "wheel"),
    *("pointermove", "pointerdown", "pointerup", "pointerover", "pointerout", "pointerenter"),
    *("pointerleave", "pointercancel", "pointerrawupdate"),
    *("touchstart", "touchmove", "touchend", "touchcancel", "keydown", "keyup", "keypress"),
)

#: Events that run the page's handlers when its document is left; the probe records the
#: ones it listens for, and a tab whose artifact did is not reused (see ``page.py``).
LEAVE_EVENTS = ("unload", "pagehide", "beforeunload", "visibilitychange")

_PLACEHOLDER = re.compile(r"__([A-Z][A-Z0-9]*)__")


@cache
def _probe_template() -> str:
    """The text of ``probe.js``, read once per process."""
    return (files(__package__) / "probe.js").read_text(encoding="utf-8")


def _fill(template: str, values: Mapping[str, str]) -> str:
    """Replace every ``__NAME__`` marker in ``template`` with ``values[NAME]``, in one pass.

    Raises:
        KeyError: ``template`` has a marker that ``values`` does not name.
    """
    return _PLACEHOLDER.sub(lambda match: values[match[1]], template)


_VALUES = {
    "GLOBAL": PROBE_GLOBAL,
    "CLOCK": CLOCK_GLOBAL,
    "DRAWS": json.dumps(list(DRAW_METHODS)),
    "SOCKETS": json.dumps(list(SOCKET_CONSTRUCTORS)),
    "INPUTS": json.dumps(list(INPUT_EVENTS)),
    "LEAVES": json.dumps(list(LEAVE_EVENTS)),
}

#: The init script, the clock first; install it with
#: ``context.add_init_script(script=PROBE_JS)``.
PROBE_JS = _fill(clock_script(), _VALUES) + "\n" + _fill(_probe_template(), _VALUES)
