"""Structured outputs with `client.responses.parse`: a pydantic model as the answer's
type, after a server-side tool ran, streamed and not.

Start the server with the tools sample's agent first (see README.md), then:

    python samples/structured/client.py [--base-url http://127.0.0.1:8000]

The embedded model is not an LLM: the `[[call NAME {json}]]` directive in the input tells
it to call `lookup`, and under a JSON schema it answers the smallest valid instance of
the schema, so the run is the same every time. On an upstream model the same code gets
the model's own answer, in the same type.
"""

from __future__ import annotations

import argparse
import os

from openai import OpenAI
from pydantic import BaseModel

MODEL = "embedded"
QUESTION = 'Is it sunny in Paris? [[call lookup {"city": "Paris"}]]'


class Forecast(BaseModel):
    city: str
    sunny: bool
    temperature_c: int


def make_client() -> OpenAI:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--base-url", default=os.environ.get("SAMPLES_BASE_URL", "http://127.0.0.1:8000")
    )
    args = parser.parse_args()
    api_key = os.environ.get("SAMPLES_API_KEY", "local")
    return OpenAI(base_url=f"{args.base_url}/v1", api_key=api_key)


def main() -> None:
    client = make_client()

    print("parse:")
    parsed = client.responses.parse(model=MODEL, input=QUESTION, text_format=Forecast)
    for item in parsed.output:
        print(f"  item    {item.type}")
    forecast = parsed.output_parsed  # a Forecast, or None if the model refused
    print(f"  parsed  {forecast!r}")
    print(f"  status  {parsed.status}")

    print("stream:")
    with client.responses.stream(model=MODEL, input=QUESTION, text_format=Forecast) as stream:
        kinds = {event.type for event in stream}
        final = stream.get_final_response()
    print(f"  parsed  {final.output_parsed!r}")
    print(f"  events  {'response.output_text.delta' in kinds and 'response.completed' in kinds}")


if __name__ == "__main__":
    main()
