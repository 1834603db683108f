"""The packages' layering, read from the source with `ast` (CONVENTIONS.md, ARCHITECTURE.md
"Packages"): imports flow `server -> recovery -> store` and never back, no package imports
another's private names, no package above `store` names one of its backends, and SQL is
written only in `store/`.

Every import counts, a type-only one (`if TYPE_CHECKING:`) too: it couples the packages
all the same. An exception has to be listed in EXCEPTIONS with the reason it cannot go.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The project packages each package may import, besides itself.
MAY_IMPORT = {
    "server": {"recovery"},
    "recovery": {"store"},
    "store": set(),
}

# (module, package it imports against MAY_IMPORT) -> why that import cannot be removed.
# Empty: the server opens the store through `recovery.open_store`, and gets the store's
# records and errors from `recovery` too.
EXCEPTIONS: dict[tuple[str, str], str] = {}

# What names a backend of `store`: its subpackages and what they export. Above `store`
# only the backend-neutral surface (the Store protocol, records, errors, open_store) is
# used, so that the server runs the same on either backend and a backend can change alone.
BACKENDS = {
    "sqlite",
    "postgres",
    "SQLiteStore",
    "PostgresStore",
    "open_sqlite_store",
    "open_postgres_store",
}

# A string that begins like an SQL statement (keywords in capitals, as the store writes
# them); prose such as "Delete a finished response" does not match.
_SQL = re.compile(
    r"""^\s*(
        SELECT\s | INSERT\s+(OR\s+\w+\s+)?INTO\s | REPLACE\s+INTO\s | UPDATE\s+\w+\s+SET\s
        | DELETE\s+FROM\s | CREATE\s+(UNIQUE\s+)?(TABLE|INDEX|VIEW|TRIGGER)\s
        | DROP\s+(TABLE|INDEX|VIEW|TRIGGER)\s | ALTER\s+TABLE\s | PRAGMA\s
        | WITH\s+(RECURSIVE\s+)?\w+\s*(\(|AS\s) | BEGIN(\s+(IMMEDIATE|DEFERRED|EXCLUSIVE))?\s*;?$
        | COMMIT\s*;?$ | ROLLBACK\b | SAVEPOINT\s | VACUUM\b | ANALYZE\b
    )""",
    re.VERBOSE,
)


def _modules() -> list[Path]:
    return sorted(p for package in MAY_IMPORT for p in (ROOT / package).rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _imports(tree: ast.AST) -> Iterator[tuple[int, str, list[str]]]:
    """(line, dotted module, names imported from it) of every absolute import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, [alias.name for alias in node.names]


def layering_violations(module: str, source: str) -> list[str]:
    """What `module` (a path such as `server/_app.py`) imports against MAY_IMPORT, or of
    another package's private names, or a backend of `store`, apart from EXCEPTIONS."""
    own = module.split("/")[0]
    found = []
    for line, dotted, names in _imports(ast.parse(source)):
        package, *rest = dotted.split(".")
        if package not in MAY_IMPORT or package == own:
            continue
        where = f"{module}:{line}: `{dotted}`"
        if package not in MAY_IMPORT[own] and (module, package) not in EXCEPTIONS:
            found.append(f"{where}: {own} must not import {package}")
        private = [part for part in rest + names if part.startswith("_")]
        if private:
            found.append(f"{where}: private name {private[0]} of another package")
        backend = [part for part in rest + names if part in BACKENDS]
        if package == "store" and backend:
            found.append(f"{where}: store backend {backend[0]}; use the Store protocol")
    return found


def _strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every string literal, an f-string as one with its placeholders as `x`."""
    parts = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts.update(id(part) for part in node.values)
            text = "".join(
                part.value if isinstance(part, ast.Constant) else "x" for part in node.values
            )
            yield node.lineno, text
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts
        ):
            yield node.lineno, node.value


def sql_violations(module: str, source: str) -> list[str]:
    """The SQL statements written in `module`, unless it is in `store/`."""
    if module.startswith("store/"):
        return []
    return [
        f"{module}:{line}: SQL outside store/: {text.strip()[:60]!r}"
        for line, text in _strings(ast.parse(source))
        if _SQL.match(text)
    ]


def test_imports_flow_from_server_to_recovery_to_store() -> None:
    found = []
    for path in _modules():
        found += layering_violations(_name(path), path.read_text())
    assert found == [], "\n".join(found)


def test_sql_is_written_only_in_store() -> None:
    found = []
    for path in _modules():
        found += sql_violations(_name(path), path.read_text())
    assert found == [], "\n".join(found)


def test_the_sql_check_sees_the_stores_statements() -> None:
    """Not vacuous: the same pattern finds the store's own statements."""
    statements = [
        text
        for path in (ROOT / "store").rglob("*.py")
        for _, text in _strings(ast.parse(path.read_text()))
        if _SQL.match(text)
    ]
    kinds = {text.split()[0] for text in statements}
    assert {"SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "PRAGMA"} <= kinds


def test_every_exception_is_still_needed() -> None:
    used = set()
    for path in _modules():
        for _, dotted, _names in _imports(ast.parse(path.read_text())):
            used.add((_name(path), dotted.split(".")[0]))
    assert set(EXCEPTIONS) <= used, f"stale: {sorted(set(EXCEPTIONS) - used)}"


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        pytest.param("server/_x.py", "from store import open_store\n", 1, id="server-store"),
        pytest.param("server/_x.py", "import store._sqlite\n", 2, id="server-store-private"),
        pytest.param(
            "server/_x.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from store import ItemRow\n",
            1,
            id="server-store-type-only",
        ),
        pytest.param("recovery/_x.py", "from server import create_app\n", 1, id="recovery-server"),
        pytest.param("store/_x.py", "import recovery\n", 1, id="store-recovery"),
        pytest.param("store/_x.py", "from server._app import create_app\n", 2, id="store-server"),
        pytest.param("server/_x.py", "from recovery._runtime import Runtime\n", 1, id="private"),
        pytest.param("server/_x.py", "from recovery import _history\n", 1, id="private-name"),
        pytest.param("server/_x.py", "from recovery import Runtime\n", 0, id="allowed"),
        pytest.param("recovery/_x.py", "from store import Store, open_store\n", 0, id="allowed-2"),
        pytest.param("recovery/_x.py", "from store import SQLiteStore\n", 1, id="backend-class"),
        pytest.param("recovery/_x.py", "from store import PostgresStore\n", 1, id="backend-pg"),
        pytest.param("recovery/_x.py", "import store.sqlite\n", 1, id="backend-module"),
        pytest.param("recovery/_x.py", "from store import postgres\n", 1, id="backend-name"),
        pytest.param(
            "recovery/_x.py", "from store.postgres import open_postgres_store\n", 1, id="backend-2"
        ),
        pytest.param(
            "recovery/_x.py", "from store.sqlite._store import migrate\n", 2, id="backend-private"
        ),
        pytest.param("server/_x.py", "from store import SQLiteStore\n", 2, id="server-backend"),
        pytest.param("server/_y.py", "from ._x import helper\n", 0, id="relative"),
    ],
)
def test_the_import_check_catches_a_violation(module: str, source: str, expected: int) -> None:
    assert len(layering_violations(module, source)) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param('Q = "SELECT id FROM responses WHERE id = ?"\n', 1, id="select"),
        pytest.param('Q = f"UPDATE {table} SET status = ?"\n', 1, id="f-string"),
        pytest.param('Q = f"SELECT {columns} FROM t"\n', 1, id="f-string-once"),
        pytest.param('Q = ("INSERT INTO t (a)"\n     " VALUES (?)")\n', 1, id="concatenated"),
        pytest.param('Q = "  DELETE FROM events"\n', 1, id="indented"),
        pytest.param('Q = "PRAGMA journal_mode=WAL"\n', 1, id="pragma"),
        pytest.param('Q = "WITH RECURSIVE c(x) AS (SELECT 1)"\n', 1, id="with"),
        pytest.param('S = "Delete a finished response"\n', 0, id="prose"),
        pytest.param('S = "Update a conversation\'s metadata"\n', 0, id="prose-2"),
        pytest.param('S = "SELECTED"\n', 0, id="word"),
    ],
)
def test_the_sql_check_catches_a_violation(source: str, expected: int) -> None:
    assert len(sql_violations("recovery/_x.py", source)) == expected
    assert sql_violations("store/_x.py", source) == []
