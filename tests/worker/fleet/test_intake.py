"""A worker stops taking work while any reason holds, and a slow link is one."""

from __future__ import annotations

from worker.fleet.intake import SLOW_FLOOR_MS, Intake, on_slow_link


class _Control:
    """Records the remote-control commands sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def cancel_consumer(self, queue: str, **kwargs: object) -> object:
        assert kwargs["destination"] == ["w@h"]
        self.calls.append(("cancel", queue))
        return None

    def add_consumer(self, queue: str, **kwargs: object) -> object:
        assert kwargs["destination"] == ["w@h"]
        self.calls.append(("add", queue))
        return None


def test_a_worker_takes_work_again_only_once_no_reason_holds() -> None:
    # Given a worker that consumes two queues
    control = _Control()
    intake = Intake(control)
    intake.bind("w@h", ["sessions", "verify"])
    # When two reasons stop it, one after the other
    assert intake.pause("database unreachable")
    assert not intake.pause("slow link")
    # Then it stopped consuming once
    assert control.calls == [("cancel", "sessions"), ("cancel", "verify")]
    # When one reason is over, Then it still takes no work
    assert not intake.resume("database unreachable")
    assert intake.paused == {"slow link"}
    # When the other is over too, Then it consumes both queues again
    assert intake.resume("slow link")
    assert control.calls[2:] == [("add", "sessions"), ("add", "verify")]
    # and a reason that never held changes nothing
    assert not intake.resume("slow link")
    assert len(control.calls) == 4


def test_a_slow_link_is_one_far_slower_than_the_fleet_s() -> None:
    # A worker alone is never slow; nor is one as slow as the rest (a fleet under load)
    assert not on_slow_link(500.0, [])
    assert not on_slow_link(500.0, [400.0, 600.0])
    # One far slower than the others is
    assert on_slow_link(200.0, [0.5, 0.7])
    # while a worker whose own loop runs behind by tens of milliseconds is not
    assert not on_slow_link(60.0, [0.5, 0.7])
    # but a few milliseconds are never slow, however fast the others
    assert not on_slow_link(SLOW_FLOOR_MS - 1, [0.1, 0.1])
