"""The migrations each released cairn had applied to the stores it wrote, per store, by release: what an upgrade
starts from. The registries (migrations.py, schema.py) are append-only, so a release's list is a prefix of the
current one (a test checks it, and checks each list against the release's tag when the repository has it).

Append the new release here when cairn_cli.__version__ is bumped for it."""

from __future__ import annotations

RELEASES: dict[str, dict[str, tuple[str, ...]]] = {
    "0.1.0": {
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
        ),
        "ephemeral": (
            "0001_memory_deliveries",
            "0002_hook_state",
            "0003_deliveries_engagement_detail",
            "0004_evidence_applied",
            "0005_deliveries_backfill_tag",
            "0006_deliveries_instance",
            "0007_double_precision",
        ),
    },
}
TAGS = {"0.1.0": "v0.1.0"}  # the git tag of each release (v0.1.0: commit f1fc18c)
PREVIOUS = "0.1.0"  # the release before this one: the stores an upgrade test builds
