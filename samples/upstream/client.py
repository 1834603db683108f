"""Ask the tools agent a question that a real model answers with the `lookup` tool.

    python samples/upstream/client.py [--base-url http://127.0.0.1:8000] [--model NAME]
                                      [--prompt TEXT]

The client does not know or care which model the server uses: the server decides that
from its own configuration (--upstream-base-url, see README.md).
"""

from __future__ import annotations

import argparse
import os

from openai import OpenAI

PROMPT = "What is the weather in Paris today? Use the lookup tool, then answer in one sentence."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--base-url", default=os.environ.get("SAMPLES_BASE_URL", "http://127.0.0.1:8000")
    )
    parser.add_argument(
        "--model",
        default=os.environ.get("SAMPLES_MODEL", "default"),
        help="sent as the request's model; the server's --upstream-model overrides it",
    )
    parser.add_argument("--prompt", default=PROMPT)
    args = parser.parse_args()
    api_key = os.environ.get("SAMPLES_API_KEY", "local")
    with OpenAI(base_url=f"{args.base_url}/v1", api_key=api_key) as client:
        stream = client.responses.create(model=args.model, input=args.prompt, stream=True)
        for event in stream:
            if event.type == "response.output_item.done":
                item = event.item
                if item.type == "function_call":
                    print(f"[server tool call] {item.name}({item.arguments})")
                elif item.type == "function_call_output":
                    print(f"[server tool output] {item.output}")
            elif event.type == "response.output_text.delta":
                print(event.delta, end="", flush=True)
            elif event.type in ("response.completed", "response.incomplete", "response.failed"):
                response = event.response
                usage = response.usage
                tokens = f", {usage.input_tokens} in / {usage.output_tokens} out" if usage else ""
                error = f": {response.error.message}" if response.error else ""
                print(f"\n[{response.status}{error}{tokens}]")


if __name__ == "__main__":
    main()
