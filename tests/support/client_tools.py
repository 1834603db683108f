"""Client tools the tests declare in `tools` (the client runs them, not the server)."""

from __future__ import annotations

from typing import Any

# A strict function tool, as OpenAI's structured function calling declares one.
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
