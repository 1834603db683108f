"""API keys and tenants.

With keys configured, every route but the probes (/healthz, /readyz: a Kubernetes probe
has no key) needs `Authorization: Bearer <key>`; the key's tenant scopes everything the
request can see (another tenant's ids answer 404). With no keys the server is open: every
request is in the one tenant "". Metrics are not served to tenants at all: they have a
listener of their own (server/_metrics.py).

Keys come from `--api-keys` (comma-separated `tenant:key`, or a bare `key` that is its
own tenant) and from `--keys-file` (one `tenant key` per line, `#` comments). Only
SHA-256 digests of the keys are kept in memory, and keys are never logged.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from starlette.types import Scope

from ._errors import APIError

OPEN_TENANT = ""
_EXEMPT = frozenset({"/healthz", "/readyz"})


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Keys:
    tenants: dict[str, str]  # sha256(key) -> tenant

    @property
    def open(self) -> bool:
        return not self.tenants

    def tenant_for(self, key: str) -> str | None:
        return self.tenants.get(_digest(key))

    @classmethod
    def load(cls, listed: str | None, keys_file: Path | None) -> Keys:
        """Parse the keys; ValueError with a line number for a malformed entry."""
        tenants: dict[str, str] = {}
        for entry in (listed or "").split(","):
            entry = entry.strip()
            if entry:
                tenant, sep, key = entry.rpartition(":")
                key = key.strip()
                tenants[_digest(key)] = tenant.strip() if sep else f"key-{_digest(key)[:8]}"
        if keys_file is not None:
            for number, line in enumerate(keys_file.read_text().splitlines(), start=1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                parts = line.split()
                if len(parts) != 2:
                    raise ValueError(f"{keys_file}:{number}: expected 'tenant key'")
                tenants[_digest(parts[1])] = parts[0]
        return cls(tenants)


_CHALLENGE = {"www-authenticate": 'Bearer realm="durable-responses"'}


def authenticate(keys: Keys, header: str) -> str:
    """The tenant whose API key an `Authorization` header carries; an APIError 401 for a
    missing or unknown key (an HTTP request's, or a WebSocket upgrade's)."""
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise APIError(
            401,
            "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.",
            code="missing_api_key",
            headers=_CHALLENGE,
        )
    tenant = keys.tenant_for(key.strip())
    if tenant is None:
        raise APIError(
            401, "Incorrect API key provided.", code="invalid_api_key", headers=_CHALLENGE
        )
    return tenant


def request_tenant(keys: Keys, scope: Scope) -> str | None:
    """The tenant of an HTTP request (None for the probes when keys are set); an APIError
    401 for a missing or unknown key."""
    if keys.open:
        return OPEN_TENANT
    if scope["path"] in _EXEMPT:
        return None
    for name, value in scope["headers"]:
        if name == b"authorization":
            return authenticate(keys, value.decode("latin-1"))
    return authenticate(keys, "")
