"""The default ranking adapts to the store (#26): each scope is ranked with the profile of its kind of store,
dialog turns with their neighbours, notes with the seed's composite, read off the memories themselves; the
composite floor is each kind's own (its own machine-state key, its own calibration)."""

from __future__ import annotations

import json

import orjson
import pytest

from cairn_cli.config import Settings
from cairn_cli.core.learning import calibration
from cairn_cli.core.ranking.kinds import DIALOG, MIN_MEMORIES, NOTES, first_person_share, store_kind
from cairn_cli.core.ranking.profiles import FLOOR_KEY, composite_floor
from cairn_cli.core.store import deliveries, state
from cairn_cli.errors import InvalidInput

CHAT = [
    "Ana: Hey Ben! I just got back from my trip to Lisbon, it was amazing.",
    "Ben: Welcome back! What did you like most about it?",
    "Ana: The tiles everywhere, and I took a pottery class by the river.",
    "Ben: That sounds lovely. I have been busy with my garden lately.",
    "Ana: Oh nice, what are you growing this year?",
    "Ben: Tomatoes mostly, and I tried chillies for the first time.",
    "Ana: I would love to taste them when they are ripe!",
    "Ben: Sure, I will bring some to the book club on Friday.",
    "Ana: Which book are we reading again?",
    "Ben: The one about the lighthouse keeper, I forgot the title.",
]
NOTES_TEXTS = [
    "The webshop test suite needs a running PostgreSQL: start it with make db-up before pytest.",
    "Checkout totals are computed in integer cents; never use floats for prices.",
    "Database migrations live in webshop/migrations and are applied with alembic upgrade head.",
    "The payment sandbox rejects card numbers without the test prefix 4242.",
    "Release tags are signed; push them with git push --follow-tags.",
    "The CI cache key includes the lock file hash: a new dependency invalidates it.",
    "Logs go to journald in production; use journalctl -u webshop to read them.",
    "Feature flags are read from the flags table at start-up, not per request.",
    "The staging database is refreshed from a masked production dump every Sunday.",
    "You can run a single test with pytest -k and the test's name.",
]


def test_the_kind_is_read_off_the_memories():
    assert store_kind(CHAT) == DIALOG
    assert store_kind([t.split(": ", 1)[1] for t in CHAT]) == DIALOG  # no speaker prefix: still a dialog
    assert store_kind(NOTES_TEXTS) == NOTES  # a note that says "you" is not a dialog
    assert store_kind(CHAT[: MIN_MEMORIES - 1]) == NOTES  # a handful decides nothing: the seed's ranking
    web = [
        f"You can renew your passport online in {n} steps; you need a photo and your old passport." for n in range(20)
    ]
    assert first_person_share(web) == 0.0 and store_kind(web) == NOTES  # web text says "you", seldom "I"
    assert first_person_share(["I am", "My dog", "we went", "the end"]) == 0.5


@pytest.fixture
def two_kinds(cli, tmp_path):
    rows = [{"content": t, "scope": "chat"} for t in CHAT] + [{"content": t, "scope": "webshop"} for t in NOTES_TEXTS]
    path = tmp_path / "two_kinds.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli("memory", "import", path).exit_code == 0


def _rank(cli, prompt: str, scope: str) -> dict:
    result = cli("rank", prompt, "--scope", scope, "--json", "-k", "3")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.usefixtures("two_kinds")
def test_each_scope_is_ranked_with_its_kinds_profile(cli):
    chat = _rank(cli, "what is Ben growing in the garden", "chat")["memories"]
    notes = _rank(cli, "how do I apply database migrations", "webshop")["memories"]
    assert chat and notes
    assert {(m["components"]["profile"], m["components"]["profile_by"]) for m in chat} == {("dialog", "auto")}
    assert {(m["components"]["profile"], m["components"]["profile_by"]) for m in notes} == {("default", "auto")}
    assert all("keywords_context" in m["components"] and "neighbour" in m["components"] for m in chat)
    assert not any("keywords_context" in m["components"] for m in notes)


@pytest.mark.usefixtures("two_kinds")
def test_a_reply_is_found_through_the_turn_it_answers(cli):
    """ "Tomatoes mostly…" shares no word with the prompt: its question ("what are you growing…") does."""
    memories = _rank(cli, "what are you growing this year", "chat")["memories"]
    reply = next(m for m in memories if m["content"].startswith("Ben: Tomatoes"))
    assert reply["components"]["keywords"] == 0.0 and reply["components"]["keywords_context"] > 0.5


@pytest.mark.usefixtures("two_kinds")
def test_the_setting_overrides_the_kind(cli, monkeypatch):
    monkeypatch.setenv("CAIRN_RANK_PROFILE", "default")
    chat = _rank(cli, "what is Ben growing in the garden", "chat")["memories"]
    assert {(m["components"]["profile"], m["components"]["profile_by"]) for m in chat} == {
        ("default", "CAIRN_RANK_PROFILE")
    }


@pytest.mark.usefixtures("two_kinds")
def test_the_floor_is_read_from_the_kinds_own_key(cli):
    settings = Settings()
    state.put(FLOOR_KEY.format("dialog", "hashing"), 5.0, settings, by="test", reason="a dialog floor nothing reaches")
    assert composite_floor(settings, "dialog", "hashing") == (5.0, "calibrated")
    assert composite_floor(settings, "default", "hashing") == (0.0, "shipped")  # notes: untouched
    chat = _rank(cli, "what is Ben growing in the garden", "chat")
    assert chat["memories"] == [] and any("composite floor 5" in n for n in chat["notes"])
    notes = _rank(cli, "how do I apply database migrations", "webshop")["memories"]
    assert notes and notes[0]["components"]["composite_floor"] == 0.0


def _graded(cli, profile: str, relevances: list[tuple[int, float]]) -> None:
    from cairn_cli.db.tables import MemoryDelivery

    memory = orjson.loads(cli("memory", "add", f"a memory ranked by {profile}", "--json").stdout)["id"]
    rows = [
        deliveries.DeliveryInput(
            session_id=f"s-{profile}",
            turn=n + 1,
            memory_id=memory,
            context_window="ctx",
            context_key="k",
            rank=1,
            final_score=relevance,
            score_components={"relevance": relevance, "profile": profile, "embed_model": "hashing"},
            reranker_model="none",
            layer="main",
            scope="global",
        )
        for n, (_, relevance) in enumerate(relevances)
    ]
    for delivery, (grade, _) in zip(deliveries.record(rows, Settings()), relevances):
        MemoryDelivery.update(grade=grade).where(MemoryDelivery.id == delivery).execute()


def test_calibrate_floor_sets_each_kinds_floor(cli):
    _graded(cli, "dialog", [(3, 0.5 + i / 100) for i in range(20)] + [(0, 0.1), (0, 0.2)])
    report = calibration.calibrate(Settings(), model="composite", min_grade3=20)  # one profile graded: that one
    assert report.key == "composite_floor:dialog:hashing"
    _graded(cli, "default", [(3, 0.3 + i / 100) for i in range(20)])
    with pytest.raises(InvalidInput, match="default, dialog"):
        calibration.calibrate(Settings(), model="composite", min_grade3=20)  # two: which one is asked
    report = calibration.calibrate(Settings(), model="composite", profile="default", min_grade3=20)
    assert report.key == "composite_floor:default:hashing" and 0.3 <= report.proposal <= 0.31
    with pytest.raises(InvalidInput, match="a kind of store"):
        calibration.calibrate(Settings(), profile="dialog")  # --profile is the composite's


@pytest.mark.usefixtures("two_kinds")
def test_the_dialog_floor_reads_how_much_of_the_prompt_the_store_knows(cli):
    known = _rank(cli, "what is Ben growing in the garden", "chat")["memories"]
    assert {m["components"]["coverage"] for m in known} == {1.0}
    foreign = _rank(cli, "what is Zoltan growing in the garden", "chat")["memories"]  # a name the chat never says
    share = foreign[0]["components"]["coverage"]
    assert 0.0 < share < 1.0
    for m in foreign:
        c = m["components"]
        assert c["relevance"] == pytest.approx((c["composite"] - 0.05 * c["scope"] * 1.5) * share, abs=1e-5)
    notes = _rank(cli, "how do I apply Zoltan migrations", "webshop")["memories"]
    assert "coverage" not in notes[0]["components"]  # notes: the plain relevance (bench/relevance.md)


def _table(vectors):
    import datetime as dt

    from cairn_cli.core.ranking.scoring import Candidate, ScoringTable

    now = dt.datetime(2026, 1, 1)
    cands = [Candidate(i, f"note {i} about topic {i // 5}", [], "s", "fact", 0.75, now) for i in range(len(vectors))]
    return ScoringTable(cands, 3, vectors=vectors)


def test_notes_whose_neighbours_are_alike_are_a_sequence():
    import numpy as np

    rng = np.random.default_rng(7)
    topics = rng.normal(size=(8, 32))
    # five notes per topic, written one topic after the other: each is most like the notes around it
    vecs = np.repeat(topics, 5, axis=0) + 0.3 * rng.normal(size=(40, 32))
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    assert _table(vecs).kind("s") == "sequence"
    shuffled = vecs[rng.permutation(40)]  # the same notes in an order that means nothing
    assert _table(shuffled).kind("s") == NOTES
    assert _table(vecs[: MIN_MEMORIES - 1]).kind("s") == NOTES  # too few to tell


@pytest.mark.slow
@pytest.mark.usefixtures("real_model", "two_kinds")
def test_with_the_bundled_model_each_scope_gets_its_kind_and_the_reply_its_question(cli):
    chat = _rank(cli, "what vegetables is Ben growing this year?", "chat")["memories"]
    assert {m["components"]["profile"] for m in chat} == {"dialog"}
    assert any(m["content"].startswith("Ben: Tomatoes") for m in chat)  # found through the turn it answers
    notes = _rank(cli, "how do I apply the database migrations?", "webshop")["memories"]
    assert notes[0]["content"].startswith("Database migrations")
    assert notes[0]["components"]["profile"] in ("default", "sequence")  # notes, with or without order
