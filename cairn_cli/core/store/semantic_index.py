"""The semantic dedup index of one write: the live memories of each scope an entry is written to, as unit vectors
of the writing call's model, and the closest one a new entry merges into (docs/store.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from cairn_cli.core.store.memories import MemoryInput
from cairn_cli.core.text import stated_numbers


class SemanticIndex:
    """The live memories of each scope an entry is written to, embedded by this call's model (loaded on first use as
    one matrix of unit rows per scope, grown in place by the memories this call adds); `nearest` is the closest one
    at or above the threshold that states the same numbers."""

    def __init__(self, model: str, threshold: float):
        from cairn_cli.core.store.embedders import calibration

        self.model, self.threshold = model, threshold
        self.calibration = calibration(model)  # a learned embedder's cosines on the scale the threshold was fit on
        self.enabled = 0.0 < threshold <= 1.0
        self._scopes: dict[str, tuple[list[int], list[Any]]] = {}  # scope -> (ids, [matrix with spare rows])

    def __bool__(self) -> bool:
        return self.enabled

    def _scope(self, scope: str, dim: int) -> tuple[list[int], list[Any]]:
        import numpy as np

        from cairn_cli.db.tables import Memory

        if scope not in self._scopes:
            rows = Memory.select(Memory.id, Memory.embedding).where(
                (Memory.scope == scope)
                & Memory.superseded_by.is_null()
                & (Memory.embedding_model == self.model)
                & Memory.embedding.is_null(False)
            )
            ids: list[int] = []
            blobs: list[bytes] = []
            for memory_id, blob in cast(Iterable[tuple[int, bytes]], rows.tuples()):
                if len(blob) == 4 * dim:  # another dimension: not this model's vector after all
                    ids.append(memory_id)
                    blobs.append(bytes(blob))
            matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim).copy()
            self._scopes[scope] = (ids, [_unit_rows(matrix)])
        return self._scopes[scope]

    def add(self, scope: str, memory_id: int, vec) -> None:
        import numpy as np

        v = _unit_rows(np.asarray(vec, dtype=np.float32)[None, :])[0]
        ids, holder = self._scope(scope, len(v))
        if len(ids) == len(holder[0]):  # full: double the rows (an import adds thousands)
            grown = np.zeros((max(64, 2 * len(ids)), len(v)), dtype=np.float32)
            grown[: len(ids)] = holder[0]
            holder[0] = grown
        holder[0][len(ids)] = v
        ids.append(memory_id)

    def nearest(self, entry: MemoryInput, vec):
        """(the live Memory, cosine) the entry merges into, or None."""
        import numpy as np

        from cairn_cli.db.tables import Memory

        v = _unit_rows(np.asarray(vec, dtype=np.float32)[None, :])[0]
        ids, holder = self._scope(entry.scope, len(v))
        if not ids or not v.any():
            return None
        # einsum, not `@`: one thread; a BLAS matrix-vector product spins up its thread pool per call and, on a busy
        # 2-core machine, was 10-80x slower for an import's thousands of small products
        cos = np.einsum("ij,j->i", holder[0][: len(ids)], v)
        if self.calibration is not None:
            cos = self.calibration.to_base(cos, "memory")
        above = np.flatnonzero(cos >= self.threshold)
        numbers = stated_numbers(entry.content)
        for k in above[np.argsort(-cos[above], kind="stable")]:
            mem = Memory.get_or_none(Memory.id == ids[k])
            if mem is not None and mem.superseded_by is None and stated_numbers(mem.content) == numbers:
                return mem, round(float(cos[k]), 4)
        return None


def _unit_rows(matrix):
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)
