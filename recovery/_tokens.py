"""How many tokens a model request is: the model's own count when it has one, else an
estimate. `POST /v1/responses/input_tokens` answers with it, and a turn with
`context_management` compares it with its `compact_threshold` before each step.

A model may count for itself with a `count_input_tokens(request)` method, plain or async,
returning an int (the embedded model counts words, as its usage does). No upstream can
(Chat Completions has no count endpoint, nor have most Responses servers), so theirs is
the estimate: about four characters a token over the instructions, the items and the
tools, which is what a model would read.
"""

from __future__ import annotations

import inspect
import json
import math
from typing import Any

from ._model import ModelRequest

CHARACTERS_PER_TOKEN = 4  # the estimate's rule of thumb for English text


async def count_tokens(model: Any, request: ModelRequest) -> int:
    """`request`'s input tokens: `model`'s own count when it has one, else the estimate."""
    counter = getattr(model, "count_input_tokens", None)
    if counter is None:
        return estimate_tokens(request)
    counted = counter(request)
    return int(await counted if inspect.isawaitable(counted) else counted)


def estimate_tokens(request: ModelRequest) -> int:
    """About one token per four characters of what the model would read."""
    read = [request.instructions or "", *map(_text, request.input), *map(_text, request.tools)]
    return sum(math.ceil(len(text) / CHARACTERS_PER_TOKEN) for text in read)


def _text(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
