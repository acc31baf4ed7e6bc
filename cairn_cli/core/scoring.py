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
    """An inverted BM25 index over the candidates' lexical fields (pure Python; postings only are touched)."""

    def __init__(self, fields: list[list[str]]):
        self.n = len(fields)
        self.lengths = [len(f) for f in fields]
        self.avgdl = (sum(self.lengths) / self.n) if self.n else 0.0
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for doc, field_terms in enumerate(fields):
            for term, tf in Counter(field_terms).items():
                self.postings.setdefault(term, []).append((doc, tf))

    def idf(self, term: str) -> float:
        df = len(self.postings.get(term, ()))
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))

    def scores(self, query_terms: list[str]) -> list[float]:
        out = [0.0] * self.n
        if not self.n:
            return out
        for term in set(query_terms):
            plist = self.postings.get(term)
            if not plist:
                continue
            idf = self.idf(term)
            for doc, tf in plist:
                norm = BM25_K1 * (1 - BM25_B + BM25_B * self.lengths[doc] / (self.avgdl or 1.0))
                out[doc] += idf * tf * (BM25_K1 + 1) / (tf + norm)
        return out


def recency(updated_at: dt.datetime, now: dt.datetime, half_life_days: float) -> float:
    age_days = max(0.0, (now - updated_at).total_seconds() / 86400.0)
    return 0.5 ** (age_days / half_life_days) if half_life_days > 0 else 0.0


def composite(
    candidates: list[Candidate],
    query_text: str,
    similarities: list[float] | None,
    *,
    scope: str | None,
    weights: dict[str, float],
    half_life_days: float,
    keyword_weight: int,
    index: LexicalIndex | None = None,
    now: dt.datetime | None = None,
) -> list[Scored]:
    """Score every candidate; returns them best first (ties broken by newer id).

    `similarities` is aligned with `candidates` (None when no embedding model is in play: similarity 0).
    Pass a prebuilt `index` over the same candidates to skip re-indexing (the daemon keeps one warm).
    """
    now = now or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    index = index or LexicalIndex([lexical_field(c, keyword_weight) for c in candidates])
    bm25 = index.scores(terms(query_text))
    best = max(bm25, default=0.0) or 1.0
    out = []
    for i, cand in enumerate(candidates):
        sim = similarities[i] if similarities is not None and cand.has_embedding else 0.0
        comps = {
            "similarity": round(max(0.0, float(sim)), 6),
            "keywords": round(bm25[i] / best, 6),
            "keywords_bm25": round(bm25[i], 6),
            "scope": 1.0 if scope and scope != GLOBAL_SCOPE and cand.scope == scope else 0.0,
            "confidence": round(cand.confidence, 6),
            "recency": round(recency(cand.updated_at, now, half_life_days), 6),
        }
        score = sum(weights[name] * comps[name] for name in weights)
        comps["composite"] = round(score, 6)
        out.append(Scored(cand, score, comps))
    out.sort(key=lambda s: (-s.score, -s.candidate.id))
    return out
