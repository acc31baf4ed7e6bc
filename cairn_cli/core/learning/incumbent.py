"""The incumbent: what ranks now (the live cross-encoder, or the composite alone), as a scorer the student is
compared with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.ids import GLOBAL_SCOPE
from cairn_cli.core.learning.pairs import Scorer


def composite_scorer(settings: Settings) -> Scorer:
    """The composite as it orders a query's candidates in production (similarity + BM25 within the candidates +
    scope; confidence and recency weigh 0): the incumbent when no cross-encoder is live."""
    import numpy as np

    from cairn_cli.core.ranking.scoring import Candidate, ScoringTable
    from cairn_cli.core.store.embedders import calibration, live_encoder

    encoder = live_encoder(settings)
    cal = calibration(encoder.name)
    now = utcnow()

    def score(query: str, texts: list[str]) -> list[float]:
        vecs = encoder.encode([query] + texts)
        table = ScoringTable([], settings.KEYWORD_FIELD_WEIGHT, dim=encoder.dim, calibration=cal)
        for i, (text, vec) in enumerate(zip(texts, vecs[1:])):
            table.upsert(Candidate(i, text, [], GLOBAL_SCOPE, "fact", 0.75, now), vec)
        scored = table.score(
            query,
            table.similarities(np.asarray(vecs[0])),
            scope=None,
            weights=settings.weights(),
            half_life_days=settings.RECENCY_HALF_LIFE_DAYS,
        )
        by_id = {s.candidate.id: s.score for s in scored}
        return [by_id[i] for i in range(len(texts))]

    return score


@dataclass
class Incumbent:
    name: str
    scorer: Scorer
    base: Path | None  # its weights, when it is a cross-encoder (the default base to fine-tune)
    reranker: object | None = None  # the loaded cross-encoder the pipeline blends in (None: the composite alone)


def incumbent(settings: Settings) -> Incumbent:
    """What ranks now: the live cross-encoder (resolve_reranker) or, with none, the composite."""
    from cairn_cli.core.ranking.reranking import load_reranker, resolve

    resolution = resolve(settings)
    reranker, _ = load_reranker(settings, resolution)
    if reranker is None:
        return Incumbent("composite", composite_scorer(settings), None, None)
    return Incumbent(reranker.name, reranker.logits, resolution.path, reranker)
