"""The HTTP edge of durable-responses: `create_app` builds the ASGI application that
speaks the OpenAI Responses API; `python -m server` runs it with Hypercorn."""

from ._app import create_app
from ._embedded_model import EmbeddedModel
from ._settings import Settings
from ._upstream import UpstreamModel
from ._upstream_responses import ResponsesUpstreamModel

__all__ = [
    "EmbeddedModel",
    "ResponsesUpstreamModel",
    "Settings",
    "UpstreamModel",
    "create_app",
]
