"""The semantic dedup index of one write: the live memories of each scope an entry is written to, as unit vectors
of the writing call's model, and the closest one a new entry merges into (docs/store.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from cairn_cli.core.store.memories import MemoryInput
from cairn_cli.core.text import stated_numbers


class SemanticIndex:
    """The live memories of each scope an entry is written to, embedded by this call's model, in groups by the
    numbers they state (only memories stating the same numbers ever merge, so an entry is compared with its own
    group alone: templated lines that differ only in a number — release notes, ticket logs — each form a group of
    their own, and an import of them costs the same per line at any size). Each group is one matrix of unit rows,
    loaded on first use with one query per scope and grown in place by the memories this call adds; `nearest` is
    the closest memory of the entry's group at or above the threshold. An import shares one index across its
    batches (`SemanticIndexes`)."""

    def __init__(self, model: str, threshold: float):
        from cairn_cli.core.store.embedders import calibration

        self.model, self.threshold = model, threshold
        self.calibration = calibration(model)  # a learned embedder's cosines on the scale the threshold was fit on
        self.enabled = 0.0 < threshold <= 1.0
        self._loaded: set[str] = set()
        self._groups: dict[tuple[str, frozenset[str]], tuple[list[int], list[Any]]] = {}  # -> (ids, [matrix])
        self._prepared: dict[int, tuple[Any, Any]] = {}  # a batch position -> (rows, cosines) above the threshold
        self._prepared_rows: dict[tuple[str, frozenset[str]], int] = {}  # a group's rows when prepared

    def __bool__(self) -> bool:
        return self.enabled

    def _group(self, scope: str, numbers: frozenset[str], dim: int) -> tuple[list[int], list[Any]]:
        import numpy as np

        from cairn_cli.db.tables import Memory

        if scope not in self._loaded:
            rows = Memory.select(Memory.id, Memory.embedding, Memory.content).where(
                (Memory.scope == scope)
                & Memory.superseded_by.is_null()
                & (Memory.embedding_model == self.model)
                & Memory.embedding.is_null(False)
            )
            found: dict[frozenset[str], tuple[list[int], list[bytes]]] = {}
            for memory_id, blob, content in cast(Iterable[tuple[int, bytes, str]], rows.tuples()):
                if len(blob) == 4 * dim:  # another dimension: not this model's vector after all
                    ids, blobs = found.setdefault(stated_numbers(content), ([], []))
                    ids.append(memory_id)
                    blobs.append(bytes(blob))
            for key, (ids, blobs) in found.items():
                matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim).copy()
                self._groups[(scope, key)] = (ids, [_unit_rows(matrix)])
            self._loaded.add(scope)
        return self._groups.setdefault((scope, numbers), ([], [np.zeros((0, dim), dtype=np.float32)]))

    def add(self, entry: MemoryInput, memory_id: int, vec) -> None:
        import numpy as np

        v = _unit_rows(np.asarray(vec, dtype=np.float32)[None, :])[0]
        ids, holder = self._group(entry.scope, stated_numbers(entry.content), len(v))
        if len(ids) == len(holder[0]):  # full: double the rows (an import adds thousands)
            grown = np.zeros((max(8, 2 * len(ids)), len(v)), dtype=np.float32)
            grown[: len(ids)] = holder[0][: len(ids)]
            holder[0] = grown
        holder[0][len(ids)] = v
        ids.append(memory_id)

    def prepare(self, entries: list[MemoryInput], vecs: list) -> None:
        """Compare a batch's entries with the memories of their groups now, a matrix product per group (not one
        product per entry); `nearest` then scans only what was added after. `vecs[i]`: entry i's vector, or None."""
        import numpy as np

        self._prepared, self._prepared_rows = {}, {}
        by_group: dict[tuple[str, frozenset[str]], list[int]] = {}
        for i, (entry, vec) in enumerate(zip(entries, vecs)):
            if vec is not None:
                by_group.setdefault((entry.scope, stated_numbers(entry.content)), []).append(i)
        for (scope, numbers), positions in by_group.items():
            rows = _unit_rows(np.asarray([vecs[i] for i in positions], dtype=np.float32))
            ids, holder = self._group(scope, numbers, rows.shape[1])
            n = len(ids)
            self._prepared_rows[(scope, numbers)] = n
            if not n:
                continue
            for start in range(0, len(positions), 64):  # at most 64 x n cosines at a time
                cos = rows[start : start + 64] @ holder[0][:n].T
                if self.calibration is not None:
                    cos = self.calibration.to_base(cos, "memory")
                for k, row in enumerate(np.asarray(cos, dtype=np.float32)):
                    above = np.flatnonzero(row >= self.threshold)
                    self._prepared[positions[start + k]] = (above, row[above])

    def nearest(self, entry: MemoryInput, vec, position: int | None = None):
        """(the live Memory, cosine) the entry merges into, or None. `position`: the entry's place in the batch
        given to `prepare`, whose products stand for the memories present then."""
        import numpy as np

        from cairn_cli.db.tables import Memory

        v = _unit_rows(np.asarray(vec, dtype=np.float32)[None, :])[0]
        key = (entry.scope, stated_numbers(entry.content))
        ids, holder = self._group(*key, len(v))
        if not ids or not v.any():
            return None
        prepared = self._prepared.get(position) if position is not None else None
        first = self._prepared_rows.get(key, 0) if position is not None and key in self._prepared_rows else 0
        # einsum, not `@`: one thread; a BLAS matrix-vector product spins up its thread pool per call and, on a busy
        # 2-core machine, was 10-80x slower for an import's thousands of small products
        cos = np.einsum("ij,j->i", holder[0][first : len(ids)], v)
        if self.calibration is not None:
            cos = self.calibration.to_base(cos, "memory")
        above = np.flatnonzero(cos >= self.threshold)
        rows, values = above + first, cos[above]
        if prepared is not None:
            rows, values = np.concatenate([prepared[0], rows]), np.concatenate([prepared[1], values])
        for k in np.argsort(-values, kind="stable"):
            mem = Memory.get_or_none(Memory.id == ids[int(rows[k])])  # the one it merges into: one query
            if mem is not None and mem.superseded_by is None:
                return mem, round(float(values[k]), 4)
        return None


class SemanticIndexes:
    """One SemanticIndex per embedding model, kept across the batches of one import (each batch its own
    transaction): the store's vectors are read once, not once per batch."""

    def __init__(self, threshold: float):
        self.threshold = threshold
        self._by_model: dict[str, SemanticIndex] = {}

    def of(self, model: str) -> SemanticIndex:
        if model not in self._by_model:
            self._by_model[model] = SemanticIndex(model, self.threshold)
        return self._by_model[model]


def _unit_rows(matrix):
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)
