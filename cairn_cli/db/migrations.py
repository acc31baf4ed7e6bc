"""Ordered migration registries, one per database, recorded in `cairn_migrations`.

Each migration declares a frozen snapshot of the tables it creates (literal table names, its own field
list) so that it never depends on the live models in tables.py.
"""

from __future__ import annotations

from collections.abc import Callable

import peewee

from cairn_cli.clock import utcnow
from cairn_cli.db.fields import JSONField

Migration = tuple[str, Callable[[peewee.Database], None]]


def _create(db: peewee.Database, table: str, fields: dict, indexes: tuple = ()) -> None:
    meta = type("Meta", (), {"database": db, "table_name": table, "indexes": indexes})
    model = type(table, (peewee.Model,), {**fields, "Meta": meta})  # class name = table: index names
    db.create_tables([model], safe=True)


def _memories_v1(db: peewee.Database) -> None:
    _create(
        db,
        "memories",
        {
            "content": peewee.TextField(),
            "content_hash": peewee.CharField(max_length=64, index=True),
            "norm_hash": peewee.CharField(max_length=64, index=True),
            "keywords": JSONField(),
            "scope": peewee.CharField(max_length=200, index=True),
            "kind": peewee.CharField(max_length=40),
            "confidence": peewee.FloatField(),
            "corroborations": peewee.IntegerField(default=0),
            "contradictions": peewee.IntegerField(default=0),
            "source_ref": peewee.CharField(max_length=200, null=True),
            "session_id": peewee.CharField(max_length=200, null=True),
            "created_at": peewee.DateTimeField(),
            "updated_at": peewee.DateTimeField(),
            "superseded_by": peewee.IntegerField(null=True, index=True),
            "embedding": peewee.BlobField(null=True),
            "embedding_model": peewee.CharField(max_length=200, null=True),
        },
    )


def _machine_state_v1(db: peewee.Database) -> None:
    _create(
        db,
        "machine_state",
        {
            "key": peewee.CharField(max_length=200, primary_key=True),
            "value": JSONField(null=True),
            "updated_at": peewee.DateTimeField(),
            "history": JSONField(),
        },
    )


def _deliveries_v1(db: peewee.Database) -> None:
    _create(
        db,
        "memory_deliveries",
        {
            "session_id": peewee.CharField(max_length=200, index=True),
            "turn": peewee.IntegerField(),
            "memory_id": peewee.IntegerField(index=True),
            "context_window": peewee.TextField(),
            "context_key": peewee.CharField(max_length=64, index=True),
            "rank": peewee.IntegerField(),
            "final_score": peewee.FloatField(),
            "score_components": JSONField(),
            "reranker_model": peewee.CharField(max_length=200),
            "ranker": peewee.CharField(max_length=200),
            "layer": peewee.CharField(max_length=100),
            "scope": peewee.CharField(max_length=200),
            "delivered_at": peewee.DateTimeField(),
            "grade": peewee.IntegerField(null=True),
            "hard_negative": peewee.BooleanField(null=True),
            "graded_at": peewee.DateTimeField(null=True),
            "engaged": peewee.BooleanField(null=True),
            "engaged_score": peewee.FloatField(null=True),
            "engaged_method": peewee.CharField(max_length=40, null=True),
            "arm": peewee.CharField(max_length=10, null=True),
        },
    )


def _hook_state_v1(db: peewee.Database) -> None:
    _create(
        db,
        "hook_state",
        {
            "session_id": peewee.CharField(max_length=200),
            "turn": peewee.IntegerField(),
            "arm": peewee.CharField(max_length=10, null=True),
            "transcript_path": peewee.TextField(null=True),
            "is_subagent": peewee.BooleanField(default=False),
            "agent_id": peewee.CharField(max_length=200, null=True),
            "context_key": peewee.CharField(max_length=64, null=True),
            "data": JSONField(),
            "created_at": peewee.DateTimeField(),
        },
        indexes=((("session_id", "turn"), True),),
    )


def _memories_updated_at_index(db: peewee.Database) -> None:
    # the store's version (MAX(updated_at)) and the fallback's newest-first cap read it on every ranking
    db.execute_sql("CREATE INDEX IF NOT EXISTS memories_updated_at ON memories (updated_at)")


def _deliveries_engagement_detail(db: peewee.Database) -> None:
    # both raw engagement measurements (the decision's method picks one), so thresholds can be calibrated later
    from playhouse.migrate import SchemaMigrator, migrate

    migrator = SchemaMigrator.from_database(db)
    migrate(
        migrator.add_column("memory_deliveries", "engaged_lexical", peewee.FloatField(null=True)),
        migrator.add_column("memory_deliveries", "engaged_semantic", peewee.FloatField(null=True)),
        migrator.add_column("memory_deliveries", "engaged_at", peewee.DateTimeField(null=True)),
    )
    db.execute_sql("CREATE INDEX IF NOT EXISTS memory_deliveries_session_turn ON memory_deliveries (session_id, turn)")


def _memory_merges(db: peewee.Database) -> None:
    """Every time a written memory is merged into an existing one instead of stored, what was written (text,
    keywords, scope, kind, version, session) and how it matched: a merge loses nothing."""
    _create(
        db,
        "memory_merges",
        {
            "memory_id": peewee.IntegerField(index=True),
            "content": peewee.TextField(),
            "keywords": JSONField(),
            "scope": peewee.CharField(max_length=200),
            "kind": peewee.CharField(max_length=40),
            "source_ref": peewee.CharField(max_length=200, null=True),
            "session_id": peewee.CharField(max_length=200, null=True),
            "method": peewee.CharField(max_length=20),
            "similarity": peewee.FloatField(null=True),
            "merged_at": peewee.DateTimeField(),
        },
    )


def _evidence_applied(db: peewee.Database) -> None:
    """One row per (session, turn, memory, cu | -!) applied: "applied once" is a unique row, inserted or not in the
    same transaction as the confidence change, never a list rewritten from a stale copy (issue: a Stop then a
    `cairn grade` on the same turn counted a corroboration twice). The lists kept in hook_state.data move here."""
    import orjson

    _create(
        db,
        "evidence_applied",
        {
            "session_id": peewee.CharField(max_length=200),
            "turn": peewee.IntegerField(),
            "memory_id": peewee.IntegerField(),
            "kind": peewee.CharField(max_length=4),
            "applied_at": peewee.DateTimeField(),
        },
        indexes=((("session_id", "turn", "memory_id", "kind"), True),),
    )
    now = utcnow()
    for session_id, turn, data in db.execute_sql("SELECT session_id, turn, data FROM hook_state").fetchall():
        try:
            record = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            continue
        for key, kind in (("cu_applied", "cu"), ("contradict_applied", "-!")):
            for memory_id in record.get(key) or []:
                if isinstance(memory_id, int):
                    db.execute_sql(
                        "INSERT INTO evidence_applied (session_id, turn, memory_id, kind, applied_at) "
                        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING".replace("%s", db.param),
                        (session_id, turn, memory_id, kind, now),
                    )


MEMORY_MIGRATIONS: list[Migration] = [
    ("0001_memories", _memories_v1),
    ("0002_machine_state", _machine_state_v1),
    ("0003_memories_updated_at_index", _memories_updated_at_index),
    ("0004_memory_merges", _memory_merges),
]
EPHEMERAL_MIGRATIONS: list[Migration] = [
    ("0001_memory_deliveries", _deliveries_v1),
    ("0002_hook_state", _hook_state_v1),
    ("0003_deliveries_engagement_detail", _deliveries_engagement_detail),
    ("0004_evidence_applied", _evidence_applied),
]


def _ledger(db: peewee.Database) -> type[peewee.Model]:
    meta = type("Meta", (), {"database": db, "table_name": "cairn_migrations"})
    return type(
        "MigrationLedger",
        (peewee.Model,),
        {
            "name": peewee.CharField(max_length=200, primary_key=True),
            "applied_at": peewee.DateTimeField(),
            "Meta": meta,
        },
    )


def apply_pending(db: peewee.Database, registry: list[Migration]) -> list[str]:
    """Apply, in order and each in its own transaction, the migrations not yet recorded. Returns their names."""
    ledger = _ledger(db)
    db.create_tables([ledger], safe=True)
    done = {name for (name,) in db.execute_sql("SELECT name FROM cairn_migrations").fetchall()}
    applied = []
    for name, migrate in registry:
        if name in done:
            continue
        with db.atomic():
            migrate(db)
            ledger.insert(name=name, applied_at=utcnow()).execute()
        applied.append(name)
    return applied
