"""Learned embedder versions (core/store/embedders.py): calibration, the staged re-embed and its atomic swap,
rollback, the scratch engine, the daemon's switch, and a real-model deploy end to end."""

from __future__ import annotations

from cairn_cli.config import Settings, embedder_versions_dir
from cairn_cli.core.store import embedders
from cairn_cli.core.store.embedders import Calibration

LEARNED = "hashing@20261206T070000123456Z-4242"


def install(name: str = LEARNED, cal: Calibration | None = None):
    """A learned version of the hashing encoder (tests): its directory, and a calibration when given."""
    directory = embedder_versions_dir() / embedders.version_of(name)
    directory.mkdir(parents=True, exist_ok=True)
    if cal is not None:
        (directory / "calibration.json").write_text(cal.to_json())
    return directory


def add(texts, scope="proj"):
    from cairn_cli.core.store import dedup, memories

    entries = [memories.validate_entry({"content": t, "scope": scope}) for t in texts]
    return [r.id for r in dedup.add_memories(entries, Settings())]


def vectors():
    from cairn_cli.db.tables import Memory

    return {m.id: m.embedding_model for m in Memory.select().where(Memory.superseded_by.is_null())}


TEXTS = [f"memory number {i} about the {w} service" for i, w in enumerate(["billing", "auth", "search", "mail"] * 5)]


def test_swap_smoke():
    add(TEXTS)
    install()
    embedders.request(LEARNED, Settings(), card={})
    assert set(vectors().values()) == {"hashing"}
    line = embedders.finish_pending(Settings())
    assert LEARNED in line
    assert set(vectors().values()) == {LEARNED}
    assert embedders.live_name(Settings()) == LEARNED
