"""A big store's table (#30): the composite of a few hundred candidates instead of every memory in scope.

Above CAIRN_VECTOR_INDEX_ABOVE live memories (or on a team store with pgvector) the daemon keeps no scoring table of
the whole store. A ranking takes its candidates from two indexes, the scope and global read together: the store's
full-text index (BM25's best from the postings the daemon holds, core/store/keyword_index.py, else by MaxScore,
core/ranking/fallback.py) and the vector index (the nearest memories by cosine, core/store/vector_index.py, or
pgvector's); then it scores every candidate, and the neighbours that may lend them their score, exactly as
ScoringTable.score does: the cosine of the memory's own stored vector, BM25 with the store's statistics, the scope,
confidence, recency, the neighbour's share, the coverage factor. What can differ from the whole table is only who is
a candidate, and it reads deeper (ROUNDS) while a memory neither index returned could still outrank the last one
chosen: its cosine is at most the last nearest one's, its BM25 at most the last of BM25's best (Fagin's threshold).
With the postings held every BM25 is known: BM25's side is read exactly as deep as the bound asks, and only a short
nearest side is read 4 times deeper (begun within DEEPER_BEFORE_MS of the ranking; a ranking stopped there says so
in its memories' components, `short_of_the_bound`, which the delivery log keeps). What is left is the vector
index's own approximation (bench/scale.md: the whole table's top 10 for 199 of 200 real questions at 100k).

Without the postings held on PostgreSQL (a team store) BM25's best are computed inside the server over the GIN
index's matches of the query's terms; when those matches are more than PG_BM25_SCAN, over the rarest terms' alone
(every candidate is then scored with all of them, and no bound is known: no deeper read).

One part is read differently: the dialog profile's joined keywords (a memory's field with its previous neighbour's)
are max-normalised over the candidates, not the scope (the same order on LoCoMo; components within 0.01). The kind
of store is read from SAMPLE of the scope's memories spread over its ids, as the table reads it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import orjson

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.ids import GLOBAL_SCOPE
from cairn_cli.core.ranking import fallback as lexical
from cairn_cli.core.ranking.lexical import BM25_B, BM25_K1, COMPONENTS, Candidate, Scored, unknown_weight
from cairn_cli.core.ranking.scoring import pairwise_cosines
from cairn_cli.core.store import search_index
from cairn_cli.core.text import terms
from cairn_cli.db.fulltext import Doc

PG_BM25_SCAN = 20_000  # on PostgreSQL, at most about this many term matches are scored inside it per query
ROUNDS = 3  # reads of ever deeper candidates (4 times deeper each) while an unseen memory could still rank
# a deeper read of the nearest (4 times as many) begins only while the ranking has taken less than this (bench/scale.md:
# at 1M near-tied memories 800 nearest take ~35 ms, 3,200 ~100 ms); past it, the best of what was read ranks. A deeper
# read of BM25's best alone (milliseconds) is always begun
DEEPER_BEFORE_MS = 50.0
DEEPEST = 64  # BM25's side read at most this many times deeper in one round (beyond: the nearest are read deeper)
VECTOR_DEPTH = 200  # the nearest memories of the scope and global taken per query vector (at least twice the depth)


@dataclass
class VectorQuery:
    """What `similarities` hands back to `score`: the prompt's vector, the window's (or None) and its margin."""

    prompt: np.ndarray
    window: np.ndarray | None = None
    margin: float = 0.0


class CandidateEntry:
    """What `rank()` reads of a big store: the full-text index's counts and scopes (fallback.IndexedEntry), the
    vector index, and the lock a refresh of the vector index takes alone."""

    def __init__(
        self,
        settings: Settings,
        notes: list[str],
        vectors,
        lock,
        calibration=None,
        kinds_cache=None,
        keywords=None,
        counters: dict | None = None,
    ):
        from cairn_cli.db import fulltext as sql

        # a team store's statistics from the postings held (PostgreSQL would scan its index for them every time)
        held_stats = keywords.scope_stats() if keywords is not None and sql.is_postgres() else None
        self.lexical = lexical.IndexedEntry(settings, notes, held_stats)
        self.vectors = vectors
        self.keywords = keywords  # the postings held in memory (core/store/keyword_index.py), or None: SQLite's
        self.counters = {} if counters is None else counters  # rankings, and those that stopped short of the bound
        self.lock = lock
        self.scopes = sorted(set(self.lexical.scopes) | set(vectors.scopes()))
        self.table = CandidateTable(self, calibration, {} if kinds_cache is None else kinds_cache)

    def prefiltered(self, scope: str | None) -> int:
        return self.lexical.prefiltered(scope)

    def in_scope_count(self, scope: str | None) -> int:
        return self.lexical.in_scope_count(scope)


class CandidateTable:
    """The ScoreTable (lexical.py) of a big store: ScoringTable.score's ranking and components over candidates."""

    def __init__(self, entry: CandidateEntry, calibration, kinds_cache: dict):
        self.entry = entry
        self.calibration = calibration
        self._kinds = kinds_cache  # scope -> (memories in scope when read, kind)

    def __len__(self) -> int:
        return self.entry.in_scope_count(None)

    def similarities(self, query_vec) -> VectorQuery:
        return VectorQuery(np.asarray(query_vec, dtype=np.float32))

    def window_similarities(self, prompt_vec, window_vec, margin: float) -> tuple[VectorQuery, bool]:
        """(what ranks, what the floor reads): both are read in `score`, from the two vectors."""
        query = VectorQuery(np.asarray(prompt_vec, dtype=np.float32), np.asarray(window_vec, dtype=np.float32), margin)
        return query, True

    def _to_base(self, cos, which: str):
        return cos if self.calibration is None else self.calibration.to_base(cos, which)

    def cosines(self, memory_ids: list[int]) -> dict[int, dict[int, float]]:
        vecs = self.entry.vectors.vectors(memory_ids)
        ids = [i for i in memory_ids if i in vecs]
        if len(ids) < 2:
            return {}
        return pairwise_cosines(ids, np.stack([vecs[i] for i in ids]), self._to_base)

    def kind(self, scope: str | None) -> str:
        """The kind of store the scope's memories make (core/ranking/kinds.py), read off SAMPLE of them spread evenly
        over its ids as the whole table reads it, again when the scope has grown by a tenth."""
        from cairn_cli.core.ranking import kinds
        from cairn_cli.db import fulltext as sql

        count = self.entry.in_scope_count(scope)
        known = self._kinds.get(scope)
        if known is not None and known[0] <= count <= known[0] * 1.1:
            return known[1]
        with_meta = not self.entry.lexical.prefilter
        groups = [s for group, _ in lexical._groups(scope) for s in (group or [])] or None
        every = np.asarray(sql.ids_in(groups, with_meta=with_meta), dtype=np.int64)
        sample = every
        if len(every) > kinds.SAMPLE:
            sample = every[np.linspace(0, len(every) - 1, kinds.SAMPLE).astype(np.int64)]
        ids = sample.tolist()
        rows = {r[0]: r for r in sql.memory_rows(ids)}
        found = kinds.store_kind([rows[i][1] for i in ids if i in rows])
        if found == kinds.NOTES and len(every) >= kinds.MIN_MEMORIES:
            docs = lexical._IndexSource(self.entry.lexical.prefilter).docs(ids)
            in_groups = set(every.tolist()) if groups is not None else None
            near = sql.neighbours(docs, with_meta=with_meta)
            pairs = [
                (i, before)
                for i, (before, _) in sorted(near.items())
                if before is not None and (in_groups is None or before in in_groups)
            ]
            vecs = self.entry.vectors.vectors(sorted({i for pair in pairs for i in pair}))
            pairs = [(i, b) for i, b in pairs if i in vecs and b in vecs]
            if pairs:
                order = sorted(vecs)
                slot = {i: n for n, i in enumerate(order)}
                matrix = np.stack([vecs[i] for i in order])
                coherence = kinds.neighbour_coherence(matrix, [slot[i] for i, _ in pairs], [slot[b] for _, b in pairs])
                if coherence >= kinds.ORDERED_COHERENCE:
                    found = kinds.SEQUENCE
        self._kinds[scope] = (count, found)
        return found

    def _joined_avg(self) -> float:
        """The average length of a memory's field joined with its previous neighbour's over the store (what
        scoring.py's joined BM25 normalises by), read again when the store has grown by a tenth."""
        from cairn_cli.db import fulltext as sql

        count = self.entry.in_scope_count(None)
        known = self._kinds.get(("joined",))
        if known is None or not known[0] <= count <= known[0] * 1.1:
            n, total = sql.joined_length(self.entry.lexical.weight, with_meta=not self.entry.lexical.prefilter)
            known = self._kinds[("joined",)] = (count, total / n if n else 1.0)
        return known[1]

    def score(
        self,
        query_text: str,
        similarities,
        *,
        scope: str | None,
        weights: dict[str, float],
        half_life_days: float,
        now: dt.datetime | None = None,
        top: int | None = None,
        neighbour_weight: float = 0.0,
        context_keywords: float = 0.0,
        coverage: bool = False,
        query_terms: Mapping[str, float] | None = None,
        floor_similarities=None,
    ) -> list[Scored]:
        """ScoringTable.score over the candidates (see the module note). Read deeper while a memory that was no
        candidate could still score above the last one chosen: its cosine is at most the last nearest one's, its
        BM25 at most the last of BM25's best (Fagin's threshold; the neighbour's share is not bounded)."""
        for name in weights:
            if name not in COMPONENTS:
                raise unknown_weight(name)
        in_scope = self.entry.lexical.in_scope_count(scope)
        want = in_scope if top is None else min(top, in_scope)
        if want <= 0:
            return []
        options = {
            "scope": scope,
            "weights": weights,
            "half_life_days": half_life_days,
            "now": now,
            "want": want,
            "neighbour_weight": neighbour_weight,
            "context_keywords": context_keywords,
            "coverage": coverage,
            "query_terms": query_terms,
            "floor_similarities": floor_similarities,
        }
        depth = want if not neighbour_weight else min(in_scope, max(4 * want, want + 50))
        wide = max(VECTOR_DEPTH, 2 * depth)
        read: dict = {}  # the index rows read so far (a deeper round reads only the new ones), and every BM25
        started = time.perf_counter()
        counters = self.entry.counters
        counters["rankings"] = counters.get("rankings", 0) + 1
        for _ in range(ROUNDS):
            out, unseen = self._score(query_text, similarities, depth=depth, wide=wide, read=read, **options)
            if unseen is None or len(out) < want or out[-1].score > unseen or depth >= in_scope:
                break
            keyword_depth = _keyword_depth(read, out[-1].score, weights.get("keywords", 0.0), depth)
            if keyword_depth is not None:  # BM25's side alone is short: exactly as deep as it must be, no nearer
                depth = min(in_scope, keyword_depth)
                continue
            took = (time.perf_counter() - started) * 1000
            if took > DEEPER_BEFORE_MS:  # the answer of the candidates read
                counters["short_of_the_bound"] = counters.get("short_of_the_bound", 0) + 1
                mark = {"after_ms": round(took, 1), "candidates": depth, "nearest": wide}
                for scored in out:  # each delivery's provenance says its ranking stopped short of the bound
                    scored.components["short_of_the_bound"] = dict(mark)
                break
            depth, wide = min(in_scope, 4 * depth), 4 * wide
        return out

    def _score(
        self,
        query_text: str,
        similarities,
        *,
        scope: str | None,
        weights: dict[str, float],
        half_life_days: float,
        now: dt.datetime | None,
        want: int,
        neighbour_weight: float,
        context_keywords: float,
        coverage: bool,
        query_terms: Mapping[str, float] | None,
        floor_similarities,
        depth: int,
        wide: int,
        read: dict,
    ) -> tuple[list[Scored], float | None]:
        """The best `want` of BM25's best `depth` and the `wide` nearest, and the most a memory neither of them
        holds can score (None: unknown)."""
        from cairn_cli.db import fulltext as sql

        entry = self.entry.lexical

        weight_of = dict.fromkeys(terms(query_text), 1.0) if query_terms is None else dict(query_terms)
        weight_of = {t: w for t, w in weight_of.items() if w > 0}
        source = lexical._IndexSource(entry.prefilter)
        stats = lexical._Stats(entry.scope_rows, entry.prefilter, entry.weight)
        held = self.entry.keywords if self.entry.lexical.rows is None else None
        fast = held is None and not sql.is_postgres() and entry.weight == search_index.FULLTEXT_KEYWORD_WEIGHT
        query = similarities if isinstance(similarities, VectorQuery) else None
        bm25_floor = 0.0  # the most BM25 a memory outside BM25's best can have (None: unknown)
        bounded = True
        bm25: dict[int, float | None] = {}  # None: scored below, from the index row
        idf: dict[str, float] = {}
        near_ids: set[int] = set()
        scan: dict[str, float] = {}
        known_bm25 = None  # (ids ascending, BM25) of every memory holding a query term, when the postings are held
        if held is None and not fast:  # PostgreSQL: the document frequencies from its GIN index, BM25's best in it
            freqs = sql.pg_doc_freqs(sorted(weight_of), with_meta=not entry.prefilter)
            idf.update({t: lexical._weighted(stats.idf(n), weight_of[t]) for t, n in freqs.items()})
            scan = _scanned_terms(freqs, idf)
        # the scope and global read together: BM25's best of both (the scope part is added below, per memory), and
        # the last of them bounds every memory left out of either
        together = [s for group, _ in lexical._groups(scope) for s in (group or [])] or None
        if held is not None:  # every memory's BM25 from the postings in memory (once: a deeper round reads it again)
            if "bm25" not in read:
                for term, (df, df_meta) in held.doc_freqs(sorted(weight_of)).items():
                    full = df + (0 if entry.prefilter else df_meta)
                    idf[term] = lexical._weighted(stats.idf(full), weight_of[term])
                read["idf"] = dict(idf)
                read["bm25"] = held.bm25(
                    idf,
                    together,
                    with_meta=not entry.prefilter,
                    weight=entry.weight,
                    avgdl=stats.avgdl,
                    k1=BM25_K1,
                    b=BM25_B,
                )
            idf.update(read["idf"])
            known_bm25 = read["bm25"]
            top_ids, values = _best(known_bm25[0], known_bm25[1], depth)
            bm25.update(zip(top_ids, values))
            bm25.update(dict.fromkeys(i for i in source.newest(together, depth) if i not in bm25))
        elif fast:
            got = lexical._maxscore(source, stats, weight_of, together, depth, entry.prefilter, idf)
            bm25.update(got)
            values = sorted(got.values(), reverse=True)  # the best `depth` by BM25 and some newest, lower
        else:  # who is a candidate: BM25's best over the scanned terms; every score then over all (below)
            found = sql.pg_bm25_top(
                scan,
                together,
                depth,
                weight=entry.weight,
                avgdl=stats.avgdl,
                with_meta=not entry.prefilter,
                k1=BM25_K1,
                b=BM25_B,
            )
            bm25.update(dict.fromkeys([i for i, _ in found] + source.newest(together, depth)))
            values = [v for _, v in found]
            bounded = len(scan) == len(idf)  # a term left out: no bound
        if len(values) >= depth:
            bm25_floor = values[depth - 1]
        cos_floor: list[float] = []  # per query vector, the cosine of its last nearest (-inf: every one read)
        if query is not None:  # the nearest of the scope and global together: they compete for the same places
            for vec in (query.prompt, query.window):
                if vec is not None:
                    key = ("nearest", vec is query.window, wide)  # a round only BM25's side deepens reads them again
                    found_near = read.get(key)
                    if found_near is None:
                        found_near = read[key] = self.entry.vectors.nearest(vec, wide, together)
                    near_ids.update(found_near.ids.tolist())
                    full = len(found_near.ids) >= wide
                    cos_floor.append(float(found_near.cosines[-1]) if full else float("-inf"))
        if held is not None and not (neighbour_weight or context_keywords):  # no term read: the held rows say all
            # (a memory forgotten since they were caught up has no row in `memories`: it is dropped below, where
            # the chosen's rows are read)
            docs = {i: Doc._make(row) for i, row in held.rows(set(bm25) | near_ids).items()}
        else:
            docs = _docs(source, set(bm25) | near_ids, read.setdefault("docs", {}))
        in_groups = {s for group, _ in lexical._groups(scope) for s in (group if group is not None else entry.counts)}
        ranked = {
            i for i, d in docs.items() if d.scope in in_groups and not (d.meta and entry.prefilter)
        }  # a memory of another scope or one the prefilter drops is never a candidate
        neighbours: dict[int, tuple[int | None, int | None]] = {}
        if neighbour_weight or context_keywords:
            for _ in range(2 if neighbour_weight else 1):  # the neighbours, and theirs: each is scored with its own
                todo = [docs[i] for i in ranked if i not in neighbours]
                neighbours.update(source.neighbours(todo, with_meta=not entry.prefilter))
                others = sorted({n for pair in neighbours.values() for n in pair if n is not None and n not in docs})
                for doc in _docs(source, others, read.setdefault("docs", {})).values():
                    docs[doc.memory_id] = doc
                    if doc.scope in in_groups and not (doc.meta and entry.prefilter):
                        ranked.add(doc.memory_id)
                if not neighbour_weight:
                    break
        counts = _Counts(docs, entry.weight)  # each memory's term counts, parsed once
        missing = [i for i in ranked if bm25.get(i) is None]
        if known_bm25 is not None and missing:
            bm25.update(zip(missing, _lookup(known_bm25[0], known_bm25[1], missing)))
        for i in missing:
            if bm25.get(i) is None:
                bm25[i] = counts.bm25(i, idf, stats.avgdl)
        ids = sorted(ranked)
        if not ids:
            return [], None
        slot = {i: n for n, i in enumerate(ids)}
        n = len(ids)
        requested = scope if scope and scope != GLOBAL_SCOPE else None
        scope_bonus = np.asarray([1.0 if docs[i].scope == requested else 0.0 for i in ids])
        raw_bm25 = np.asarray([bm25[i] for i in ids], dtype=np.float64)
        best = float(raw_bm25.max()) or 1.0
        has_vec = np.zeros(n, dtype=bool)
        sims = floor_sims = np.zeros(n, dtype=np.float64)
        if query is not None:
            vecs = self.entry.vectors.vectors(ids)
            has_vec = np.asarray([i in vecs for i in ids])
            matrix = np.zeros((n, len(query.prompt)), dtype=np.float32)
            for i, vec in vecs.items():
                matrix[slot[i]] = vec
            prompt_cos = np.asarray(self._to_base(matrix @ query.prompt, "query"), dtype=np.float64)
            sims = floor_sims = prompt_cos
            if query.window is not None:
                window_cos = np.asarray(self._to_base(matrix @ query.window, "query"), dtype=np.float64)
                sims = np.maximum(prompt_cos, window_cos - query.margin)
                floor_sims = np.maximum(prompt_cos, window_cos)
        # the memories' rows: of every candidate when confidence or recency weighs, else of the chosen alone
        per_memory = bool(weights.get("confidence") or weights.get("recency"))
        rows = _memories(ids, has_vec, slot) if per_memory else {}
        now_ts = (now or utcnow()).timestamp()
        columns = {
            "similarity": np.where(has_vec, np.clip(sims, 0, None), 0.0),
            "keywords": raw_bm25 / best,
            "scope": scope_bonus,
            "confidence": np.asarray([rows[i].confidence if i in rows else 0.0 for i in ids], dtype=np.float64),
            "recency": np.zeros(n),
        }
        if per_memory:
            at = [slot[i] for i in rows]
            columns["recency"][at] = _recency([rows[i].updated_at for i in rows], now_ts, half_life_days)
        total = np.zeros(n, dtype=np.float64)
        scope_part = np.zeros(n, dtype=np.float64)
        for name, weight in weights.items():
            if weight:
                part = weight * columns[name]
                total += part
                if name == "scope":
                    scope_part = part
        joined = None
        if context_keywords:
            joined = _joined_bm25(ids, counts, neighbours, idf, self._joined_avg())
            total += context_keywords * joined / (float(joined.max()) or 1.0)
        lent = np.zeros(n, dtype=np.float64)
        if neighbour_weight:
            lent_scope = np.zeros(n, dtype=np.float64)
            base, base_scope = total.copy(), scope_part.copy()
            for i in ids:
                for other in neighbours.get(i, (None, None)):
                    j = slot.get(other) if other is not None else None
                    if j is not None and base[j] > lent[slot[i]]:
                        lent[slot[i]], lent_scope[slot[i]] = base[j], base_scope[j]
            total = total + neighbour_weight * lent
            scope_part = scope_part + neighbour_weight * lent_scope
        relevance = total - scope_part
        if floor_similarities is not None and query is not None and weights.get("similarity"):
            gap = np.clip(floor_sims, 0, None) - np.clip(sims, 0, None)
            relevance = relevance + weights["similarity"] * np.where(has_vec, np.clip(gap, 0, None), 0.0)
        known = _coverage(weight_of, idf, stats) if coverage else None
        if known is not None:
            relevance = relevance * known
        unseen = None
        if bounded:  # what a memory that was no candidate could score at most
            sim_floor = 0.0
            if cos_floor and query is not None:
                p = float(self._to_base(np.asarray([cos_floor[0]]), "query")[0]) if cos_floor[0] > -1e9 else 0.0
                sim_floor = p
                if len(cos_floor) > 1 and cos_floor[1] > -1e9:
                    w = float(self._to_base(np.asarray([cos_floor[1]]), "query")[0])
                    sim_floor = max(p, w - query.margin)
            vector_part = weights.get("similarity", 0.0) * max(sim_floor, 0.0)
            rest = sum(weights.get(name, 0.0) for name in ("scope", "confidence", "recency")) + context_keywords
            unseen = vector_part + weights.get("keywords", 0.0) * bm25_floor / best + rest
            read["bound"] = (vector_part + rest, best)
        by_total = np.lexsort((-np.asarray(ids), -total)).tolist()
        # the best `want` with a row in `memories`: a memory forgotten since the indexes were caught up has none and
        # is never a candidate (with confidence or recency weighing, every row was read above; else the chosen's
        # rows are read now, a few more if some are gone)
        order: list[int] = [k for k in by_total if ids[k] in rows][:want] if per_memory else []
        start = 0
        while not per_memory and len(order) < want and start < n:
            chunk = by_total[start : start + want - len(order)]
            start += len(chunk)
            read_rows = _memories([ids[k] for k in chunk], has_vec, slot)
            rows.update(read_rows)
            for k in chunk:  # their confidence and recency, logged though they weigh nothing
                if ids[k] in read_rows:
                    order.append(k)
                    columns["confidence"][k] = read_rows[ids[k]].confidence
                    columns["recency"][k] = _recency([read_rows[ids[k]].updated_at], now_ts, half_life_days)[0]
        out = []
        for k in order:
            i = ids[k]
            c = {name: round(float(columns[name][k]), 6) for name in weights}
            c["keywords_bm25"] = round(float(raw_bm25[k]), 6)
            if joined is not None:
                c["keywords_context"] = round(float(joined[k] / (float(joined.max()) or 1.0)), 6)
            if neighbour_weight:
                c["neighbour"] = round(float(lent[k]), 6)
            if known is not None:
                c["coverage"] = round(known, 6)
            c["composite"] = round(float(total[k]), 6)
            c["relevance"] = round(float(relevance[k]), 6)
            out.append(Scored(rows[i], float(total[k]), c))
        return out, unseen


def _keyword_depth(read: dict, last: float, keyword_weight: float, depth: int) -> int | None:
    """When every memory's BM25 is known (the postings held) and the nearest are deep enough, how many of BM25's best
    must be candidates so that no other memory could outrank `last` (the last one chosen): those whose keywords
    part alone exceeds what the nearest's bound leaves. None: the nearest must be read deeper (or no such count is
    known, or it is more than DEEPEST times `depth`)."""
    if "bm25" not in read or "bound" not in read or not keyword_weight:
        return None
    others, best = read["bound"]
    slack = last - others
    if slack <= 0:
        return None
    need = int(np.count_nonzero(keyword_weight * read["bm25"][1] / best >= slack * (1 - 1e-9))) + 1
    return need if depth < need <= DEEPEST * depth else None


def _best(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[list[int], list[float]]:
    """The `k` best of (ids, scores) by score, then newer (higher) id, best first."""
    if len(ids) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((-ids, -scores))[:k]
    return ids[order].tolist(), scores[order].tolist()


def _lookup(ids: np.ndarray, scores: np.ndarray, wanted: list[int]) -> list[float]:
    """The scores of `wanted` in (ids ascending, scores); 0 for those not there."""
    at = np.searchsorted(ids, wanted)
    at = np.minimum(at, max(len(ids) - 1, 0))
    if not len(ids):
        return [0.0] * len(wanted)
    found = ids[at] == np.asarray(wanted)
    return np.where(found, scores[at], 0.0).tolist()


def _memories(ids: list[int], has_vec: np.ndarray, slot: dict[int, int]) -> dict[int, Candidate]:
    rows = lexical._memories(ids)
    for i, cand in rows.items():
        cand.has_embedding = bool(has_vec[slot[i]])
    return rows


def _recency(updated: list[dt.datetime], now_ts: float, half_life_days: float) -> np.ndarray:
    if half_life_days <= 0:
        return np.zeros(len(updated))
    age_days = np.clip((now_ts - np.asarray([u.timestamp() for u in updated])) / 86400.0, 0, None)
    return 0.5 ** (age_days / half_life_days)


def _coverage(weight_of: Mapping[str, float], idf: Mapping[str, float], stats) -> float:
    """LexicalIndex.coverage from the index's statistics: the IDF-weighted share of the query's terms the store
    holds (`idf` has the weighted IDF of those it holds; an unknown term weighs the most, df 0)."""
    if not weight_of:
        return 0.0
    weights = {t: idf[t] if t in idf else lexical._weighted(stats.idf(0), w) for t, w in weight_of.items()}
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if t in idf) / total if total else 0.0


def _scanned_terms(freqs: Mapping[str, int], idf: Mapping[str, float]) -> dict[str, float]:
    """The query's terms whose matches PostgreSQL scores to find BM25's best: all of them while their matches are
    at most PG_BM25_SCAN, else the rarest that fit (at least one). A memory that holds only the most common terms
    scores little with BM25 anyway, and is a candidate still when it is near the query's vector."""
    out: dict[str, float] = {}
    total = 0
    for term in sorted(freqs, key=lambda t: (freqs[t], t)):
        total += freqs[term]
        if out and total > PG_BM25_SCAN:
            break
        out[term] = idf[term]
    return out


def _docs(source, ids, read: dict[int, Doc]) -> dict[int, Doc]:
    """The index rows of `ids`, those not in `read` read now (and kept there); ids without a row are left out."""
    new = sorted(i for i in ids if i not in read)
    read.update((d.memory_id, d) for d in source.docs(new))
    return {i: read[i] for i in ids if i in read}


class _Counts:
    """The candidates' index rows with each one's term counts parsed once: {term: tf at the keyword weight}, and its
    field's length."""

    def __init__(self, docs: dict, weight: int):
        self.docs, self.weight = docs, weight
        self._parsed: dict[int, tuple[dict[str, int], int]] = {}

    def of(self, memory_id: int) -> tuple[dict[str, int], int]:
        got = self._parsed.get(memory_id)
        if got is None:
            doc = self.docs[memory_id]
            w = self.weight
            tfs = {t: c[0] + w * c[1] for t, c in orjson.loads(doc.terms).items()}
            got = self._parsed[memory_id] = (tfs, doc.content_len + w * doc.keyword_len)
        return got

    def bm25(self, memory_id: int, idf: Mapping[str, float], avgdl: float) -> float:
        """fallback._doc_bm25 of one memory."""
        tfs, length = self.of(memory_id)
        return _bm25(tfs, length, idf, avgdl)


def _bm25(tfs: Mapping[str, int], length: int, idf: Mapping[str, float], avgdl: float) -> float:
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / avgdl) if avgdl else BM25_K1
    score = 0.0
    for term, w in idf.items():
        tf = tfs.get(term)
        if tf:
            score += w * tf * (BM25_K1 + 1) / (tf + norm)
    return score


def _joined_bm25(ids, counts: _Counts, neighbours, idf, avg: float) -> np.ndarray:
    """BM25 of each memory's field joined with its previous neighbour's (scoring.py's `_joined`); `avg`: the joined
    fields' average length over the store."""
    out = np.zeros(len(ids), dtype=np.float64)
    for k, i in enumerate(ids):
        tfs, length = counts.of(i)
        before = neighbours.get(i, (None, None))[0]
        if before is not None and before in counts.docs:
            prev, prev_length = counts.of(before)
            tfs = {t: tfs.get(t, 0) + prev.get(t, 0) for t in idf if t in tfs or t in prev}
            length += prev_length
        out[k] = _bm25(tfs, length, idf, avg or 1.0)
    return out
