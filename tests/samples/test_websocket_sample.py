"""samples/websocket: a person steers a running agent from the keyboard over a WebSocket.
The sample is run as a user would, its keyboard a pipe: one line typed while the long
answer streams must stop that answer (steered) and start a successor that answers it."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import StartServer
from tests.support.server import REPO


def test_websocket(start_server: StartServer) -> None:
    server = start_server()

    done = subprocess.run(
        [sys.executable, str(REPO / "samples/websocket/client.py"), "--base-url", server.url],
        cwd=REPO,
        input="Make it about dragons [[words 6]]\n",
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )

    assert done.returncode == 0, f"{done.stdout}{done.stderr}"
    lines = done.stdout.splitlines()
    assert lines[0] == "> Tell me a long story about a lighthouse keeper [[words 300]] [[delay 50]]"
    assert re.fullmatch(r"steer accepted \(\w{8}\)", lines[3]), lines
    cut = re.fullmatch(r"-- incomplete \(steered\) after (\d+) words", lines[4])
    assert cut is not None and 1 <= int(cut.group(1)) < 300, lines
    first = re.fullmatch(r"\[(\w{8})\]", lines[1])
    successor = re.fullmatch(r"\[\w{8}\] continues \[(\w{8})\]", lines[5])
    assert first is not None and successor is not None, lines
    assert successor.group(1) == first.group(1)
    assert lines[6:] == ["Make it about dragons Make it", "-- completed after 6 words"]
