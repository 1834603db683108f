"""Identifiers: a type prefix and 192 random bits (unguessable, see issue on tenancy)."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"
