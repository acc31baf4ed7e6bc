"""`cairn rank` end to end through the CLI: injection block, delivery provenance, turns, --json, --no-log."""

import orjson
import pytest

from cairn_cli.config import Settings
from cairn_cli.core.store import deliveries
from tests.conftest import EXAMPLES

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")


def _load(cli):
    result = cli("memory", "import", EXAMPLES)
    assert result.exit_code == 0, result.output
    return result


def test_rank_prints_the_block_and_logs_full_provenance(cli):
    _load(cli)
    result = cli(
        "rank",
        "integration tests fail with connection refused on port 5433",
        "--scope",
        "webshop",
        "--session",
        "s1",
        "-k",
        "3",
    )
    assert result.exit_code == 0, result.output
    block = result.stdout
    assert block.startswith('<cairn-memories session="s1" turn="1"')
    assert '<memory id="1" reliability="0.75" kind="procedure" scope="webshop">' in block.splitlines()[1]
    rows = deliveries.list_deliveries(Settings(), session_id="s1")
    assert [r.rank for r in rows] == [1, 2, 3] and rows[0].memory_id == 1
    for row in rows:
        c = row.score_components
        assert row.reranker_model == "none" and row.layer == "prompt" and row.scope == "webshop"
        assert row.ranker == "cairn" and len(row.context_key) == 16
        assert set(c) >= {
            "similarity",
            "keywords",
            "keywords_bm25",
            "scope",
            "confidence",
            "recency",
            "composite",
            "reranker",
            "embed_model",
            "weights",
        }
        assert c["weights"] == {"similarity": 0.5, "keywords": 0.15, "scope": 0.05, "confidence": 0.0, "recency": 0.0}
        assert c["embed_model"] == "hashing" and row.final_score == c["composite"]
        assert row.grade is None and row.engaged is None
    assert [r.final_score for r in rows] == sorted((r.final_score for r in rows), reverse=True)


def test_turns_advance_per_session_and_no_log_writes_nothing(cli):
    _load(cli)
    for _ in range(2):
        assert cli("rank", "deploy to production", "--session", "s2").exit_code == 0
    assert cli("rank", "deploy to production", "--session", "s2", "--no-log").exit_code == 0
    assert sorted({r.turn for r in deliveries.list_deliveries(Settings(), session_id="s2")}) == [1, 2]


def test_json_output_carries_components(cli):
    _load(cli)
    result = cli("rank", "how are prices stored for the checkout?", "--scope", "webshop", "--json", "--no-log")
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.stdout)
    assert data["memories"][0]["id"] == 2 and data["reranker_model"] == "none"
    assert data["delivery_ids"] == [] and data["candidates"] == 18
    assert data["dropped"]["prefilter"] == 2  # the two self-referential meta memories of the example set


def test_superseded_memories_never_rank(cli):
    _load(cli)
    assert (
        cli(
            "memory", "add", "Prices are kept as Decimal in euros, never as integer cents", "--scope", "webshop"
        ).exit_code
        == 0
    )
    assert cli("memory", "supersede", "2", "19").exit_code == 0
    data = orjson.loads(cli("rank", "integer cents prices checkout VAT", "--json", "-k", "20").stdout)
    assert 2 not in [m["id"] for m in data["memories"]] and 19 in [m["id"] for m in data["memories"]]


def test_prompt_from_stdin_and_prefilter_gate(cli, monkeypatch):
    _load(cli)
    query = "grade every injected memory in the cm block"
    on = orjson.loads(cli("rank", "-", "--json", "--no-log", "-k", "20", input=query).stdout)
    assert 14 not in [m["id"] for m in on["memories"]]
    monkeypatch.setenv("CAIRN_RELEVANCE_PREFILTER_ENABLED", "false")
    off = orjson.loads(cli("rank", "-", "--json", "--no-log", "-k", "20", input=query).stdout)
    assert off["memories"][0]["id"] == 14 and off["dropped"]["prefilter"] == 0


def test_transcript_turns_join_the_context_window(cli, tmp_path):
    _load(cli)
    path = tmp_path / "t.jsonl"
    path.write_text(
        orjson.dumps(
            {
                "type": "user",
                "uuid": "u1",
                "message": {"role": "user", "content": "we are working on the alembic migrations"},
            }
        ).decode()
        + "\n"
    )
    data = orjson.loads(cli("rank", "what was the command again?", "--transcript", path, "--json").stdout)
    assert data["context_window"] == "what was the command again? user: we are working on the alembic migrations"
    assert data["memories"][0]["id"] == 3


def test_log_delivery_records_an_external_ranking(cli):
    _load(cli)
    payload = {
        "session_id": "ext",
        "turn": 4,
        "context_window": "some context",
        "reranker_model": "bm25",
        "ranker": "my-ranker",
        "memories": [
            {"id": 1, "rank": 1, "score": 3.2, "score_components": {"bm25": 3.2}},
            {"id": 5, "rank": 2, "score": 1.0},
        ],
    }
    result = cli("log-delivery", "--json", input=orjson.dumps(payload).decode())
    assert result.exit_code == 0, result.output
    rows = deliveries.list_deliveries(Settings(), session_id="ext")
    assert [(r.memory_id, r.rank, r.ranker, r.reranker_model, r.turn) for r in rows] == [
        (1, 1, "my-ranker", "bm25", 4),
        (5, 2, "my-ranker", "bm25", 4),
    ]
    assert rows[0].score_components == {"bm25": 3.2} and rows[0].layer == "external"


def test_past_the_commit_deadline_nothing_is_logged(cli):
    import pytest

    from cairn_cli.core.hooks.prompt import prompt_turn
    from cairn_cli.core.hooks.request import PromptRequest
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.errors import DeadlineExceeded
    from cairn_cli.ml.models import get_encoder

    _load(cli)
    engine = RankEngine(get_encoder("hashing"))
    with pytest.raises(DeadlineExceeded):
        prompt_turn(PromptRequest(prompt="deploy", session_id="late", commit_deadline=1.0), Settings(), engine)
    assert deliveries.list_deliveries(Settings(), session_id="late") == []
    result = prompt_turn(PromptRequest(prompt="deploy", session_id="late"), Settings(), engine)
    assert set(result.timings_ms) >= {"context", "table", "embed", "score", "log"}


def test_log_delivery_with_flags(cli):
    _load(cli)
    result = cli(
        "log-delivery",
        "--session",
        "flags",
        "--turn",
        "2",
        "--context",
        "ctx",
        "--reranker-model",
        "bm25",
        "--memory",
        "3:2.5",
        "--memory",
        "1:0.5",
    )
    assert result.exit_code == 0, result.output
    rows = deliveries.list_deliveries(Settings(), session_id="flags")
    assert [(r.memory_id, r.rank, r.final_score) for r in rows] == [(3, 1, 2.5), (1, 2, 0.5)]
    bad = cli("log-delivery", "--session", "flags", "--memory", "x:1")
    assert bad.exit_code == 2 and "is not ID:SCORE" in bad.stderr
    missing = cli("log-delivery", "--session", "flags", "--memory", "3:1")
    assert missing.exit_code == 2 and "missing field 'turn'" in missing.stderr


def test_a_warm_engine_refreshes_by_the_changed_rows_and_matches_a_fresh_one(cli):
    from cairn_cli.core.hooks.prompt import prompt_turn
    from cairn_cli.core.hooks.request import PromptRequest
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.core.store import dedup, evidence, memories
    from cairn_cli.ml.models import get_encoder

    _load(cli)
    s = Settings()
    warm = RankEngine(get_encoder("hashing"))
    req = PromptRequest(
        prompt="prices in cents for the checkout and VAT", session_id="w", scope="webshop", k=5, log=False
    )
    prompt_turn(req, s, warm)
    table_before = warm.table(s).table
    added = dedup.add_memories(
        [
            memories.validate_entry(
                {"content": "VAT is 19% on the checkout total, rounded per line in cents", "scope": "webshop"}
            )
        ],
        s,
    )[0]
    memories.supersede(2, added.id, s)
    evidence.record_evidence([6], s, corroborate=True)
    dedup.add_memories(
        [
            memories.validate_entry(
                {"content": "Save this as a memory: grade the injected memories in the [cm] block", "kind": "meta"}
            )
        ],
        s,
    )
    got = prompt_turn(req, s, warm)
    assert warm.table(s).table is table_before, "refreshed in place, not rebuilt"
    fresh = prompt_turn(req, s, RankEngine(get_encoder("hashing")))
    assert [(i.id, i.score) for i in got.items] == [(i.id, i.score) for i in fresh.items]
    assert got.items[0].id == added.id and 2 not in [i.id for i in got.items]
    assert got.dropped["prefilter"] == fresh.dropped["prefilter"] == 3
    table = warm.table(s).table
    assert table.candidates[table.slot_of[6]].confidence == 0.8
