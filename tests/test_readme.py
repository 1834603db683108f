"""The README is what a new user reads first: its two opening commands are the ones CI
runs, and its settings table lists every setting."""

from __future__ import annotations

import re

from server import Settings
from tests.support.server import REPO

README = (REPO / "README.md").read_text()


def test_the_readme_opens_with_the_serve_and_test_commands_ci_runs() -> None:
    blocks = re.findall(r"```bash\n(.+?)\n```", README, re.DOTALL)
    serve, test = blocks[0], blocks[1]
    ci = (REPO / ".ci" / "run").read_text()

    assert serve.endswith("python -m server")
    assert f'TEST_COMMAND="{test}"' in ci


def test_every_setting_is_documented_with_its_flag_and_variable() -> None:
    for name in Settings.model_fields:
        flag, variable = f"`--{name.replace('_', '-')}`", f"`DURABLE_RESPONSES_{name.upper()}`"
        assert f"| {flag} | {variable} |" in README, name
