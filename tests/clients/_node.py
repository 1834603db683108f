"""The Node.js client checks' shared part: a pinned npm project (a folder of this one with
its package.json, package-lock.json and script) copied and installed once per session,
and its script run against a server.

Skipped without Node.js and npm, or when the locked packages cannot be installed (no
registry in reach); under CI (`CI=true`, where .ci/run installs Node.js and npm), each of
those is a failure instead, so that the client checks never pass by not running.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def installed(tmp_path_factory: pytest.TempPathFactory, project: str, what: str) -> Path:
    """A copy of tests/clients/<project> with its locked packages installed."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        _cannot(f"Node.js and npm are needed for {what}")
    folder = tmp_path_factory.mktemp(project)
    for source in (HERE / project).iterdir():
        if source.is_file():
            shutil.copy(source, folder / source.name)
    done = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=45,
    )
    if done.returncode != 0:
        _cannot(f"{what} could not be installed: {done.stderr[-500:]}")
    return folder


def _cannot(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI=true: .ci/run installs Node.js and npm)")
    pytest.skip(reason)


def run_script(folder: Path, script: str, base_url: str) -> subprocess.CompletedProcess[str]:
    """`node <script>` in `folder`, told the server's URL (BASE_URL), with only node on
    its PATH."""
    return subprocess.run(
        ["node", script],
        cwd=folder,
        env={"BASE_URL": base_url, "PATH": str(Path(shutil.which("node") or "node").parent)},
        capture_output=True,
        text=True,
        timeout=30,
    )
