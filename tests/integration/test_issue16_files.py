"""Issue 16, item 3: input images and files on the Chat Completions upstream.

Images (`image_url`, a URL or a data: URL, with `detail`) reach the upstream as
`image_url` parts and files sent inline (`file_data`, a base64 data: URL, with
`filename`) as `file` parts; every `input_file` used to be refused. Forms no model can
be sent (a file by `file_id` or `file_url`, a file inside a tool output, a malformed
data: URL, an image URL of another scheme) and inline data over
`--max-attachment-bytes` are a 400 in OpenAI's envelope naming the part, refused before
anything is stored or sent. The fake upstream rejects malformed parts as OpenAI does.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import StartServer
from tests.integration._issue16_support import MODEL, Rig, rig_on
from tests.integration._responses_support import checked_response, dump
from tests.support.fake_upstream import FakeUpstream, text
from tests.support.peek import count
from tests.support.schemas import validate_error_envelope, validate_item_list
from tests.support.server import ServerProcess

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n tiny").decode()
PDF_BYTES = b"%PDF-1.4 a tiny document " * 4  # 100 bytes
PDF = "data:application/pdf;base64," + base64.b64encode(PDF_BYTES).decode()
URL = "https://example.com/cat.jpg"


@pytest.fixture
def rig(start_server: StartServer, fake_upstream: FakeUpstream, tmp_path: Path) -> Iterator[Rig]:
    # A limit between the tiny image and the 100-byte file: one fits, one does not.
    with rig_on(start_server, fake_upstream, tmp_path, "--max-attachment-bytes", "200") as rig:
        yield rig


def _user(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "input_text", "text": "Look:"}, *parts]}]


def test_images_and_files_reach_the_upstream_as_chat_content_parts(rig: Rig) -> None:
    rig.fake.push(text("A cat and a PDF."))

    response = rig.client.responses.create(
        model=MODEL,
        input=_user(  # type: ignore[arg-type]
            {"type": "input_image", "image_url": URL, "detail": "low"},
            {"type": "input_image", "image_url": PNG},
            {"type": "input_file", "file_data": PDF, "filename": "doc.pdf"},
        ),
    )

    checked_response(response)
    assert response.output_text == "A cat and a PDF."
    assert rig.messages(0) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image_url", "image_url": {"url": URL, "detail": "low"}},
                {"type": "image_url", "image_url": {"url": PNG, "detail": "auto"}},
                {"type": "file", "file": {"file_data": PDF, "filename": "doc.pdf"}},
            ],
        }
    ]
    assert rig.fake.refusals == []
    # The stored input keeps the parts as sent.
    items = rig.client.responses.input_items.list(response.id).data
    [stored] = [dump(item) for item in items]
    assert [part["type"] for part in stored["content"]] == [
        "input_text",
        "input_image",
        "input_image",
        "input_file",
    ]
    assert stored["content"][2]["detail"] == "auto"  # filled in: both schemas require it
    assert stored["content"][3] == {"type": "input_file", "file_data": PDF, "filename": "doc.pdf"}


REFUSED = [
    pytest.param(
        {"type": "input_file", "file_url": "https://example.com/a.pdf"},
        "file_url",
        "unsupported_value",
        id="file-by-url",
    ),
    pytest.param(
        {"type": "input_file", "file_id": "file-1"}, "file_id", "unsupported_value", id="file-id"
    ),
    pytest.param(
        {"type": "input_file", "file_data": PDF},
        "filename",
        "missing_required_parameter",
        id="file-without-filename",
    ),
    pytest.param(
        {"type": "input_file", "file_data": "JVBERi0=", "filename": "a.pdf"},
        "data: URL",
        "invalid_value",
        id="file-data-not-a-data-url",
    ),
    pytest.param(
        {"type": "input_image", "image_url": "ftp://example.com/cat.jpg"},
        "http(s) URL",
        "invalid_value",
        id="image-of-another-scheme",
    ),
    pytest.param(
        {"type": "input_image", "image_url": "data:image/png;base64,@@not base64@@"},
        "data: URL",
        "invalid_value",
        id="image-data-url-malformed",
    ),
    pytest.param(
        {
            "type": "input_image",
            "image_url": "data:image/png;base64," + base64.b64encode(b"x" * 201).decode(),
        },
        "200 bytes",
        "file_too_large",
        id="image-over-the-limit",
    ),
    pytest.param(
        {
            "type": "input_file",
            "file_data": "data:application/pdf;base64," + base64.b64encode(b"x" * 300).decode(),
            "filename": "big.pdf",
        },
        "200 bytes",
        "file_too_large",
        id="file-over-the-limit",
    ),
]


@pytest.mark.parametrize(("part", "named", "code"), REFUSED)
def test_a_part_no_model_can_take_is_a_400_naming_it(
    rig: Rig, part: dict[str, Any], named: str, code: str
) -> None:
    before = count(rig.server.db, "SELECT count(*) FROM responses")

    answer = rig.http.post("/v1/responses", json={"model": MODEL, "input": _user(part)})

    assert answer.status_code == 400, answer.text
    body = answer.json()
    validate_error_envelope(body)
    assert body["error"]["param"] == "input[0].content[1]"
    assert body["error"]["code"] == code
    assert named in body["error"]["message"]
    assert count(rig.server.db, "SELECT count(*) FROM responses") == before
    assert rig.fake.requests == []


def test_a_file_in_a_tool_output_is_a_400_naming_it(rig: Rig) -> None:
    file = {"type": "input_file", "file_data": PDF, "filename": "doc.pdf"}
    body = {
        "model": MODEL,
        "input": [
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [file]},
        ],
        "tools": [{"type": "function", "name": "f"}],
    }

    answer = rig.http.post("/v1/responses", json=body)

    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "input[1].output[0]"
    assert rig.fake.requests == []


@pytest.mark.parametrize(
    ("part", "param"),
    [
        pytest.param(
            {"type": "image_url", "image_url": {"url": "not a url"}},
            "messages[0].content[0].image_url.url",
            id="image-url",
        ),
        pytest.param(
            {"type": "image_url", "image_url": {"url": URL, "detail": "original"}},
            "messages[0].content[0].image_url.detail",
            id="image-detail",
        ),
        pytest.param(
            {"type": "file", "file": {"file_data": PDF}},
            "messages[0].content[0].file.filename",
            id="file-without-filename",
        ),
        pytest.param(
            {"type": "input_image", "image_url": URL},
            "messages[0].content[0].type",
            id="a-responses-part",
        ),
    ],
)
def test_the_fake_upstream_refuses_malformed_parts_as_openai_does(
    fake_upstream: FakeUpstream, part: dict[str, Any], param: str
) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": [part]}], "stream": True}

    answer = httpx.post(f"{fake_upstream.url}/chat/completions", json=body, timeout=10)

    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert [r.param for r in fake_upstream.refusals] == [param]


def test_the_embedded_model_takes_images_and_files_and_reads_only_the_text(
    start_server: StartServer,
) -> None:
    from tests.conftest import make_client

    server = start_server()
    with make_client(server.url) as client:
        response = client.responses.create(
            model="embedded",
            input=_user(  # type: ignore[arg-type]
                {"type": "input_image", "image_url": PNG},
                {"type": "input_file", "file_data": PDF, "filename": "doc.pdf"},
            ),
        )

    checked_response(response)
    assert response.status == "completed"
    assert set(response.output_text.split()) == {"Look:"}


def test_an_image_in_a_tool_output_is_stored_as_a_message_s_and_lists_within_the_schemas(
    server: ServerProcess,
) -> None:
    """A tool output's parts are normalized as a message's: an image without `detail` is
    stored `auto`, which OpenAI's item lists require."""
    items = [
        {"type": "function_call", "call_id": "c_img", "name": "f", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c_img",
            "output": [
                {"type": "input_text", "text": "the picture:"},
                {"type": "input_image", "image_url": URL},
            ],
        },
    ]
    with httpx.Client(base_url=server.url, timeout=30) as http:
        created = http.post(
            "/v1/responses",
            json={
                "model": "embedded",
                "input": items,
                "tools": [{"type": "function", "name": "f"}],
            },
        )
        assert created.status_code == 200, created.text
        listed = http.get(f"/v1/responses/{created.json()['id']}/input_items?order=asc").json()
        conversation = http.post("/v1/conversations", json={"items": items})
        assert conversation.status_code == 200, conversation.text
        page = http.get(f"/v1/conversations/{conversation.json()['id']}/items?order=asc").json()

    for stored in (listed["data"][1], page["data"][1]):
        assert stored["output"][1] == {"type": "input_image", "image_url": URL, "detail": "auto"}
    validate_item_list(listed, "input_items")
    validate_item_list(page, "conversation")
