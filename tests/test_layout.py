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
    {"ids", "private", "text", "metrics", "transcript", "job_locks", "plotting", "prefilter", "redact"},
    {"store"},
    {"experiment"},
    {"labels"},
    {"ranking"},
    {"learning"},
    {"hooks", "stats", "replay", "settings_report", "doctor", "privacy", "mcp_tools"},
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
    assert bad <= {"cairn_cli.config", "cairn_cli.config.home_dir", "cairn_cli.wire"}, bad
    # its JSON: C's scanner or, without it, the json package; nothing else (typing: only for mypy, TYPE_CHECKING)
    assert {m.split(".")[0] for m in _imports(PKG / "wire.py")} <= {"__future__", "_json", "json", "typing"}


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
        if where.startswith("db/"):
            continue
        assert not _sql_strings(path), f"{where} holds SQL: {_sql_strings(path)}"


# -- the picture of the house: which module imports which ---------------------------------------------------------


def _module_name(path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """module -> the cairn_cli modules it names in an import (module-level or in a function): `from a.b import c`
    is an arrow to a.b.c when that is a module, else to a.b."""
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.update(
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                )
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _under(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_import_graph_has_no_cycles():
    graph = _graph()
    cycles = [
        " ⇄ ".join(c) + "  (" + ", ".join(f"{a} -> {b}" for a in c for b in sorted(graph[a]) if b in c) + ")"
        for c in _cycles(graph)
    ]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


EDGES = (
    "cairn_cli.commands",
    "cairn_cli.cli",
    "cairn_cli.daemon",
    "cairn_cli.hotpath",
    "cairn_cli.entry",
    "cairn_cli.hook_entry",
    "cairn_cli.launcher",
    "cairn_cli.api",
    "cairn_cli.mcp_server",
)


def test_no_arrow_points_up():
    """core, db and ml never import the faces (commands, cli, daemon, the hot path's entries, the API); db and ml never import
    core (core's own stages: test_core_stages_import_one_way)."""
    graph = _graph()
    upward = [
        f"{m} -> {t}"
        for m in sorted(graph)
        for t in sorted(graph[m])
        if (_under(m, "cairn_cli.core", "cairn_cli.db", "cairn_cli.ml") and _under(t, *EDGES))
        or (_under(m, "cairn_cli.db", "cairn_cli.ml") and _under(t, "cairn_cli.core"))
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


MAX_COMMAND_BODY = 40


def test_commands_are_thin():
    """Every command's body (after its docstring; its option declarations are its parameters, not counted; blank
    lines not counted) is at most MAX_COMMAND_BODY lines: the command declares and calls, core does the work."""
    import inspect
    from pathlib import Path

    from cairn_cli.cli import COMMANDS

    long = []
    for _, _, fn in COMMANDS:
        path = Path(inspect.getsourcefile(fn) or "")
        text = path.read_text()
        node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == fn.__name__)
        body = node.body[1:] if ast.get_docstring(node) is not None else node.body
        lines = [line for line in text.splitlines()[body[0].lineno - 1 : node.end_lineno] if line.strip()]
        if len(lines) > MAX_COMMAND_BODY:
            long.append(f"{path.relative_to(ROOT)}:{fn.__name__} ({len(lines)} lines)")
    assert not long, f"commands with a body over {MAX_COMMAND_BODY} lines:\n" + "\n".join(long)
