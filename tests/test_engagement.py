"""Engagement: distinctive-term overlap minus the prompt's terms, the semantic second chance, the method tag."""

from __future__ import annotations

import orjson
import pytest

from cairn_cli.config import Settings
from cairn_cli.core.labels.engagement import (
    LEXICAL,
    SEMANTIC,
    MemoryText,
    chunks,
    decide,
    distinctive_terms,
    lexical_overlap,
)
from cairn_cli.core.store import deliveries
from cairn_cli.core.text import term_set
from tests.conftest import EXAMPLES

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")

MEM = MemoryText(
    1,
    "The webshop test suite needs a running PostgreSQL: start it with `make db-up` before `pytest`.",
    ["postgres", "db-up"],
)


def test_distinctive_terms_drop_stop_and_generic_words():
    terms = distinctive_terms("The code needs a running PostgreSQL; just run make db-up and check the output")
    assert {"postgresql", "db-up"} <= terms
    assert not terms & {"the", "code", "just", "check", "output", "run"}


def test_prompt_terms_do_not_count_as_use():
    mem = distinctive_terms(MEM.content, MEM.keywords)
    response = term_set("Start PostgreSQL with make db-up, then pytest passes.")
    echoed, _ = lexical_overlap(mem, response, term_set("why does pytest fail on the webshop postgresql?"))
    plain, _ = lexical_overlap(mem, response, set())
    assert 0 < echoed < plain
    assert lexical_overlap(mem, response, mem) == (0.0, [])  # everything was in the prompt: nothing to prove use


def test_chunks_keep_paragraphs_apart_and_bound_their_size():
    text = "One. Two!\n\nThree is a longer sentence here. " + "x" * 50
    parts = chunks(text, 30)
    assert parts[0] == "One. Two!" and all(len(p) <= 30 for p in parts)
    assert "".join(parts).replace(" ", "") == text.replace("\n", "").replace(" ", "")


def fake_embed(mapping):
    """Texts containing a key get that key's vector; others a vector orthogonal to all keys."""

    def embed(texts):
        return [next((v for k, v in mapping.items() if k in t), [0.0, 0.0, 0.0, 1.0]) for t in texts]

    return embed


def test_lexical_first_then_the_semantic_second_chance_with_its_own_tag():
    other = MemoryText(2, "Invoices are generated nightly by the billing cron job", [])
    unrelated = MemoryText(3, "The logo is a purple cairn of stones", [])
    response = "Run make db-up so PostgreSQL is up, then pytest.\n\nThe evening task produces statements."
    embed = fake_embed(
        {"Invoices": [1.0, 0.0, 0.0, 0.0], "evening task": [0.8, 0.6, 0.0, 0.0], "logo": [0.0, 0.5, 0.866, 0.0]}
    )
    decisions, notes = decide(
        [MEM, other, unrelated],
        response,
        "tests fail",
        lexical_min=0.25,
        semantic_min=0.55,
        chunk_chars=400,
        embed=embed,
    )
    by_id = {d.memory_id: d for d in decisions}
    assert by_id[1].engaged and by_id[1].method == LEXICAL and by_id[1].semantic is None
    assert by_id[2].engaged and by_id[2].method == SEMANTIC and by_id[2].score == pytest.approx(0.8)
    assert by_id[2].lexical < 0.25  # the lexical measurement is kept beside the semantic decision
    assert not by_id[3].engaged and by_id[3].method == LEXICAL and by_id[3].semantic == pytest.approx(0.3, abs=1e-3)
    assert notes == []


def test_no_embedder_means_lexical_only_with_a_note():
    decisions, notes = decide(
        [MEM], "nothing related", "", lexical_min=0.25, semantic_min=0.55, chunk_chars=400, embed=lambda texts: None
    )
    assert decisions[0].method == LEXICAL and decisions[0].semantic is None and not decisions[0].engaged
    assert "semantic second chance skipped" in notes[0]


def _ranked(cli, session="e1"):
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    out = cli(
        "rank",
        "integration tests fail with connection refused",
        "--scope",
        "webshop",
        "--session",
        session,
        "-k",
        "3",
        "--json",
    )
    assert out.exit_code == 0, out.output
    return [m["id"] for m in orjson.loads(out.stdout)["memories"]]


def test_engage_command_tags_every_delivery_and_is_idempotent(cli, tmp_path):
    ids = _ranked(cli)
    response = tmp_path / "r.txt"
    response.write_text("Start the database with `make db-up` first; PostgreSQL must listen on 5433 before pytest.")
    first = cli("engage", "--session", "e1", "--file", response, "--json")
    assert first.exit_code == 0, first.output
    report = orjson.loads(first.stdout)
    assert report["turn"] == 1 and [d["memory_id"] for d in report["decisions"]] == ids
    rows = {r.memory_id: r for r in deliveries.list_deliveries(Settings(), session_id="e1")}
    assert rows[1].engaged is True and rows[1].engaged_method == LEXICAL and rows[1].engaged_score > 0.25
    assert all(r.engaged_method in (LEXICAL, SEMANTIC) for r in rows.values())
    again = orjson.loads(cli("engage", "--session", "e1", "--file", response, "--json").stdout)
    assert again["decisions"] == report["decisions"]


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--session", "e1", ""], 2, "the response is empty"),
        (["--session", "e1", "--turn", "-1", "x"], 2, "greater than or equal to 0"),
        (["--session", "nobody", "some text"], 1, "no deliveries"),
        (["--session", "e1", "--file", "/no/such/file"], 1, "no such file"),
        (["--session", "e1", "--transcript", "/no/such.jsonl"], 1, "no such transcript"),
    ],
)
def test_engage_bad_input(cli, args, code, message):
    _ranked(cli)
    out = cli("engage", *args)
    assert out.exit_code == code, out.output
    assert message in out.output


def test_semantic_second_chance_with_the_real_model(cli, real_model):
    ids = _ranked(cli, "sem")
    assert ids[0] == 1
    # a paraphrase that shares almost no distinctive term with memory 1
    out = cli(
        "engage",
        "--session",
        "sem",
        "--json",
        "Bring the Postgres database up before you launch the test suite, or nothing can connect.",
    )
    d = {x["memory_id"]: x for x in orjson.loads(out.stdout)["decisions"]}[1]
    assert d["method"] == SEMANTIC and d["engaged"] and d["score"] >= 0.55 and d["lexical"] < 0.25
