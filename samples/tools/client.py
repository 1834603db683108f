"""Server-side tools and a client-side tool round trip.

Start the server with the sample agent first (see README.md), then:

    python samples/tools/client.py [--base-url http://127.0.0.1:8000]

The embedded model is not an LLM: the `[[call NAME {json}]]` directives in the input tell
it which tools to call, so the run is the same every time.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime
from zoneinfo import ZoneInfo

from openai import OpenAI
from openai.types.responses import FunctionToolParam, Response, ResponseInputParam

MODEL = "embedded"

# A tool the client runs itself: declared in the request, answered with function_call_output.
GET_TIME: FunctionToolParam = {
    "type": "function",
    "name": "get_time",
    "description": "The current time in a time zone.",
    "parameters": {
        "type": "object",
        "properties": {"zone": {"type": "string", "description": "IANA zone, e.g. Asia/Tokyo"}},
        "required": ["zone"],
        "additionalProperties": False,
    },
    "strict": True,
}


def make_client() -> OpenAI:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--base-url", default=os.environ.get("SAMPLES_BASE_URL", "http://127.0.0.1:8000")
    )
    args = parser.parse_args()
    api_key = os.environ.get("SAMPLES_API_KEY", "local")
    return OpenAI(base_url=f"{args.base_url}/v1", api_key=api_key)


def show(response: Response) -> None:
    for item in response.output:
        if item.type == "function_call":
            print(f"  call    {item.name}({item.arguments})")
        elif item.type == "function_call_output":
            print(f"  output  {item.output}")
        elif item.type == "message":
            print(f"  message {response.output_text}")
    print(f"  status  {response.status}")


def server_tools(client: OpenAI) -> None:
    """The server runs `lookup`, then `send_email`, and the model answers: one request."""
    email = {"to": "ada@example.com", "subject": "Forecast", "body": "Sunny in Paris."}
    response = client.responses.create(
        model=MODEL,
        input='Email Ada the Paris forecast. [[call lookup {"city": "Paris"}]] '
        f"[[next]] [[call send_email {json.dumps(email)}]]",
    )
    print("server tools:")
    show(response)


def client_tool(client: OpenAI) -> None:
    """The model calls a tool the server does not have: the turn ends with the call, the
    client runs it and sends the output back in a second request."""
    first = client.responses.create(
        model=MODEL,
        input='What time is it in Tokyo? [[call get_time {"zone": "Asia/Tokyo"}]]',
        tools=[GET_TIME],
    )
    print("client tool, turn 1:")
    show(first)
    outputs: ResponseInputParam = []
    for item in first.output:
        if item.type == "function_call" and item.name == "get_time":
            zone = json.loads(item.arguments)["zone"]
            now = datetime.now(ZoneInfo(zone)).strftime("%H:%M")
            outputs.append({"type": "function_call_output", "call_id": item.call_id, "output": now})
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input=outputs, tools=[GET_TIME]
    )
    print("client tool, turn 2:")
    show(second)


def main() -> None:
    with make_client() as client:
        server_tools(client)
        client_tool(client)


if __name__ == "__main__":
    main()
