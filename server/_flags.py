"""The command line, built from `Settings`: one flag per setting, whose help names its
environment variable and its default in the words an operator uses (no Python types).

Flags the user did not give are left out of the result, so that pydantic-settings still
reads the environment for them; a flag given wins over its environment variable.
"""

from __future__ import annotations

import argparse
import sys
import typing
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo

from ._settings import ENV_PREFIX, Settings

PROG = "durable-responses"

# What a flag's value looks like, where the field's type alone says too little.
_METAVARS = {
    "host": "ADDRESS",
    "port": "PORT",
    "metrics_port": "PORT",
    "agent": "(NAME=)MODULE:ATTR",
    "agents": "NAME=MODULE:ATTR,...",
    "agent_path": "DIRS",
    "api_keys": "TENANT:KEY,...",
    "upstream_base_url": "URL",
    "upstream_api_key": "KEY",
    "upstream_model": "NAME",
    "embedded_delay_ms": "MS",
    "retention_days": "DAYS",
}


def version() -> str:
    try:
        return metadata.version(PROG)
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def env_name(field: str) -> str:
    return f"{ENV_PREFIX}{field.upper()}"


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A self-hosted OpenAI Responses API server that never loses an agent's work.",
        epilog="Every flag is also the environment variable shown in brackets; a flag wins"
        " over its variable, and an empty variable counts as unset.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
    for name, field in Settings.model_fields.items():
        parser.add_argument(
            flag_name(name), dest=name, default=argparse.SUPPRESS, **_kind(name, field)
        )
    return parser


def _kind(name: str, field: FieldInfo) -> dict[str, Any]:
    """How argparse reads and shows one setting's flag."""
    description = (field.description or "").replace("%", "%%")
    kind: dict[str, Any] = {"help": f"{description} [{env_name(name)}; default: {_shown(field)}]"}
    annotation = _unwrap(field.annotation)
    if annotation is bool:
        kind["action"] = argparse.BooleanOptionalAction
    elif typing.get_origin(annotation) is typing.Literal:
        kind["choices"] = list(typing.get_args(annotation))
    else:
        kind["metavar"] = _METAVARS.get(name) or _metavar(annotation, description)
    if name == "agent":
        kind["action"] = "append"  # `--agent NAME=module:attr` may be given many times
    return kind


def _unwrap(annotation: Any) -> Any:
    """`X | None` as X."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, type(int | None)) and len(args) == 1:
        return args[0]
    return annotation


def _metavar(annotation: Any, description: str) -> str:
    if annotation is int:
        return "N"
    if annotation is float:
        return "SECONDS" if "seconds" in description else "NUMBER"
    if annotation is Path:
        return "FILE"
    if annotation is SecretStr:
        return "SECRET"
    return "TEXT"


def _shown(field: FieldInfo) -> str:
    default = field.default
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def parse_settings(argv: list[str]) -> Settings:
    """The settings from `argv` and the environment; a bad value exits 2 with one line
    naming the flag and its variable (the value may have come from either)."""
    given = vars(build_parser().parse_args(argv))
    if "agent" in given:
        given.update(_split_agents(given.pop("agent"), given.get("agents")))
    try:
        return Settings(**given)
    except ValidationError as exc:
        print(f"{PROG}: invalid settings: {describe(exc)}", file=sys.stderr)
        raise SystemExit(2) from None


def _split_agents(specs: list[str], agents: str | None) -> dict[str, str]:
    """The `--agent` flags as settings: the one without a name is the default `agent`,
    the named ones join `--agents`. A module name cannot hold "=", so "=" marks a name."""
    default = [spec for spec in specs if "=" not in spec]
    if len(default) > 1:
        print(
            f"{PROG}: invalid settings: {flag_name('agent')}: one default agent only (got"
            f" {', '.join(default)}); name the others as NAME=module:attribute",
            file=sys.stderr,
        )
        raise SystemExit(2)
    named = [spec for spec in specs if "=" in spec]
    split: dict[str, str] = {"agent": default[0]} if default else {}
    if named:
        split["agents"] = ",".join([*([agents] if agents else []), *named])
    return split


def describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        field = str(error["loc"][0]) if error["loc"] else ""
        message = error["msg"].removeprefix("Value error, ")
        where = f"{flag_name(field)} ({env_name(field)})" if field else "settings"
        problems.append(f"{where}: {message}")
    return "; ".join(problems)
