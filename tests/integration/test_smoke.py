"""The smallest end-to-end check: the SDK gets an answer from a real server process."""

from __future__ import annotations

import openai


def test_foreground_create_answers_with_the_embedded_model(client: openai.OpenAI) -> None:
    response = client.responses.create(model="embedded", input="hello there [[words 4]]")

    assert response.status == "completed"
    assert response.output_text == "hello there hello there"
