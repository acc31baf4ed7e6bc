"""A big store's vectors in approximate nearest-neighbour indexes kept beside the store (#30): one usearch HNSW
graph per scope, for one embedder, updated by the memories that changed and saved to disk, so that a daemon's
restart opens the saved graphs instead of reading every vector of the store row by row.

Why usearch (bench/ann.md, bench/ann_m32.md, bench/scale.md): at 100k vectors of real text usearch, hnswlib and
faiss all reach recall@50 >= 0.99 against the exact scan, but only usearch adds, removes and re-adds keys in place
without a fixed capacity (hnswlib needs one, faiss's HNSW cannot remove), and its saved 1M graph opens in seconds
(a 1M restart is ready in 16 s, models included).

One graph per scope: a ranking reads its scope and the global memories, so each search is unfiltered (a filter over
one graph of a team's whole store would starve a small scope of candidates); a scope with at most EXACT_UP_TO
vectors is scanned exactly (usearch's brute force over its own graph's vectors: a few milliseconds), a larger one
searched with breadth 2 k, and at least EXPANSION_SEARCH above BROAD_ABOVE vectors. The scope of every key is kept
by memory id, so a memory that moves to another scope leaves its old graph.

An index belongs to one embedder version (`model`): its directory is named after it, and a store whose vectors
another embedder made gets another index, never a mixed one. Nothing here opens the database: the engine
(core/ranking/engine.py) reads the changed rows and hands them to `apply`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1
CONNECTIVITY = 32  # the graph's degree (bench/ann.md: 16 stops short of recall 0.99 at 1M)
EXPANSION_ADD = 128
# the search breadth: 2 k, and at least EXPANSION_SEARCH in a graph of more than BROAD_ABOVE vectors (bench/ann.md:
# 256 reaches recall@50 0.996 at 100k; bench/ann_m32.md: 1024 reaches 0.992 at 1M, 9.5 ms p50)
EXPANSION_SEARCH = 1024
BROAD_ABOVE = 300_000
EXACT_UP_TO = 20_000  # a scope this small is scanned exactly
DROPPED = "dropped"  # the mark drop_saved leaves in a store's directory
SAVE_EVERY = 5_000  # changed vectors after which `apply` says the index is worth saving


def store_dir(home: str, store_url: str) -> Path:
    """Where the vector indexes of the store at `store_url` are kept: under CAIRN_HOME, one directory per store."""
    return Path(home) / "indexes" / hashlib.sha256(store_url.encode()).hexdigest()[:16]


def index_dir(home: str, store_url: str, model: str) -> Path:
    """The directory of the store's index made with `model` (one per embedder version, never mixed)."""
    return store_dir(home, store_url) / hashlib.sha256(model.encode()).hexdigest()[:16]


def drop_saved(home: str, store_url: str) -> None:
    """Delete the store's saved indexes (`cairn forget`, `cairn redact --scan`: a removed vector's bytes stay in a
    graph's file until its slot is reused) and leave a mark, so that a daemon holding one in memory builds it again
    from the store instead of saving what it holds (`stale`)."""
    base = store_dir(home, store_url)
    if not base.is_dir():
        return
    for child in base.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
    mark = base / DROPPED
    mark.write_text(f"{time.time()}\n")


def dropped_since(directory: Path | None, opened_at: float) -> bool:
    """Were the saved indexes beside `directory` dropped (`drop_saved`) at or after `opened_at`?"""
    if directory is None:
        return False
    try:
        return (directory.parent / DROPPED).stat().st_mtime >= opened_at
    except OSError:
        return False


@dataclass
class Found:
    """A search's memories (ids) and their cosines to the query, nearest first."""

    ids: np.ndarray
    cosines: np.ndarray


class VectorIndex:
    """The vectors of one store made by one embedder, a graph per scope. Searches may run in any number of threads at
    once; `apply` (the changed memories) must not run beside them (the engine holds its table lock alone for it)."""

    def __init__(self, model: str, dim: int, directory: Path | None = None):
        self.model, self.dim, self.directory = model, dim, directory
        self._graphs: dict[str, Any] = {}  # scope -> usearch Index
        self._scope_names: list[str] = []
        self._scope_code: dict[str, int] = {}
        self._scope_of = np.full(0, -1, dtype=np.int32)  # memory id -> its scope's code (-1: not indexed)
        self.since: str | None = None  # the newest updated_at applied (text, as the store gives it back)
        self.max_id = 0  # the highest memory id applied
        self._unsaved = 0
        self._saving = threading.Lock()
        self.opened_at = time.time()  # a drop_saved after this makes it stale

    # -- building and keeping up to date ---------------------------------------------------------------------------

    def _graph(self, scope: str):
        graph = self._graphs.get(scope)
        if graph is None:
            from usearch.index import Index

            graph = Index(
                ndim=self.dim,
                metric="cos",
                dtype="f32",
                connectivity=CONNECTIVITY,
                expansion_add=EXPANSION_ADD,
                expansion_search=EXPANSION_SEARCH,
            )
            self._graphs[scope] = graph
        if scope not in self._scope_code:
            self._scope_code[scope] = len(self._scope_names)
            self._scope_names.append(scope)
        return graph

    def _grow(self, memory_id: int) -> None:
        if memory_id >= len(self._scope_of):
            grown = np.full(max(memory_id + 1, 2 * len(self._scope_of), 1024), -1, dtype=np.int32)
            grown[: len(self._scope_of)] = self._scope_of
            self._scope_of = grown

    def scope_of(self, memory_id: int) -> str | None:
        if memory_id >= len(self._scope_of) or self._scope_of[memory_id] < 0:
            return None
        return self._scope_names[int(self._scope_of[memory_id])]

    def remove(self, memory_id: int) -> None:
        scope = self.scope_of(memory_id)
        if scope is not None:
            self._graphs[scope].remove(memory_id)
            self._scope_of[memory_id] = -1
            self._unsaved += 1

    def apply(self, rows, *, threads: int = 1) -> bool:
        """Apply changed memories: (id, scope, unit vector or None: no longer indexed, updated_at text) each. Returns
        whether enough changed since the last save to save now."""
        latest: dict[int, tuple[str, object]] = {}  # a memory changed twice in one batch: its last row counts
        for memory_id, scope, vec, updated in rows:
            latest[memory_id] = (scope, vec)
            if updated is not None and (self.since is None or str(updated) > self.since):
                self.since = str(updated)
            self.max_id = max(self.max_id, memory_id)
        same = self._unchanged(latest)
        adds: dict[str, tuple[list[int], list[np.ndarray]]] = {}
        for memory_id, (scope, vec) in latest.items():
            if memory_id in same:
                continue  # read again (a catch-up from a timestamp it shares), not changed: the graph is left alone
            self.remove(memory_id)
            if vec is not None:
                ids, vecs = adds.setdefault(scope, ([], []))
                ids.append(memory_id)
                vecs.append(np.asarray(vec, dtype=np.float32))
        for scope, (ids, vecs) in adds.items():
            if not ids:
                continue
            graph = self._graph(scope)
            graph.add(np.asarray(ids, dtype=np.uint64), np.stack(vecs), threads=threads)
            self._grow(max(ids))
            self._scope_of[np.asarray(ids)] = self._scope_code[scope]
            self._unsaved += len(ids)
        return self._unsaved >= SAVE_EVERY

    def _unchanged(self, latest: dict[int, tuple[str, object]]) -> set[int]:
        """The memories of `latest` indexed already in that scope with that very vector."""
        by_scope: dict[str, list[int]] = {}
        for memory_id, (scope, vec) in latest.items():
            if vec is not None and self.scope_of(memory_id) == scope:
                by_scope.setdefault(scope, []).append(memory_id)
        same = set()
        for scope, ids in by_scope.items():
            held = np.asarray(self._graphs[scope].get(np.asarray(ids, dtype=np.uint64), dtype=np.float32))
            for memory_id, row in zip(ids, held.reshape(len(ids), self.dim)):
                if np.array_equal(row, np.asarray(latest[memory_id][1], dtype=np.float32)):
                    same.add(memory_id)
        return same

    # -- reading ---------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return sum(len(g) for g in self._graphs.values())

    def scopes(self) -> list[str]:
        return [s for s, g in self._graphs.items() if len(g)]

    def nearest(self, query: np.ndarray, k: int, scopes: list[str] | None) -> Found:
        """The `k` memories of `scopes` (None: every scope) nearest `query` (a unit vector), nearest first."""
        ids: list[np.ndarray] = []
        cos: list[np.ndarray] = []
        q = np.asarray(query, dtype=np.float32)
        for scope in self._graphs if scopes is None else scopes:
            graph = self._graphs.get(scope)
            if graph is None or not len(graph):
                continue
            n = len(graph)
            exact = n <= EXACT_UP_TO
            breadth = max(2 * k, EXPANSION_SEARCH if n > BROAD_ABOVE else 0)
            if not exact and graph.expansion_search != breadth:
                graph.expansion_search = breadth
            got = graph.search(q, min(k, n), threads=1, exact=exact)
            ids.append(np.asarray(got.keys, dtype=np.int64))
            cos.append(1.0 - np.asarray(got.distances, dtype=np.float32))
        if not ids:
            return Found(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        all_ids, all_cos = np.concatenate(ids), np.concatenate(cos)
        order = np.lexsort((-all_ids, -all_cos))[:k]
        return Found(all_ids[order], all_cos[order])

    def vectors(self, ids: list[int]) -> dict[int, np.ndarray]:
        """The stored vectors of those of `ids` that are indexed (for their exact cosines)."""
        wanted = np.asarray(ids, dtype=np.int64)
        inside = (wanted >= 0) & (wanted < len(self._scope_of))
        wanted = wanted[inside]
        codes = self._scope_of[wanted]
        out: dict[int, np.ndarray] = {}
        for code in np.unique(codes[codes >= 0]).tolist():
            of_scope = wanted[codes == code]
            got = self._graphs[self._scope_names[code]].get(of_scope.astype(np.uint64), dtype=np.float32)
            out.update(zip(of_scope.tolist(), np.asarray(got).reshape(len(of_scope), self.dim)))
        return out

    # -- on disk ---------------------------------------------------------------------------------------------------

    def stale(self) -> bool:
        """Were the store's saved indexes dropped since this one was opened or built (`drop_saved`)? Then what it
        holds may include the vectors a forget removed: it is built again from the store, never saved."""
        return dropped_since(self.directory, self.opened_at)

    def save(self) -> None:
        """Write the graphs and what they have applied (graphs first, then the record naming them, each renamed into
        place: a kill mid-save leaves the last complete save). Nothing to do without a directory."""
        if self.directory is None:
            return
        with self._saving:
            if self.stale():
                return
            self.directory.mkdir(parents=True, exist_ok=True)
            files = {}
            for scope, graph in self._graphs.items():
                name = "scope-" + hashlib.sha256(scope.encode()).hexdigest()[:16] + ".usearch"
                tmp = self.directory / (name + ".tmp")
                graph.save(str(tmp))
                os.replace(tmp, self.directory / name)
                files[scope] = name
            np.save(self.directory / "scope_of.tmp.npy", self._scope_of)
            os.replace(self.directory / "scope_of.tmp.npy", self.directory / "scope_of.npy")
            record = {
                "format": FORMAT,
                "model": self.model,
                "dim": self.dim,
                "since": self.since,
                "max_id": self.max_id,
                "scopes": self._scope_names,
                "files": files,
                "connectivity": CONNECTIVITY,
            }
            tmp_record = self.directory / "index.json.tmp"
            tmp_record.write_text(json.dumps(record, indent=1) + "\n")
            os.replace(tmp_record, self.directory / "index.json")
            for old in self.directory.glob("scope-*.usearch"):  # a scope no longer held
                if old.name not in files.values():
                    old.unlink(missing_ok=True)
            self._unsaved = 0

    @classmethod
    def open(cls, model: str, dim: int, directory: Path) -> VectorIndex:
        """The index saved in `directory` when it is this embedder's and complete, else an empty one (to be built
        from the store: `since` None)."""
        from usearch.index import Index

        index = cls(model, dim, directory)
        try:
            record = json.loads((directory / "index.json").read_text())
            if (record.get("format"), record.get("model"), record.get("dim")) != (FORMAT, model, dim):
                return index
            if record.get("connectivity") != CONNECTIVITY:
                return index
            graphs: dict[str, Any] = {s: Index.restore(str(directory / name)) for s, name in record["files"].items()}
            scope_of = np.load(directory / "scope_of.npy")
        except (OSError, ValueError, KeyError, RuntimeError):
            return index  # none yet, or unreadable: built again from the store
        if any(g is None for g in graphs.values()):
            return index
        index._graphs = graphs
        index._scope_names = list(record["scopes"])
        index._scope_code = {s: i for i, s in enumerate(index._scope_names)}
        index._scope_of = scope_of.astype(np.int32)
        index.since, index.max_id = record["since"], int(record["max_id"])
        return index


class PgVectors:
    """A team store's vectors searched inside PostgreSQL (db/vectors.py: pgvector's HNSW index of this embedder
    version), read as a VectorIndex is: nothing is held here, so another instance's write is in the next search."""

    directory = None

    def __init__(self, model: str):
        self.model = model

    def stale(self) -> bool:
        return False

    def scopes(self) -> list[str]:
        return []  # the full-text index knows them (core/ranking/candidates.py)

    def nearest(self, query: np.ndarray, k: int, scopes: list[str] | None) -> Found:
        from cairn_cli.db import vectors

        found = vectors.nearest(query, k, model=self.model, scopes=scopes)
        return Found(
            np.asarray([i for i, _ in found], dtype=np.int64), np.asarray([c for _, c in found], dtype=np.float32)
        )

    def vectors(self, ids: list[int]) -> dict[int, np.ndarray]:
        from cairn_cli.db import vectors

        return vectors.vectors_of(ids, self.model)


def pgvector_source(model: str, dim: int) -> tuple[PgVectors | None, str]:
    """The store's vectors in PostgreSQL when it is PostgreSQL with pgvector (its index of `model` made ready:
    installed, backfilled, built), else None; and why not on a PostgreSQL store (what `cairn daemon status` says)."""
    from cairn_cli import db
    from cairn_cli.db import vectors
    from cairn_cli.errors import ConfigError

    if not db.is_postgres("memory"):
        return None, ""  # a SQLite store: nothing to say
    why = vectors.pgvector_ready()
    if why is not None:
        return None, why
    try:
        vectors.ensure_index(model, dim)
    except ConfigError as exc:
        return None, str(exc)
    return PgVectors(model), "pgvector"
