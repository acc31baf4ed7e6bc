"""The learned embedder (core/learning/embedder.py): the bi-encoder tuned on graded pairs in both query forms, judged
by the gate over the store re-embedded in memory, deployed as an embedder version the store is re-embedded with,
recorded in every delivery and rolled back by the same command."""

from __future__ import annotations

import orjson
import pytest

from cairn_cli.config import Settings
from cairn_cli.core.learning import embedder
from cairn_cli.core.learning.attempt import TrainOptions
from cairn_cli.core.learning.export import LabelRow
from cairn_cli.core.learning.pairs import Split, make_pairs
from cairn_cli.core.store import embedders
from cairn_cli.errors import InvalidInput


def _row(key: str, memory: str, grade: int, *, prompt: str | None, hard: bool = False) -> LabelRow:
    return LabelRow(
        query=f"{prompt} user: an earlier turn" if prompt else key,
        memory=memory,
        grade=grade,
        query_key=key,
        memory_id=None,
        hard_negative=hard,
        prompt=prompt,
    )


def test_pairs_are_taught_in_both_forms_and_hard_negatives_change_them():
    rows = [
        _row("k1", "the answer", 3, prompt="what is it?"),
        _row("k1", "unrelated", 0, prompt="what is it?"),
        _row("k1", "misleading", 2, prompt="what is it?", hard=True),
        _row("k2", "other answer", 3, prompt=None),  # a window that is its prompt: its pairs once
        _row("k2", "noise", 0, prompt=None),
    ]
    keys = {"k1", "k2"}
    split = Split(rows, "rows", keys, set(), make_pairs(rows, keys, min_gap=2), [], [])
    pairs = embedder.both_forms(split, 2)
    by_query = {}
    for p in pairs:
        by_query.setdefault(p.query, set()).add((p.better, p.worse))
    # the window and the prompt alone each get k1's pairs, the misleading memory a negative even one grade below
    expected = {("the answer", "unrelated"), ("the answer", "misleading"), ("misleading", "unrelated")}
    assert by_query["what is it? user: an earlier turn"] == by_query["what is it?"]
    assert {("the answer", "misleading")} <= by_query["what is it?"] <= expected
    assert by_query["k2"] == {("other answer", "noise")}
    assert sum(p.weight for p in pairs) == pytest.approx(len(pairs))  # normalised together
    hard = [p for p in pairs if p.worse == "misleading"]
    plain = [p for p in pairs if p.worse == "unrelated" and p.better == "the answer"]
    assert hard and plain and hard[0].weight > plain[0].weight / 3  # gap 1, yet counted double


def test_the_embedder_learner_needs_weights_and_the_store(cli, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"query": "q", "memory": "m", "grade": 3}\n')
    out = cli("train-reranker", "--learner", "embedder", "--data", rows)
    assert out.exit_code == 2 and "--learner student" in out.output
    from tests.test_training import _graded_delivery

    for i in range(4):
        assert cli("memory", "add", f"memory {i}").exit_code == 0
    for q in range(6):
        _graded_delivery(1, "s", q, f"window {q}", grade=3)
        _graded_delivery(2, "s", q, f"window {q}", grade=0)
    with pytest.raises(InvalidInput, match="has no weights"):  # the hashing encoder of the fast tests
        embedder.train(Settings(), TrainOptions(learner="embedder", holdout=0.3), _split())


def _split():
    from cairn_cli.core.learning.pairs import prepare

    return prepare(Settings(), TrainOptions(learner="embedder", holdout=0.3))


CITIES = [
    "Oslo",
    "Lima",
    "Quito",
    "Accra",
    "Hanoi",
    "Perth",
    "Dakar",
    "Riga",
    "Sofia",
    "Tunis",
    "Porto",
    "Cusco",
    "Kyoto",
    "Malmo",
    "Turin",
    "Bergen",
    "Leeds",
    "Nantes",
    "Graz",
    "Split",
    "Cork",
    "Lyon",
    "Basel",
    "Gdansk",
    "Tartu",
    "Aarhus",
    "Utrecht",
    "Ghent",
    "Bilbao",
    "Salzburg",
]


def _jargon_store(cli) -> list[tuple[str, int]]:
    """Per city the team's slang ("ship to the <city> box") and its meaning (the <city> production release), with two
    memories that share the slang's words and mean something else (the base model ranks them first). Returns
    (prompt, the answer's id) per city, the first 20 graded."""
    from cairn_cli.core.store import memories
    from tests.test_training import _graded_delivery

    out = []
    for q, city in enumerate(CITIES):
        prompt = f"how do I ship to the {city} box?"
        ids = []
        for text in (
            f"shipping a box to {city} costs more this year",
            f"the {city} box shipment tracking number was lost",
            f"release to {city} production: run make release and watch the logs",
        ):
            assert cli("memory", "add", text).exit_code == 0
            ids.append(max(m.id for m in memories.list_memories(Settings(), include_superseded=True)))
        if q < 20:
            for mid, grade in zip(ids, (0, 0, 3)):
                _graded_delivery(mid, "s", q, prompt, grade=grade)
        out.append((prompt, ids[2]))
    return out


def _first(cli, prompt: str) -> dict:
    out = cli("rank", prompt, "--json")
    assert out.exit_code == 0, out.output
    return orjson.loads(out.stdout)["memories"][0]


@pytest.mark.slow
def test_with_the_real_model_the_learned_embedder_deploys_re_embeds_ranks_and_rolls_back(cli, real_model):
    projects = _jargon_store(cli)
    unseen = projects[20:]  # never graded: what the learner must transfer to
    base_hits = sum(_first(cli, p)["id"] == a for p, a in unseen)
    assert base_hits < len(unseen) // 2, base_hits  # the slang's words mislead the base model

    out = cli("train-reranker", "--learner", "embedder", "--holdout", "0.3", "--epochs", "8", "--json")
    assert out.exit_code == 0, out.output
    report = orjson.loads(out.stdout)
    assert report["outcome"] == "deployed", {k: v for k, v in report.items() if k != "train_stats"}
    assert set(report["forms"]) == {"window", "prompt"}
    name = report["name"]
    assert name.startswith("all-MiniLM-L6-v2@") and embedders.live_name(Settings()) == name
    from cairn_cli.db.tables import Memory

    assert {m.embedding_model for m in Memory.select()} == {name}  # every stored vector carries the version

    top = _first(cli, unseen[0][0])
    assert top["components"]["embed_model"] == name  # the provenance names the version
    hits = sum(_first(cli, p)["id"] == a for p, a in unseen)
    assert hits > base_hits, (hits, base_hits)

    out = cli("train-reranker", "--learner", "embedder", "--rollback", "--json")
    assert out.exit_code == 0, out.output
    assert embedders.live_name(Settings()) == "all-MiniLM-L6-v2"
    assert {m.embedding_model for m in Memory.select()} == {"all-MiniLM-L6-v2"}
    assert sum(_first(cli, p)["id"] == a for p, a in unseen) == base_hits
