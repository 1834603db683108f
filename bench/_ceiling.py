"""The ceiling: a trivial Starlette endpoint on Hypercorn, configured as `server._cli`
configures the real server (one worker, h11, no access log, the default asyncio loop).

`python -m bench._ceiling --port N` serves `GET /v1/responses/{id}` with a fixed JSON
body the size of a stored simple response, so that the poll workload and this one move
the same bytes. Nothing is read from disk: this is the upper bound of the HTTP stack.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal

from hypercorn.asyncio import serve
from hypercorn.config import Config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

# About the size of a completed 10-word response's snapshot (1.5 KB).
BODY = json.dumps(
    {"id": "resp_" + "0" * 48, "object": "response", "status": "completed", "pad": "x" * 1400},
    separators=(",", ":"),
)


async def fixed(request: Request) -> Response:
    return Response(BODY, media_type="application/json")


async def healthz(request: Request) -> Response:
    return Response('{"status":"ok"}', media_type="application/json")


def app() -> Starlette:
    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/v1/responses/{response_id}", fixed, methods=["GET"]),
        ]
    )


async def run(host: str, port: int) -> None:
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await serve(app(), config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._ceiling")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(run(args.host, args.port))


if __name__ == "__main__":
    main()
