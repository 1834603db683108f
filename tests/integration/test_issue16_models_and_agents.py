"""Issue 16: several agents per server, chosen by the request's `model`, and /v1/models.

A server hosts named agents (`--agent NAME=module:attr`, repeatable, or
DURABLE_RESPONSES_AGENTS) beside its default agent; the request's `model` picks the
agent. With named agents only, an unknown model is a 404 `model_not_found` that stores
nothing. `GET /v1/models` lists the agents, then an upstream's own models (cached; an
upstream that fails leaves our list). A background response recovered after a crash
runs with the agent its request named, not the default one.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.conftest import NewStore, StartServer, make_client
from tests.support.fake_models import FakeModels
from tests.support.peek import count
from tests.support.server import REPO
from tests.support.waiting import wait_status, wait_terminal

AGENTS = "tests.agents.named_agents"
NAMED = ("--agent", f"alpha={AGENTS}:alpha", "--agent", f"beta={AGENTS}:beta")
DEFAULT = ("--agent", f"{AGENTS}:default")  # the built-in agent, for every other name
KEY = "sk-issue16"


@pytest.fixture
def fake_models() -> Iterator[FakeModels]:
    fake = FakeModels("up-small", "alpha", key="sk-up").start()
    yield fake
    fake.stop()


def test_the_model_picks_the_named_agent_and_the_default_takes_every_other_name(
    start_server: StartServer,
) -> None:
    server = start_server(*NAMED, *DEFAULT)

    with make_client(server.url) as sdk:
        alpha = sdk.responses.create(model="alpha", input="hello there")
        beta = sdk.responses.create(model="beta", input="hello there")
        other = sdk.responses.create(model="gpt-4o", input="hello there [[words 2]]")
        listed = [model.id for model in sdk.models.list()]
        one = sdk.models.retrieve("beta")

    assert alpha.output_text == "ALPHA HELLO THERE"
    assert beta.output_text == "BETA HELLO THERE"
    assert other.output_text == "hello there"  # the built-in default agent
    assert listed == ["embedded", "alpha", "beta"]
    assert (one.id, one.object, one.owned_by) == ("beta", "model", "durable-responses")
    assert one.created > 0


def test_with_named_agents_only_an_unknown_model_is_refused_before_anything_is_stored(
    start_server: StartServer,
) -> None:
    server = start_server(*NAMED)

    with make_client(server.url) as sdk:
        for background in (False, True):
            with pytest.raises(openai.NotFoundError) as refused:
                sdk.responses.create(model="gpt-4o", input="hi", background=background)
            assert refused.value.code == "model_not_found"
            assert refused.value.param == "model"
            assert "'alpha', 'beta'" in refused.value.message
        with pytest.raises(openai.NotFoundError) as missing:
            sdk.models.retrieve("gpt-4o")
        assert missing.value.code == "model_not_found"
        assert [model.id for model in sdk.models.list()] == ["alpha", "beta"]
        assert sdk.responses.create(model="alpha", input="still here").output_text == (
            "ALPHA STILL HERE"
        )

    assert count(server.db, "SELECT count(*) FROM responses") == 1  # only the served one


def test_named_agents_come_from_the_environment_too(start_server: StartServer) -> None:
    env = {"DURABLE_RESPONSES_AGENTS": f"alpha={AGENTS}:alpha, beta={AGENTS}:beta"}
    server = start_server(env=env)

    with make_client(server.url) as sdk:
        assert [model.id for model in sdk.models.list()] == ["alpha", "beta"]
        assert sdk.responses.create(model="beta", input="env").output_text == "BETA ENV"
        with pytest.raises(openai.NotFoundError):
            sdk.responses.create(model="gamma", input="env")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        pytest.param(("--agent", "=x:y"), "is not NAME=module:attribute", id="no-name"),
        pytest.param(("--agent", "a=x:y", "--agent", "a=x:z"), "given twice", id="twice"),
        pytest.param(("--agent", "x:y", "--agent", "x:z"), "one default agent", id="defaults"),
        pytest.param(("--agent", "a=no_such_module:agent"), "cannot import", id="no-module"),
    ],
)
def test_a_bad_named_agent_is_a_one_line_start_up_error(args: tuple[str, ...], said: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "server", "--port", "1", "--db", ":memory:", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert done.returncode == 2
    assert said in done.stderr
    assert "Traceback" not in done.stderr


def test_models_routes_need_the_key_and_answer_with_and_without_the_v1_prefix(
    start_server: StartServer,
) -> None:
    server = start_server(*NAMED, "--api-keys", f"t:{KEY}")

    with httpx.Client(base_url=server.url, timeout=30.0) as http:
        for path in ("/models", "/v1/models", "/models/alpha", "/v1/models/alpha"):
            refused = http.get(path)
            assert refused.status_code == 401, path
            assert refused.json()["error"]["code"] is not None
        auth = {"Authorization": f"Bearer {KEY}"}
        assert (
            http.get("/models", headers=auth).json() == http.get("/v1/models", headers=auth).json()
        )
        assert http.get("/models/alpha", headers=auth).json()["id"] == "alpha"
        unknown = http.get("/models/nope", headers=auth)
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "model_not_found"
    with make_client(server.url) as sdk, pytest.raises(openai.AuthenticationError):
        sdk.models.list()  # the client's key is not one of the server's


def test_the_upstreams_models_follow_ours_and_are_cached(
    start_server: StartServer, fake_models: FakeModels
) -> None:
    server = start_server(
        "--agent",
        f"alpha={AGENTS}:alpha",
        *DEFAULT,
        "--upstream-base-url",
        fake_models.url,
        "--upstream-api-key",
        "sk-up",
    )

    with make_client(server.url) as sdk:
        first = [(model.id, model.owned_by) for model in sdk.models.list()]
        again = [model.id for model in sdk.models.list()]
        small = sdk.models.retrieve("up-small")

    # The default agent passes model names through to the upstream, whose list stands for
    # it; its `alpha` is ours.
    assert first == [("alpha", "durable-responses"), ("up-small", "up")]
    assert again == ["alpha", "up-small"]
    assert (small.id, small.created) == ("up-small", 1700000000)
    assert fake_models.lists == 1  # kept for --upstream-models-ttl (300 s)


def test_a_failing_upstream_leaves_our_agents_listed(
    start_server: StartServer, fake_models: FakeModels
) -> None:
    fake_models.failing = True
    server = start_server(
        *NAMED,
        *DEFAULT,
        "--upstream-base-url",
        fake_models.url,
        "--upstream-model",
        "pinned",
        "--upstream-api-key",
        "sk-up",
        "--upstream-models-ttl",
        "0",
    )

    with make_client(server.url) as sdk:
        assert [model.id for model in sdk.models.list()] == ["pinned", "alpha", "beta"]
        with pytest.raises(openai.NotFoundError):
            sdk.models.retrieve("up-small")
        fake_models.failing = False
        assert "up-small" in [model.id for model in sdk.models.list()]
        assert [model.id for model in sdk.models.list()].count("alpha") == 1
    assert fake_models.lists == 2  # not kept: --upstream-models-ttl 0
    assert "the upstream's model list is not available" in server.log()


RECOVERY = ("--lease-ttl", "1", "--scan-interval", "0.2")
SLOW = "[[slow]] one two three four five six"


def test_a_crashed_background_response_is_recovered_with_the_agent_it_named(
    start_server: StartServer, new_store: NewStore
) -> None:
    db = new_store("recovered")
    first = start_server(*NAMED, *DEFAULT, *RECOVERY, db=db)
    with make_client(first.url) as sdk:
        created = sdk.responses.create(model="beta", input=SLOW, background=True)
        wait_status(sdk, created.id, "in_progress")
    first.kill()

    # The default agent would answer "one two ..." (the embedded model's echo).
    second = start_server(*NAMED, *DEFAULT, *RECOVERY, db=db)
    with make_client(second.url) as sdk:
        final = wait_terminal(sdk, created.id, deadline=30)

    assert final.status == "completed"
    assert final.output_text == "BETA ONE TWO THREE FOUR FIVE SIX"


def test_a_crashed_response_whose_agent_is_gone_fails_rather_than_run_by_another(
    start_server: StartServer, new_store: NewStore
) -> None:
    db = new_store("gone")
    first = start_server(*NAMED, *RECOVERY, db=db)
    with make_client(first.url) as sdk:
        created = sdk.responses.create(model="beta", input=SLOW, background=True)
        wait_status(sdk, created.id, "in_progress")
    first.kill()

    second = start_server("--agent", f"alpha={AGENTS}:alpha", *RECOVERY, db=db)
    with make_client(second.url) as sdk:
        final = wait_terminal(sdk, created.id, deadline=30)

    assert final.status == "failed"
    assert final.error is not None
    assert "not served by this server any more" in final.error.message
