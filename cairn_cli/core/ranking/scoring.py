"""The composite scorer: similarity 0.50, keywords 0.15, scope 0.05, confidence 0, recency 0 (by default).

Every component is computed and recorded for every candidate, whatever its weight, so that a delivery's
provenance says exactly what produced its position.

- similarity: cosine of the prompt's and the memory's embeddings (unit vectors), or of the whole context window's
              less a margin when that is higher (core/ranking/query.py), clipped at 0.
- keywords:   Okapi BM25 (k1=1.2, b=0.75) of the query's terms (a window's earlier turns' weigh less than its
              prompt's, as a term's IDF times its weight) against the memory's lexical field
              (content terms + its explicit keywords counted KEYWORD_FIELD_WEIGHT times), divided by the best
              BM25 among the candidates of this query (max-normalisation, 0..1). `keywords_bm25` keeps the raw value.
- scope:      1 when the memory's scope is the requested scope, 0 for global memories.
- confidence: the memory's stored confidence (see core/store/evidence.py for the update rule).
- recency:    0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS) from updated_at.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Iterable, Mapping

import numpy as np

from cairn_cli.clock import utcnow
from cairn_cli.core.ids import GLOBAL_SCOPE
from cairn_cli.core.ranking.lexical import (  # the numpy-free part, re-exported here
    BM25_B,
    BM25_K1,
    COMPONENTS,
    Candidate,
    Scored,
    lexical_field,
    unknown_weight,
)
from cairn_cli.core.text import terms

__all__ = [
    "BM25_B",
    "BM25_K1",
    "COMPONENTS",
    "FEATURES",
    "Candidate",
    "LexicalIndex",
    "Scored",
    "ScoringTable",
    "lexical_field",
]

FEATURES = (*COMPONENTS, "keywords_context")  # the columns of ScoringTable.features


class LexicalIndex:
    """An inverted BM25 index over slots (one memory a slot); a query touches only its terms' postings.

    Incremental: `add` appends a slot, `remove` takes a slot's postings out, so the daemon refreshes a 100k
    store by the few memories that changed instead of re-indexing it.
    """

    def __init__(self, fields: list[list[str]] | None = None):
        self._docs: dict[str, list[int]] = {}
        self._tfs: dict[str, list[int]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._doc_terms: list[Counter | None] = []
        self._lengths: list[int] = []
        self._lengths_arr: np.ndarray | None = None
        self.n = 0  # live documents
        self._total_len = 0
        for f in fields or []:
            self.add(f)

    @property
    def slots(self) -> int:
        return len(self._lengths)

    @property
    def avgdl(self) -> float:
        return self._total_len / self.n if self.n else 0.0

    def add(self, field_terms: list[str]) -> int:
        slot = len(self._lengths)
        counts = Counter(field_terms)
        for term, tf in counts.items():
            self._docs.setdefault(term, []).append(slot)
            self._tfs.setdefault(term, []).append(tf)
            self._arrays.pop(term, None)
        self._doc_terms.append(counts)
        self._lengths.append(len(field_terms))
        self._lengths_arr = None
        self.n += 1
        self._total_len += len(field_terms)
        return slot

    def remove(self, slot: int) -> None:
        counts = self._doc_terms[slot]
        if counts is None:
            return
        for term in counts:
            docs, tfs = self._docs[term], self._tfs[term]
            i = docs.index(slot)
            del docs[i], tfs[i]
            self._arrays.pop(term, None)
            if not docs:
                del self._docs[term], self._tfs[term]
        self._doc_terms[slot] = None
        self.n -= 1
        self._total_len -= self._lengths[slot]

    def freeze(self) -> None:
        """Materialise every term's posting arrays now (the daemon does it while warming, not on a prompt)."""
        for term in self._docs:
            self._postings(term)

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        if term not in self._docs:
            return None
        arr = self._arrays.get(term)
        if arr is None:
            arr = (np.asarray(self._docs[term], dtype=np.int64), np.asarray(self._tfs[term], dtype=np.float32))
            self._arrays[term] = arr
        return arr

    def idf(self, term: str) -> float:
        df = len(self._docs.get(term, ()))
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))

    def scores_with_previous(
        self, query_terms: Mapping[str, float] | Iterable[str], prev: np.ndarray, alive: np.ndarray
    ) -> np.ndarray:
        """BM25 per slot of the slot's field joined with its previous slot's (`prev`: that slot, -1 for none): a
        reply scored with the turn it answers. Term and length counts add up (the average length is the live
        slots' joined one); IDF is the index's. `query_terms`: term -> its weight in the query (terms alone: 1)."""
        n = self.slots
        out = np.zeros(n, dtype=np.float32)
        if not self.n:
            return out
        if self._lengths_arr is None:
            self._lengths_arr = np.asarray(self._lengths, dtype=np.float32)
        has_prev = prev >= 0
        before = np.where(has_prev, prev, 0)
        lengths = self._lengths_arr + np.where(has_prev, self._lengths_arr[before], np.float32(0))
        avg = float(lengths[alive].mean()) if alive.any() else 1.0
        norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths / avg)
        for term, weight in _as_weights(query_terms).items():
            post = self._postings(term)
            if post is None or not weight:
                continue
            tf = np.zeros(n, dtype=np.float32)
            tf[post[0]] = post[1]
            joined = tf + np.where(has_prev, tf[before], np.float32(0))
            out += _weighted(self.idf(term), weight) * joined * (BM25_K1 + 1) / (joined + norm)
        return out

    def coverage(self, query_terms: Mapping[str, float] | Iterable[str]) -> float:
        """How much of the query the store knows: the IDF-weighted share of its distinct terms found in the index
        (an unknown term weighs the most, df 0; a term's query weight scales it: a context window's earlier turns
        count less than the prompt). 0 for a query without terms. A question about people and things a store never
        mentions (another conversation's, another store's) covers little of it."""
        wanted = dict(query_terms) if isinstance(query_terms, Mapping) else dict.fromkeys(query_terms, 1.0)
        if not wanted:
            return 0.0
        weights = {t: w * self.idf(t) for t, w in wanted.items()}
        total = sum(weights.values())
        return sum(w for t, w in weights.items() if t in self._docs) / total if total else 0.0

    def scores(self, query_terms: Mapping[str, float] | Iterable[str]) -> np.ndarray:
        """BM25 per slot (removed slots score 0); `query_terms`: term -> its weight in the query (terms alone, or
        every weight 1: plain BM25)."""
        out = np.zeros(self.slots, dtype=np.float32)
        if not self.n:
            return out
        if self._lengths_arr is None:
            self._lengths_arr = np.asarray(self._lengths, dtype=np.float32)
        norm = BM25_K1 * (1 - BM25_B + BM25_B * self._lengths_arr / (self.avgdl or 1.0))
        for term, weight in _as_weights(query_terms).items():
            post = self._postings(term)
            if post is None or not weight:
                continue
            docs, tf = post
            out[docs] += _weighted(self.idf(term), weight) * tf * (BM25_K1 + 1) / (tf + norm[docs])
        return out


def _as_weights(query_terms: Mapping[str, float] | Iterable[str]) -> Mapping[str, float]:
    return query_terms if isinstance(query_terms, Mapping) else dict.fromkeys(query_terms, 1.0)


def _weighted(idf: float, weight: float) -> float:
    """A query term's IDF at its weight in the query (at 1, exactly the IDF: the prompt alone ranks as it always did)."""
    return idf if weight == 1.0 else idf * weight


def plain_terms(query_text: str) -> dict[str, float]:
    """Every term of `query_text` at weight 1, in the order first seen: plain BM25's query."""
    return dict.fromkeys(terms(query_text), 1.0)


def pairwise_cosines(ids: list[int], rows: np.ndarray, to_base) -> dict[int, dict[int, float]]:
    """memory id -> memory id -> the cosine of their embeddings (`rows`, aligned with `ids`), on the base's scale
    (`to_base(cosines, "memory")`): what the near-duplicate skip reads."""
    rows = rows.astype(np.float64)
    norms = np.linalg.norm(rows, axis=1)
    rows = rows / np.where(norms > 0, norms, 1.0)[:, None]
    sims = to_base(rows @ rows.T, "memory").tolist()
    return {a: dict(zip(ids, row)) for a, row in zip(ids, sims)}


def fuse_similarities(prompt: np.ndarray, window: np.ndarray, margin: float) -> np.ndarray:
    """Per slot, the prompt's cosine or the whole window's less `margin`, whichever is higher: the earlier turns can
    only add (core/ranking/query.py)."""
    return np.maximum(prompt, window - np.float32(margin))


class ScoringTable:
    """A store's live memories with everything a query does not change precomputed, updated in place.

    Build once, then `upsert` / `remove` the memories that changed (the daemon keeps one warm for the whole
    store). `score` ranks the slots in scope: scope + global memories, or all of them when no scope is asked.
    BM25's statistics are the whole store's; the keywords component is max-normalised over the in-scope ones.
    """

    def __init__(
        self,
        candidates: list[Candidate],
        keyword_weight: int,
        vectors: np.ndarray | None = None,
        dim: int | None = None,
        calibration=None,
    ):
        self.keyword_weight = keyword_weight
        # a learned embedder's map of its cosines to its base's scale (core/store/embedders.py), so that every
        # weight and threshold fitted on the base's cosines reads the scale it was fitted on; None: as they are
        self.calibration = calibration
        self.index = LexicalIndex()
        self.candidates: list[Candidate | None] = []
        self.slot_of: dict[int, int] = {}
        self._ids: list[int] = []
        self._scopes: list[int] = []  # scope codes: comparing ints over 100k slots, not strings
        self._scope_code: dict[str, int] = {GLOBAL_SCOPE: 0}
        self._groups: list[int] = []  # neighbour groups: the writing session, else the scope
        self._group_code: dict[str, int] = {}
        self._masks: dict[str | None, np.ndarray] = {}
        self._kinds: dict[str | None, str] = {}
        self._conf: list[float] = []
        self._updated: list[float] = []
        self._has_emb: list[bool] = []
        self._alive: list[bool] = []
        self.dim = dim if dim is not None else (vectors.shape[1] if vectors is not None else None)
        self._matrix: np.ndarray = np.zeros((0, self.dim or 0), dtype=np.float32)
        self._pending: list[np.ndarray] = []  # rows appended since the matrix was last stacked
        self._arrays: dict | None = None
        for i, cand in enumerate(candidates):
            self.upsert(cand, None if vectors is None else vectors[i])

    def __len__(self) -> int:
        return self.index.n

    def upsert(self, cand: Candidate, vector: np.ndarray | None = None) -> None:
        if cand.id in self.slot_of:
            self.remove(cand.id)
        slot = self.index.add(lexical_field(cand, self.keyword_weight))
        self.slot_of[cand.id] = slot
        self.candidates.append(cand)
        self._ids.append(cand.id)
        self._scopes.append(self._scope_code.setdefault(cand.scope, len(self._scope_code)))
        group = f"session:{cand.session_id}" if cand.session_id else f"scope:{cand.scope}"
        self._groups.append(self._group_code.setdefault(group, len(self._group_code)))
        self._conf.append(cand.confidence)
        self._updated.append(cand.updated_at.timestamp())
        self._has_emb.append(cand.has_embedding and vector is not None if self.dim else cand.has_embedding)
        self._alive.append(True)
        if self.dim:
            self._pending.append(
                np.asarray(vector, dtype=np.float32) if vector is not None else np.zeros(self.dim, dtype=np.float32)
            )
        self._arrays = None

    def remove(self, memory_id: int) -> None:
        slot = self.slot_of.pop(memory_id, None)
        if slot is None:
            return
        self.index.remove(slot)
        self.candidates[slot] = None
        self._alive[slot] = False
        self._arrays = None

    def arrays(self) -> dict:
        if self._arrays is None:
            self._masks = {}
            self._kinds = {}
            a: dict[str, np.ndarray] = {
                "ids": np.asarray(self._ids, dtype=np.int64),
                "scopes": np.asarray(self._scopes, dtype=np.int32),
                "confidence": np.asarray(self._conf, dtype=np.float64),
                "updated": np.asarray(self._updated, dtype=np.float64),
                "has_embedding": np.asarray(self._has_emb, dtype=bool),
                "alive": np.asarray(self._alive, dtype=bool),
            }
            a["prev"], a["next"] = self._neighbours(a["ids"], np.asarray(self._groups, dtype=np.int64), a["alive"])
            if self.dim:
                if self._pending:
                    self._matrix = np.vstack([self._matrix, np.stack(self._pending)])
                    self._pending = []
                a["matrix"] = self._matrix
            self._arrays = a
        return self._arrays

    @staticmethod
    def _neighbours(ids: np.ndarray, groups: np.ndarray, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per slot, the live slot written just before / after it in its group (-1: none)."""
        prev = np.full(len(ids), -1, dtype=np.int64)
        nxt = np.full(len(ids), -1, dtype=np.int64)
        live = np.flatnonzero(alive)
        if len(live) > 1:
            order = live[np.lexsort((ids[live], groups[live]))]
            same = groups[order[1:]] == groups[order[:-1]]
            prev[order[1:][same]] = order[:-1][same]
            nxt[order[:-1][same]] = order[1:][same]
        return prev, nxt

    @property
    def dead_fraction(self) -> float:
        slots = self.index.slots
        return (slots - self.index.n) / slots if slots else 0.0

    def live_scopes(self) -> set[str]:
        a = self.arrays()
        names = {code: name for name, code in self._scope_code.items()}
        return {names[int(c)] for c in np.unique(a["scopes"][a["alive"]])}

    def _is_scope(self, scope: str) -> np.ndarray:
        a = self.arrays()
        code = self._scope_code.get(scope)
        return np.zeros(len(a["ids"]), dtype=bool) if code is None else a["scopes"] == code

    def in_scope(self, scope: str | None) -> np.ndarray:
        a = self.arrays()
        mask = self._masks.get(scope)
        if mask is None:
            if scope and scope != GLOBAL_SCOPE:
                mask = a["alive"] & (self._is_scope(scope) | self._is_scope(GLOBAL_SCOPE))
            elif scope == GLOBAL_SCOPE:
                mask = a["alive"] & self._is_scope(GLOBAL_SCOPE)
            else:
                mask = a["alive"]
            self._masks[scope] = mask
        return mask

    def kind(self, scope: str | None) -> str:
        """The kind of store the memories in `scope` make (core/ranking/kinds.py), once per table version: read off
        their words, and for notes, whether their neighbours are alike (with embeddings)."""
        from cairn_cli.core.ranking import kinds

        found = self._kinds.get(scope)
        if found is None:
            mask = self.in_scope(scope)
            slots = np.flatnonzero(mask)
            sample = slots
            if len(slots) > kinds.SAMPLE:
                sample = slots[np.linspace(0, len(slots) - 1, kinds.SAMPLE).astype(np.int64)]
            found = kinds.store_kind([c.content for i in sample.tolist() if (c := self.candidates[i]) is not None])
            if found == kinds.NOTES and self.dim and len(slots) >= kinds.MIN_MEMORIES:
                a = self.arrays()
                prev = a["prev"][slots]
                pairs = (prev >= 0) & mask[np.maximum(prev, 0)] & a["has_embedding"][slots]
                pairs &= a["has_embedding"][np.maximum(prev, 0)]
                coherence = kinds.neighbour_coherence(a["matrix"], slots[pairs], prev[pairs])
                if coherence >= kinds.ORDERED_COHERENCE:
                    found = kinds.SEQUENCE
            self._kinds[scope] = found
        return found

    def similarities(self, query_vec: np.ndarray) -> np.ndarray:
        """The cosine per slot of the query's vector."""
        matrix = self.arrays().get("matrix")
        return np.zeros(self.index.slots) if matrix is None else self._to_base(matrix @ query_vec, "query")

    def _to_base(self, cos, which: str):
        return cos if self.calibration is None else self.calibration.to_base(cos, which)

    def cosines(self, memory_ids: list[int]) -> dict[int, dict[int, float]] | None:
        """The cosines between the embeddings of `memory_ids` (those in the table and embedded by its model; None
        when the table has no embeddings): memory id -> memory id -> cosine, for the near-duplicate skip."""
        matrix = self.arrays().get("matrix")
        if matrix is None:
            return None
        has = self.arrays()["has_embedding"]
        ids = [i for i in memory_ids if (slot := self.slot_of.get(i)) is not None and has[slot]]
        if len(ids) < 2:
            return {}
        return pairwise_cosines(ids, matrix[[self.slot_of[i] for i in ids]], self._to_base)

    def window_similarities(
        self, prompt_vec: np.ndarray, window_vec: np.ndarray, margin: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(what ranks, what the floor reads) for a context window with earlier turns (core/ranking/query.py): per
        slot the prompt's cosine fused with the window's less `margin`, and the better of the two cosines."""
        matrix = self.arrays().get("matrix")
        if matrix is None:
            return np.zeros(self.index.slots), np.zeros(self.index.slots)
        both = self._to_base(matrix @ np.stack([prompt_vec, window_vec], axis=1), "query")
        return fuse_similarities(both[:, 0], both[:, 1], margin), np.maximum(both[:, 0], both[:, 1])

    def _components(self, query, similarities, scope: str | None, mask: np.ndarray, half_life_days: float, now):
        """(the in-scope BM25 per slot, component(name, idx)): the one place a component is computed, for `score`
        and `features` alike (what a learned profile is fit on is what the hook ranks with)."""
        a = self.arrays()
        now_ts = (now or utcnow()).timestamp()
        bm25 = np.where(mask, self.index.scores(query), np.float32(0))
        best = float(bm25.max()) or 1.0
        n = len(mask)
        sims = None if similarities is None else np.asarray(similarities, dtype=np.float32)
        code = self._scope_code.get(scope) if scope and scope != GLOBAL_SCOPE else None

        def component(name: str, idx):
            """One component over the slots `idx` (a slice: all of them): zero-weighted ones are computed only
            for the memories that are returned, which is all that their logging needs."""
            if name == "similarity":
                if sims is None:
                    return np.zeros(n, dtype=np.float32)[idx]
                return np.where(a["has_embedding"][idx], np.clip(sims[idx], 0, None), np.float32(0))
            if name == "keywords":
                return bm25[idx] / np.float32(best)
            if name == "scope":
                return (
                    (a["scopes"][idx] == code).astype(np.float32)
                    if code is not None
                    else np.zeros(n, dtype=np.float32)[idx]
                )
            if name == "confidence":
                return a["confidence"][idx]
            if name == "recency":
                age_days = np.clip((now_ts - a["updated"][idx]) / 86400.0, 0, None)
                return 0.5 ** (age_days / half_life_days) if half_life_days > 0 else np.zeros_like(age_days)
            raise unknown_weight(name)

        return bm25, component

    def _joined(self, query, mask: np.ndarray) -> np.ndarray:
        """The in-scope BM25 of each slot's field joined with its previous neighbour's (not yet normalised)."""
        a = self.arrays()
        return np.where(mask, self.index.scores_with_previous(query, a["prev"], a["alive"]), np.float32(0))

    def features(
        self,
        query_text: str,
        similarities,
        *,
        scope: str | None,
        half_life_days: float,
        now: dt.datetime | None = None,
        query_terms: Mapping[str, float] | None = None,
    ) -> dict[str, np.ndarray] | None:
        """Every slot's components for this query as `score` computes them, before any weight (None: nothing in
        scope): `matrix` (slots x FEATURES: the five components and `keywords_context`, max-normalised over the
        scope), `in_scope`, `prev` and `next` (the neighbour slots, -1 none). A profile's composite of a slot is
        matrix @ w, plus its neighbour weight times the better in-scope neighbour's (core/learning/fusion.py fits
        the weights on exactly this)."""
        mask = self.in_scope(scope)
        if not mask.any():
            return None
        query = plain_terms(query_text) if query_terms is None else query_terms
        _, component = self._components(query, similarities, scope, mask, half_life_days, now)
        everything = slice(None)
        joined = self._joined(query, mask)
        columns = [np.asarray(component(name, everything), dtype=np.float64) for name in COMPONENTS]
        columns.append(np.asarray(joined / (float(joined.max()) or 1.0), dtype=np.float64))
        a = self.arrays()
        return {"matrix": np.stack(columns, axis=1), "in_scope": mask, "prev": a["prev"], "next": a["next"]}

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
        """The best `top` in-scope memories (all when None), best first, ties broken by newer id, with every
        component. `similarities` is aligned with the slots (None when no embedding model is in play: 0).
        `query_terms`: BM25's query, term -> weight (None: every term of `query_text` at 1; a context window's
        earlier turns weigh less than its prompt, core/ranking/query.py). `floor_similarities`: the similarity the
        `relevance` the composite floor reads is made of, when it is not the one that ranks (a window's: its
        cosine without the margin, so that the earlier turns keep a prompt that says nothing by itself from
        abstaining while the prompt still ranks first).

        `context_keywords` (a ranking profile's, 0 by default): that weight of the BM25 of each memory's field
        joined with its previous neighbour's (a reply with the turn it answers), max-normalised over the scope like
        `keywords`; logged as `keywords_context`.

        `coverage` (a ranking profile's): the relevance the composite floor reads is multiplied by the share of the
        query the store knows (`LexicalIndex.coverage`, logged as `coverage`), so that a prompt about what the
        store never mentions abstains; the order is unchanged (one factor per query).

        `neighbour_weight` (a ranking profile's, 0 by default): each memory also gets that share of the better of
        its two neighbours' scores, the memories written just before and after it in the same session (or scope):
        a dialog turn is understood with the turns around it (bench/relevance.md)."""
        a = self.arrays()
        mask = self.in_scope(scope)
        n_in = int(mask.sum())
        if n_in == 0:
            return []
        query = plain_terms(query_text) if query_terms is None else query_terms
        bm25, component = self._components(query, similarities, scope, mask, half_life_days, now)
        n = len(mask)
        sims = None if similarities is None else np.asarray(similarities, dtype=np.float32)
        everything = slice(None)
        total = np.zeros(n, dtype=np.float64)
        scope_part = np.zeros(n, dtype=np.float64)
        for name, weight in weights.items():
            if weight:
                part = weight * component(name, everything)
                total += part
                if name == "scope":
                    scope_part = part
        joined = None
        if context_keywords:
            joined = self._joined(query, mask)
            total += context_keywords * joined / (float(joined.max()) or 1.0)
        neighbour = np.zeros(n, dtype=np.float64)
        if neighbour_weight:
            base = np.where(mask, total, 0.0)
            base_scope = np.where(mask, scope_part, 0.0)
            neighbour_scope = np.zeros(n, dtype=np.float64)
            for side in (a["prev"], a["next"]):
                has = np.flatnonzero(side >= 0)
                their = base[side[has]]
                better = their > neighbour[has]
                neighbour[has[better]] = their[better]
                neighbour_scope[has[better]] = base_scope[side[has[better]]]
            total = total + neighbour_weight * neighbour
            # the neighbour's share carries the neighbour's own scope part (none without a neighbour, nor a global
            # one's): the floor never reads the scope, whatever its weight (a learned profile's may be large)
            scope_part = scope_part + neighbour_weight * neighbour_scope
        relevance = total - scope_part  # what the floor reads: the scope alone never lifts a memory
        if floor_similarities is not None and sims is not None and weights.get("similarity"):
            lifted = np.asarray(floor_similarities, dtype=np.float32)
            gap = np.clip(lifted, 0, None) - np.clip(sims, 0, None)
            relevance = relevance + weights["similarity"] * np.where(a["has_embedding"], np.clip(gap, 0, None), 0.0)
        known = self.index.coverage(query_terms if query_terms is not None else terms(query_text)) if coverage else None
        if known is not None:
            relevance = relevance * known
        total = np.where(mask, total, -np.inf)
        want = n_in if top is None else min(top, n_in)
        if want < n:
            # everything tied with the want-th score joins the cut, so that a tie at the cut goes to the newer id
            # whatever `top` is (argpartition alone picks among tied memories arbitrarily)
            kth = np.partition(-total, want - 1)[want - 1]
            cut = np.flatnonzero(-total <= kth)
            order = cut[np.lexsort((-a["ids"][cut], -total[cut]))][:want]
        else:
            order = np.lexsort((-a["ids"], -total))[:want]
        picked = {name: component(name, order) for name in weights}
        out = []
        for row, i in enumerate(order.tolist()):
            c = {name: round(float(picked[name][row]), 6) for name in weights}
            c["keywords_bm25"] = round(float(bm25[i]), 6)
            if joined is not None:
                c["keywords_context"] = round(float(joined[i] / (float(joined.max()) or 1.0)), 6)
            if neighbour_weight:
                c["neighbour"] = round(float(neighbour[i]), 6)
            if known is not None:
                c["coverage"] = round(known, 6)
            c["composite"] = round(float(total[i]), 6)
            c["relevance"] = round(float(relevance[i]), 6)
            out.append(Scored(self.candidates[i], float(total[i]), c))
        return out
