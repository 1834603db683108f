"""Input images and files: which forms a model can be sent, and how large they may be.

Images go by URL or `data:` URL (`image_url`). Files go inline, as a base64 `data:` URL
in `file_data` with their `filename`: that is the one form a Chat Completions upstream
takes (its `file` part). Neither goes by `file_id` (there is no Files API here), and a
`file_url` is refused rather than fetched: this server fetches nothing on a client's
behalf. Every refusal is a 400 naming the part, before anything is stored. Inline data
is limited in decoded bytes (`--max-attachment-bytes`), on top of the body limit.
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from collections.abc import Mapping
from typing import Any, NoReturn

from ._errors import APIError

_PARTS_KEY = {"message": "content", "function_call_output": "output"}


def refuse_unsent_part(part: Mapping[str, Any], path: str) -> None:
    """Refuse an image or file part no model could be sent (rather than drop it)."""
    kind = part.get("type")
    if kind == "input_image" and part.get("file_id") is not None:
        _refuse(
            path,
            "images by 'file_id' are not supported by this server (it has no Files API); "
            "send the image as 'image_url', a URL or a data: URL.",
        )
    if kind == "input_image":
        _check_image_url(part.get("image_url"), path)
    if kind != "input_file":
        return
    if path.rpartition(".")[2].startswith("output["):
        _refuse(
            path,
            "file inputs ('input_file') cannot be part of a function call output: a model "
            "takes only text and images there. Send the file in a user message.",
        )
    if part.get("file_id") is not None:
        _refuse(
            path,
            "file inputs ('input_file') by 'file_id' are not supported by this server (it "
            "has no Files API); send the file inline as 'file_data' (a base64 data: URL) "
            "with its 'filename'.",
        )
    if part.get("file_url") is not None:
        _refuse(
            path,
            "file inputs ('input_file') by 'file_url' are not supported by this server (it "
            "does not fetch URLs, and the model cannot); send the file inline as "
            "'file_data' (a base64 data: URL) with its 'filename'.",
        )
    data = part.get("file_data")
    if not isinstance(data, str) or not data:
        _refuse(path, "an 'input_file' needs 'file_data' (a base64 data: URL).", "missing")
    if not part.get("filename"):
        _refuse(path, "an 'input_file' with 'file_data' needs its 'filename'.", "missing")
    if _inline(data) is None:
        _refuse(
            path,
            "'file_data' must be a base64 data: URL, e.g. 'data:application/pdf;base64,...'.",
            "invalid_value",
        )


def _check_image_url(url: Any, path: str) -> None:
    if not isinstance(url, str):
        return  # the part's model names the wrong type
    if url.startswith("data:"):
        if _inline(url) is None:
            _refuse(
                path,
                "an inline 'image_url' must be a base64 data: URL, e.g. "
                "'data:image/png;base64,...'.",
                "invalid_value",
            )
    elif not url.startswith(("http://", "https://")):
        _refuse(path, "'image_url' must be an http(s) URL or a data: URL.", "invalid_value")


def check_sizes(items: list[Any], *, path: str, max_bytes: int) -> None:
    """Refuse an inline image or file (data: URL) larger than `max_bytes` decoded."""
    for i, item in enumerate(items):
        key = _PARTS_KEY.get(item.get("type") or "message") if isinstance(item, dict) else None
        parts = item.get(key) if key else None
        if not isinstance(parts, list):
            continue
        for j, part in enumerate(parts):
            data = part.get("image_url") or part.get("file_data")
            payload = _inline(data) if isinstance(data, str) else None
            if payload is not None and _decoded_size(payload) > max_bytes:
                raise APIError(
                    400,
                    f"Invalid content part '{path}[{i}].{key}[{j}]': its inline data is larger "
                    f"than this server's limit of {max_bytes} bytes (decoded).",
                    param=f"{path}[{i}].{key}[{j}]",
                    code="file_too_large",
                )


def _inline(url: str) -> str | None:
    """The base64 payload of a `data:...;base64,` URL, or None if it is not one (or not
    valid base64)."""
    head, comma, payload = url.partition(",")
    if not (comma and head.startswith("data:") and head.endswith(";base64")):
        return None
    try:
        b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    return payload


def _decoded_size(payload: str) -> int:
    return len(payload) * 3 // 4 - payload[-2:].count("=")


def _refuse(path: str, reason: str, code: str = "unsupported_value") -> NoReturn:
    raise APIError(
        400,
        f"Invalid content part '{path}': {reason}",
        param=path,
        code="missing_required_parameter" if code == "missing" else code,
    )
