"""The reference server of `python -m bench --reference`: a minimal echo handler on the
reference package (`azure-ai-agentserver-responses`, pinned in `bench/_reference.py`).

It runs under the reference's own virtual environment, never under the project's: the
bench starts `<reference venv>/bin/python bench/reference/echo_server.py --port N
--state DIR` and speaks to it over HTTP only. Nothing here is imported by the project,
and the project's checks do not resolve its imports.

What the bench's workloads need of it, and how the package is asked for each:

- the `/v1/responses` routes: `ResponsesAgentServerHost(prefix="/v1")`;
- background responses that survive a crash: `ResponsesServerOptions(
  resilient_background=True)`, which turns on the package's durable task subsystem;
  responses and tasks persist to files under `AGENTSERVER_STATE_ROOT` (set by the bench
  to a temporary directory, `--state`);
- the answer of the project's embedded model with no delay: the input's words cycled to
  10 words, each its own `response.output_text.delta` (18 events per response);
- a health probe at `/healthz`, as the bench's other servers have (the package's own is
  `/readiness`);
- no log line per request, as the project's server runs in the bench
  (`--no-access-log`): the package's access log is off (`access_log=None`) and its
  library log level is WARNING (`log_level`), since at its default, INFO, it logs every
  request's start and end (and the response's creation, its task, its completion) to
  stderr and again as OpenTelemetry JSON records, some 25 lines each.

Everything else is the package's default.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the reference venv's packages
    from azure.ai.agentserver.responses import (
        CreateResponse,
        ResponseContext,
        ResponsesAgentServerHost,
        TextResponse,
    )

ANSWER_WORDS = 10  # the project's embedded model answers 10 words by default


def _host(state: Path) -> ResponsesAgentServerHost:
    # The state root must be set before the package reads it (at construction).
    os.environ["AGENTSERVER_STATE_ROOT"] = str(state)
    from azure.ai.agentserver.responses import (
        ResponsesAgentServerHost,
        ResponsesServerOptions,
        TextResponse,
    )
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = ResponsesAgentServerHost(
        prefix="/v1",
        options=ResponsesServerOptions(resilient_background=True),
        access_log=None,
        log_level="WARNING",
        routes=[Route("/healthz", healthz, methods=["GET"])],
    )

    @app.response_handler
    async def echo(
        request: CreateResponse, context: ResponseContext, cancellation_signal: asyncio.Event
    ) -> TextResponse:
        words = (await context.get_input_text()).split() or ["echo"]

        async def deltas() -> AsyncIterator[str]:
            for n in range(ANSWER_WORDS):
                yield words[n % len(words)] + (" " if n < ANSWER_WORDS - 1 else "")

        return TextResponse(context, request, text=deltas())

    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="echo_server.py")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True, help="AGENTSERVER_STATE_ROOT")
    args = parser.parse_args()
    args.state.mkdir(parents=True, exist_ok=True)
    app = _host(args.state)
    app.run(host=args.host, port=args.port)


if __name__ == "__main__":
    main()
