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
        "instance",
    ],
    "machine_state": ["key", "value", "updated_at", "history"],
    "memory_merges": [
        "id",
        "memory_id",
        "content",
        "keywords",
        "scope",
        "kind",
        "source_ref",
        "session_id",
        "method",
        "similarity",
        "merged_at",
    ],
    # the full-text index (migration 0005, kept in step by triggers: tests/test_fulltext.py)
    "fulltext_docs": ["memory_id", "scope", "meta", "content_len", "keyword_len", "terms", "grp"],
    "fulltext_pending": ["memory_id"],
    "fulltext_postings": ["term", "scope_id", "memory_id", "tf", "dl"],
    "fulltext_scopes": [
        "id",
        "scope",
        "n",
        "n_meta",
        "content_len",
        "keyword_len",
        "content_len_meta",
        "keyword_len_meta",
    ],
    "fulltext_terms": ["term", "df", "df_meta", "tf_max", "dl_min"],
    # `cairn replay` (migration 0006): the content cache of model calls and the runs
    "replay_calls": [
        "key",
        "backend",
        "model",
        "role",
        "answer",
        "input_tokens",
        "output_tokens",
        "run_id",
        "created_at",
    ],
    "replay_runs": ["id", "status", "config", "sent", "report", "created_at", "updated_at"],
    # the team's deployed students (migration 0008, core/learning/team.py)
    "student_versions": ["name", "checksum", "size", "blob", "card", "instance", "published_at"],
    # a learned embedder's staged vectors (migration 0010, core/store/embedders.py)
    "memory_vectors": ["id", "memory_id", "embedding_model", "embedding", "memory_updated_at"],
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
        "engaged_backfill",
        "instance",
        "grade_propensity",
        "grade_asked",
        "agent",
    ],
    "evidence_applied": ["id", "session_id", "turn", "memory_id", "kind", "applied_at"],
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
        "instance",
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
        "memories_instance",
        "memories_norm_hash",
        "memories_scope",
        "memories_superseded_by",
        "memories_updated_at",
    ]
    assert sorted(i.name for i in mem.get_indexes("fulltext_docs")) == ["fulltext_docs_group", "fulltext_docs_scope"]
    triggers = mem.execute_sql("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name").fetchall()
    assert [t[0] for t in triggers] == [
        "fulltext_docs_added",
        "fulltext_docs_removed",
        "fulltext_docs_replaced_not_updated",
        "memories_fulltext_delete",
        "memories_fulltext_insert",
        "memories_fulltext_update",
    ]


def test_databases_live_under_cairn_home(cairn_home):
    db.open_db(config.memory_db_url(), config.ephemeral_db_url())
    assert (cairn_home / "memory.db").is_file() and (cairn_home / "ephemeral.db").is_file()


def test_migrations_are_recorded_in_order_and_applied_once(tmp_path):
    database = peewee.SqliteDatabase(str(tmp_path / "m.db"))
    names = [
        "0001_memories",
        "0002_machine_state",
        "0003_memories_updated_at_index",
        "0004_memory_merges",
        "0005_memories_fulltext",
        "0006_replay",
        "0007_memories_instance",
        "0008_student_versions",
        "0009_double_precision",
        "0010_memory_vectors",
        "0011_memories_pgvector",
    ]
    assert migrations.apply_pending(database, migrations.MEMORY_MIGRATIONS) == names
    assert migrations.apply_pending(database, migrations.MEMORY_MIGRATIONS) == []
    rows = database.execute_sql("select name from cairn_migrations order by name").fetchall()
    assert [r[0] for r in rows] == names


def test_evidence_recorded_in_hook_state_by_an_older_cairn_moves_to_its_own_table(tmp_path):
    database = peewee.SqliteDatabase(str(tmp_path / "e.db"))
    older = [m for m in migrations.EPHEMERAL_MIGRATIONS if m[0] < "0004"]
    migrations.apply_pending(database, older)
    database.execute_sql(
        "INSERT INTO hook_state (session_id, turn, is_subagent, data, created_at) VALUES (?, ?, 0, ?, ?)",
        ("s1", 3, '{"cu_applied": [7, 9], "contradict_applied": [4], "prompt": "x"}', "2026-01-01 00:00:00"),
    )
    assert migrations.apply_pending(database, migrations.EPHEMERAL_MIGRATIONS)[0] == "0004_evidence_applied"
    rows = database.execute_sql("SELECT session_id, turn, memory_id, kind FROM evidence_applied ORDER BY id")
    assert rows.fetchall() == [("s1", 3, 7, "cu"), ("s1", 3, 9, "cu"), ("s1", 3, 4, "-!")]


def test_home_databases_and_logs_are_private(cairn_home, cli):
    """Prompts, memories and transcripts' content are nobody else's to read: home 0700, files 0600."""
    from cairn_cli import hook_entry

    hook_entry.log("a line")
    assert cli("memory", "add", "a private memory").exit_code == 0
    assert oct(cairn_home.stat().st_mode & 0o777) == "0o700"
    for name in ("memory.db", "ephemeral.db", "logs/hook.log"):
        assert oct((cairn_home / name).stat().st_mode & 0o777) == "0o600", name
    for wal in cairn_home.glob("*.db-*"):
        assert oct(wal.stat().st_mode & 0o777) == "0o600", wal.name


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
