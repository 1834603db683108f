"""The project's docs stand alone: every relative link in them leads to a file of the
repository, and nothing outside the tests points at documents that are not in it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.server import REPO

DOCS = [REPO / "README.md", REPO / "ARCHITECTURE.md", *sorted((REPO / "docs").glob("*.md"))]

# Inline links and images, `[text](target)` or `[text](target "title")`.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...

# References to documents that live outside this repository (spelled in two pieces, so
# that this file is not itself such a reference).
OUTSIDE = ("../" + "shared", "durability" + ".md")


def relative_links(doc: Path) -> list[str]:
    text = FENCE.sub("", doc.read_text())  # code blocks hold code, not links
    links = [m.group(1) for m in LINK.finditer(text)]
    return [link for link in links if not EXTERNAL.match(link) and not link.startswith("#")]


def test_the_docs_exist() -> None:
    names = {doc.relative_to(REPO).as_posix() for doc in DOCS}
    assert {"docs/guarantees.md", "docs/protocol.md"} <= names


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.relative_to(REPO).as_posix())
def test_every_relative_link_resolves_to_a_file_of_the_repository(doc: Path) -> None:
    broken = []
    for link in relative_links(doc):
        path = link.split("#", 1)[0].split("?", 1)[0]
        target = (doc.parent / path).resolve()
        if not target.is_relative_to(REPO) or not target.exists():
            broken.append(link)
    assert not broken, f"{doc.name} links to what is not in the repository: {broken}"


def repository_files() -> list[str]:
    """Tracked files, and untracked ones that are not ignored."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return sorted({name for name in listed.decode().split("\0") if name})


def test_nothing_outside_the_tests_points_at_documents_outside_the_repository() -> None:
    offenders = []
    for name in repository_files():
        path = REPO / name
        if name.startswith("tests/") or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # not text
        for number, line in enumerate(text.splitlines(), 1):
            if any(needle in line for needle in OUTSIDE):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert not offenders, "references to documents outside the repository:\n" + "\n".join(offenders)
