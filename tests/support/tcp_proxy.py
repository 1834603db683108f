"""A loopback TCP proxy that a test can cut: every connection through it drops at once
and new ones are refused, until it is restored. It stands for a network partition or a
database server that went away, without touching the server itself. It can also stall
the connections open now (a half-open link: they stay open and carry nothing more),
while new ones pass."""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._stalled: set[asyncio.StreamWriter] = set()
        self._cut = False
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def cut(self) -> None:
        """Drop every connection now (as a reset) and refuse new ones."""
        self._cut = True
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    def stall(self) -> None:
        """From now on, drop whatever the connections open now send, either way."""
        self._stalled |= self._open

    def restore(self) -> None:
        self._cut = False

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._open |= {writer, up_writer}
        try:
            await asyncio.gather(
                _pipe(reader, up_writer, self._stalled), _pipe(up_reader, writer, self._stalled)
            )
        finally:
            for each in (writer, up_writer):
                self._open.discard(each)
                each.transport.abort()


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stalled: set[asyncio.StreamWriter]
) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            if writer in stalled:
                continue
            writer.write(data)
            await writer.drain()
    writer.transport.abort()
