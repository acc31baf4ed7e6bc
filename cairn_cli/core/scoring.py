"""The composite scorer: similarity 0.50, keywords 0.15, scope 0.05, confidence 0, recency 0 (by default).

Every component is computed and recorded for every candidate, whatever its weight, so that a delivery's
provenance says exactly what produced its position.

- similarity: cosine of the context-window and memory embeddings (unit vectors), clipped at 0.
- keywords:   Okapi BM25 (k1=1.2, b=0.75) of the context-window terms against the memory's lexical field
              (content terms + its explicit keywords counted KEYWORD_FIELD_WEIGHT times), divided by the best
              BM25 among the candidates of this query (max-normalisation, 0..1). `keywords_bm25` keeps the raw value.
- scope:      1 when the memory's scope is the requested scope, 0 for global memories.
- confidence: the memory's stored confidence (see core/memories.py for the update rule).
- recency:    0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS) from updated_at.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from cairn_cli.core.text import terms

GLOBAL_SCOPE = "global"
BM25_K1 = 1.2
BM25_B = 0.75


@dataclass
class Candidate:
    """A memory as the scorer sees it (a plain view of the stored row)."""

    id: int
    content: str
    keywords: list[str]
    scope: str
    kind: str
    confidence: float
    updated_at: dt.datetime
    source_ref: str | None = None
    has_embedding: bool = True


@dataclass
class Scored:
    candidate: Candidate
    score: float
    components: dict = field(default_factory=dict)


def lexical_field(candidate: Candidate, keyword_weight: int) -> list[str]:
    field_terms = terms(candidate.content)
    for kw in candidate.keywords:
        field_terms.extend(terms(kw) * keyword_weight)
    return field_terms


class LexicalIndex:
    """An inverted BM25 index over the candidates' lexical fields; a query touches only its terms' postings."""

    def __init__(self, fields: list[list[str]]):
        self.n = len(fields)
        lengths = np.fromiter((len(f) for f in fields), dtype=np.float32, count=self.n)
        self.avgdl = float(lengths.mean()) if self.n else 0.0
        self._norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths / (self.avgdl or 1.0))
        docs: dict[str, list[int]] = {}
        tfs: dict[str, list[int]] = {}
        for doc, field_terms in enumerate(fields):
            for term, tf in Counter(field_terms).items():
                docs.setdefault(term, []).append(doc)
                tfs.setdefault(term, []).append(tf)
        self.postings = {t: (np.asarray(d, dtype=np.int32), np.asarray(tfs[t], dtype=np.float32))
                         for t, d in docs.items()}

    def idf(self, term: str) -> float:
        df = len(self.postings[term][0]) if term in self.postings else 0
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))

    def scores(self, query_terms: list[str]) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.float32)
        for term in set(query_terms):
            if term not in self.postings:
                continue
            docs, tf = self.postings[term]
            out[docs] += self.idf(term) * tf * (BM25_K1 + 1) / (tf + self._norm[docs])
        return out


def recency(updated_at: dt.datetime, now: dt.datetime, half_life_days: float) -> float:
    age_days = max(0.0, (now - updated_at).total_seconds() / 86400.0)
    return 0.5 ** (age_days / half_life_days) if half_life_days > 0 else 0.0


class ScoringTable:
    """The candidates of one store (or scope) with everything a query does not change precomputed.

    Build once per set of candidates (the daemon keeps one warm per scope); score many queries against it.
    """

    def __init__(self, candidates: list[Candidate], keyword_weight: int):
        self.candidates = candidates
        self.index = LexicalIndex([lexical_field(c, keyword_weight) for c in candidates])
        self.ids = np.fromiter((c.id for c in candidates), dtype=np.int64, count=len(candidates))
        self.scopes = np.array([c.scope for c in candidates], dtype=object)
        self.confidence = np.fromiter((c.confidence for c in candidates), dtype=np.float64, count=len(candidates))
        self.updated = np.fromiter((c.updated_at.timestamp() for c in candidates), dtype=np.float64,
                                   count=len(candidates))
        self.has_embedding = np.fromiter((c.has_embedding for c in candidates), dtype=bool, count=len(candidates))

    def __len__(self) -> int:
        return len(self.candidates)

    def score(self, query_text: str, similarities, *, scope: str | None, weights: dict[str, float],
              half_life_days: float, now: dt.datetime | None = None, top: int | None = None) -> list[Scored]:
        """The best `top` candidates (all when None), best first, ties broken by newer id, with every component.

        `similarities` is aligned with the candidates (None when no embedding model is in play: similarity 0).
        """
        n = len(self.candidates)
        if n == 0:
            return []
        now = now or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        bm25 = self.index.scores(terms(query_text)).astype(np.float64)
        best = float(bm25.max()) or 1.0
        sim = np.zeros(n) if similarities is None else np.clip(np.asarray(similarities, dtype=np.float64), 0, None)
        sim = np.where(self.has_embedding, sim, 0.0)
        scope_v = (self.scopes == scope).astype(np.float64) if scope and scope != GLOBAL_SCOPE else np.zeros(n)
        age_days = np.clip((now.timestamp() - self.updated) / 86400.0, 0, None)
        rec = 0.5 ** (age_days / half_life_days) if half_life_days > 0 else np.zeros(n)
        comps = {"similarity": sim, "keywords": bm25 / best, "scope": scope_v, "confidence": self.confidence,
                 "recency": rec}
        total = sum(weights[name] * comps[name] for name in weights)
        order = np.lexsort((-self.ids, -total))
        if top is not None and top < n:
            order = order[:top]
        out = []
        for i in order.tolist():
            c = {name: round(float(comps[name][i]), 6) for name in comps}
            c["keywords_bm25"] = round(float(bm25[i]), 6)
            c["composite"] = round(float(total[i]), 6)
            out.append(Scored(self.candidates[i], float(total[i]), c))
        return out
