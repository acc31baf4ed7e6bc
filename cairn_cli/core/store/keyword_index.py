"""A big store's full-text postings held by the daemon in arrays (#30), beside its vector index: BM25 of every memory
for a query's terms in a few vectorised passes, instead of MaxScore over SQLite's postings row by row.

At 1M memories SQLite's postings made the keyword side of a ranking the slow part (bench/scale_avx2_sqlite_postings.md:
393 ms p50 inside the daemon, most of it reading postings and completing memories from their rows; bench/paths.md
compares both paths on one machine). Here the postings of the store's full-text index (the rows
core/store/search_index.py writes: a memory's terms with their counts in its content and its keywords) are held as
one compressed-row table per term: memory ids (int32) and the two counts (uint16), and per memory its scope, its two
lengths and whether it is a bucket-4 memory. A query reads each of its terms' postings once: BM25 is exact for every
memory, at any keyword weight.

Kept up to date as the vector index is: the engine (core/ranking/engine.py) hands `apply` the index rows of the
memories changed since the last catch-up (a superseded one's row is gone: it leaves). A changed memory's old postings
stay in the table, masked, and its new ones go to a small overlay; the table is rebuilt with the overlay merged in
once the overlay holds MERGE_ABOVE memories, and before a save. Saved beside the vector index (the same directory,
one per store and embedder version; a forget's `drop_saved` deletes both), so a restart reads arrays, not every
row. Nothing here opens the database.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import orjson

FORMAT = 1
MERGE_ABOVE = 20_000  # memories in the overlay after which the table is rebuilt with them
_FILES = ("start", "ids", "tf_content", "tf_keywords", "scope_of", "content_len", "keyword_len", "meta", "in_table")
_TF_MAX = np.iinfo(np.uint16).max


class KeywordIndex:
    """The postings of one store's full-text index, by term. Reads may run in any number of threads at once;
    `apply` and `merge` must not run beside them (the engine holds its table lock alone for them)."""

    def __init__(self, directory: Path | None = None):
        self.directory = directory
        self.vocab: dict[str, int] = {}  # term -> its code (its row of the table, when below len(start) - 1)
        self._terms: list[str] = []
        self._start = np.zeros(1, dtype=np.int64)  # term code -> where its postings start in the arrays below
        self._ids = np.zeros(0, dtype=np.int32)
        self._tf_content = np.zeros(0, dtype=np.uint16)
        self._tf_keywords = np.zeros(0, dtype=np.uint16)
        # per memory id
        self._scope_of = np.full(0, -1, dtype=np.int32)  # its scope's code (-1: not indexed)
        self._content_len = np.zeros(0, dtype=np.int32)
        self._keyword_len = np.zeros(0, dtype=np.int32)
        self._meta = np.zeros(0, dtype=bool)
        self._in_table = np.zeros(0, dtype=bool)  # its postings in the table are its current ones
        self._generation = np.zeros(0, dtype=np.uint32)  # how often it was applied: a waiting array's are current
        self._scope_names: list[str] = []
        self._scope_code: dict[str, int] = {}
        # the overlay: memories changed since the table was built
        self._overlay: dict[int, dict[int, tuple[int, int]]] = {}  # memory -> term code -> (in content, in keywords)
        self._overlay_terms: dict[int, set[int]] = {}  # term code -> memories of the overlay holding it
        self._masked = 0  # memories whose postings in the table are no longer theirs
        self._chunks: list[tuple] = []  # a bulk apply's postings, waiting for `settle`: (codes, ids, c, k, generation)
        self.since: str | None = None  # the newest updated_at applied (text, as the store gives it back)
        self.max_id = 0
        self._count = 0  # memories indexed
        self._stats: list | None = None  # scope_stats, until the next change
        self._unsaved = 0
        self._saving = threading.Lock()
        self.opened_at = time.time()

    # -- building and keeping up to date ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    def _code(self, term: str) -> int:
        code = self.vocab.get(term)
        if code is None:
            code = self.vocab[term] = len(self._terms)
            self._terms.append(term)
        return code

    def _scope(self, scope: str) -> int:
        code = self._scope_code.get(scope)
        if code is None:
            code = self._scope_code[scope] = len(self._scope_names)
            self._scope_names.append(scope)
        return code

    def _grow(self, memory_id: int) -> None:
        n = len(self._scope_of)
        if memory_id < n:
            return
        size = max(memory_id + 1, 2 * n, 1024)
        for name, fill in (("_scope_of", -1), ("_content_len", 0), ("_keyword_len", 0), ("_meta", False)):
            old = getattr(self, name)
            grown = np.full(size, fill, dtype=old.dtype)
            grown[:n] = old
            setattr(self, name, grown)
        for name in ("_in_table", "_generation"):
            old = getattr(self, name)
            grown = np.zeros(size, dtype=old.dtype)
            grown[:n] = old
            setattr(self, name, grown)

    def _forget(self, memory_id: int) -> None:
        """Take a memory's postings out (masked in the table, dropped from the overlay)."""
        if memory_id >= len(self._scope_of):
            return
        self._generation[memory_id] += 1
        if self._scope_of[memory_id] >= 0:
            self._count -= 1
        if self._in_table[memory_id]:
            self._in_table[memory_id] = False
            self._masked += 1
        old = self._overlay.pop(memory_id, None)
        if old:
            for code in old:
                held = self._overlay_terms.get(code)
                if held is not None:
                    held.discard(memory_id)
                    if not held:
                        del self._overlay_terms[code]
        self._scope_of[memory_id] = -1

    def apply(
        self, changed: Iterable[int], docs: Iterable[tuple], *, since: str | None = None, bulk: bool = False
    ) -> bool:
        """Apply the index rows (db/fulltext.py Doc: id, scope, meta, lengths, terms JSON, group) of the memories
        `changed` (those of them without a row have left the index); `since`: the newest updated_at they bring.
        They go to the overlay, read at once; `bulk` (a first build, nobody reading yet): to arrays that wait for
        `settle`. Returns whether enough changed since the last save to save now."""
        rows = {doc[0]: doc for doc in docs}
        changed = list(changed)
        self._stats = None
        chunk: tuple[list, list, list, list] = ([], [], [], [])
        for memory_id in changed:
            self._forget(memory_id)
            self.max_id = max(self.max_id, memory_id)
            doc = rows.get(memory_id)
            if doc is None:
                continue
            _, scope, meta, content_len, keyword_len, terms_json, _ = doc
            self._grow(memory_id)
            self._count += 1
            self._scope_of[memory_id] = self._scope(scope)
            self._content_len[memory_id] = content_len
            self._keyword_len[memory_id] = keyword_len
            self._meta[memory_id] = bool(meta)
            counts = {self._code(t): (c, k) for t, (c, k) in orjson.loads(terms_json).items() if c or k}
            if bulk:
                chunk[0].extend(counts)
                chunk[1].extend([memory_id] * len(counts))
                for c, k in counts.values():
                    chunk[2].append(c)
                    chunk[3].append(k)
                continue
            self._overlay[memory_id] = counts
            for code in counts:
                self._overlay_terms.setdefault(code, set()).add(memory_id)
        if bulk and chunk[0]:
            ids = np.asarray(chunk[1], dtype=np.int32)
            self._chunks.append(
                (
                    np.asarray(chunk[0], dtype=np.int32),
                    ids,
                    np.minimum(np.asarray(chunk[2], dtype=np.int64), _TF_MAX).astype(np.uint16),
                    np.minimum(np.asarray(chunk[3], dtype=np.int64), _TF_MAX).astype(np.uint16),
                    self._generation[ids],
                )
            )
        self._unsaved += len(changed)
        if since is not None and (self.since is None or since > self.since):
            self.since = since
        from cairn_cli.core.store.vector_index import SAVE_EVERY

        return self._unsaved >= SAVE_EVERY

    def settle(self, swap=nullcontext) -> None:
        """Make what was applied readable: the waiting arrays merged into the table, and the overlay too once it
        holds MERGE_ABOVE memories (`swap`: see `merge`)."""
        if self._chunks or len(self._overlay) >= MERGE_ABOVE:
            self.merge(swap)

    def merge(self, swap=nullcontext) -> None:
        """Rebuild the table with the waiting arrays and the overlay in it (and without the masked postings). The
        new table is computed beside the old one, which readers may go on reading, and put in its place inside
        `swap()` (the engine's lock held alone); nothing may apply meanwhile."""
        if not self._overlay and not self._masked and not self._chunks:
            return
        n_terms = len(self._terms)
        keep = self._in_table[self._ids] if len(self._ids) else np.zeros(0, dtype=bool)
        codes = [np.repeat(np.arange(len(self._start) - 1, dtype=np.int32), np.diff(self._start))[keep]]
        ids = [self._ids[keep]]
        tf_content, tf_keywords = [self._tf_content[keep]], [self._tf_keywords[keep]]
        settled = []
        for chunk_codes, chunk_ids, c, k, generation in self._chunks:
            current = (generation == self._generation[chunk_ids]) & (self._scope_of[chunk_ids] >= 0)
            codes.append(chunk_codes[current])
            ids.append(chunk_ids[current])
            tf_content.append(c[current])
            tf_keywords.append(k[current])
            settled.append(chunk_ids[current])
        size = sum(len(c) for c in self._overlay.values())
        codes_new = np.empty(size, dtype=np.int32)
        ids_new = np.empty(size, dtype=np.int32)
        pairs = np.empty((size, 2), dtype=np.int64)
        at = 0
        for memory_id, counts in self._overlay.items():
            m = len(counts)
            codes_new[at : at + m] = np.fromiter(counts.keys(), dtype=np.int32, count=m)
            ids_new[at : at + m] = memory_id
            pairs[at : at + m] = np.asarray(list(counts.values()), dtype=np.int64).reshape(m, 2)
            at += m
        codes.append(codes_new)
        ids.append(ids_new)
        tf_content.append(np.minimum(pairs[:, 0], _TF_MAX).astype(np.uint16))
        tf_keywords.append(np.minimum(pairs[:, 1], _TF_MAX).astype(np.uint16))
        all_codes, all_ids = np.concatenate(codes), np.concatenate(ids)
        # a term no memory holds any more leaves the vocabulary (a superseded memory's words are not kept)
        per_term = np.bincount(all_codes, minlength=n_terms)
        held = per_term > 0
        terms = [t for t, has in zip(self._terms, held.tolist()) if has]
        recode = np.cumsum(held, dtype=np.int64) - 1
        order = np.lexsort((all_ids, recode[all_codes]))
        new_ids = all_ids[order]
        new_content = np.concatenate(tf_content)[order]
        new_keywords = np.concatenate(tf_keywords)[order]
        start = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum(per_term[held], out=start[1:])
        vocab = {t: i for i, t in enumerate(terms)}
        in_table = self._in_table.copy()
        for settled_ids in settled:
            in_table[settled_ids] = True
        in_table[ids_new] = True
        with swap():
            self._ids, self._tf_content, self._tf_keywords, self._start = new_ids, new_content, new_keywords, start
            self._terms, self.vocab = terms, vocab
            self._in_table = in_table
            self._chunks.clear()
            self._overlay.clear()
            self._overlay_terms.clear()
            self._masked = 0

    # -- reading ---------------------------------------------------------------------------------------------------

    def scopes(self) -> list[str]:
        present = np.unique(self._scope_of[self._scope_of >= 0])
        return [self._scope_names[int(c)] for c in present]

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(memory ids, counts in content, counts in keywords) of the memories holding `term` now."""
        code = self.vocab.get(term)
        if code is None:
            empty = np.zeros(0, dtype=np.int32)
            return empty, empty, empty
        ids: np.ndarray = np.zeros(0, dtype=np.int32)
        c: np.ndarray = ids
        k: np.ndarray = ids
        if code < len(self._start) - 1:
            lo, hi = int(self._start[code]), int(self._start[code + 1])
            ids, c, k = self._ids[lo:hi], self._tf_content[lo:hi], self._tf_keywords[lo:hi]
            if self._masked:
                live = self._in_table[ids]
                if not live.all():
                    ids, c, k = ids[live], c[live], k[live]
        extra = self._overlay_terms.get(code)
        if extra:
            more = sorted(extra)
            ids = np.concatenate([ids, np.asarray(more, dtype=np.int32)])
            c = np.concatenate([c, np.asarray([self._overlay[m][code][0] for m in more], dtype=np.int32)])
            k = np.concatenate([k, np.asarray([self._overlay[m][code][1] for m in more], dtype=np.int32)])
        return ids, c, k

    def rows(self, ids: Iterable[int]) -> dict[int, tuple]:
        """id -> (id, scope, meta, content length, keyword length, "", "") of those of `ids` indexed: their index rows
        without their terms and group (what a ranking that reads no neighbour needs of its candidates)."""
        wanted = np.fromiter(ids, dtype=np.int64)
        wanted = wanted[(wanted >= 0) & (wanted < len(self._scope_of))]
        codes = self._scope_of[wanted]
        keep = codes >= 0
        wanted, codes = wanted[keep], codes[keep]
        names = self._scope_names
        return {
            i: (i, names[c], m, cl, kl, "", "")
            for i, c, m, cl, kl in zip(
                wanted.tolist(),
                codes.tolist(),
                self._meta[wanted].astype(np.int64).tolist(),
                self._content_len[wanted].tolist(),
                self._keyword_len[wanted].tolist(),
            )
        }

    def scope_stats(self) -> list:
        """db/fulltext.py's scope_stats over the memories held (what a team store's PostgreSQL would compute with a
        scan of its index at every ranking), kept until the next change."""
        from cairn_cli.db.fulltext import ScopeStats

        if self._stats is None:
            codes = self._scope_of
            held = codes >= 0
            meta = self._meta & held
            plain = held & ~self._meta
            width = len(self._scope_names)

            def per_scope(mask: np.ndarray, values: np.ndarray | None = None) -> list[int]:
                weights = None if values is None else values[mask].astype(np.float64)
                return [int(x) for x in np.bincount(codes[mask], weights=weights, minlength=width)]

            n, n_meta = per_scope(plain), per_scope(meta)
            clen, klen = per_scope(plain, self._content_len), per_scope(plain, self._keyword_len)
            clen_meta, klen_meta = per_scope(meta, self._content_len), per_scope(meta, self._keyword_len)
            self._stats = [
                ScopeStats(None, scope, n[c], n_meta[c], clen[c], klen[c], clen_meta[c], klen_meta[c])
                for c, scope in enumerate(self._scope_names)
                if n[c] + n_meta[c]
            ]
        return self._stats

    def scope_mask(self, scopes: Sequence[str] | None) -> np.ndarray:
        """Per scope code: is it one of `scopes` (None: every scope)."""
        mask = np.zeros(len(self._scope_names) + 1, dtype=bool)  # the last: not indexed (-1)
        if scopes is None:
            mask[:-1] = True
        else:
            for scope in scopes:
                code = self._scope_code.get(scope)
                if code is not None:
                    mask[code] = True
        return mask

    def doc_freqs(self, terms: Iterable[str]) -> dict[str, tuple[int, int]]:
        """term -> (memories holding it that are not bucket 4, bucket-4 ones), over the whole store."""
        out = {}
        for term in terms:
            ids = self._postings(term)[0]
            if len(ids):
                meta = int(np.count_nonzero(self._meta[ids]))
                out[term] = (len(ids) - meta, meta)
        return out

    def bm25(
        self,
        idf: Mapping[str, float],
        scopes: Sequence[str] | None,
        *,
        with_meta: bool,
        weight: int,
        avgdl: float,
        k1: float,
        b: float,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(memory ids ascending, BM25) of every memory of `scopes` (None: all) holding a term of `idf` (term -> its
        IDF at its weight in the query), bucket-4 ones only `with_meta`; a memory's length is its content's and
        `weight` times its keywords', as search_index counts them."""
        mask = self.scope_mask(scopes)
        parts_ids, parts_score = [], []
        for term, w in idf.items():
            ids, c, k = self._postings(term)
            if not len(ids):
                continue
            keep = mask[self._scope_of[ids]]
            if not with_meta:
                keep &= ~self._meta[ids]
            if not keep.all():
                ids, c, k = ids[keep], c[keep], k[keep]
            if not len(ids):
                continue
            tf = c.astype(np.float64) + weight * k
            dl = self._content_len[ids] + weight * self._keyword_len[ids].astype(np.float64)
            norm = k1 * (1 - b + b * dl / avgdl) if avgdl else np.full(len(ids), k1)
            parts_ids.append(ids)
            parts_score.append(np.where(tf > 0, w * tf * (k1 + 1) / (tf + norm), 0.0))
        if not parts_ids:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        ids = np.concatenate(parts_ids).astype(np.int64)
        scores = np.concatenate(parts_score)
        if len(parts_ids) == 1:
            order = np.argsort(ids, kind="stable")
            return ids[order], scores[order]
        unique, inverse = np.unique(ids, return_inverse=True)
        return unique, np.bincount(inverse, weights=scores, minlength=len(unique))

    # -- on disk ---------------------------------------------------------------------------------------------------

    def stale(self) -> bool:
        """Were the store's saved indexes dropped since this one was opened or built (vector_index.drop_saved)?"""
        from cairn_cli.core.store.vector_index import dropped_since

        return dropped_since(self.directory, self.opened_at)

    def save(self) -> None:
        """Write the table and what it has applied (the arrays first, then the record naming them, each renamed
        into place: a kill mid-save leaves the last complete save). Readers may go on meanwhile; the overlay is not
        saved: call `merge` first."""
        if self.directory is None:
            return
        with self._saving:
            if self.stale() or self._overlay or self._chunks or self._masked:
                return
            self.directory.mkdir(parents=True, exist_ok=True)
            for name in _FILES:
                tmp = self.directory / f"keywords-{name}.tmp.npy"
                np.save(tmp, getattr(self, "_" + name))
                os.replace(tmp, self.directory / f"keywords-{name}.npy")
            (self.directory / "keywords-terms.tmp.json").write_bytes(orjson.dumps(self._terms))
            os.replace(self.directory / "keywords-terms.tmp.json", self.directory / "keywords-terms.json")
            record = {
                "format": FORMAT,
                "since": self.since,
                "max_id": self.max_id,
                "scopes": self._scope_names,
            }
            tmp_record = self.directory / "keywords.json.tmp"
            tmp_record.write_text(json.dumps(record, indent=1) + "\n")
            os.replace(tmp_record, self.directory / "keywords.json")
            self._unsaved = 0

    @classmethod
    def open(cls, directory: Path) -> KeywordIndex:
        """The index saved in `directory` when it is complete, else an empty one (to be built: `since` None)."""
        index = cls(directory)
        try:
            record = json.loads((directory / "keywords.json").read_text())
            if record.get("format") != FORMAT:
                return index
            arrays = {name: np.load(directory / f"keywords-{name}.npy") for name in _FILES}
            terms = orjson.loads((directory / "keywords-terms.json").read_bytes())
        except (OSError, ValueError, KeyError):
            return index
        if len(arrays["start"]) != len(terms) + 1 or arrays["start"][-1] != len(arrays["ids"]):
            return index  # written by two saves at once: built again
        for name, value in arrays.items():
            setattr(index, "_" + name, value)
        index._generation = np.zeros(len(index._scope_of), dtype=np.uint32)
        index._count = int(np.count_nonzero(index._scope_of >= 0))
        index._terms = list(terms)
        index.vocab = {t: i for i, t in enumerate(index._terms)}
        index._scope_names = list(record["scopes"])
        index._scope_code = {s: i for i, s in enumerate(index._scope_names)}
        index.since, index.max_id = record["since"], int(record["max_id"])
        return index
