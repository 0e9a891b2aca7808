"""Run by ``test_leases.py`` in a process of its own: gevent patches the standard library
first, as on a worker of a green pool. Holds a lease while one greenlet keeps the loop busy
for ``BUSY_S`` without yielding, and prints how many renewals ran (and renewed the lease)
in that time."""

from gevent import monkey

monkey.patch_all()

import sys  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime  # noqa: E402

from sqlalchemy import create_engine, update  # noqa: E402

from worker.fleet.leases import LeaseKeeper  # noqa: E402
from worker.store.tables import sessions  # noqa: E402

BUSY_S = 1.5
RENEW_S = 0.1


def main(url: str, session_id: int) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            update(sessions)
            .where(sessions.c.id == session_id)
            .values(lease_owner="green:1", lease_epoch=1, lease_expires_at=datetime.now(UTC))
        )
    keeper = LeaseKeeper(
        engine=engine, owner="green:1", ttl_s=60, renew_s=RENEW_S, clock=lambda: datetime.now(UTC)
    )
    renewed: list[tuple[float, int]] = []
    renew = keeper.renew

    def counted() -> int:
        rows = renew()
        renewed.append((time.monotonic(), rows))
        return rows

    keeper.renew = counted  # type: ignore[method-assign]
    with keeper.hold(session_id, 1):
        # A greenlet that never yields, as a saturated worker's turns look to the loop
        started = time.monotonic()
        while time.monotonic() - started < BUSY_S:
            pass
        busy_until = time.monotonic()
    keeper.stop()
    during = [rows for at, rows in renewed if at < busy_until]
    print(len(during), sum(during))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
