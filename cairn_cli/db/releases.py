"""The migrations each released cairn had applied to the stores it wrote, per store, by release: what an upgrade
starts from. The registries (migrations.py, schema.py) are append-only, so a release's list is a prefix of the
current one, recorded by its length (a test checks each list against the release's tag when the repository has it).

Append the new release here when cairn_cli.__version__ is bumped for it."""

from __future__ import annotations

from cairn_cli.db.schema import MIGRATIONS

# A release's migrations by how many of each registry's (schema.py) it had: the registries only ever grow.
_APPLIED: dict[str, dict[str, int]] = {
    "0.1.0": {"memory": 9, "ephemeral": 7},
}
RELEASES: dict[str, dict[str, tuple[str, ...]]] = {
    version: {kind: MIGRATIONS[kind][:n] for kind, n in counts.items()} for version, counts in _APPLIED.items()
}
TAGS = {"0.1.0": "v0.1.0"}  # the git tag of each release (v0.1.0: commit f1fc18c)
PREVIOUS = "0.1.0"  # the release before this one: the stores an upgrade test builds
