"""A fake upstream that only lists models: `GET /v1/models`, strictly (any other request
is a 404), as an OpenAI-compatible server answers it. It counts the lists it gave
(`lists`), checks the bearer key when given one, and with `failing` set answers 503."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeModels:
    def __init__(self, *ids: str, key: str | None = None) -> None:
        self.ids = list(ids)
        self.key = key
        self.failing = False
        self.lists = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeModels:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                authorized = fake.key is None or (
                    self.headers.get("authorization") == f"Bearer {fake.key}"
                )
                if self.path != "/v1/models":
                    self._answer(404, {"error": {"message": "no such route"}})
                elif not authorized:
                    self._answer(401, {"error": {"message": "bad key"}})
                elif fake.failing:
                    self._answer(503, {"error": {"message": "down"}})
                else:
                    fake.lists += 1
                    data = [
                        {"id": i, "object": "model", "created": 1700000000, "owned_by": "up"}
                        for i in fake.ids
                    ]
                    self._answer(200, {"object": "list", "data": data})

            def do_POST(self) -> None:
                self._answer(404, {"error": {"message": "only GET /v1/models here"}})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        return Handler
