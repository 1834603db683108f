"""/v1/models routes: the models a client may name, as OpenAI lists its own.

The list holds this server's agents first: each named agent under its name, and the
default agent under the name of its model (or of its workflow), unless that model is the
upstream taking every model name through, whose own names stand for it. With a Chat
Completions upstream, the upstream's models follow, read from its `GET /models` and kept
for `--upstream-models-ttl` seconds. An upstream that does not answer (or answers
something that is not a model list) never fails the request: the list is this server's
agents alone, and the log says why. `created` of an agent is when this server started.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ._context import context
from ._errors import APIError

log = logging.getLogger("server")

Json = dict[str, Any]

OWNER = "durable-responses"
# An upstream slower than this to list its models is left out of this one answer.
LIST_TIMEOUT = 5.0


class UpstreamModels:
    """The upstream's `GET {base_url}/models`, kept for `ttl` seconds once read."""

    def __init__(
        self, base_url: str, *, api_key: str | None, ttl: float, timeout: float = LIST_TIMEOUT
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout
        )
        self._ttl = ttl
        self._kept: tuple[float, list[Json]] | None = None  # (read at, models)

    async def models(self) -> list[Json]:
        """The upstream's models; [] when it cannot say (logged)."""
        now = time.monotonic()
        if self._kept is not None and now - self._kept[0] < self._ttl:
            return self._kept[1]
        try:
            answer = await self._client.get("/models")
            answer.raise_for_status()
            models = _models_of(answer.json())
        except (httpx.HTTPError, ValueError) as exc:
            log.warning(
                "the upstream's model list is not available (%s); /v1/models lists this"
                " server's agents only",
                str(exc) or type(exc).__name__,
            )
            return []
        self._kept = (now, models)
        return models

    async def aclose(self) -> None:
        await self._client.aclose()


def _models_of(body: Any) -> list[Json]:
    """The model objects of an OpenAI-style list, in the shape OpenAI gives them."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise ValueError("the answer is not a list of models")
    models = []
    for entry in data:
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            created = entry.get("created")
            owner = entry.get("owned_by")
            models.append(
                model_object(
                    entry["id"],
                    created if isinstance(created, int) and not isinstance(created, bool) else 0,
                    owner if isinstance(owner, str) else "upstream",
                )
            )
    return models


def model_object(model_id: str, created: int, owned_by: str = OWNER) -> Json:
    return {"id": model_id, "object": "model", "created": created, "owned_by": owned_by}


class ModelCatalog:
    """What /v1/models answers: this server's agents (`served`), then the upstream's."""

    def __init__(self, served: list[str], upstream: UpstreamModels | None = None) -> None:
        created = int(time.time())
        self._ours = [model_object(name, created) for name in dict.fromkeys(served)]
        self._upstream = upstream

    async def all(self) -> list[Json]:
        ours = {model["id"] for model in self._ours}
        theirs = await self._upstream.models() if self._upstream is not None else []
        return self._ours + [model for model in theirs if model["id"] not in ours]

    async def find(self, model_id: str) -> Json | None:
        for model in self._ours:
            if model["id"] == model_id:
                return model
        return next((m for m in await self.all() if m["id"] == model_id), None)

    async def aclose(self) -> None:
        if self._upstream is not None:
            await self._upstream.aclose()


async def list_models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": await context(request).models.all()})


async def get_model(request: Request) -> Response:
    model_id = request.path_params["model_id"]
    found = await context(request).models.find(model_id)
    if found is None:
        raise APIError(
            404,
            f"The model '{model_id}' does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )
    return JSONResponse(found)


ROUTES = [
    Route("/models", list_models, methods=["GET"]),
    # A model id may hold "/" (`meta-llama/Llama-3.1-8B`), as the SDK sends it unescaped.
    Route("/models/{model_id:path}", get_model, methods=["GET"]),
]
