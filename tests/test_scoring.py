"""The composite scorer: documented weights, zero-weighted components still recorded, BM25 keywords."""

import datetime as dt

import pytest

from cairn_cli.config import Settings
from cairn_cli.core.ranking.scoring import Candidate, LexicalIndex, ScoringTable, lexical_field

NOW = dt.datetime(2026, 6, 1)


def _cand(i, content, keywords=(), scope="global", confidence=0.75, age_days=0.0):
    return Candidate(
        id=i,
        content=content,
        keywords=list(keywords),
        scope=scope,
        kind="fact",
        confidence=confidence,
        updated_at=NOW - dt.timedelta(days=age_days),
    )


def _score(cands, query, sims=None, scope=None, **weights):
    s = Settings()
    w = {**s.weights(), **weights}
    return ScoringTable(cands, 2).score(query, sims, scope=scope, weights=w, half_life_days=30.0, now=NOW)


def test_zero_weighted_components_are_computed_and_recorded_but_weigh_nothing():
    a = _cand(1, "deploy with make release", confidence=0.2, age_days=300)
    b = _cand(2, "deploy with make release now", confidence=0.99, age_days=0)
    scored = _score([a, b], "how to deploy", sims=[0.5, 0.5])
    comps = {s.candidate.id: s.components for s in scored}
    assert comps[1]["confidence"] == 0.2 and comps[2]["confidence"] == 0.99
    assert comps[1]["recency"] == pytest.approx(0.5**10, rel=1e-3) and comps[2]["recency"] == 1.0
    for s in scored:
        c = s.components
        assert s.score == pytest.approx(0.5 * c["similarity"] + 0.15 * c["keywords"] + 0.05 * c["scope"])
        assert set(c) >= {"similarity", "keywords", "keywords_bm25", "scope", "confidence", "recency", "composite"}


def test_a_configured_weight_takes_effect():
    a = _cand(1, "same words here", confidence=0.1)
    b = _cand(2, "same words here too", confidence=0.9)
    assert _score([a, b], "same words", sims=[0.5, 0.5], confidence=1.0)[0].candidate.id == 2


def test_keywords_component_is_bm25_max_normalised_and_counts_explicit_keywords():
    cands = [
        _cand(1, "the server crashed", keywords=["segfault"]),
        _cand(2, "a segfault happened once in the nightly build"),
        _cand(3, "unrelated note about lunch"),
    ]
    scored = {s.candidate.id: s.components for s in _score(cands, "why the segfault?")}
    assert scored[1]["keywords"] == 1.0  # keyword field weight 2 beats one mention in content
    assert 0 < scored[2]["keywords"] < 1.0 and scored[3]["keywords"] == 0.0


def test_scope_component():
    scored = {
        s.candidate.id: s.components["scope"]
        for s in _score([_cand(1, "x", scope="webshop"), _cand(2, "x", scope="global")], "x", scope="webshop")
    }
    assert scored == {1: 1.0, 2: 0.0}


def test_similarity_is_clipped_and_missing_embedding_scores_zero():
    a, b = _cand(1, "a"), _cand(2, "b")
    b.has_embedding = False
    scored = {s.candidate.id: s.components["similarity"] for s in _score([a, b], "q", sims=[-0.3, 0.9])}
    assert scored == {1: 0.0, 2: 0.0}


def test_bm25_matches_the_textbook_formula():
    index = LexicalIndex([["cat", "cat", "dog"], ["dog"], ["bird"]])
    import math

    idf = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    avgdl = 5 / 3
    tf, dl = 2, 3
    expected = idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * dl / avgdl))
    assert index.scores(["cat"])[0] == pytest.approx(expected)
    assert index.scores(["fish"]).tolist() == [0.0, 0.0, 0.0]


def test_identifiers_match_whole_and_by_parts():
    field = lexical_field(_cand(1, "set HF_HUB_OFFLINE before loading"), 2)
    assert "hf_hub_offlin" in field and "offlin" in field


def test_top_keeps_the_best_in_order():
    cands = [_cand(i, f"note {i}") for i in range(1, 30)]
    sims = [i / 100 for i in range(1, 30)]
    everything = _score(cands, "note", sims=sims)
    top = ScoringTable(cands, 2).score(
        "note", sims, scope=None, weights=Settings().weights(), half_life_days=30.0, now=NOW, top=5
    )
    assert [s.candidate.id for s in top] == [s.candidate.id for s in everything[:5]] == [29, 28, 27, 26, 25]


@pytest.mark.parametrize("top", [1, 3, 5, 8, 12, 40])
def test_a_tie_at_the_cut_goes_to_the_newer_id_whatever_top_is(top):
    """Found by exploration's test: with 12 memories tied, top=5 picked 5 of them arbitrarily (argpartition) and
    top=20 another order, so a deeper pool changed what the top 5 was."""
    cands = [_cand(i, "deploy the release train") for i in range(1, 13)]
    sims = [0.5 if i % 3 else 0.4 for i in range(1, 13)]  # 1, 2, 4, 5, 7, 8, 10, 11 tie on top
    table = ScoringTable(cands, 2)
    ranked = table.score(
        "deploy", sims, scope=None, weights=Settings().weights(), half_life_days=30.0, now=NOW, top=top
    )
    assert [s.candidate.id for s in ranked] == [11, 10, 8, 7, 5, 4, 2, 1, 12, 9, 6, 3][:top]


def test_an_unknown_score_weight_is_a_configuration_error_not_recency():
    from cairn_cli.errors import ConfigError

    table = ScoringTable([Candidate(1, "deploy with make release", [], "global", "fact", 0.75, NOW)], 2)
    with pytest.raises(ConfigError, match="unknown score weight 'recncy'"):
        table.score("deploy", None, scope=None, weights={"keywords": 0.15, "recncy": 0.0}, half_life_days=30.0)
