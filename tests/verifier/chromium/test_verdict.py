"""Browser reports become checks with values and repair hints; verdicts serialise."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from verifier.chromium.judge import FRAME_BUDGET_MS, Verdict, browser_checks, judge
from verifier.chromium.page import BrowserReport

HEALTHY = BrowserReport(
    measured=True,
    window_s=5.0,
    fps=60.0,
    callbacks_per_s=60.0,
    script_ms_per_frame=2.5,
    own_loop_share=1.0,
    display_frames=300,
    page_frames=300,
    draw_calls=900,
    contexts_2d=1,
    canvas_size=(1280, 800),
    canvas_changed=True,
    errors=(),
    blocked_requests=(),
    window_opens=(),
    popups=(),
    sockets=(),
    crashed=False,
    screenshot_png=b"\x89PNG...",
    screenshot_blank=False,
    elapsed_s=6.1,
    late_window_s=0.5,
    late_fps=60.0,
    late_display_frames=30,
    late_share=1.0,
    early_share=1.0,
    last_frame_s=5.49,
    change_span_s=1.0,
    canvas_changed_late=True,
    last_change_s=5.5,
    judged_until_s=5.5,
    watched_until_s=5.5,
    inputs_blocked=4,
    input_listeners=(),
    frame_ms_p95=3.0,
    frame_ms_p95_here=3.0,
)

#: What a page whose loop stopped 3.9 s after load reports.
STOPPED = {
    "late_fps": 0.0,
    "late_share": 0.0,
    "last_frame_s": 3.9,
    "canvas_changed_late": False,
    "last_change_s": 4.0,
}
#: What a page whose loop waits for a mousemove reports.
WAITS_FOR_INPUT = {
    "fps": 0.0,
    "page_frames": 0,
    "own_loop_share": 0.0,
    "late_fps": 0.0,
    "late_share": 0.0,
    "early_share": 0.0,
    "last_frame_s": None,
    "canvas_changed": False,
    "canvas_changed_late": False,
    "last_change_s": None,
    "input_listeners": ("mousemove",),
}


def make_report(**overrides: Any) -> BrowserReport:
    """A report of a healthy page, with ``overrides`` applied."""
    return dataclasses.replace(HEALTHY, **overrides)


def failing(report: BrowserReport, **kwargs: Any) -> dict[str, Any]:
    return {c.name: c for c in browser_checks(report, **kwargs) if not c.passed}


def test_healthy_report_passes_every_check() -> None:
    checks = browser_checks(HEALTHY)
    assert [c.name for c in checks] == [
        "fps",
        "frame_cost",
        "own_loop_share",
        "loop_keeps_running",
        "canvas_changes",
        "no_page_errors",
        "no_blocked_requests",
        "no_popups",
        "no_sockets",
        "screenshot_not_blank",
    ]
    assert all(c.passed for c in checks)


@pytest.mark.parametrize(
    ("overrides", "name", "value", "hint"),
    [
        ({"fps": 12.34, "page_frames": 68, "own_loop_share": 1.0}, "fps", 12.3, "offered 60"),
        ({"frame_ms_p95": 31.26}, "frame_cost", 31.3, "more than a 60 Hz frame allows"),
        ({"fps": 9.0, "page_frames": 18, "own_loop_share": 1.0}, "fps", 9.0, "throttling"),
        ({"fps": 0.0, "page_frames": 0, "own_loop_share": 1.0}, "fps", 0.0, "never ran"),
        ({"own_loop_share": 0.5}, "own_loop_share", 0.5, "inside every frame callback"),
        (
            {"canvas_changed": False, "canvas_changed_late": False},
            "canvas_changes",
            False,
            "1280x800",
        ),
        (
            {"canvas_changed": False, "canvas_changed_late": False, "canvas_size": None},
            "canvas_changes",
            False,
            "<canvas>",
        ),
        (
            {"canvas_changed_late": False, "last_change_s": 2.5},
            "canvas_changes",
            False,
            "stopped changing 2.5 s after load",
        ),
        (
            {"late_fps": 12.0, "late_share": 0.2, "early_share": 1.0},
            "loop_keeps_running",
            12.0,
            "only 20% of display frames, down from 100%",
        ),
        ({"errors": ("TypeError: x",)}, "no_page_errors", ["TypeError: x"], "TypeError: x"),
        ({"blocked_requests": ("https://a.test/x.js",)}, "no_blocked_requests", None, "inline"),
        ({"sockets": ("WebSocket wss://a.test",)}, "no_sockets", None, "simulate"),
        ({"popups": ("https://a.test/",)}, "no_popups", None, "window.open"),
        ({"screenshot_blank": True}, "screenshot_not_blank", False, "flat colour"),
        ({"screenshot_png": None, "screenshot_blank": None}, "screenshot_not_blank", False, "hung"),
    ],
)
def test_each_defect_fails_one_check_with_a_hint(
    overrides: dict[str, Any], name: str, value: object, hint: str
) -> None:
    # Given a report with one defect
    # When it is turned into checks
    failed = failing(make_report(**overrides))
    # Then exactly that check fails, carrying the value and a hint naming the fix
    assert list(failed) == [name]
    if value is not None:
        assert failed[name].value == value
    assert hint in failed[name].detail


def test_unmeasured_page_points_at_the_error() -> None:
    report = make_report(
        measured=False,
        window_s=0.0,
        fps=0.0,
        callbacks_per_s=0.0,
        own_loop_share=0.0,
        display_frames=0,
        page_frames=0,
        canvas_size=None,
        canvas_changed=False,
        late_fps=0.0,
        late_display_frames=0,
        late_share=0.0,
        early_share=0.0,
        last_frame_s=None,
        canvas_changed_late=False,
        last_change_s=None,
        judged_until_s=0.0,
        watched_until_s=0.0,
        errors=("The page stopped responding: its main thread stayed busy.",),
        screenshot_png=None,
        screenshot_blank=None,
    )
    failed = failing(report)
    assert list(failed) == [
        "fps",
        "own_loop_share",
        "loop_keeps_running",
        "canvas_changes",
        "no_page_errors",
        "screenshot_not_blank",
    ]
    for name in ("fps", "own_loop_share", "loop_keeps_running", "canvas_changes"):
        assert "see no_page_errors" in failed[name].detail


def test_a_loop_that_stops_says_it_stopped_and_when() -> None:
    # Given a page whose loop ran at 60 fps and stopped 3.9 s after load
    report = make_report(fps=41.0, page_frames=205, **STOPPED)
    # When it is judged
    failed = failing(report)
    # Then the loop and the canvas fail, saying when it stopped, and nothing blames timers
    assert list(failed) == ["loop_keeps_running", "canvas_changes"]
    assert failed["loop_keeps_running"].value == 0.0
    assert "stopped 3.9 s after load" in failed["loop_keeps_running"].detail
    assert "loop stopped at 3.9 s" in failed["canvas_changes"].detail
    for check in failed.values():
        assert "setTimeout" not in check.detail and "setInterval" not in check.detail


def test_a_loop_that_stops_early_fails_fps_with_the_stop_as_reason() -> None:
    report = make_report(fps=11.0, page_frames=55, **STOPPED)
    failed = failing(report)
    assert list(failed) == ["fps", "loop_keeps_running", "canvas_changes"]
    assert "because it stopped 3.9 s after load" in failed["fps"].detail
    assert "timers" not in failed["fps"].detail


def test_a_page_that_waits_for_input_is_told_it_needs_input() -> None:
    failed = failing(make_report(**WAITS_FOR_INPUT))
    assert list(failed) == ["fps", "own_loop_share", "loop_keeps_running", "canvas_changes"]
    for check in failed.values():
        assert "waits for input (it listens for mousemove)" in check.detail
        assert "setTimeout" not in check.detail


def test_a_machine_slowing_down_late_is_not_the_loop_stopping() -> None:
    # the display and the page's loop both ran at 20 fps late, after 60 fps before
    assert not failing(make_report(late_fps=20.0, late_share=1.0, early_share=1.0))


def test_input_listeners_alone_are_no_fault() -> None:
    assert not failing(make_report(input_listeners=("mousemove", "click")))


def test_undecidable_screenshot_is_not_held_against_the_page() -> None:
    assert not failing(make_report(screenshot_blank=None))


def test_min_fps_is_a_parameter() -> None:
    assert "fps" in failing(make_report(fps=45.0), min_fps=50.0)
    assert not failing(make_report(fps=45.0), min_fps=40.0)


def test_without_a_browser_only_static_checks_run() -> None:
    # Given a page that passes the static checks, judged without a browser
    html = "<canvas></canvas><script>c.getContext('2d'); requestAnimationFrame(f)</script>"
    verdict = judge(html, browser=None)
    # Then the verdict rests on the static checks alone
    assert verdict.passed
    assert [c.name for c in verdict.checks] == ["size", "canvas_2d", "raf_loop", "no_external_url"]
    assert verdict.fps is None


def test_verdict_json_round_trip() -> None:
    verdict = Verdict(
        passed=False,
        checks=browser_checks(make_report(blocked_requests=("https://a.test/x",))),
        fps=60.0,
        screenshot_png=b"png",
    )
    data = json.loads(verdict.to_json())
    assert data["passed"] is False
    assert data["fps"] == 60.0
    assert set(data) == {"passed", "checks", "fps", "sandbox"}
    blocked = next(c for c in data["checks"] if c["name"] == "no_blocked_requests")
    assert blocked == {
        "name": "no_blocked_requests",
        "passed": False,
        "value": ["https://a.test/x"],
        "detail": blocked["detail"],
    }
    assert verdict.failed == ["no_blocked_requests"]
    assert data == verdict.to_dict()


@pytest.mark.parametrize(
    ("p95_ms", "ok"),
    [(0.4, True), (FRAME_BUDGET_MS - 0.1, True), (FRAME_BUDGET_MS + 0.1, False), (30.0, False)],
)
def test_frame_cost_must_fit_a_60_hz_frame_on_the_reference_machine(
    p95_ms: float, ok: bool
) -> None:
    # Given a page whose 95th-percentile frame costs p95_ms on the reference machine
    report = make_report(frame_ms_p95=p95_ms)
    # When it is judged
    check = next(c for c in browser_checks(report) if c.name == "frame_cost")
    # Then it passes exactly when that fits a 60 Hz frame, and says so with the figure
    assert check.passed is ok
    assert check.value == round(p95_ms, 1)
    assert f"{round(p95_ms, 1):g} ms" in check.detail


def test_a_page_whose_loop_never_ran_has_no_frame_cost_to_fail() -> None:
    # the fps check says what is wrong with it; frame_cost has nothing to measure
    report = make_report(frame_ms_p95=0.0, **WAITS_FOR_INPUT)
    check = next(c for c in browser_checks(report) if c.name == "frame_cost")
    assert check.passed
    assert "no frame cost" in check.detail


class _ReportingBrowser:
    """Stands in for the browser: every measurement returns the same report."""

    def __init__(self, report: BrowserReport) -> None:
        self.report = report

    def measure(self, html: str) -> BrowserReport:
        return self.report


def test_a_measurement_is_judged_as_measured_however_busy_the_machine(
    page_html: Callable[[str], str],
) -> None:
    # Given a measurement of a page whose loop ran at 15 fps of page time
    report = make_report(fps=15.0, page_frames=83)
    browser: Any = _ReportingBrowser(report)
    # When it is judged, it is judged once: no load on the host excuses it any more
    verdict = judge(page_html("good.html"), browser=browser, min_fps=30.0)
    assert (verdict.passed, verdict.failed, verdict.fps) == (False, ["fps"], 15.0)
