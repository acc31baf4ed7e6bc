"""Memory embeddings: the text a memory is embedded as and the vectors stored as float32 blobs with their model's
name (which embedder is live, and the re-embedding of memories it has not embedded yet: core/store/embedders.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def embedding_text(content: str, keywords: list[str]) -> str:
    return f"{content}\nkeywords: {', '.join(keywords)}" if keywords else content


Embedder = Callable[[list[str]], "tuple[str, Sequence[Sequence[float]]] | None"]


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
