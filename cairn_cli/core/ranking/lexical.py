"""What a ranking is made of, without numpy: the candidate and scored views, the lexical field, BM25's constants,
and the table protocol the pipeline scores with.

The daemon's ScoringTable (scoring.py, numpy) and the fallback's IndexedTable (fallback.py, the store's full-text
index, no numpy) both implement `ScoreTable`; the hook's hot path imports this module and never scoring.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from cairn_cli.core.text import terms
from cairn_cli.errors import ConfigError

COMPONENTS = ("similarity", "keywords", "scope", "confidence", "recency")
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
    session_id: str | None = None  # memories written in one session, in id order, are each other's neighbours


def candidate_of(row, *, has_embedding: bool) -> Candidate:
    """The scorer's view of a stored memory row (anything with the memories table's columns)."""
    return Candidate(
        id=row.id,
        content=row.content,
        keywords=list(row.keywords),
        scope=row.scope,
        kind=row.kind,
        confidence=row.confidence,
        updated_at=row.updated_at,
        source_ref=row.source_ref,
        has_embedding=has_embedding,
        session_id=row.session_id,
    )


def unknown_weight(name: str) -> ConfigError:
    return ConfigError(f"unknown score weight {name!r}", f"use the components {', '.join(COMPONENTS)}")


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


class ScoreTable(Protocol):
    """A store's memories as the pipeline scores them: the best `top` in scope, best first, every component;
    `similarities` aligns a query embedding's cosines with the table (None: the table has no embeddings),
    `window_similarities` a context window's (the prompt's fused with the window's, and what the floor reads);
    `query_terms` weighs BM25's query terms (None: every term of the text at 1); `floor_similarities`: what the
    floor's relevance reads of the similarity when it is not what ranks;
    `cosines` gives the memories' own embeddings' cosines between each other, what the near-duplicate skip
    reads (diversity.py; None: no embeddings)."""

    def __len__(self) -> int: ...

    def similarities(self, query_vec): ...

    def cosines(self, memory_ids: list[int]) -> dict[int, dict[int, float]] | None: ...
    def window_similarities(self, prompt_vec, window_vec, margin: float): ...

    def kind(self, scope: str | None) -> str | None: ...

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
    ) -> list[Scored]: ...
