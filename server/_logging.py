"""Log set-up: plain text or one JSON object per line, and on every line the request id
and the response id it is about (from context variables, so tasks inherit them).
Request bodies and API keys are never logged.

A record's `fields` (passed as `extra={"fields": {...}}`: the access log, a response's
end) become keys of its JSON object; the text line already says them in its message.
httpx's line per upstream request ("HTTP Request: POST ...") shows only at debug level."""

from __future__ import annotations

import contextvars
import json
import logging
from datetime import UTC, datetime

from recovery import current_response_id

current_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_request_id", default=None
)


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id.get()
        record.response_id = current_response_id.get()
        return True


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = [
            f"{name}={value}"
            for name in ("request_id", "response_id")
            if (value := getattr(record, name, None))
        ]
        return f"{line} [{' '.join(ids)}]" if ids else line


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
            "response_id": getattr(record, "response_id", None),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry |= {k: v for k, v in fields.items() if k not in entry}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.addFilter(_ContextFilter())
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiosqlite logs every statement with its parameters at debug: request data.
    logging.getLogger("aiosqlite").setLevel(logging.INFO)
    logging.getLogger("httpx").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
