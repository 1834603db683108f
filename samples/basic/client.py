"""Three ways to get a response: foreground, streaming, and background with polling.

python samples/basic/client.py [--base-url http://127.0.0.1:8000]
"""

from __future__ import annotations

import argparse
import os
import time

from openai import OpenAI

MODEL = "embedded"  # passed through to the server; the embedded model ignores it


def make_client() -> OpenAI:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--base-url", default=os.environ.get("SAMPLES_BASE_URL", "http://127.0.0.1:8000")
    )
    args = parser.parse_args()
    api_key = os.environ.get("SAMPLES_API_KEY", "local")  # any value while the server is open
    return OpenAI(base_url=f"{args.base_url}/v1", api_key=api_key)


def foreground(client: OpenAI) -> None:
    # The request returns when the response is finished.
    response = client.responses.create(model=MODEL, input="Hello durable world [[words 6]]")
    print(f"foreground: {response.status}: {response.output_text}")


def streaming(client: OpenAI) -> None:
    # Server-sent events as the model produces them.
    stream = client.responses.create(
        model=MODEL, input="Streaming one word at a time [[words 8]]", stream=True
    )
    print("streaming: ", end="", flush=True)
    for event in stream:
        if event.type == "response.output_text.delta":
            print(event.delta, end="", flush=True)
        elif event.type == "response.completed":
            print(f"\nstreaming: {event.response.status} after {event.sequence_number + 1} events")


def background(client: OpenAI) -> None:
    # The request returns at once; the server runs (and persists) the response on its own.
    response = client.responses.create(
        model=MODEL, input="Take your time [[words 10]] [[delay 100]]", background=True
    )
    seen = [response.status]
    while response.status in ("queued", "in_progress"):
        time.sleep(0.2)
        response = client.responses.retrieve(response.id)
        if response.status != seen[-1]:
            seen.append(response.status)
    print(f"background: {' -> '.join(str(s) for s in seen)}: {response.output_text}")


def main() -> None:
    with make_client() as client:
        foreground(client)
        streaming(client)
        background(client)


if __name__ == "__main__":
    main()
