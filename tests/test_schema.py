"""The migrated schema is pinned: a change to it must come with a new migration and a change here."""

import peewee

from cairn_cli import config, db
from cairn_cli.db import migrations

MEMORY_SCHEMA = {
    "cairn_migrations": ["name", "applied_at"],
    "memories": [
        "id",
        "content",
        "content_hash",
        "norm_hash",
        "keywords",
        "scope",
        "kind",
        "confidence",
        "corroborations",
        "contradictions",
        "source_ref",
        "session_id",
        "created_at",
        "updated_at",
        "superseded_by",
        "embedding",
        "embedding_model",
    ],
    "machine_state": ["key", "value", "updated_at", "history"],
}
EPHEMERAL_SCHEMA = {
    "cairn_migrations": ["name", "applied_at"],
    "memory_deliveries": [
        "id",
        "session_id",
        "turn",
        "memory_id",
        "context_window",
        "context_key",
        "rank",
        "final_score",
        "score_components",
        "reranker_model",
        "ranker",
        "layer",
        "scope",
        "delivered_at",
        "grade",
        "hard_negative",
        "graded_at",
        "engaged",
        "engaged_score",
        "engaged_method",
        "arm",
        "engaged_lexical",
        "engaged_semantic",
        "engaged_at",
    ],
    "hook_state": [
        "id",
        "session_id",
        "turn",
        "arm",
        "transcript_path",
        "is_subagent",
        "agent_id",
        "context_key",
        "data",
        "created_at",
    ],
}


def _schema(database: peewee.Database) -> dict[str, list[str]]:
    return {t: [c.name for c in database.get_columns(t)] for t in database.get_tables()}


def test_migrated_schema_is_pinned():
    mem = db.open_memory_db(config.memory_db_url())
    eph = db.open_ephemeral_db(config.ephemeral_db_url())
    assert _schema(mem) == MEMORY_SCHEMA
    assert _schema(eph) == EPHEMERAL_SCHEMA
    assert [i.columns for i in eph.get_indexes("hook_state") if i.unique] == [["session_id", "turn"]]
    assert sorted(i.name for i in mem.get_indexes("memories")) == [
        "memories_content_hash",
        "memories_norm_hash",
        "memories_scope",
        "memories_superseded_by",
        "memories_updated_at",
    ]


def test_databases_live_under_cairn_home(cairn_home):
    db.open_db(config.memory_db_url(), config.ephemeral_db_url())
    assert (cairn_home / "memory.db").is_file() and (cairn_home / "ephemeral.db").is_file()


def test_migrations_are_recorded_in_order_and_applied_once(tmp_path):
    database = peewee.SqliteDatabase(str(tmp_path / "m.db"))
    assert migrations.apply_pending(database, migrations.MEMORY_MIGRATIONS) == [
        "0001_memories",
        "0002_machine_state",
        "0003_memories_updated_at_index",
    ]
    assert migrations.apply_pending(database, migrations.MEMORY_MIGRATIONS) == []
    rows = database.execute_sql("select name from cairn_migrations order by name").fetchall()
    assert [r[0] for r in rows] == ["0001_memories", "0002_machine_state", "0003_memories_updated_at_index"]


def test_a_new_migration_applies_on_top(tmp_path):
    database = peewee.SqliteDatabase(str(tmp_path / "m.db"))
    migrations.apply_pending(database, migrations.MEMORY_MIGRATIONS)
    calls = []
    extra = migrations.MEMORY_MIGRATIONS + [("0099_probe", lambda d: calls.append(d))]
    assert migrations.apply_pending(database, extra) == ["0099_probe"]
    assert len(calls) == 1


def test_sqlite_pragmas():
    mem = db.open_memory_db(config.memory_db_url())
    assert mem.execute_sql("pragma journal_mode").fetchone()[0] == "wal"
    assert mem.execute_sql("pragma foreign_keys").fetchone()[0] == 1
