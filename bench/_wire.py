"""A minimal HTTP/1.1 keep-alive client for the load processes.

It deliberately diverges from httpx: it knows only what Hypercorn sends us
(Content-Length or chunked bodies, SSE over chunked), and costs a fraction of httpx's
CPU per request, so that on a 2-core machine the client is not what limits the numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

MAX_HEADER = 64 * 1024


class HTTPError(Exception):
    """A status or framing the bench did not expect."""


class Connection:
    """One keep-alive connection; requests on it run one at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, limit=MAX_HEADER * 16
            )
        return self._reader, self._writer

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _send(self, method: str, path: str, body: Any) -> asyncio.StreamReader:
        reader, writer = await self._open()
        payload = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
        if body is not None:
            head += f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n"
        writer.write(head.encode() + b"\r\n" + payload)
        await writer.drain()
        return reader

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """Send one request; return (status, body). Reconnects once if the idle
        connection was closed by the server."""
        try:
            reader = await self._send(method, path, body)
            status, headers = await _read_head(reader)
        except (ConnectionError, asyncio.IncompleteReadError):
            await self.close()
            reader = await self._send(method, path, body)
            status, headers = await _read_head(reader)
        data = await _read_body(reader, headers)
        if headers.get("connection") == "close":
            await self.close()
        return status, data

    async def events(self, path: str, body: Any) -> AsyncGenerator[tuple[str, bytes], None]:
        """POST `body` (GET when it is None) and yield (event type, data) of an SSE
        response until it ends. The connection is closed afterwards unless the stream
        ended cleanly."""
        reader = await self._send("GET" if body is None else "POST", path, body)
        status, headers = await _read_head(reader)
        if status != 200:
            data = await _read_body(reader, headers)
            raise HTTPError(f"stream: HTTP {status}: {data[:200]!r}")
        if headers.get("transfer-encoding") != "chunked":
            raise HTTPError("stream: expected a chunked body")
        buffer = b""
        async for chunk in _chunks(reader):
            buffer += chunk
            while b"\n\n" in buffer:
                frame, buffer = buffer.split(b"\n\n", 1)
                kind, data = _parse_frame(frame)
                if kind:
                    yield kind, data
        if headers.get("connection") == "close":  # Hypercorn: every 1,000th response
            await self.close()


def _parse_frame(frame: bytes) -> tuple[str, bytes]:
    kind, data = "", b""
    for line in frame.split(b"\n"):
        if line.startswith(b"event: "):
            kind = line[7:].decode()
        elif line.startswith(b"data: "):
            data = line[6:]
    return kind, data


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise HTTPError(f"bad status line {lines[0]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
    return int(parts[1]), headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding") == "chunked":
        return b"".join([chunk async for chunk in _chunks(reader)])
    return b""


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # no trailers from Hypercorn
            return
        data = await reader.readexactly(size + 2)
        yield data[:-2]
