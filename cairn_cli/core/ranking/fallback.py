"""The lexical fallback's table: the composite of every live memory in scope, read from the store's full-text index.
When the daemon does not answer, the hook's own process ranks with keywords and scope only (no model, no numpy),
exactly the daemon's composite without embeddings, top-k by BM25 with MaxScore's bound over the index's postings;
the how and the why (and why not FTS5's `bm25()`) are in docs/hot-path.md."""

from __future__ import annotations

import datetime as dt
import heapq
import math
from collections.abc import Iterable, Mapping, Sequence

import orjson

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.ids import GLOBAL_SCOPE
from cairn_cli.core.ranking.lexical import (
    BM25_B,
    BM25_K1,
    COMPONENTS,
    Candidate,
    Scored,
    candidate_of,
    unknown_weight,
)
from cairn_cli.core.store import search_index
from cairn_cli.core.text import terms
from cairn_cli.db.fulltext import Doc, ScopeStats

COMPLETE_COST = 8  # completing a memory from its stored counts costs about this many postings read
_EPS = 1e-9  # relative slack on every bound: a memory at the bound is completed, never skipped


class _Stats:
    """The BM25 collection statistics of the table (the memories that can rank) at a keyword weight."""

    def __init__(self, scope_rows: Iterable[ScopeStats], prefilter: bool, weight: int):
        self.scope_id: dict[str, int] = {}
        n = clen = klen = 0
        for row in scope_rows:
            if row.scope_id is not None:
                self.scope_id[row.scope] = row.scope_id
            n += row.n + (0 if prefilter else row.n_meta)
            clen += row.content_len + (0 if prefilter else row.content_len_meta)
            klen += row.keyword_len + (0 if prefilter else row.keyword_len_meta)
        self.n = n
        self.avgdl = (clen + weight * klen) / n if n else 0.0

    def idf(self, df: int) -> float:
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))


Group = tuple[list[str] | None, bool]  # (its scopes, None: every memory; do they get the scope bonus)


def _groups(scope: str | None) -> list[Group]:
    """The requested scope and global, global alone, or every memory."""
    if scope and scope != GLOBAL_SCOPE:
        return [([scope], True), ([GLOBAL_SCOPE], False)]
    if scope == GLOBAL_SCOPE:
        return [([GLOBAL_SCOPE], False)]
    return [(None, False)]


class IndexedEntry:
    """What `rank()` reads of the fallback's store: the table, the known scopes, the in-scope and prefilter counts.
    `notes` receives what the ranking's provenance must say (an index that could not be brought up to date)."""

    def __init__(self, settings: Settings, notes: list[str], scope_rows: list[ScopeStats] | None = None):
        from cairn_cli.db import fulltext as sql

        self.prefilter = bool(settings.RELEVANCE_PREFILTER_ENABLED)
        self.weight = int(settings.KEYWORD_FIELD_WEIGHT)
        self.rows: list[Doc] | None = None  # index rows computed here (an index this process cannot update)
        if search_index.is_behind():
            failed = search_index.sync_if_behind()
            if failed:
                self.rows = [Doc._make(r) for r in search_index.rows_of(sql.all_memory_rows())]
                notes.append(f"full-text index behind and not writable ({failed}): every memory scored in memory")
        if self.rows is not None:
            self.scope_rows = _scope_rows(self.rows)
        else:  # `scope_rows`: held by the caller (a big store's postings in memory), else the index's
            self.scope_rows = scope_rows if scope_rows is not None else sql.scope_stats()
        self.counts = {row.scope: (row.n, row.n_meta) for row in self.scope_rows}  # scope -> (ranked, bucket 4)
        self.scopes = sorted({s for s, (n, n_meta) in self.counts.items() if n + n_meta} | {GLOBAL_SCOPE})
        self.table = IndexedTable(self)

    def _counts(self, scope: str | None) -> tuple[int, int]:
        scopes = {s for group, _ in _groups(scope) for s in (group if group is not None else self.counts)}
        return (
            sum(self.counts.get(s, (0, 0))[0] for s in scopes),
            sum(self.counts.get(s, (0, 0))[1] for s in scopes),
        )

    def prefiltered(self, scope: str | None) -> int:
        return self._counts(scope)[1] if self.prefilter else 0

    def in_scope_count(self, scope: str | None) -> int:
        n, n_meta = self._counts(scope)
        return n + (0 if self.prefilter else n_meta)


def _scope_rows(rows: Iterable[Doc]) -> list[ScopeStats]:
    """scope_stats() of index rows held in memory."""
    out: dict[str, dict] = {}
    for doc in rows:
        row = out.setdefault(doc.scope, dict.fromkeys(ScopeStats._fields, 0) | {"scope_id": None, "scope": doc.scope})
        suffix = "_meta" if doc.meta else ""
        row["n" + suffix] += 1
        row["content_len" + suffix] += doc.content_len
        row["keyword_len" + suffix] += doc.keyword_len
    return [ScopeStats(**r) for r in out.values()]


class IndexedTable:
    """The fallback's ScoreTable (lexical.py): ScoringTable.score's ranking and components, similarity 0."""

    def __init__(self, entry: IndexedEntry):
        self.entry = entry

    def __len__(self) -> int:
        return self.entry.in_scope_count(None)

    def similarities(self, query_vec) -> None:
        return None

    def cosines(self, memory_ids: list[int]) -> None:
        """None: no model, no embeddings (the near-duplicate skip tells repeats by their text alone)."""
        return None

    def window_similarities(self, prompt_vec, window_vec, margin: float) -> tuple[None, None]:
        return None, None

    def kind(self, scope: str | None) -> None:
        """Unknown: the fallback reads only the query's terms' postings, not the scope's memories, so `auto` ranks
        with the default profile here (lexically, as the daemon's BM25 does)."""
        return None

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
        context_keywords: float = 0.0,  # the dialog profile's joined keywords: the daemon's alone (pipeline.py)
        coverage: bool = False,  # and its floor's coverage factor
        query_terms: Mapping[str, float] | None = None,
        floor_similarities=None,  # no similarity here
    ) -> list[Scored]:
        for name in weights:
            if name not in COMPONENTS:
                raise unknown_weight(name)
        entry = self.entry
        in_scope = entry.in_scope_count(scope)
        want = in_scope if top is None else min(top, in_scope)
        if want <= 0:
            return []
        from cairn_cli.db import fulltext as sql

        # BM25's query: term -> weight (a context window's earlier turns weigh less than its prompt); a term's
        # weight scales its IDF, so that MaxScore's bounds and every stored-count completion carry it
        weight_of = dict.fromkeys(terms(query_text), 1.0) if query_terms is None else dict(query_terms)
        weight_of = {t: w for t, w in weight_of.items() if w > 0}
        every_memory = bool(weights.get("confidence") or weights.get("recency"))
        source: _Source = _IndexSource(entry.prefilter) if entry.rows is None else _RowSource(entry)
        stats = _Stats(entry.scope_rows, entry.prefilter, entry.weight)
        fast = (
            entry.rows is None
            and not sql.is_postgres()
            and entry.weight == search_index.FULLTEXT_KEYWORD_WEIGHT
            and weights.get("keywords", 0) > 0
            and not every_memory
        )
        # a profile that smooths over neighbours (the dialog one) may lift a memory by its neighbour's score: it
        # reads deeper (and the neighbours of what it read)
        depth = want if not neighbour_weight else min(in_scope, max(4 * want, want + 50))
        bm25: dict[int, float] = {}
        bonus: set[int] = set()
        idf: dict[str, float] = {}
        for scopes, is_requested in _groups(scope):
            if fast:
                got = _maxscore(source, stats, weight_of, scopes, depth, entry.prefilter, idf)
            else:
                got = _exhaustive(source, stats, weight_of, scopes, depth, entry, every_memory, idf)
            bm25.update(got)
            if is_requested:
                bonus.update(got)
        near: dict[int, tuple[int | None, int | None]] = {}
        if neighbour_weight and bm25:
            # the candidates: what was read and its neighbours (a neighbour of a good memory is lifted by it); each
            # needs its own neighbours' scores, so the neighbours' neighbours are scored too
            in_groups = {s for group, _ in _groups(scope) for s in (group if group is not None else entry.counts)}
            requested = scope if scope and scope != GLOBAL_SCOPE else None
            docs = {d.memory_id: d for d in source.docs(list(bm25))}
            for _ in range(2):
                near.update(
                    source.neighbours([d for i, d in docs.items() if i not in near], with_meta=not entry.prefilter)
                )
                others = sorted({n for pair in near.values() for n in pair if n is not None and n not in docs})
                for doc in source.docs(others):
                    docs[doc.memory_id] = doc
                    if doc.scope in in_groups:  # a neighbour out of scope lends nothing (the table's mask)
                        bm25[doc.memory_id] = _doc_bm25(doc, idf, entry.weight, stats.avgdl)
                        if doc.scope == requested:
                            bonus.add(doc.memory_id)
            near = {i: pair for i, pair in near.items() if i in bm25}
        return _composite(bm25, bonus, weights, half_life_days, now, want, neighbour_weight, near)


# --- where the term counts come from ---------------------------------------------------------------------------


class _Source:
    """The index's rows (db/fulltext.py's Doc)."""

    def docs(self, ids: Sequence[int]) -> list[Doc]:
        raise NotImplementedError

    def newest(self, scopes: list[str] | None, k: int) -> list[int]:
        raise NotImplementedError

    def meta_docs(self, scopes: list[str] | None) -> list[Doc]:
        raise NotImplementedError

    def containing(self, query: Sequence[str]) -> list[Doc]:
        raise NotImplementedError

    def scope_docs(self, scopes: list[str] | None) -> list[Doc]:
        raise NotImplementedError

    def neighbours(self, docs: Sequence[Doc], *, with_meta: bool) -> dict[int, tuple[int | None, int | None]]:
        raise NotImplementedError


class _IndexSource(_Source):
    """The store's full-text index."""

    def __init__(self, prefilter: bool):
        self.prefilter = prefilter

    def docs(self, ids):
        from cairn_cli.db import fulltext as sql

        return sql.docs(ids)

    def newest(self, scopes, k):
        from cairn_cli.db import fulltext as sql

        return sql.newest(scopes, k, with_meta=not self.prefilter)

    def meta_docs(self, scopes):
        from cairn_cli.db import fulltext as sql

        return sql.meta_docs(scopes)

    def containing(self, query):
        from cairn_cli.db import fulltext as sql

        return sql.containing(query)

    def scope_docs(self, scopes):
        from cairn_cli.db import fulltext as sql

        return sql.scope_docs(scopes)

    def neighbours(self, docs, *, with_meta):
        from cairn_cli.db import fulltext as sql

        return sql.neighbours(docs, with_meta=with_meta)


class _RowSource(_Source):
    """Index rows computed in this process from the memories themselves."""

    def __init__(self, entry: IndexedEntry):
        self.prefilter = entry.prefilter
        self.rows = entry.rows or []
        self.by_id = {r.memory_id: r for r in self.rows}

    def docs(self, ids):
        return [self.by_id[i] for i in ids if i in self.by_id]

    def scope_docs(self, scopes):
        return [r for r in self.rows if scopes is None or r.scope in scopes]

    def newest(self, scopes, k):
        return sorted((r.memory_id for r in self.scope_docs(scopes) if not (r.meta and self.prefilter)), reverse=True)[
            :k
        ]

    def meta_docs(self, scopes):
        return [r for r in self.scope_docs(scopes) if r.meta]

    def containing(self, query):
        wanted = set(query)
        return [r for r in self.rows if not wanted.isdisjoint(orjson.loads(r.terms))]

    def neighbours(self, docs, *, with_meta):
        by_group: dict[str, list[int]] = {}
        for r in self.rows:
            if with_meta or not r.meta:
                by_group.setdefault(r.grp, []).append(r.memory_id)
        out = {}
        for doc in docs:
            ids = sorted(by_group.get(doc.grp, []))
            before = [i for i in ids if i < doc.memory_id]
            after = [i for i in ids if i > doc.memory_id]
            out[doc.memory_id] = (before[-1] if before else None, after[0] if after else None)
        return out


# --- BM25 ------------------------------------------------------------------------------------------------------


def _weighted(idf: float, weight: float) -> float:
    """A query term's IDF at its weight in the query (at 1, exactly the IDF), as scoring.py's."""
    return idf if weight == 1.0 else idf * weight


def _doc_bm25(doc: Doc, idf: dict[str, float], weight: int, avgdl: float) -> float:
    """BM25 of one index row for the terms of `idf`."""
    counts = orjson.loads(doc.terms)
    norm = BM25_K1 * (1 - BM25_B + BM25_B * (doc.content_len + weight * doc.keyword_len) / avgdl) if avgdl else BM25_K1
    score = 0.0
    for term, w in idf.items():
        c = counts.get(term)
        if c is not None:
            tf = c[0] + weight * c[1]
            if tf:
                score += w * tf * (BM25_K1 + 1) / (tf + norm)
    return score


def _maxscore(
    source: _Source,
    stats: _Stats,
    query: Mapping[str, float],
    scopes: list[str] | None,
    k: int,
    prefilter: bool,
    idf: dict[str, float],
) -> dict[int, float]:
    """Exact BM25 of one scope group's top `k` (by BM25, then newer id) and of its `k` newest memories, reading
    only the postings that can change the top k (the postings are at FULLTEXT_KEYWORD_WEIGHT). `query`: term ->
    weight. Fills `idf` (each term's IDF at its weight)."""
    from cairn_cli.db import fulltext as sql

    weight = search_index.FULLTEXT_KEYWORD_WEIGHT
    avgdl = stats.avgdl
    c1 = BM25_K1 * (1 - BM25_B)
    c2 = BM25_K1 * BM25_B / avgdl if avgdl else 0.0
    plan: list[tuple[float, str]] = []  # (the most one memory can get from the term, the term), largest first
    tf_ceiling: dict[str, int] = {}
    doc_freq: dict[str, int] = {}
    for term, (df, df_meta, tf_max, dl_min) in sql.term_stats(sorted(query)).items():
        full_df = df + (0 if prefilter else df_meta)
        if full_df:
            idf[term] = _weighted(stats.idf(full_df), query[term])
        if df:  # postings exist: tf <= tf_max and length >= dl_min over them
            plan.append((idf[term] * tf_max * (BM25_K1 + 1) / (tf_max + c1 + c2 * dl_min), term))
            tf_ceiling[term] = tf_max
            doc_freq[term] = df
    plan.sort(reverse=True)
    left = [0.0] * (len(plan) + 1)  # left[i]: the most the terms from i on can add to a memory
    for i in range(len(plan) - 1, -1, -1):
        left[i] = left[i + 1] + plan[i][0]
    postings = sql.postings_query(
        None if scopes is None else [stats.scope_id[s] for s in scopes if s in stats.scope_id]
    )
    acc: dict[int, float] = {}  # memory -> its BM25 over the terms read so far
    lengths: dict[int, int] = {}  # memory -> its length at the postings' keyword weight
    best: list[int] = []  # the k best of acc, once worth tracking
    theta = 0.0  # the k-th best of acc: no more than the k-th best final score
    stop = len(plan)
    for i, (_, term) in enumerate(plan):
        if left[i] < theta * (1 - _EPS):
            # a memory seen in none of the terms read so far scores under theta: the top k is among acc. Those of
            # acc that may still reach it are completed one by one (~10x a posting's cost): reading the next term's
            # postings instead is cheaper while they are fewer than COMPLETE_COST times those memories
            floor = theta - _EPS * max(theta, 1.0)
            open_ = sum(1 for v in acc.values() if v + left[i] >= floor)
            if doc_freq[term] >= COMPLETE_COST * open_:
                stop = i
                break
        a = idf[term] * (BM25_K1 + 1)
        get = acc.get
        rows = postings(term)
        for memory_id, tf, dl in rows:
            acc[memory_id] = get(memory_id, 0.0) + a * tf / (tf + c1 + c2 * dl)
            lengths[memory_id] = dl
        if len(acc) < k or left[i + 1] >= left[0] - left[i + 1]:
            continue  # theta <= the largest partial score <= what was read: no stop is possible yet
        pool = {r[0] for r in rows}.union(best) if best else set(acc)
        best = heapq.nlargest(k, pool, key=acc.__getitem__)
        theta = acc[best[-1]]
    rest = {term: idf[term] for _, term in plan[stop:]}
    top: list[tuple[float, int]] = []  # a min-heap of the k best (score, id) known exactly
    fetched: dict[int, Doc] = {}
    if not rest:
        top = heapq.nlargest(k, ((v, d) for d, v in acc.items()))
    else:  # complete the memories that may still reach the top k, the highest ceiling first
        ceilings: dict[int, float] = {}  # length -> the most the terms left can add to a memory that long

        def ceiling(dl: int) -> float:
            got = ceilings.get(dl)
            if got is None:
                norm = c1 + c2 * dl
                got = ceilings[dl] = sum(idf[t] * (BM25_K1 + 1) * tf_ceiling[t] / (tf_ceiling[t] + norm) for t in rest)
            return got

        floor = theta - _EPS * max(theta, 1.0)
        order = sorted(((up, d) for d, v in acc.items() if (up := v + ceiling(lengths[d])) >= floor), reverse=True)
        for start in range(0, len(order), 64):
            limit = top[0][0] if len(top) >= k else theta
            batch = [d for up, d in order[start : start + 64] if up >= limit - _EPS * max(limit, 1.0)]
            if not batch:
                break
            for doc in source.docs(batch):
                fetched[doc.memory_id] = doc
                item = (acc[doc.memory_id] + _doc_bm25(doc, rest, weight, avgdl), doc.memory_id)
                if len(top) < k:
                    heapq.heappush(top, item)
                elif item > top[0]:
                    heapq.heapreplace(top, item)
    out = {d: v for v, d in top}
    newest = [d for d in source.newest(scopes, k) if d not in out]
    more = [fetched[d] for d in newest if d in fetched] + source.docs([d for d in newest if d not in fetched])
    if not prefilter:
        more += source.meta_docs(scopes)  # bucket-4 memories have no postings
    for doc in more:
        out[doc.memory_id] = _doc_bm25(doc, idf, weight, avgdl)
    return out


def _exhaustive(
    source: _Source,
    stats: _Stats,
    query: Mapping[str, float],
    scopes: list[str] | None,
    k: int,
    entry: IndexedEntry,
    every_memory: bool,
    idf: dict[str, float],
) -> dict[int, float]:
    """Exact BM25 of every memory of one scope group that contains a query term, and of its `k` newest (of all of
    them when `every_memory`); the document frequencies are counted from the rows (any keyword weight). Fills `idf`."""
    weight = entry.weight
    df: dict[str, int] = dict.fromkeys(sorted(query), 0)
    hits = []
    for doc in source.containing(list(df)):
        if doc.meta and entry.prefilter:
            continue
        counts = orjson.loads(doc.terms)
        hit = False
        for term in df.keys() & counts.keys():
            c = counts[term]
            if c[0] + weight * c[1]:
                df[term] += 1
                hit = True
        if hit:
            hits.append(doc)
    idf.update({t: _weighted(stats.idf(n), query[t]) for t, n in df.items() if n})
    wanted = None if scopes is None else set(scopes)
    out = {d.memory_id: _doc_bm25(d, idf, weight, stats.avgdl) for d in hits if wanted is None or d.scope in wanted}
    if every_memory:
        extra = [d.memory_id for d in source.scope_docs(scopes) if not (d.meta and entry.prefilter)]
    else:
        extra = source.newest(scopes, k)
    for memory_id in extra:
        out.setdefault(memory_id, 0.0)
    return out


# --- the composite ---------------------------------------------------------------------------------------------


def _composite(
    bm25: dict[int, float],
    bonus: set[int],
    weights: dict[str, float],
    half_life_days: float,
    now: dt.datetime | None,
    top: int,
    neighbour_weight: float = 0.0,
    near: dict[int, tuple[int | None, int | None]] | None = None,
) -> list[Scored]:
    """The `top` best candidates by scoring.py's composite (similarity 0), ties to the newer id, with every
    component, the relevance the composite floor reads (the composite less its scope part) and, for a profile that
    smooths over neighbours, the neighbour's share. `bonus`: the candidates in the requested scope; `near`: the
    neighbours of the candidates (those not in `bm25` are out of scope and lend nothing)."""
    if not bm25:
        return []
    best = max(bm25.values()) or 1.0
    per_memory = bool(weights.get("confidence") or weights.get("recency"))
    rows = _memories(list(bm25)) if per_memory else {}
    now_ts = (now or utcnow()).timestamp()

    def components(memory_id: int) -> dict[str, float]:
        c = {
            "similarity": 0.0,
            "keywords": bm25[memory_id] / best,
            "scope": 1.0 if memory_id in bonus else 0.0,
            "confidence": 0.0,
            "recency": 0.0,
        }
        cand = rows.get(memory_id)
        if cand is not None:
            c["confidence"] = cand.confidence
            age_days = max((now_ts - cand.updated_at.timestamp()) / 86400.0, 0.0)
            c["recency"] = 0.5 ** (age_days / half_life_days) if half_life_days > 0 else 0.0
        return c

    base = {}
    for memory_id in bm25:
        c = components(memory_id)
        base[memory_id] = sum(w * c[name] for name, w in weights.items() if w)
    totals, lent, lent_scope = dict(base), {}, {}
    if neighbour_weight and near:
        for memory_id, pair in near.items():
            chosen_nb, lent[memory_id] = None, 0.0
            for n in pair:  # the better neighbour, the previous one on a tie (as the table picks it)
                if n is not None and base.get(n, 0.0) > lent[memory_id]:
                    chosen_nb, lent[memory_id] = n, base[n]
            lent_scope[memory_id] = 1.0 if chosen_nb in bonus else 0.0
            totals[memory_id] = base[memory_id] + neighbour_weight * lent[memory_id]
    scope_weight = weights.get("scope", 0.0)  # the neighbour's share carries the neighbour's own scope part
    candidates = [d for d in totals if d in near] if neighbour_weight and near else list(totals)
    chosen = heapq.nsmallest(top, candidates, key=lambda d: (-totals[d], -d))
    if not per_memory:
        rows = _memories(chosen)
    out = []
    for memory_id in chosen:
        c = components(memory_id)
        logged = {name: round(float(c[name]), 6) for name in weights}
        logged["keywords_bm25"] = round(bm25[memory_id], 6)
        if neighbour_weight:
            logged["neighbour"] = round(lent.get(memory_id, 0.0), 6)
        logged["composite"] = round(totals[memory_id], 6)
        scope_part = scope_weight * (c["scope"] + neighbour_weight * lent_scope.get(memory_id, 0.0))
        logged["relevance"] = round(totals[memory_id] - scope_part, 6)
        out.append(Scored(rows[memory_id], totals[memory_id], logged))
    return out


def _memories(ids: list[int]) -> dict[int, Candidate]:
    """The memories as the scorer sees them (no embedding: the fallback has no model). Read through the lean
    connection, whose rows hold keywords as JSON and SQLite's datetimes as text."""
    from types import SimpleNamespace

    from cairn_cli.db import fulltext as sql

    out = {}
    for values in sql.memory_rows(ids):
        row = SimpleNamespace(**dict(zip(sql.MEMORY_COLUMNS, values)))
        row.keywords = orjson.loads(row.keywords) if row.keywords else []
        if isinstance(row.updated_at, str):
            row.updated_at = dt.datetime.fromisoformat(row.updated_at)
        out[row.id] = candidate_of(row, has_embedding=False)
    return out
