"""The house's import rules (../shared/STYLE.md), checked on the code itself: every import, module-level or inside
a function, read with ast."""

from __future__ import annotations

import ast
import re

import pytest

from tests.conftest import ROOT

PKG = ROOT / "cairn_cli"
# core's stages, lowest first: a stage imports only from the stages before it (and from itself)
CORE_ORDER = [
    {"text", "metrics", "transcript", "job_locks", "plotting", "prefilter"},
    {"store"},
    {"experiment"},
    {"labels"},
    {"ranking"},
    {"learning"},
    {"hooks", "stats", "replay"},
]


def _imports(path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _modules(folder: str):
    return sorted((PKG / folder).rglob("*.py")) if folder else sorted(PKG.glob("*.py"))


def _stage(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["cairn_cli", "core"] or len(parts) < 3:
        return None
    return next((i for i, names in enumerate(CORE_ORDER) if parts[2] in names), None)


@pytest.mark.parametrize("folder", ["core", "db", "ml"])
def test_the_domain_never_renders(folder):
    for path in _modules(folder):
        bad = {m for m in _imports(path) if m.split(".")[0] in ("typer", "rich", "click")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_db_and_ml_never_import_each_other():
    for folder, other in (("db", "cairn_cli.ml"), ("ml", "cairn_cli.db")):
        for path in _modules(folder):
            assert not {m for m in _imports(path) if m.startswith(other)}, path.relative_to(ROOT)


def test_commands_call_core_never_the_database_or_the_models():
    for path in [*_modules("commands"), PKG / "cli.py"]:
        bad = {m for m in _imports(path) if m.startswith(("cairn_cli.db", "cairn_cli.ml", "peewee"))}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_daemon_client_is_stdlib_only():
    bad = {
        m
        for m in _imports(PKG / "daemon" / "client.py")
        if m.startswith("cairn_cli.") or m.split(".")[0] in ("torch", "numpy", "peewee", "orjson", "rich", "typer")
    }
    assert bad <= {"cairn_cli.config", "cairn_cli.config.home_dir"}, bad


def test_core_stages_import_one_way():
    for path in _modules("core"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        here = _stage(module)
        if here is None:
            continue
        upward = {m for m in _imports(path) if (s := _stage(m)) is not None and s > here}
        assert not upward, f"{module} imports a later stage: {sorted(upward)}"


# a statement as cairn writes one: an upper-case SQL verb at the start of a string literal (or of an f-string)
_SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|PRAGMA|WITH|BEGIN|VACUUM|ANALYZE)\s")
# core/ranking/fallback.py still reads the full-text index in SQL of its own: another branch moves it into db/
_SQL_EXEMPT = {"core/ranking/fallback.py"}


def _sql_strings(path) -> list[str]:
    """The string literals of a module (an f-string's leading text too) that begin as a SQL statement does."""
    texts = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            texts.append(str(node.values[0].value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts.append(node.value)
    return [t for t in texts if _SQL.match(t)]


def test_only_db_writes_sql():
    for path in sorted(PKG.rglob("*.py")):
        where = path.relative_to(PKG).as_posix()
        if where.startswith("db/") or where in _SQL_EXEMPT:
            continue
        assert not _sql_strings(path), f"{where} holds SQL: {_sql_strings(path)}"
