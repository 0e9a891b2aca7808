"""kombu's Redis transport, with a channel that closes quietly once its connection is gone.

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
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

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


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel
