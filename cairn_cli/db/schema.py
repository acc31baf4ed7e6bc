"""The migrations each store has once it is at this cairn's schema, by name: what the lean connection (db/lean.py)
checks a store against without importing the migrations (and peewee). migrations.py refuses to load when its
registries say otherwise, so a new migration cannot be forgotten here."""

from __future__ import annotations

MIGRATIONS: dict[str, tuple[str, ...]] = {
    "memory": (
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
    ),
    "ephemeral": (
        "0001_memory_deliveries",
        "0002_hook_state",
        "0003_deliveries_engagement_detail",
        "0004_evidence_applied",
        "0005_deliveries_backfill_tag",
        "0006_deliveries_instance",
        "0007_double_precision",
        "0008_deliveries_grade_propensity",
        "0009_deliveries_agent",
    ),
}
