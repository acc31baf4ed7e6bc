"""The house's import rules (../shared/STYLE.md), checked on the code itself: every import, module-level or inside
a function, read with ast."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import ROOT

PKG = ROOT / "cairn_cli"
# core's stages, lowest first: a stage imports only from the stages before it (and from itself)
CORE_ORDER = [
    {"text", "metrics", "transcript", "locks", "plotting", "prefilter"},
    {"store"},
    {"experiment"},
    {"labels"},
    {"ranking"},
    {"learning"},
    {"hooks", "stats", "replay", "settings_report"},
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
