"""The in-page probe: an init script that watches an artifact from inside its own page.

Installed with ``context.add_init_script`` so it runs before any of the artifact's scripts.
It wraps the APIs the verifier cares about, keeping references to the originals so the
artifact cannot disturb the measurement by replacing them later:

* ``requestAnimationFrame``: counts the page's callbacks and the frames they ran in;
* ``HTMLCanvasElement.getContext``: counts ``'2d'`` contexts and remembers them for hashing;
* ``CanvasRenderingContext2D`` drawing methods: counts draw calls;
* ``window.open``: recorded and refused (returns ``null``, as a popup blocker does);
* ``WebSocket`` / ``EventSource`` / ``RTCPeerConnection``: recorded, then the constructor
  throws a ``NetworkError`` ``DOMException`` so no socket is ever attempted;
* trusted input events (:data:`INPUT_EVENTS`): stopped in the capture phase on ``window``
  before any handler of the page sees them, and counted, so no pointer or key can start or
  drive the page (headless Chromium moves its pointer to (0,0) just after load); the input
  events the page listens for are recorded.

``window.__swarmProbe.measure(warmupMs, judgedMs, lateMs, hashEveryMs, changeSpanMs)``
waits out the warm-up, then runs its own rAF loop for ``judgedMs`` to count display frames,
hashing every canvas of at least 16x16 pixels every ``hashEveryMs``. It returns the counts
over the whole judged time and over its last ``lateMs`` (the late window), when the page's
loop last ran and a canvas last changed (milliseconds after load), and whether any canvas
changed between two hashes in the last ``changeSpanMs``, as a plain object (see :data:`PROBE_JS`).

The script itself is ``probe.js``, next to this module, so JavaScript tools can check it. Its
``__NAME__`` markers (``__GLOBAL__``, ``__DRAWS__``, ``__SOCKETS__``, ``__INPUTS__``; the
placeholder dialect of ``worker.tasks.dashboard.pages``) are plain JS identifiers or string
contents, so the file parses as it stands; they are filled in here, once per process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from importlib.resources import files

#: Name of the global the probe exposes (non-writable, non-enumerable).
PROBE_GLOBAL = "__swarmProbe"

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


#: The init script; install it with ``context.add_init_script(script=PROBE_JS)``.
PROBE_JS = _fill(
    _probe_template(),
    {
        "GLOBAL": PROBE_GLOBAL,
        "DRAWS": json.dumps(list(DRAW_METHODS)),
        "SOCKETS": json.dumps(list(SOCKET_CONSTRUCTORS)),
        "INPUTS": json.dumps(list(INPUT_EVENTS)),
    },
)

#: Call that runs the in-page measurement; takes
#: ``[warmup_ms, judged_ms, late_ms, hash_every_ms, change_span_ms]``.
MEASURE_CALL = f"(args) => window.{PROBE_GLOBAL}.measure(...args)"
