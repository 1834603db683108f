"""Every setting in one place. Each is a command-line flag (`--db`, built by
server/_flags.py) and an environment variable (`DURABLE_RESPONSES_DB`); flags win over the
environment, which wins over the defaults below. An empty environment variable counts as
unset, so that compose files can pass `${VAR:-}` through."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "DURABLE_RESPONSES_"

LogLevel = Literal["debug", "info", "warning", "error"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8000, ge=1, le=65535, description="port to listen on")
    metrics_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="port of a second listener, on the same address, that serves /metrics"
        " without an API key; unset: no metrics",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="server processes on this host, sharing the port and the store (each"
        " with its own runtime, as separate hosts are); with --metrics-port P, worker i"
        " serves its metrics on P+i",
    )
    db: str = Field(
        "data/responses.db",
        min_length=1,
        description="the store: a SQLite file (a path, or sqlite:///path), or a PostgreSQL"
        " URL (postgresql://user:password@host:port/database) for several processes or hosts",
    )
    agent: str | None = Field(
        None,
        description="custom agent or workflow handler to host, as module:attribute; it takes"
        " every model name no named agent has. Repeat the flag as NAME=module:attribute to"
        " host named agents",
    )
    agents: str | None = Field(
        None,
        description="named agents, comma-separated, each NAME=module:attribute: a request"
        " whose model is NAME runs that agent",
    )
    agent_path: str | None = Field(
        None,
        description="folders, separated by ':', searched first when importing --agent (the"
        " working directory is always searched)",
    )
    log_level: LogLevel = Field("info", description="logging level")
    log_format: Literal["text", "json"] = Field(
        "text", description="log lines as text, or one JSON object per line"
    )
    access_log: bool = Field(
        True, description="log one line per HTTP request (method, path, status, duration, tenant)"
    )

    api_keys: SecretStr | None = Field(
        None,
        description="API keys, comma-separated, each `tenant:key` (or a bare key, its own"
        " tenant); unset with no keys file: the server is open",
    )
    keys_file: Path | None = Field(None, description="file of API keys, one `tenant key` a line")
    require_keys: bool = Field(
        False, description="refuse to start without API keys (the container sets it)"
    )

    max_body_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, description="largest request body accepted, in bytes"
    )
    max_input_items: int = Field(2048, ge=1, description="input items one request may carry")
    max_tools: int = Field(128, ge=1, description="tools one request may declare")
    max_attachment_bytes: int = Field(
        5 * 1024 * 1024,
        ge=1,
        description="decoded bytes one inline input image (data: URL) or file (file_data) may hold",
    )
    max_streams_per_tenant: int = Field(
        256, ge=1, description="open event streams one tenant may hold on this process (then 429)"
    )
    max_queued_per_tenant: int = Field(
        1000, ge=1, description="queued background responses one tenant may have (then 429)"
    )
    embedded_words: int = Field(
        10, ge=1, le=100_000, description="words in an answer of the embedded model"
    )
    embedded_delay_ms: float = Field(
        0.0, ge=0, le=60_000, description="pause between the embedded model's deltas"
    )

    upstream_base_url: str | None = Field(
        None,
        description="OpenAI-compatible endpoint (e.g. http://localhost:8001/v1) that"
        " --upstream-api speaks; unset: the embedded model",
    )
    upstream_api: Literal["chat", "responses"] = Field(
        "chat",
        description="what the upstream speaks: chat (POST /chat/completions) or responses"
        " (POST /responses, stateless: store false, the full item history each step)",
    )
    upstream_api_key: SecretStr | None = Field(None, description="API key for the upstream")
    upstream_model: str | None = Field(
        None, description="upstream model name; unset: the request's model passes through"
    )
    upstream_timeout: float = Field(60.0, gt=0, description="seconds an upstream read may take")
    upstream_models_ttl: float = Field(
        300.0,
        ge=0,
        description="seconds the upstream's model list (GET /models) is kept for /v1/models;"
        " 0: asked every time",
    )
    model_retries: int = Field(
        4, ge=0, description="retries of a failed model call (429, 5xx, resets, timeouts)"
    )
    retry_base_delay: float = Field(0.5, ge=0, description="first retry backoff, in seconds")
    retry_max_delay: float = Field(8.0, ge=0, description="longest retry backoff, in seconds")
    ambiguous_calls: Literal["fail", "report"] = Field(
        "fail",
        description="a non-idempotent tool call interrupted by a crash: fail the response"
        " (tool_outcome_unknown) or report the unknown outcome to the model",
    )

    lease_ttl: float = Field(10.0, gt=0, description="seconds a runner's lease lasts")
    max_recoveries: int = Field(
        3, ge=0, description="recoveries of one response before it fails (recovery_exhausted)"
    )
    scan_interval: float = Field(1.0, gt=0, description="seconds between recovery scans")
    multitask_strategy: Literal["reject", "enqueue", "interrupt", "rollback"] = Field(
        "enqueue",
        description="what a new turn does when its conversation or chain is busy, unless"
        " the request says (multitask_strategy)",
    )
    max_queued: int = Field(
        100, ge=1, description="queued turns one conversation or chain may hold (then 429)"
    )
    retention_days: float = Field(
        30.0, gt=0, description="days finished responses, their events and keys are kept"
    )
    purge_interval: float = Field(3600.0, gt=0, description="seconds between retention purges")
    shutdown_grace: float = Field(
        10.0,
        ge=0,
        description="seconds running turns get on SIGTERM to reach a step boundary; tool"
        " bodies still running then are waited for, up to their tool's timeout",
    )
    poll_interval: float = Field(
        0.25, gt=0, description="seconds between event-log polls of a live stream"
    )
    cancel_wait: float = Field(
        10.0, ge=0, description="seconds a cancel waits for a running turn to stop"
    )
    keepalive: float = Field(
        15.0, gt=0, description="seconds of silence before a stream sends a keep-alive comment"
    )

    max_pending_steers: int = Field(
        16,
        ge=1,
        description="steers (response.steer) one response may have waiting; one more is"
        " refused (too_many_pending_steers)",
    )
    ws_max_sockets_per_tenant: int = Field(
        64,
        ge=1,
        description="open WebSockets one tenant may hold on this process (then the upgrade"
        " is refused with 429); each response a socket streams also takes one of"
        " --max-streams-per-tenant",
    )
    ws_max_message_bytes: int | None = Field(
        None,
        ge=1024,
        description="largest WebSocket message accepted, in bytes (a larger one gets an"
        " error event; one over twice this closes the socket, 1009); unset: --max-body-bytes",
    )
    ws_idle_timeout: float = Field(
        300.0,
        gt=0,
        description="seconds a WebSocket may stay idle (no client message, no response"
        " streaming on it) before the server closes it (1000)",
    )
    ws_ping_interval: float = Field(
        # Short, because Hypercorn's pinger sleeps a whole interval before it notices a
        # closed socket, and a shutdown waits for it (up to --shutdown-grace).
        2.0,
        ge=0,
        description="seconds between the pings the server sends on each WebSocket, which"
        " keep idle connections open through proxies; 0: none",
    )

    @property
    def ws_message_limit(self) -> int:
        """The largest WebSocket message accepted, in bytes."""
        return self.ws_max_message_bytes or self.max_body_bytes

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any, info: ValidationInfo) -> Any:
        if value == "" and info.field_name is not None:
            return cls.model_fields[info.field_name].default
        return value

    @field_validator("upstream_base_url")
    @classmethod
    def _an_http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"{value!r} is not an http:// or https:// URL with a host"
                " (e.g. http://localhost:8001/v1)"
            )
        try:
            parts.port  # noqa: B018  (raises on a port that is not a number)
        except ValueError:
            raise ValueError(f"{value!r} has an invalid port") from None
        return value

    @field_validator("agents")
    @classmethod
    def _named_agents(cls, value: str | None) -> str | None:
        if value is not None:
            named_agents(value)  # raises ValueError naming the entry that is wrong
        return value

    @field_validator("metrics_port")
    @classmethod
    def _not_the_api_port(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and value == info.data.get("port"):
            raise ValueError("must differ from --port: metrics are never served to tenants")
        return value

    @field_validator("workers")
    @classmethod
    def _metrics_ports_fit(cls, value: int, info: ValidationInfo) -> int:
        first, port = info.data.get("metrics_port"), info.data.get("port")
        if first is None or value == 1:
            return value
        last = first + value - 1
        if last > 65535:
            raise ValueError(f"{value} workers need metrics ports {first}-{last}, past 65535")
        if port is not None and first <= port <= last:
            raise ValueError(
                f"{value} workers serve metrics on ports {first}-{last}, which takes in --port"
            )
        return value


def named_agents(value: str | None) -> dict[str, str]:
    """`NAME=module:attr,NAME2=module:attr2` as {NAME: "module:attr"}; ValueError for an
    entry without a name or a module:attribute, or a name given twice."""
    named: dict[str, str] = {}
    for entry in (value or "").split(","):
        name, equals, spec = (part.strip() for part in entry.partition("="))
        if not entry.strip():
            continue
        if not equals or not name or ":" not in spec:
            raise ValueError(f"{entry.strip()!r} is not NAME=module:attribute")
        if name in named:
            raise ValueError(f"the agent name {name!r} is given twice")
        named[name] = spec
    return named
