"""A TCP forwarder whose link can be made slow: ``python -m tests.chaos.link``.

This machine's kernel has no ``netem`` queueing discipline, so a host of the bed gets its
delay from here: every byte it sends to a service, and every byte back, is held for the
delay named in a control file (read every :data:`READ_EVERY_S` seconds; empty or absent:
none) before it is passed on, in order, without limiting throughput. Each forwarder writes
the delay it holds bytes for to a file of its own (:func:`held_path`), so that whoever
changed the control file can tell when the link is as slow as asked. Loss is the
kernel's: :meth:`tests.chaos.hosts.Host.slow_link` drops a share of the host's packets
with nftables, and TCP retransmits them as it would on a lossy link.

    python -m tests.chaos.link LISTEN_HOST:PORT TARGET_HOST:PORT CONTROL_FILE
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

#: Seconds between two reads of the control file.
READ_EVERY_S = 0.2
#: Bytes read at once from either side.
CHUNK = 65536


def held_path(control: Path, port: int) -> Path:
    """Where the forwarder listening on ``port`` writes the delay it follows: the control
    file's text, once it holds bytes for that long."""
    return control.with_name(f"{control.name}.{port}")


class Delay:
    """The one-way delay, as the control file says."""

    def __init__(self, control: Path, held: Path) -> None:
        self.control = control
        self.held = held
        self.s = 0.0
        self._text: str | None = None

    async def follow(self) -> None:
        """Re-read the control file for as long as the forwarder runs."""
        while True:
            with contextlib.suppress(OSError, ValueError):
                text = self.control.read_text().strip()
                if text != self._text:
                    self.s = float(text) / 1000 if text else 0.0
                    self.held.write_text(text)
                    self._text = text
            await asyncio.sleep(READ_EVERY_S)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: Delay) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` after it was read."""
    loop = asyncio.get_running_loop()
    held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def release() -> None:
        while True:
            due, data = await held.get()
            if not data:
                break
            await asyncio.sleep(max(due - loop.time(), 0.0))
            writer.write(data)
            await writer.drain()

    releaser = asyncio.create_task(release())
    try:
        while data := await reader.read(CHUNK):
            held.put_nowait((loop.time() + delay.s, data))
    finally:
        held.put_nowait((0.0, b""))
        with contextlib.suppress(ConnectionError):
            await releaser
        writer.close()


async def _serve(listen: str, target: str, control: Path) -> None:
    host, _, port = listen.rpartition(":")
    delay = Delay(control, held_path(control, int(port)))
    to_host, _, to_port = target.rpartition(":")

    async def connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(to_host, int(to_port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            _pipe(reader, up_writer, delay), _pipe(up_reader, writer, delay), return_exceptions=True
        )

    server = await asyncio.start_server(connect, host, int(port), reuse_address=True)
    follower = asyncio.create_task(delay.follow())
    async with server:
        print("listening", flush=True)
        await server.serve_forever()
    follower.cancel()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m tests.chaos.link LISTEN_HOST:PORT TARGET_HOST:PORT CONTROL_FILE")
        return 2
    asyncio.run(_serve(argv[0], argv[1], Path(argv[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
