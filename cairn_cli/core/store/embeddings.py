"""Memory embeddings: the text a memory is embedded as, the embedder of this process, the vectors stored as float32
blobs with their model's name, and the re-embedding of memories a model has not embedded yet."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cairn_cli.config import Settings


def embedding_text(content: str, keywords: list[str]) -> str:
    return f"{content}\nkeywords: {', '.join(keywords)}" if keywords else content


Embedder = Callable[[list[str]], "tuple[str, Sequence[Sequence[float]]] | None"]


def local_embedder(settings: Settings) -> Embedder:
    """The live embedder (core/store/embedders.py) loaded in this process: (model name, vectors)."""

    def embed(texts: list[str]):
        from cairn_cli.core.store.embedders import live_encoder

        encoder = live_encoder(settings)
        return encoder.name, encoder.encode(texts)

    return embed


def store_embeddings(ids: list[int], vectors, model: str) -> None:
    """Write embeddings (float32 blobs) and their model's name; updated_at is untouched (the content is not)."""
    from array import array

    from cairn_cli.db.tables import Memory, memory_proxy

    with memory_proxy.atomic():
        for memory_id, vec in zip(ids, vectors):
            blob = vec.astype("float32").tobytes() if hasattr(vec, "astype") else array("f", vec).tobytes()
            Memory.update(embedding=blob, embedding_model=model).where(Memory.id == memory_id).execute()


def embed_texts(texts: list[str], embed: Embedder) -> tuple[str | None, dict[str, object]]:
    """(model name, text -> vector), or (None, {}) when nothing answered (or there was nothing to embed)."""
    got = embed(texts) if texts else None
    if got is None:
        return None, {}
    return got[0], dict(zip(texts, got[1]))


def embed_missing(settings: Settings, *, progress: Callable[[int], None] | None = None) -> int:
    """(Re)embed live memories that lack an embedding from the live embedder (core/store/embedders.py). Returns how
    many."""
    from cairn_cli.core.store.embedders import live_name, store_model
    from cairn_cli.db.tables import Memory
    from cairn_cli.errors import NotFound
    from cairn_cli.ml.models import get_encoder

    name = live_name(settings)
    if name != store_model(settings):  # never another model's vectors over the store's
        raise NotFound(
            f"the store's embedder {store_model(settings)} is not installed here",
            "start the daemon (it installs a team's published version) or roll the embedder back",
        )
    encoder = get_encoder(name, settings.EMBED_DTYPE)
    stale = list(
        Memory.select().where(
            Memory.superseded_by.is_null()
            & ((Memory.embedding_model != encoder.name) | Memory.embedding_model.is_null())
        )
    )
    for start in range(0, len(stale), 256):
        batch = stale[start : start + 256]
        store_embeddings(
            [m.id for m in batch], encoder.encode([embedding_text(m.content, m.keywords) for m in batch]), encoder.name
        )
        if progress:
            progress(len(batch))
    return len(stale)
