"""Ordered migration registries, one per database, recorded in `cairn_migrations`.

Each migration declares a frozen snapshot of the tables it creates (literal table names, its own field
list) so that it never depends on the live models in tables.py.
"""

from __future__ import annotations

from collections.abc import Callable

import peewee

from cairn_cli.clock import utcnow
from cairn_cli.db.fields import JSONField
from cairn_cli.db.schema import MIGRATIONS

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


# The full-text index (core/store/search_index.py writes it, core/ranking/fallback.py reads it). The memories' own
# triggers queue every memory whose indexed fields change in `fulltext_pending`, in the writing transaction
# itself; cairn then replaces the memory's `fulltext_docs` row (its stemmed terms, computed in Python) and, on
# SQLite, the triggers below keep the postings, the per-term and the per-scope statistics in step with that row.
# 2 is the keyword weight the postings are counted at (FULLTEXT_KEYWORD_WEIGHT in core/store/search_index.py).
_FULLTEXT_SQLITE = (
    """
    CREATE TABLE fulltext_docs (
        memory_id INTEGER PRIMARY KEY, scope TEXT NOT NULL, meta INTEGER NOT NULL,
        content_len INTEGER NOT NULL, keyword_len INTEGER NOT NULL, terms TEXT NOT NULL, grp TEXT NOT NULL)
    """,
    """
    CREATE INDEX fulltext_docs_scope ON fulltext_docs (scope, meta, memory_id)
    """,
    """
    CREATE INDEX fulltext_docs_group ON fulltext_docs (grp, memory_id)
    """,
    """
    CREATE TABLE fulltext_scopes (
        id INTEGER PRIMARY KEY, scope TEXT NOT NULL UNIQUE, n INTEGER NOT NULL, n_meta INTEGER NOT NULL,
        content_len INTEGER NOT NULL, keyword_len INTEGER NOT NULL,
        content_len_meta INTEGER NOT NULL, keyword_len_meta INTEGER NOT NULL)
    """,
    """
    CREATE TABLE fulltext_postings (
        term TEXT NOT NULL, scope_id INTEGER NOT NULL, memory_id INTEGER NOT NULL, tf INTEGER NOT NULL,
        dl INTEGER NOT NULL, PRIMARY KEY (term, scope_id, memory_id)) WITHOUT ROWID
    """,
    """
    CREATE TABLE fulltext_terms (
        term TEXT PRIMARY KEY, df INTEGER NOT NULL, df_meta INTEGER NOT NULL, tf_max INTEGER NOT NULL,
        dl_min INTEGER NOT NULL) WITHOUT ROWID
    """,
    """
    CREATE TABLE fulltext_pending (memory_id INTEGER PRIMARY KEY)
    """,
    """
    CREATE TRIGGER fulltext_docs_added AFTER INSERT ON fulltext_docs BEGIN
        INSERT INTO fulltext_scopes
            (scope, n, n_meta, content_len, keyword_len, content_len_meta, keyword_len_meta)
            VALUES (NEW.scope, 0, 0, 0, 0, 0, 0) ON CONFLICT (scope) DO NOTHING;
        UPDATE fulltext_scopes SET
            n = n + 1 - NEW.meta, n_meta = n_meta + NEW.meta,
            content_len = content_len + (1 - NEW.meta) * NEW.content_len,
            keyword_len = keyword_len + (1 - NEW.meta) * NEW.keyword_len,
            content_len_meta = content_len_meta + NEW.meta * NEW.content_len,
            keyword_len_meta = keyword_len_meta + NEW.meta * NEW.keyword_len
            WHERE scope = NEW.scope;
        INSERT INTO fulltext_postings (term, scope_id, memory_id, tf, dl)
            SELECT t.key, s.id, NEW.memory_id,
                json_extract(t.value, '$[0]') + 2 * json_extract(t.value, '$[1]'),
                NEW.content_len + 2 * NEW.keyword_len
            FROM json_each(NEW.terms) AS t, fulltext_scopes AS s
            WHERE s.scope = NEW.scope AND NEW.meta = 0;
        INSERT INTO fulltext_terms (term, df, df_meta, tf_max, dl_min)
            SELECT t.key, 1 - NEW.meta, NEW.meta,
                CASE NEW.meta WHEN 0 THEN json_extract(t.value, '$[0]') + 2 * json_extract(t.value, '$[1]') ELSE 0 END,
                CASE NEW.meta WHEN 0 THEN NEW.content_len + 2 * NEW.keyword_len ELSE 1073741824 END
            FROM json_each(NEW.terms) AS t WHERE true
            ON CONFLICT (term) DO UPDATE SET
                df = df + excluded.df, df_meta = df_meta + excluded.df_meta,
                tf_max = max(tf_max, excluded.tf_max), dl_min = min(dl_min, excluded.dl_min);
    END
    """,
    """
    CREATE TRIGGER fulltext_docs_removed AFTER DELETE ON fulltext_docs BEGIN
        DELETE FROM fulltext_postings
            WHERE scope_id = (SELECT id FROM fulltext_scopes WHERE scope = OLD.scope)
            AND memory_id = OLD.memory_id AND term IN (SELECT key FROM json_each(OLD.terms));
        UPDATE fulltext_terms SET df = df - 1 + OLD.meta, df_meta = df_meta - OLD.meta
            WHERE term IN (SELECT key FROM json_each(OLD.terms));
        DELETE FROM fulltext_terms
            WHERE df = 0 AND df_meta = 0 AND term IN (SELECT key FROM json_each(OLD.terms));
        UPDATE fulltext_scopes SET
            n = n - 1 + OLD.meta, n_meta = n_meta - OLD.meta,
            content_len = content_len - (1 - OLD.meta) * OLD.content_len,
            keyword_len = keyword_len - (1 - OLD.meta) * OLD.keyword_len,
            content_len_meta = content_len_meta - OLD.meta * OLD.content_len,
            keyword_len_meta = keyword_len_meta - OLD.meta * OLD.keyword_len
            WHERE scope = OLD.scope;
    END
    """,
    """
    CREATE TRIGGER fulltext_docs_replaced_not_updated BEFORE UPDATE ON fulltext_docs BEGIN
        SELECT RAISE(ABORT, 'a fulltext_docs row is deleted and inserted again, never updated');
    END
    """,
    """
    CREATE TRIGGER memories_fulltext_insert AFTER INSERT ON memories BEGIN
        INSERT OR IGNORE INTO fulltext_pending (memory_id) VALUES (NEW.id);
    END
    """,
    """
    CREATE TRIGGER memories_fulltext_update AFTER UPDATE ON memories
        WHEN OLD.content IS NOT NEW.content OR OLD.keywords IS NOT NEW.keywords OR OLD.kind IS NOT NEW.kind
            OR OLD.scope IS NOT NEW.scope OR OLD.superseded_by IS NOT NEW.superseded_by
            OR OLD.session_id IS NOT NEW.session_id
    BEGIN
        INSERT OR IGNORE INTO fulltext_pending (memory_id) VALUES (NEW.id);
    END
    """,
    """
    CREATE TRIGGER memories_fulltext_delete AFTER DELETE ON memories BEGIN
        INSERT OR IGNORE INTO fulltext_pending (memory_id) VALUES (OLD.id);
    END
    """,
)
_FULLTEXT_POSTGRES = (
    """
    CREATE TABLE fulltext_docs (
        memory_id INTEGER PRIMARY KEY, scope VARCHAR(200) NOT NULL, meta SMALLINT NOT NULL,
        content_len INTEGER NOT NULL, keyword_len INTEGER NOT NULL, terms TEXT NOT NULL, grp VARCHAR(210) NOT NULL,
        tsv TSVECTOR NOT NULL)
    """,
    """
    CREATE INDEX fulltext_docs_scope ON fulltext_docs (scope, meta, memory_id)
    """,
    """
    CREATE INDEX fulltext_docs_group ON fulltext_docs (grp, memory_id)
    """,
    """
    CREATE INDEX fulltext_docs_tsv ON fulltext_docs USING GIN (tsv)
    """,
    """
    CREATE TABLE fulltext_pending (memory_id INTEGER PRIMARY KEY)
    """,
    """
    CREATE FUNCTION cairn_fulltext_pending() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            INSERT INTO fulltext_pending (memory_id) VALUES (OLD.id) ON CONFLICT DO NOTHING;
            RETURN OLD;
        END IF;
        IF TG_OP = 'INSERT' OR OLD.content IS DISTINCT FROM NEW.content OR OLD.keywords IS DISTINCT FROM NEW.keywords
            OR OLD.kind IS DISTINCT FROM NEW.kind OR OLD.scope IS DISTINCT FROM NEW.scope
            OR OLD.superseded_by IS DISTINCT FROM NEW.superseded_by OR OLD.session_id IS DISTINCT FROM NEW.session_id THEN
            INSERT INTO fulltext_pending (memory_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
        END IF;
        RETURN NEW;
    END
    $body$
    """,
    """
    CREATE TRIGGER memories_fulltext AFTER INSERT OR UPDATE OR DELETE ON memories
        FOR EACH ROW EXECUTE FUNCTION cairn_fulltext_pending()
    """,
)


def _deliveries_backfill_tag(db: peewee.Database) -> None:
    """`engaged_backfill`: the `cairn backfill-semantic` run that examined the delivery (rescued or not), so that a
    second run examines nothing again and the backfill's basis stays apart from the live second chance's."""
    from playhouse.migrate import SchemaMigrator, migrate

    migrator = SchemaMigrator.from_database(db)
    migrate(migrator.add_column("memory_deliveries", "engaged_backfill", peewee.CharField(max_length=40, null=True)))


def _memories_fulltext(db: peewee.Database) -> None:
    """The full-text index's tables and triggers, and every live memory queued for it: the first cairn process that
    opens the store indexes them (the stemming is cairn's own, core/text.py, which a migration does not import)."""
    for statement in _FULLTEXT_POSTGRES if isinstance(db, peewee.PostgresqlDatabase) else _FULLTEXT_SQLITE:
        db.execute_sql(statement)
    db.execute_sql("INSERT INTO fulltext_pending (memory_id) SELECT id FROM memories WHERE superseded_by IS NULL")


def _replay(db: peewee.Database) -> None:
    """`cairn replay`: every model call cached by content (backend, model, prompt hash -> answer), so a rerun or a
    resumed run pays for nothing twice, and the runs (their configuration, what was sent where, the report)."""
    _create(
        db,
        "replay_calls",
        {
            "key": peewee.CharField(max_length=64, primary_key=True),
            "backend": peewee.CharField(max_length=40),
            "model": peewee.CharField(max_length=200),
            "role": peewee.CharField(max_length=40),
            "answer": peewee.TextField(),
            "input_tokens": peewee.IntegerField(),
            "output_tokens": peewee.IntegerField(),
            "run_id": peewee.CharField(max_length=64),
            "created_at": peewee.DateTimeField(),
        },
    )
    _create(
        db,
        "replay_runs",
        {
            "id": peewee.CharField(max_length=64, primary_key=True),
            "status": peewee.CharField(max_length=20),
            "config": JSONField(),
            "sent": JSONField(),
            "report": JSONField(null=True),
            "created_at": peewee.DateTimeField(),
            "updated_at": peewee.DateTimeField(),
        },
    )


def _instance_column(table: str) -> Callable[[peewee.Database], None]:
    def migrate_it(db: peewee.Database) -> None:
        """Who wrote each row (the instance id), for stores several machines share; old rows stay NULL."""
        from playhouse.migrate import SchemaMigrator, migrate

        migrator = SchemaMigrator.from_database(db)
        migrate(migrator.add_column(table, "instance", peewee.CharField(max_length=100, null=True)))
        db.execute_sql(f"CREATE INDEX IF NOT EXISTS {table}_instance ON {table} (instance)")

    return migrate_it


def _double_precision(columns: dict[str, list[str]]) -> Callable[[peewee.Database], None]:
    def migrate_it(db: peewee.Database) -> None:
        """On PostgreSQL a peewee FloatField is REAL (about 7 digits): scores, confidences and cosines become
        DOUBLE PRECISION, as they are on SQLite. Nothing to do on SQLite."""
        if not isinstance(db, peewee.PostgresqlDatabase):
            return
        for table, names in columns.items():
            for name in names:
                db.execute_sql(f"ALTER TABLE {table} ALTER COLUMN {name} TYPE DOUBLE PRECISION")

    return migrate_it


def _deliveries_instance(db: peewee.Database) -> None:
    _instance_column("memory_deliveries")(db)
    _instance_column("hook_state")(db)


def _student_versions(db: peewee.Database) -> None:
    """The deployed students, published to a store several machines share: each instance's daemon installs the
    one machine state names from here (checksum verified), as a local deploy."""
    _create(
        db,
        "student_versions",
        {
            "name": peewee.CharField(max_length=200, primary_key=True),
            "checksum": peewee.CharField(max_length=64),
            "size": peewee.BigIntegerField(),
            "blob": peewee.BlobField(),
            "card": JSONField(),
            "instance": peewee.CharField(max_length=100, null=True),
            "published_at": peewee.DateTimeField(),
        },
    )


def _memory_vectors(db: peewee.Database) -> None:
    """A learned embedder's vectors staged beside the live ones (core/store/embedders.py): a deploy re-embeds the
    store here in the background and copies them into `memories` in one transaction; the previous embedder's stay
    for a cheap rollback. `memory_updated_at`: the memory's version the vector was made from (stale once it moves)."""
    _create(
        db,
        "memory_vectors",
        {
            "memory_id": peewee.IntegerField(),
            "embedding_model": peewee.CharField(max_length=200),
            "embedding": peewee.BlobField(),
            "memory_updated_at": peewee.DateTimeField(),
        },
        indexes=((("memory_id", "embedding_model"), True), (("embedding_model",), False)),
    )


def _memories_pgvector(db: peewee.Database) -> None:
    """On PostgreSQL with the `vector` extension: memories' embeddings also in a `vector` column kept in step by a
    trigger, for HNSW search inside the server (db/vectors.py). Nothing on SQLite or without the extension."""
    from cairn_cli.db import pgvector_schema

    pgvector_schema.migrate(db)


def _deliveries_grade_propensity(db: peewee.Database) -> None:
    """Teacher demotion (core/experiment/grading.py): the probability the delivery's turn asked the agent for grades
    (what inverse-propensity weighting divides by) and whether it did. Old rows stay NULL: every turn was asked."""
    from playhouse.migrate import SchemaMigrator, migrate

    migrator = SchemaMigrator.from_database(db)
    migrate(
        migrator.add_column("memory_deliveries", "grade_propensity", peewee.DoubleField(null=True)),
        migrator.add_column("memory_deliveries", "grade_asked", peewee.BooleanField(null=True)),
    )


def _deliveries_agent(db: peewee.Database) -> None:
    """Which agent a delivery went to (claude, codex, gemini: core/hooks/agents.py); old rows stay NULL (Claude Code's
    hooks were the only ones)."""
    from playhouse.migrate import SchemaMigrator, migrate

    migrate(
        SchemaMigrator.from_database(db).add_column(
            "memory_deliveries", "agent", peewee.CharField(max_length=20, null=True)
        )
    )


MEMORY_MIGRATIONS: list[Migration] = [
    ("0001_memories", _memories_v1),
    ("0002_machine_state", _machine_state_v1),
    ("0003_memories_updated_at_index", _memories_updated_at_index),
    ("0004_memory_merges", _memory_merges),
    ("0005_memories_fulltext", _memories_fulltext),
    ("0006_replay", _replay),
    ("0007_memories_instance", _instance_column("memories")),
    ("0008_student_versions", _student_versions),
    ("0009_double_precision", _double_precision({"memories": ["confidence"], "memory_merges": ["similarity"]})),
    ("0010_memory_vectors", _memory_vectors),
    ("0011_memories_pgvector", _memories_pgvector),
]
EPHEMERAL_MIGRATIONS: list[Migration] = [
    ("0001_memory_deliveries", _deliveries_v1),
    ("0002_hook_state", _hook_state_v1),
    ("0003_deliveries_engagement_detail", _deliveries_engagement_detail),
    ("0004_evidence_applied", _evidence_applied),
    ("0005_deliveries_backfill_tag", _deliveries_backfill_tag),
    ("0006_deliveries_instance", _deliveries_instance),
    (
        "0007_double_precision",
        _double_precision(
            {"memory_deliveries": ["final_score", "engaged_score", "engaged_lexical", "engaged_semantic"]}
        ),
    ),
    ("0008_deliveries_grade_propensity", _deliveries_grade_propensity),
    ("0009_deliveries_agent", _deliveries_agent),
]

REGISTRIES: dict[str, list[Migration]] = {"memory": MEMORY_MIGRATIONS, "ephemeral": EPHEMERAL_MIGRATIONS}
if {kind: tuple(name for name, _ in registry) for kind, registry in REGISTRIES.items()} != MIGRATIONS:
    raise RuntimeError("cairn_cli/db/schema.py must list the migrations of MEMORY_ and EPHEMERAL_MIGRATIONS")


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


MIGRATION_LOCK = 0x636169726E  # "cairn": the PostgreSQL advisory lock two instances starting at once share


def apply_pending(db: peewee.Database, registry: list[Migration]) -> list[str]:
    """Apply, in order and each in its own transaction, the migrations not yet recorded. Returns their names.

    On PostgreSQL many instances may open one store at once: the whole check-and-apply holds a session advisory
    lock, so the second waits and then finds every migration recorded (each is applied once). SQLite serialises
    writers itself, and a second process's ledger insert of the same name would fail its transaction."""
    if not isinstance(db, peewee.PostgresqlDatabase):
        return _apply_pending(db, registry)
    db.execute_sql("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        return _apply_pending(db, registry)
    finally:
        db.execute_sql("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


def _apply_pending(db: peewee.Database, registry: list[Migration]) -> list[str]:
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
