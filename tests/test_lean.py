"""The lean connection (db.open_lean): the daemon-down fallback ranks and logs a turn through the stdlib's sqlite3,
without peewee, and what it writes is what the peewee path writes.

The process-level check (a fresh `cairn hook prompt` / `cairn rank` with no daemon imports no peewee) is in
test_fulltext.py's hot-path test; speed is benched (scripts/bench_fallback.py), never timed here.
"""

from __future__ import annotations

import sqlite3

import pytest

from cairn_cli import db
from cairn_cli.config import Settings, ephemeral_db_url, memory_db_url
from cairn_cli.core.hooks.request import PromptRequest
from cairn_cli.core.store import importing, open_stores
from cairn_cli.daemon import dispatch
from cairn_cli.db import migrations, schema
from cairn_cli.db.lean import LeanSqlite
from tests.conftest import EXAMPLES


def _urls() -> tuple[str, str]:
    s = Settings()
    return memory_db_url(s.DB_URL), ephemeral_db_url(s.EPHEMERAL_DB_URL)


def test_the_schema_names_are_the_registries():
    assert {k: tuple(n for n, _ in r) for k, r in migrations.REGISTRIES.items()} == schema.MIGRATIONS


def test_a_store_at_the_current_schema_opens_lean_and_closes_back_to_peewee(cairn_home):
    assert db.open_lean(*_urls())
    assert isinstance(db.connection("memory"), LeanSqlite) and isinstance(db.connection("ephemeral"), LeanSqlite)
    assert db.execute("memory", "SELECT count(*) FROM memories") == [(0,)]
    db.close_lean()
    assert not isinstance(db.connection("memory"), LeanSqlite)


def test_what_lean_cannot_serve_is_left_to_peewee(cairn_home, tmp_path):
    """A PostgreSQL URL, an in-memory or missing store, a store missing a migration: nothing opened lean."""
    memory_url, ephemeral_url = _urls()
    assert not db.open_lean("postgresql://cairn@127.0.0.1:1/cairn", ephemeral_url)
    assert not db.open_lean("sqlite:///:memory:", ephemeral_url)
    assert not db.open_lean(f"sqlite:///{tmp_path / 'missing.db'}", ephemeral_url)
    with sqlite3.connect(cairn_home / "ephemeral.db") as conn:
        conn.execute("DELETE FROM cairn_migrations WHERE name = '0007_double_precision'")
    assert not db.open_lean(memory_url, ephemeral_url)
    assert not db._lean


def test_the_lean_transaction_commits_rolls_back_and_nests(tmp_path):
    conn = LeanSqlite.open(str(tmp_path / "t.db"), {"journal_mode": "wal"})
    assert conn is not None
    conn.execute_sql("CREATE TABLE t (x INTEGER)")
    with conn.atomic():
        conn.execute_sql("INSERT INTO t VALUES (1)")
        with pytest.raises(RuntimeError), conn.atomic():
            conn.execute_sql("INSERT INTO t VALUES (2)")
            raise RuntimeError("inner")
        conn.execute_sql("INSERT INTO t VALUES (3)")
    with pytest.raises(RuntimeError), conn.atomic():
        conn.execute_sql("INSERT INTO t VALUES (4)")
        raise RuntimeError("outer")
    assert [r[0] for r in conn.execute_sql("SELECT x FROM t ORDER BY x")] == [1, 3]
    conn.close()


def _logged(session: str) -> tuple[list[tuple], list[tuple]]:
    """The turn's deliveries and hook_state rows as stored, less their ids and clocks."""
    with sqlite3.connect(db._sqlite_path(_urls()[1])) as conn:
        deliveries = conn.execute(
            "SELECT turn, memory_id, context_window, context_key, rank, final_score, score_components, reranker_model,"
            " ranker, layer, scope, arm, instance, typeof(delivered_at), length(delivered_at) FROM memory_deliveries"
            " WHERE session_id = ? ORDER BY id",
            (session,),
        ).fetchall()
        hook = conn.execute(
            "SELECT turn, arm, transcript_path, is_subagent, agent_id, context_key, data, instance, typeof(created_at)"
            " FROM hook_state WHERE session_id = ? ORDER BY id",
            (session,),
        ).fetchall()
    return deliveries, hook


def test_the_lean_fallback_logs_what_the_peewee_fallback_logs(cairn_home, monkeypatch):
    """The same two prompts ranked by the daemon-down fallback, once through the lean connection and once through
    peewee's (lean refused): the same deliveries with the same provenance and the same hook_state, turn after turn;
    rows written lean read back through the models."""
    from cairn_cli.db.tables import HookState, MemoryDelivery

    assert importing.import_jsonl(EXAMPLES, Settings(), embed=lambda texts: None).added == 18
    hook = {"transcript_path": None, "is_subagent": False, "agent_id": None}
    prompts = ("the integration tests fail with connection refused on port 5433", "how are prices stored?")
    opened = []
    real_open_lean = db.open_lean
    monkeypatch.setattr(db, "open_lean", lambda *a: opened.append(real_open_lean(*a)) or opened[-1])
    for session in ("lean", "peewee"):
        if session == "peewee":
            monkeypatch.setattr(db, "open_lean", lambda *a: opened.append(False) or False)
        for prompt in prompts:
            request = PromptRequest(prompt, session, scope="webshop", hook=hook)
            result = dispatch._in_process(request, {}, fallback="test")
            assert result["ranker"] == "cairn-fallback" and result["memories"]
        assert not db._lean  # closed when the ranking is done
    assert opened == [True, True, False, False]
    lean, peewee_rows = _logged("lean"), _logged("peewee")
    assert lean[0] and lean == peewee_rows
    assert [r[0] for r in lean[1]] == [1, 2]
    delivery = MemoryDelivery.select().where(MemoryDelivery.session_id == "lean").first()
    assert delivery.score_components["ranker"] == "cairn-fallback" and delivery.delivered_at.year >= 2026
    state = HookState.get((HookState.session_id == "lean") & (HookState.turn == 1))
    assert state.data["prompt"] == prompts[0] and state.is_subagent is False
    open_stores(Settings())
