"""kombu's Redis transport, with a channel that closes quietly once its connection is gone
and a consumer that reads its queue again as soon as it has room.

On losing the broker, Celery 5.7's consumer first collects its connection, which drops the
transport's client, and then closes it. Closing the channel hands the messages it holds
unacknowledged back to their queues through a client built from that dropped connection,
and kombu's Redis channel fails there with ``AttributeError: 'NoneType' object has no
attribute 'hostname'``. The consumer ignores only connection errors, so the worker stops
("Unrecoverable error"). It is kombu's issue celery/kombu#582, reached again by the close
that Celery 5.7 added after the collect in ``on_connection_error_after_connected``; a
restart of Redis stopped one worker in two that held messages.

This channel raises the transport's own connection error there instead, which the close
ignores like the lost connection it is. The messages stay in the unacknowledged hash,
where a restarted Redis has lost them anyway and the reconciler sends again what is due.
A worker's supervisor (systemd's ``Restart=always``, compose's ``restart``) stays the
second line.

A green worker reserves no more messages than it has task slots (Celery's
``worker_disable_prefetch``): a message it read while every slot was busy would wait for a
whole turn to end while another worker had a slot free. Without room its consumer stops
reading the queue, and kombu's loop, which has no timer on a green pool, would look again
only once its wait for the remote control's channel ran out (two seconds): the poller here
looks again every :data:`NO_ROOM_RECHECK_S` while a channel has no room.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

#: How often a consumer without room to take a message checks whether it has some.
NO_ROOM_RECHECK_S = 0.05

#: Where kombu finds this transport.
TRANSPORT = f"{__name__}:Transport"


def install() -> None:
    """Make this transport the one kombu's ``redis://`` URLs name.

    Naming it in ``broker_transport`` instead would make the connection's URL name the
    class, which Flower's broker page, among others, does not know.
    """
    TRANSPORT_ALIASES["redis"] = TRANSPORT


class Channel(kombu_redis.Channel):
    """A Redis channel whose connection parameters fail as a connection error once the
    connection is gone."""

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection was closed")
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[no-untyped-call]
        return params


class Poller(kombu_redis.MultiChannelPoller):
    """kombu's poller of a connection's channels, which waits at most
    :data:`NO_ROOM_RECHECK_S` while a channel that consumes has no room for a message."""

    def get(self, callback: Any, timeout: float | None = None) -> Any:
        if timeout is None or timeout > NO_ROOM_RECHECK_S:
            for channel in self._channels:
                if channel.active_queues and not channel.qos.can_consume():
                    timeout = NO_ROOM_RECHECK_S
                    break
        return super().get(callback, timeout)  # type: ignore[no-untyped-call]


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel` and :class:`Poller`."""

    Channel = Channel

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        # kombu annotates ``cycle`` as its virtual transport's FairCycle; Redis's is a poller.
        self.cycle = Poller()  # type: ignore[no-untyped-call,assignment]
