"""Steer a running agent from the keyboard, over a WebSocket (`client.responses.connect()`).

    python samples/websocket/client.py [--base-url http://127.0.0.1:8000] [--prompt TEXT]

It asks for a long answer on a socket and prints it as it streams. Every line you type
while it runs is sent as a `response.steer`: the server commits it, says so
(`steer accepted`), stops the answer at the next safe point (`incomplete`, reason
`steered`), and a successor response that was given your line streams next on the same
socket. Type more lines to steer the successor in turn. The program ends when an answer
completes with no steer waiting for it (or at Ctrl-C).

Needs the SDK's WebSocket support: pip install "openai[realtime]".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
from typing import Any

from openai import AsyncOpenAI
from openai.resources.responses.responses import AsyncResponsesConnection

MODEL = "embedded"
# The embedded model echoes these words, 300 of them, 50 ms apart: 15 s to steer it.
PROMPT = "Tell me a long story about a lighthouse keeper [[words 300]] [[delay 50]]"
LANE = "agent"  # the socket's lane (stream_id) that the answers and their successors share


def keyboard(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]) -> None:
    """Read stdin in a thread of its own (a daemon: it never holds the program open);
    None once it is closed."""
    for line in sys.stdin:
        if line.strip():
            loop.call_soon_threadsafe(lines.put_nowait, line.strip())
    loop.call_soon_threadsafe(lines.put_nowait, None)


class Steerer:
    """Prints the events of one socket, and sends each typed line as a steer of the
    answer that is running."""

    def __init__(self, connection: AsyncResponsesConnection) -> None:
        self.connection = connection
        self.current: str | None = None  # the answer streaming now
        self.words = 0  # of the current answer
        self.unanswered = 0  # steers sent, neither accepted nor refused yet
        self.waiting = 0  # steers accepted that no successor has taken yet
        self.mid_line = False
        self.streaming = asyncio.Event()  # an answer has started: lines steer it from now

    def say(self, text: str) -> None:
        if self.mid_line:
            print()
            self.mid_line = False
        print(text, flush=True)

    async def steer(self, text: Any, target: str) -> None:
        self.unanswered += 1
        await self.connection.send(
            {"type": "response.steer", "previous_response_id": target, "input": text}
        )

    async def send_lines(self, lines: asyncio.Queue[str | None]) -> None:
        while (line := await lines.get()) is not None:
            await self.streaming.wait()
            assert self.current is not None
            await self.steer(line, self.current)

    async def run(self, prompt: str) -> None:
        await self.connection.send(
            {"type": "response.create", "model": MODEL, "input": prompt, "stream_id": LANE}
        )
        self.say(f"> {prompt}")
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=keyboard, args=(loop, lines), daemon=True).start()
        sender = asyncio.create_task(self.send_lines(lines))
        try:
            async for event in self.connection:
                if await self.show(event):
                    return
        finally:
            sender.cancel()

    async def show(self, event: Any) -> bool:
        """Print one event; True once the last answer has completed."""
        kind = event.type
        if kind == "response.created":
            self.current, self.words, self.waiting = event.response.id, 0, 0
            after = event.response.previous_response_id
            self.say(
                f"[{event.response.id[-8:]}]" + (f" continues [{after[-8:]}]" if after else "")
            )
        elif kind == "response.output_text.delta":
            self.words += 1
            self.streaming.set()
            print(event.delta, end="", flush=True)
            self.mid_line = True
        elif kind == "response.steer.accepted":
            self.unanswered -= 1
            self.waiting += 1
            self.say(f"steer accepted ({event.steer.id[-8:]})")
        elif kind == "response.steer.failed":
            self.unanswered -= 1
            await self.refused(event)
        elif kind == "response.steer.pending":
            self.say(
                f"steer pending: the answer waits for {len(event.required_input)} tool output(s)"
            )
        elif kind == "error":
            self.say(f"error: {event.error.code}: {event.error.message}")
        elif kind in ("response.incomplete", "response.failed"):
            details = event.response.incomplete_details
            why = f" ({details.reason})" if details else ""
            self.say(f"-- {event.response.status}{why} after {self.words} words")
        elif kind == "response.completed":
            self.say(f"-- completed after {self.words} words")
            return self.waiting == 0 and self.unanswered == 0
        return False

    async def refused(self, event: Any) -> None:
        code, target = event.error.code, event.steer.previous_response_id
        if code in ("response_not_active", "response_already_completed") and (
            self.current not in (None, target)
        ):
            self.say("steer came late: sending it to the answer running now")
            await self.steer(event.steer.input, self.current)  # type: ignore[arg-type]
            return
        self.say(f"steer refused: {code}: {event.error.message}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--base-url", default=os.environ.get("SAMPLES_BASE_URL", "http://127.0.0.1:8000")
    )
    parser.add_argument("--prompt", default=PROMPT)
    args = parser.parse_args()
    api_key = os.environ.get("SAMPLES_API_KEY", "local")
    client = AsyncOpenAI(base_url=f"{args.base_url}/v1", api_key=api_key)
    async with client.responses.connect() as connection:
        await Steerer(connection).run(args.prompt)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the socket closes, nothing else
        asyncio.run(main())
