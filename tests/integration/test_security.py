"""API keys and tenant isolation: every route needs a key once keys are configured, and
one tenant's ids are 404 to another, indistinguishable from ids that do not exist."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import NewStore, StartServer, make_client
from tests.support.schemas import validate_error_envelope
from tests.support.server import ServerProcess

ALICE, BOB = "sk-alice-123", "sk-bob-456"


@pytest.fixture
def keyed(start_server: StartServer, tmp_path: Path) -> ServerProcess:
    keys = tmp_path / "keys"
    keys.write_text(f"# tenant key\nbob {BOB}\n")
    return start_server("--api-keys", f"alice:{ALICE}", "--keys-file", str(keys))


def client_for(server: ServerProcess, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


@pytest.fixture
def alice(keyed: ServerProcess) -> Iterator[httpx.Client]:
    with client_for(keyed, ALICE) as http:
        yield http


@pytest.fixture
def bob(keyed: ServerProcess) -> Iterator[httpx.Client]:
    with client_for(keyed, BOB) as http:
        yield http


def alice_data(alice: httpx.Client) -> dict[str, Any]:
    conversation = alice.post(
        "/v1/conversations", json={"items": [{"role": "user", "content": "hi"}]}
    )
    conv_id = conversation.json()["id"]
    item_id = alice.get(f"/v1/conversations/{conv_id}/items").json()["data"][0]["id"]
    response = alice.post(
        "/v1/responses", json={"model": "m", "input": "secret plans", "background": True}
    ).json()
    return {"conv": conv_id, "item": item_id, "resp": response["id"]}


ROUTES = [
    pytest.param("GET", "/v1/responses/{resp}", None, id="get-response"),
    pytest.param("GET", "/v1/responses/{resp}?stream=true", None, id="stream-response"),
    pytest.param("POST", "/v1/responses/{resp}/cancel", None, id="cancel-response"),
    pytest.param("DELETE", "/v1/responses/{resp}", None, id="delete-response"),
    pytest.param("GET", "/v1/responses/{resp}/input_items", None, id="input-items"),
    pytest.param("GET", "/v1/conversations/{conv}", None, id="get-conversation"),
    pytest.param(
        "POST", "/v1/conversations/{conv}", {"metadata": {"x": "y"}}, id="update-conversation"
    ),
    pytest.param("DELETE", "/v1/conversations/{conv}", None, id="delete-conversation"),
    pytest.param("GET", "/v1/conversations/{conv}/items", None, id="list-items"),
    pytest.param(
        "POST",
        "/v1/conversations/{conv}/items",
        {"items": [{"role": "user", "content": "x"}]},
        id="add-items",
    ),
    pytest.param("GET", "/v1/conversations/{conv}/items/{item}", None, id="get-item"),
    pytest.param("DELETE", "/v1/conversations/{conv}/items/{item}", None, id="delete-item"),
    pytest.param(
        "POST",
        "/v1/responses",
        {"model": "m", "input": "x", "conversation": "{conv}"},
        id="create-on-conversation",
    ),
]


def fill(value: Any, ids: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, dict):
        return {k: fill(v, ids) for k, v in value.items()}
    return value


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_another_tenant_sees_404_exactly_like_a_missing_id(
    alice: httpx.Client, bob: httpx.Client, method: str, path: str, body: Any
) -> None:
    ids = alice_data(alice)
    missing = {"conv": "conv_" + "0" * 48, "item": "msg_" + "0" * 48, "resp": "resp_" + "0" * 48}

    as_bob = bob.request(method, fill(path, ids), json=fill(body, ids))
    as_nobody = bob.request(method, fill(path, missing), json=fill(body, missing))

    assert as_bob.status_code == as_nobody.status_code == 404
    validate_error_envelope(as_bob.json())
    assert as_bob.json()["error"]["message"].replace(ids["resp"], "X").replace(
        ids["conv"], "X"
    ).replace(ids["item"], "X") == as_nobody.json()["error"]["message"].replace(
        missing["resp"], "X"
    ).replace(missing["conv"], "X").replace(missing["item"], "X")
    # and Alice's data is untouched
    assert alice.get(f"/v1/responses/{ids['resp']}").status_code == 200
    assert alice.get(f"/v1/conversations/{ids['conv']}/items/{ids['item']}").status_code == 200


def test_previous_response_of_another_tenant_is_not_found(
    alice: httpx.Client, bob: httpx.Client
) -> None:
    ids = alice_data(alice)

    answer = bob.post(
        "/v1/responses", json={"model": "m", "input": "x", "previous_response_id": ids["resp"]}
    )

    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "previous_response_not_found"


def test_idempotency_keys_belong_to_their_tenant(alice: httpx.Client, bob: httpx.Client) -> None:
    body = {"model": "m", "input": "same words"}
    first = alice.post("/v1/responses", json=body, headers={"Idempotency-Key": "k1"}).json()
    again = alice.post("/v1/responses", json=body, headers={"Idempotency-Key": "k1"}).json()
    other = bob.post("/v1/responses", json=body, headers={"Idempotency-Key": "k1"}).json()

    assert again["id"] == first["id"]
    assert other["id"] != first["id"]


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(None, id="no-key"),
        pytest.param("Bearer sk-wrong", id="wrong-key"),
        pytest.param(f"Basic {ALICE}", id="wrong-scheme"),
        pytest.param("Bearer", id="empty-key"),
    ],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/responses"),
        ("GET", "/v1/responses/resp_x"),
        ("GET", "/responses/resp_x/input_items"),
        ("POST", "/v1/conversations"),
        ("GET", "/metrics"),  # then 404 with a key: metrics have a listener of their own
    ],
)
def test_requests_without_a_valid_key_get_401(
    keyed: ServerProcess, header: str | None, method: str, path: str
) -> None:
    headers = {"Authorization": header} if header else {}
    answer = httpx.request(method, f"{keyed.url}{path}", headers=headers, json={})

    assert answer.status_code == 401
    validate_error_envelope(answer.json())
    assert answer.headers["x-request-id"]


def test_health_needs_no_key_and_the_sdk_raises_authentication_error(keyed: ServerProcess) -> None:
    assert httpx.get(f"{keyed.url}/healthz").status_code == 200
    assert httpx.get(f"{keyed.url}/readyz").status_code in (200, 503)  # a probe has no key
    with make_client(keyed.url) as sdk, pytest.raises(openai.AuthenticationError):
        sdk.responses.create(model="m", input="x")
    with openai.OpenAI(base_url=f"{keyed.url}/v1", api_key=ALICE, max_retries=0) as sdk:
        assert sdk.responses.create(model="m", input="x y").status == "completed"


def test_an_open_server_says_so_once_and_a_required_key_refuses_to_start(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    open_server = start_server()
    assert open_server.log().count("no API keys configured") == 1

    refused = ServerProcess(new_store("refused"), args=("--require-keys",), log=tmp_path / "r.log")
    refused.start(wait=False)
    assert refused.proc is not None
    assert refused.proc.wait(30) == 2
    assert "no API keys are configured" in refused.log()


def test_ids_are_unguessable_and_sort_by_creation_time(client: openai.OpenAI) -> None:
    response = client.responses.create(model="m", input="x")
    conversation = client.conversations.create()
    later = client.responses.create(model="m", input="y")

    for value, prefix in ((response.id, "resp_"), (conversation.id, "conv_")):
        assert value.startswith(prefix)
        # 12 hex digits of milliseconds, then 160 random bits
        assert re.fullmatch(r"[0-9a-f]{52}", value[len(prefix) :]), value
    clock = len("resp_") + 12
    assert response.id[:clock] <= later.id[:clock]
    assert response.id[clock:] != later.id[clock:]


def test_logs_carry_no_keys_and_no_request_bodies(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = start_server("--api-keys", f"alice:{ALICE}", "--log-level", "debug")
    with client_for(server, ALICE) as http:
        http.post("/v1/responses", json={"model": "m", "input": "the password is swordfish"})
        http.post("/v1/responses", json={"model": "m", "input": "x", "bogus": "swordfish"})
    server.stop()

    log = server.log()
    assert ALICE not in log
    assert "swordfish" not in log
