"""Steering: a second message arrives while a conversation's turn is still streaming.

    python samples/steering/client.py [--base-url http://127.0.0.1:8000]

For each `multitask_strategy` it starts a fresh conversation, streams a long first turn
in a background thread, sends a second message once the first has begun, and prints how
each turn ended and what the conversation holds afterwards:

    reject     the second message is refused (409 conversation_locked); the first finishes
    enqueue    the second waits for the first to finish, then runs
    interrupt  the first stops at once, keeps its partial answer (incomplete: steered);
               the second runs with that partial answer in its history
    rollback   the first stops and is erased from the history (cancelled); the second runs
"""

from __future__ import annotations

import argparse
import os
import threading
from typing import Any

import openai
from openai import OpenAI

MODEL = "embedded"
STRATEGIES = ("reject", "enqueue", "interrupt", "rollback")
LONG = "A long first answer [[words 40]] [[delay 50]]"  # about two seconds of streaming


def make_client() -> OpenAI:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--base-url", default=os.environ.get("SAMPLES_BASE_URL", "http://127.0.0.1:8000")
    )
    args = parser.parse_args()
    api_key = os.environ.get("SAMPLES_API_KEY", "local")
    return OpenAI(base_url=f"{args.base_url}/v1", api_key=api_key)


class FirstTurn(threading.Thread):
    """Streams the first turn, signalling `started` once a few words have arrived."""

    def __init__(self, client: OpenAI, conversation: str) -> None:
        super().__init__()
        self.client, self.conversation = client, conversation
        self.started = threading.Event()
        self.words = 0
        self.ending = "(no terminal event)"

    def run(self) -> None:
        stream = self.client.responses.create(
            model=MODEL, input=LONG, conversation=self.conversation, stream=True
        )
        for event in stream:
            if event.type == "response.output_text.delta":
                self.words += 1
                if self.words == 5:
                    self.started.set()
            elif event.type in ("response.completed", "response.incomplete", "response.failed"):
                # a cancelled (rolled back) turn ends with response.failed, status cancelled
                details = event.response.incomplete_details
                reason = f" ({details.reason})" if details else ""
                self.ending = f"{event.response.status}{reason}"
        self.started.set()


def history(client: OpenAI, conversation: str) -> str:
    items: list[Any] = list(client.conversations.items.list(conversation, order="asc"))
    parts = []
    for item in items:
        if item.type == "message":
            words = sum(len(getattr(c, "text", "").split()) for c in item.content)
            parts.append(f"{item.role}({words} words)")
    return ", ".join(parts)


def steer(client: OpenAI, strategy: str) -> None:
    conversation = client.conversations.create().id
    first = FirstTurn(client, conversation)
    first.start()
    first.started.wait(timeout=30)
    try:
        second = client.responses.create(
            model=MODEL,
            input="Second message [[words 3]]",
            conversation=conversation,
            extra_body={"multitask_strategy": strategy},
        )
        outcome = f"{second.status}: {second.output_text}"
    except openai.APIStatusError as exc:
        outcome = f"refused, {exc.status_code} {exc.code}"
    first.join(timeout=60)
    print(f"{strategy}:")
    print(f"  first turn:   {first.ending} after {first.words} streamed words")
    print(f"  second turn:  {outcome}")
    print(f"  conversation: {history(client, conversation)}")


def main() -> None:
    with make_client() as client:
        for strategy in STRATEGIES:
            steer(client, strategy)


if __name__ == "__main__":
    main()
