"""No redundant injection (issue #26): two memories that say the same thing are never shown in one block, on the
daemon path and on the lexical fallback; the slot goes to the next distinct memory (core/ranking/diversity.py)."""

from __future__ import annotations

import datetime as dt
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn_cli.config import Settings
from cairn_cli.core.ranking import diversity
from cairn_cli.core.ranking.diversity import Distinct, Rule, Signature
from cairn_cli.core.ranking.lexical import Candidate, Scored
from cairn_cli.core.ranking.pipeline import select
from tests.conftest import EXAMPLES

ORIGINAL = 1  # the example store's PostgreSQL memory
# what the demo's Stop writes (scripts/demo.sh): a near-copy of memory 1 that write-time dedup (0.95) leaves apart
NEAR_COPY = "Integration tests need make db-up first (PostgreSQL on 5433), else connection refused"
PROMPT = "the integration tests all fail with connection refused, what do I need to start first?"
NOW = dt.datetime(2026, 1, 1)


def _scored(i: int, content: str, kind: str = "fact", keywords=(), score: float = 1.0) -> Scored:
    return Scored(Candidate(i, content, list(keywords), "p", kind, 0.75, NOW), score)


# --- the test itself ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kept, other, cos, why",
    [
        ("Use `make db-up` first.", "  use `MAKE DB-UP` first!  ", None, "normalised"),
        (
            "the staging deploy runs from the staging branch",
            "deploys to staging run from the staging branch",
            0.97,
            "cosine",
        ),
        (
            "The webshop test suite needs a running PostgreSQL: start it with make db-up before pytest, otherwise "
            "every integration test fails with connection refused on port 5433",
            NEAR_COPY,
            0.5,
            "terms",
        ),
    ],
)
def test_repeats_are_recognised_and_say_by_which_rule(kept, other, cos, why):
    assert Rule().repeats(Signature(kept), Signature(other), cos)[0] == why


@pytest.mark.parametrize(
    "kept, other, cos",
    [
        # different numbers: two facts however alike (the write path's guard too)
        ("service 1 listens on port 8001 behind nginx", "service 2 listens on port 8002 behind nginx", 0.99),
        # one way only: the lower-ranked memory adds terms to the short one kept above it
        (
            "Nate practices for video game tournaments",
            "Nate won his fourth video game tournament online and is proud",
            0.5,
        ),
        # too few terms to tell by words alone
        ("Melanie: thanks, Caroline!", "Caroline: thanks", None),
    ],
)
def test_distinct_memories_are_not_repeats(kept, other, cos):
    assert Rule().repeats(Signature(kept), Signature(other), cos) is None


def test_a_correction_is_never_passed_over_for_the_memory_it_corrects():
    stale = Signature("run black on the whole repository to format the code before a commit")
    fix = Signature("Correction: do not run black on the whole repository to format the code", kind="correction")
    assert Rule().repeats(stale, fix, 0.97) is None  # shown beside the stale memory: it says the opposite
    assert Rule().repeats(fix, stale, 0.97) is not None  # ranked above it, the correction keeps the slot
    again = Signature("Correction: never run black on the whole repository to format code", kind="correction")
    assert Rule().repeats(fix, again, 0.97) is not None  # a correction repeating a correction is a repeat


def test_the_slot_goes_to_the_next_distinct_memory_and_both_sides_record_the_skip():
    ranked = [
        _scored(1, "alpha release notes go in CHANGELOG.md under the next version"),
        _scored(2, "Alpha release notes go in CHANGELOG.md under the next version."),
        _scored(3, "the deploy pipeline needs a tagged release"),
        _scored(4, "cats are mammals"),
    ]
    out, passed = Distinct().select(ranked, 3)
    assert [s.candidate.id for s in out] == [1, 3, 4] and passed == 1
    assert ranked[0].components["duplicates_skipped"] == [{"id": 2, "by": "normalised", "value": 1.0}]
    assert ranked[1].components["skipped_duplicate_of"] == {"id": 1, "by": "normalised", "value": 1.0}


def test_the_pipeline_reads_deeper_when_repeats_would_leave_the_block_short():
    """Without the rerank stage the table is read for the top k only: repeats there make it read further, so the
    block is still k distinct memories (and a store without repeats is read exactly as before)."""
    from cairn_cli.core.ranking.scoring import ScoringTable

    # the best three are one memory three times (the newest ids: they win the ties too)
    texts = ["release train docs two", "release train docs three", "release train docs four"]
    texts += ["release train friday one"] * 3
    table = ScoringTable([Candidate(i + 1, t, [], "global", "fact", 0.75, NOW) for i, t in enumerate(texts)], 2)
    chosen = select(
        table, "release train friday", None, scope=None, k=3, settings=Settings(), reranker=None, ranker="t"
    )
    assert [s.candidate.id for s in chosen.chosen] == [6, 3, 2]
    assert chosen.dropped["duplicate"] == 2


def test_the_daemon_table_hands_the_cosines_of_its_stored_embeddings():
    import numpy as np

    from cairn_cli.core.ranking.scoring import ScoringTable

    vecs = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)
    cands = [Candidate(i + 1, f"m{i}", [], "global", "fact", 0.75, NOW) for i in range(3)]
    cos = ScoringTable(cands, 2, vectors=vecs).cosines([1, 2, 3])
    assert cos[1][2] == pytest.approx(0.6) and cos[2][3] == pytest.approx(0.8) and cos[1][3] == pytest.approx(0.0)
    assert ScoringTable(cands, 2).cosines([1, 2]) is None  # no embeddings (the table without a model)


# --- through the CLI, on a real SQLite store: the demo's near-copy ------------------------------------------------


@pytest.fixture
def demo_store(cli):
    """The example memories plus the near-copy the demo's Stop writes (not merged: below the write-time 0.95)."""
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    result = cli("memory", "add", NEAR_COPY, "--keywords", "pytest, db-up", "--scope", "webshop", "--kind", "procedure")
    assert result.exit_code == 0, result.output
    assert "added" in result.output.lower()
    return 19


def _rank(cli, k: int = 3) -> dict:
    result = cli("rank", PROMPT, "--scope", "webshop", "-k", k, "--json", "--no-log")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _check_no_pair(data: dict, copy: int) -> None:
    ids = [m["id"] for m in data["memories"]]
    assert ORIGINAL in ids and copy not in ids, ids  # the original is kept, its repeat passed over
    assert data["dropped"]["duplicate"] == 1
    first = next(m for m in data["memories"] if m["id"] == ORIGINAL)
    assert [d["id"] for d in first["components"]["duplicates_skipped"]] == [copy]


@pytest.mark.parametrize("k", [2, 3, 5])
def test_the_daemon_path_never_shows_the_near_copy_beside_its_original(cli, demo_store, k):
    data = _rank(cli, k)  # CAIRN_DAEMON=off: the in-process engine, the daemon's table (hashing encoder here)
    assert data["ranker"] == "cairn" and data["embed_model"] == "hashing"
    _check_no_pair(data, demo_store)
    assert len(data["memories"]) == min(k, len(data["memories"]))


@pytest.mark.parametrize("k", [2, 3, 5])
def test_the_fallback_never_shows_the_near_copy_beside_its_original(cli, demo_store, monkeypatch, k):
    monkeypatch.setenv("CAIRN_DAEMON", "auto")  # no daemon runs: the in-process lexical fallback answers
    monkeypatch.setenv("CAIRN_COMPOSITE_FLOOR", "off")  # every positive memory may fill a slot
    data = _rank(cli, k)
    assert data["ranker"] == "cairn-fallback"
    _check_no_pair(data, demo_store)
    assert len(data["memories"]) == k  # the slot went to the next distinct memory


def test_without_the_near_copy_nothing_is_passed_over(cli, monkeypatch):
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    for daemon in ("off", "auto"):
        monkeypatch.setenv("CAIRN_DAEMON", daemon)
        assert _rank(cli)["dropped"]["duplicate"] == 0


@pytest.mark.usefixtures("real_model")
def test_with_the_real_model_the_demo_pair_is_kept_apart(cli, demo_store):
    """all-MiniLM-L6-v2 puts the pair at cosine 0.83, under both the write-time 0.95 and the injection 0.96: the
    term-set rule is what keeps them apart on the daemon path too."""
    data = _rank(cli)
    assert data["embed_model"] == "all-MiniLM-L6-v2"
    _check_no_pair(data, demo_store)


# --- the rule never shows a near-duplicate pair (property) --------------------------------------------------------

WORDS = [
    "deploy",
    "release",
    "staging",
    "branch",
    "tag",
    "pipeline",
    "tests",
    "postgres",
    "port",
    "cache",
    "build",
    "docker",
    "queue",
    "worker",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10_000), st.integers(1, 6), st.sampled_from([None, "vectors"]))
def test_no_block_ever_holds_a_pair_the_rule_calls_repeats(seed, k, embedded):
    """Random stores full of near-copies (word-shuffled, trimmed, re-cased), random prompts: every block the
    pipeline returns is free of repeats, is the longest one possible (k, or every distinct positive memory), and is
    the ranking's own order with the repeats left out."""
    import numpy as np

    from cairn_cli.core.ranking.scoring import ScoringTable

    rng = random.Random(seed)
    bases = [" ".join(rng.sample(WORDS, rng.randint(5, 9))) for _ in range(rng.randint(2, 6))]
    texts = []
    for base in bases:
        for _ in range(rng.randint(1, 4)):
            words = base.split()
            rng.shuffle(words)
            text = " ".join(words[: max(5, len(words) - rng.randint(0, 2))])
            texts.append(text.upper() if rng.random() < 0.2 else text)
    vecs = None
    if embedded:
        vecs = np.asarray([[rng.random() for _ in range(8)] for _ in texts], dtype=np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    cands = [Candidate(i + 1, t, [], "global", "fact", 0.75, NOW) for i, t in enumerate(texts)]
    table = ScoringTable(cands, 2, vectors=vecs)
    query = " ".join(rng.sample(WORDS, 3))
    sims = table.similarities(vecs[0]) if vecs is not None else None
    s = Settings()
    chosen = select(table, query, sims, scope=None, k=k, settings=s, reranker=None, ranker="t").chosen
    assert Distinct(table.cosines([c.id for c in cands])).pairs(chosen) == 0
    # the whole ranking, as the composite orders it, with each repeat of a better memory left out: its first k
    weights = s.weights() if sims is not None else {**s.weights(), "similarity": 0.0}
    order = [x for x in table.score(query, sims, scope=None, weights=weights, half_life_days=30) if x.score > 0]
    distinct, _ = Distinct(table.cosines([c.id for c in cands])).select(order, len(order))
    assert [x.candidate.id for x in chosen] == [x.candidate.id for x in distinct][:k]


def test_the_thresholds_are_the_fitted_ones():
    """bench/diversity.md records the fit: a change to the constants without a new fit is caught here."""
    from pathlib import Path

    fit = json.loads((Path(__file__).resolve().parents[1] / "bench" / "diversity.json").read_text())["fit"]
    assert (fit["cosine_chosen"], fit["containment_chosen"]) == (
        diversity.DUPLICATE_COSINE,
        diversity.DUPLICATE_CONTAINMENT,
    )
