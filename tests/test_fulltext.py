"""The memory store's full-text index and the fallback that ranks from it.

The index stays in step with every write (add, merge, supersede, import, a write cairn did not make, the migration
of a store made before it), and the fallback gives the ranking of the rank engine's own table (scoring.py's BM25)
on the same memories: the same top 10, memory for memory or tied, over generated and real text.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import peewee
import pytest

from cairn_cli import db
from cairn_cli.config import Settings
from cairn_cli.core.hooks.prompt import prompt_turn
from cairn_cli.core.hooks.request import PromptRequest
from cairn_cli.core.prefilter import is_self_referential_meta
from cairn_cli.core.ranking.engine import RankEngine
from cairn_cli.core.ranking.lexical import Candidate, lexical_field
from cairn_cli.core.store import dedup, evidence, importing, memories, open_stores, search_index
from cairn_cli.core.text import normalise, sha256, terms
from cairn_cli.daemon import singleton
from cairn_cli.db import migrations
from cairn_cli.db.tables import Memory, memory_proxy
from tests.conftest import EXAMPLES, ROOT, shared


def _sql(query: str, params=()) -> list[tuple]:
    if memory_proxy.obj.param != "?":
        query = query.replace("?", memory_proxy.obj.param)
    return memory_proxy.execute_sql(query, params).fetchall()


def assert_in_step() -> None:
    """The index is what it would be if built from scratch from the live memories: the rows, the postings, the
    per-term and per-scope statistics (the term bounds may only be looser), and nothing queued. On PostgreSQL:
    the rows and their tsvectors (there are no postings tables)."""
    assert _sql("SELECT memory_id FROM fulltext_pending") == []
    live = _sql(
        "SELECT id, content, keywords, kind, scope, session_id FROM memories WHERE superseded_by IS NULL ORDER BY id"
    )
    want = {r[0]: r for r in search_index.rows_of(live)}
    got = {
        r[0]: r for r in _sql("SELECT memory_id, scope, meta, content_len, keyword_len, terms, grp FROM fulltext_docs")
    }
    assert set(got) == set(want)
    for memory_id, row in want.items():
        assert got[memory_id][:5] == row[:5] and orjson.loads(got[memory_id][5]) == orjson.loads(row[5]), memory_id
        assert got[memory_id][6] == row[6], memory_id
    if isinstance(memory_proxy.obj, peewee.PostgresqlDatabase):
        for memory_id, tsv in _sql("SELECT memory_id, tsv::text FROM fulltext_docs"):
            want_tsv = search_index.tsvector(want[memory_id][5])
            assert tsv == _sql("SELECT ?::tsvector::text", (want_tsv,))[0][0], memory_id
        return
    postings, df, df_meta, tf_max, dl_min = set(), Counter(), Counter(), Counter(), {}
    scopes: dict[str, list[int]] = {}
    for memory_id, scope, meta, clen, klen, terms_json, _group in want.values():
        counts = orjson.loads(terms_json)
        stats = scopes.setdefault(scope, [0, 0, 0, 0, 0, 0])
        stats[1 if meta else 0] += 1
        stats[4 if meta else 2] += clen
        stats[5 if meta else 3] += klen
        for term, (in_content, in_keywords) in counts.items():
            if meta:
                df_meta[term] += 1
                continue
            tf, dl = in_content + 2 * in_keywords, clen + 2 * klen
            postings.add((term, scope, memory_id, tf, dl))
            df[term] += 1
            tf_max[term] = max(tf_max[term], tf)
            dl_min[term] = min(dl_min.get(term, dl), dl)
    assert postings == set(
        _sql(
            "SELECT p.term, s.scope, p.memory_id, p.tf, p.dl FROM fulltext_postings p "
            "JOIN fulltext_scopes s ON s.id = p.scope_id"
        )
    )
    term_rows = {r[0]: r[1:] for r in _sql("SELECT term, df, df_meta, tf_max, dl_min FROM fulltext_terms")}
    assert set(term_rows) == set(df) | set(df_meta)
    for term, (got_df, got_df_meta, got_tf_max, got_dl_min) in term_rows.items():
        assert (got_df, got_df_meta) == (df[term], df_meta[term]), term
        if df[term]:
            assert got_tf_max >= tf_max[term] and got_dl_min <= dl_min[term], term
    rows = _sql(
        "SELECT scope, n, n_meta, content_len, keyword_len, content_len_meta, keyword_len_meta FROM fulltext_scopes"
    )
    assert {r[0]: list(r[1:]) for r in rows if r[1] or r[2]} == scopes
    assert all(list(r[1:]) == [0] * 6 for r in rows if r[0] not in scopes)


def _add(*entries: dict) -> list[dedup.AddResult]:
    return dedup.add_memories([memories.validate_entry(e) for e in entries], Settings())


def test_the_index_holds_what_the_rank_engine_scores(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    assert_in_step()
    for m in Memory.select():
        (row,) = _sql("SELECT meta, terms FROM fulltext_docs WHERE memory_id = ?", (m.id,))
        counts = orjson.loads(row[1])
        cand = Candidate(m.id, m.content, list(m.keywords), m.scope, m.kind, m.confidence, m.updated_at)
        for weight in (0, 1, 2, 3):
            at_weight = {t: c + weight * k for t, (c, k) in counts.items() if c + weight * k}
            assert at_weight == Counter(lexical_field(cand, weight)), (m.id, weight)
        assert row[0] == is_self_referential_meta(m.content, m.kind)


def test_the_index_stays_in_step_with_add_merge_supersede_import_and_evidence(cli, tmp_path):
    first = _add({"content": "Deploys go through the `release` pipeline", "keywords": ["deploy"], "scope": "web"})[0]
    assert_in_step()
    merged = _add(
        {"content": "Deploys go through the `release` pipeline.", "keywords": ["pipeline", "ci"], "scope": "web"}
    )
    assert merged[0].action == "merged" and merged[0].keywords_added == ["pipeline", "ci"]
    assert_in_step()
    (terms_json,) = _sql("SELECT terms FROM fulltext_docs WHERE memory_id = ?", (first.id,))[0]
    assert orjson.loads(terms_json)["ci"] == [0, 1], "a merge's new keywords are indexed"
    second = _add({"content": "Deploys go through the `ship` pipeline since March", "scope": "web"})[0]
    memories.supersede(first.id, second.id, Settings())
    assert_in_step()
    assert _sql("SELECT count(*) FROM fulltext_docs WHERE memory_id = ?", (first.id,)) == [(0,)]
    path = tmp_path / "more.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(e)
            for e in (
                {"content": "The staging database is reset every night", "scope": "web"},
                {"content": "Deploys go through the `ship` pipeline since March", "keywords": ["ship"], "scope": "web"},
                {"content": "Remember to save this as a memory: the memory store logged the injected memories"},
            )
        )
    )
    report = importing.import_jsonl(path, Settings(), embed=lambda texts: None)
    assert (report.added, report.merged) == (2, 1)
    assert_in_step()
    before = _sql("SELECT * FROM fulltext_docs ORDER BY memory_id")
    evidence.record_evidence([second.id], Settings(), corroborate=True)
    assert _sql("SELECT * FROM fulltext_docs ORDER BY memory_id") == before and search_index.is_behind() is False
    assert cli("memory", "add", "The CI cache is keyed by the lock file", "--keywords", "ci,cache").exit_code == 0
    assert_in_step()


def test_a_semantic_merge_indexes_the_keywords_it_adds():
    """Write-time dedup (a near-copy of a memory of its scope merges into it): the merged memory's new keywords
    are in the index in the same transaction, the near-copy never is."""
    base, near = "Start PostgreSQL with make db-up before pytest", "Before pytest, start PostgreSQL with make db-up"

    def embed(texts):  # the two texts at cosine 0.99: over any dedup threshold
        return "fake", [[1.0, 0.0] if t.startswith(base) else [0.99, 0.141067] for t in texts]

    [first] = dedup.add_memories(
        [memories.validate_entry({"content": base, "scope": "webshop"})], Settings(), embed=embed
    )
    entry = memories.validate_entry({"content": near, "keywords": ["docker-compose"], "scope": "webshop"})
    [merged] = dedup.add_memories([entry], Settings(), embed=embed)
    assert (merged.action, merged.id, merged.method) == ("merged", first.id, "semantic")
    assert not search_index.is_behind()
    assert_in_step()
    (terms_json,) = _sql("SELECT terms FROM fulltext_docs WHERE memory_id = ?", (first.id,))[0]
    counts = orjson.loads(terms_json)
    assert all(counts[t] == [0, 1] for t in terms("docker-compose")) and terms("docker-compose")
    assert _sql("SELECT count(*) FROM fulltext_docs") == [(1,)]


def test_a_write_cairn_did_not_make_is_queued_and_indexed_before_the_fallback_ranks(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    now = dt.datetime(2026, 1, 1)
    text = "Quarantined flaky tests live in tests/quarantine and never block a merge"
    Memory.insert(
        content=text,
        content_hash=sha256(text),
        norm_hash=sha256(normalise(text)),
        keywords=["quarantine"],
        scope="webshop",
        kind="fact",
        confidence=0.75,
        created_at=now,
        updated_at=now,
    ).execute()
    Memory.update(scope="global").where(Memory.id == 5).execute()
    Memory.delete().where(Memory.id == 7).execute()  # cairn never deletes (it supersedes); a hand-made DELETE
    assert search_index.is_behind()
    result = prompt_turn(PromptRequest("where do quarantined flaky tests live", log=False), Settings(), _fallback())
    assert result.items[0].content == text and not search_index.is_behind()
    assert_in_step()
    assert _sql("SELECT count(*) FROM fulltext_docs WHERE memory_id = 7") == [(0,)]


def test_an_index_that_cannot_be_brought_up_to_date_is_not_trusted(cli, monkeypatch):
    """A store this process may not write (another account's) with a write the index has not seen: the fallback
    scores every memory from the memories themselves, and says so."""
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    _sql("INSERT INTO fulltext_pending (memory_id) VALUES (1)")
    _sql("DELETE FROM fulltext_docs WHERE memory_id = 1")  # what an unindexed write looks like
    monkeypatch.setattr(
        search_index, "sync_if_behind", lambda: "OperationalError: attempt to write a readonly database"
    )
    request = PromptRequest("integration tests fail with connection refused on port 5433", scope="webshop", log=False)
    result = prompt_turn(request, Settings(), _fallback())
    assert result.items[0].id == 1 and "full-text index behind and not writable" in result.notes[1]
    _same_or_tied(prompt_turn(request, Settings(), _table_engine()), result)


def test_an_interrupted_indexing_keeps_the_batches_it_finished(cli, monkeypatch):
    """A large store's first open indexes it batch by batch, each batch committed: killed half way (a hook's
    timeout), the next open goes on from there rather than from the start."""
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    _sql("INSERT INTO fulltext_pending (memory_id) SELECT id FROM memories")
    calls = []
    real_rows_of = search_index.rows_of

    def dies_on_the_third_batch(memories):
        calls.append(len(memories))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_rows_of(memories)

    monkeypatch.setattr(search_index, "rows_of", dies_on_the_third_batch)
    with pytest.raises(KeyboardInterrupt):
        search_index.sync(batch=5)
    assert [r[0] for r in _sql("SELECT memory_id FROM fulltext_pending ORDER BY memory_id")] == list(range(11, 19))
    monkeypatch.setattr(search_index, "rows_of", real_rows_of)
    assert search_index.sync(batch=5) == 8
    assert_in_step()


def test_a_store_made_before_the_index_is_indexed_when_opened(tmp_path):
    """A store with the schema of migrations 0001-0004 and memories written by an older cairn (one superseded):
    opening it applies 0005, which queues every live memory, and indexes them."""
    path = tmp_path / "old.db"
    old = peewee.SqliteDatabase(str(path))
    migrations.apply_pending(old, [m for m in migrations.MEMORY_MIGRATIONS if m[0] < "0005"])
    lines = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    for i, entry in enumerate(lines, start=1):
        old.execute_sql(
            "INSERT INTO memories (content, content_hash, norm_hash, keywords, scope, kind, confidence,"
            " corroborations, contradictions, created_at, updated_at, superseded_by)"
            " VALUES (?, ?, ?, ?, ?, ?, 0.75, 0, 0, '2026-01-01 00:00:00', '2026-01-01 00:00:00', ?)",
            (
                entry["content"],
                sha256(entry["content"]),
                sha256(normalise(entry["content"])),
                json.dumps(entry.get("keywords", [])),
                entry.get("scope", "global"),
                entry.get("kind", "fact"),
                2 if i == 4 else None,
            ),
        )
    old.close()
    db.close_all()
    open_stores(Settings(DB_URL=f"sqlite:///{path}"))
    names = [r[0] for r in _sql("SELECT name FROM cairn_migrations ORDER BY name")]
    assert "0005_memories_fulltext" in names
    assert_in_step()
    assert _sql("SELECT count(*) FROM fulltext_docs") == [(len(lines) - 1,)]
    request = PromptRequest("how should prices be stored for the checkout?", scope="webshop", log=False)
    _same_or_tied(prompt_turn(request, Settings(), _table_engine()), prompt_turn(request, Settings(), _fallback()))


def test_the_fallback_ranks_every_live_memory_and_says_how():
    from cairn_cli.daemon import dispatch

    rows = [{"content": f"note {i}: the build cache lives in /var/cache/build-{i}", "scope": "web"} for i in range(40)]
    _add({"content": "The oldest memory: flaky payment tests need the stripe mock on port 12111", "scope": "web"})
    _add(*rows)
    request = PromptRequest("the payment tests are flaky again", "all", k=3, log=False)
    result = dispatch._in_process(request, {}, fallback="test")
    assert result["ranker"] == "cairn-fallback" and result["embed_model"] is None
    assert result["candidates"] == 41 and result["memories"][0]["id"] == 1
    assert result["notes"] == ["fallback: test"]
    assert result["memories"][0]["components"]["ranker"] == "cairn-fallback"
    assert set(result["memories"][0]["components"]) >= {"similarity", "keywords", "scope", "keywords_bm25"}


# --- the same ranking as the rank engine's table ----------------------------------------------------------------


def _fallback() -> RankEngine:
    return RankEngine.lexical_fallback("test")


def _table_engine() -> RankEngine:
    """The rank engine's own table (scoring.py's LexicalIndex) without a model: the ranking the fallback had."""
    return RankEngine(None, None, ranker="cairn-fallback")


def _same_or_tied(want, got) -> None:
    """Two rankings of the same memories: the same scores position by position, the same memory at each position
    unless its score is tied with another (then the tie may break either way: float32 against float64)."""
    assert len(got.items) == len(want.items)
    assert (got.candidates, got.dropped) == (want.candidates, want.dropped)
    scores = [i.score for i in want.items]
    for pos, (w, g) in enumerate(zip(want.items, got.items)):
        assert g.score == pytest.approx(w.score, rel=1e-5, abs=2e-6), (pos, w, g)  # both rounded to 6 places
        if w.id != g.id:
            tied = [s for p, s in enumerate(scores) if p != pos and s == pytest.approx(w.score, rel=1e-5, abs=2e-6)]
            assert tied or pos == len(scores) - 1, (pos, w, g)
        else:
            for name in ("keywords", "scope", "keywords_bm25", "composite", "relevance", "neighbour"):
                if name not in w.components:
                    assert name not in g.components, (pos, name)
                    continue
                assert g.components[name] == pytest.approx(w.components[name], rel=1e-5, abs=2e-6), (pos, name)


WORDS = [
    "deploy",
    "release",
    "branch",
    "merge",
    "commit",
    "review",
    "pipeline",
    "staging",
    "production",
    "rollback",
    "cache",
    "index",
    "query",
    "server",
    "client",
    "socket",
    "timeout",
    "retry",
    "config",
    "env",
    "import",
    "module",
    "function",
    "class",
    "error",
    "exception",
    "log",
    "trace",
    "build",
    "docker",
    "image",
    "container",
    "volume",
    "network",
    "port",
    "proxy",
    "header",
    "token",
    "session",
    "cookie",
    "auth",
    "user",
    "role",
    "admin",
    "payment",
    "invoice",
    "order",
    "cart",
    "checkout",
    "price",
    "tax",
    "report",
    "email",
    "template",
    "queue",
    "worker",
    "job",
    "schedule",
    "cron",
    "search",
    "vector",
    "embedding",
    "model",
    "rerank",
    "grade",
    "label",
    "memory",
    "store",
    "scope",
    "keyword",
    "daemon",
    "hook",
    "migration",
    "schema",
    "table",
    "column",
    "postgres",
    "sqlite",
    "redis",
    "celery",
    "alembic",
    "pytest",
    "fixture",
    "mock",
    "flaky",
    "race",
    "lock",
    "thread",
    "async",
    "await",
    "webhook",
    "stripe",
]
IDENTIFIERS = ["HF_HUB_OFFLINE", "build_context_window", "v1.2.3", "foo-bar/baz", "src/app/main.py", "port 5433"]
META = ["the injected memories were graded in the [cm] block", "remember to save this as a memory"]


def _generated(n: int, seed: int = 11) -> list[dict]:
    """Memories of a Zipf-like vocabulary with identifiers, in three scopes and in sessions, some of them bucket 4."""
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(len(WORDS))]
    out = []
    for i in range(n):
        words = rng.choices(WORDS, weights, k=rng.randint(4, 40))
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words) + 1), rng.choice(IDENTIFIERS))
        if rng.random() < 0.05:
            words.append(rng.choice(META))
        out.append(
            {
                "content": " ".join(words) + f" (note {i})",
                "keywords": rng.sample(WORDS, rng.randint(0, 3)),
                "scope": rng.choice(["alpha", "beta", "global"]),
                "kind": rng.choice(["fact", "fact", "procedure", "correction", "meta"]),
                # written in sessions of 6 (a session's neighbours may be in other scopes), one in 4 without
                "session_id": f"s{i // 6}" if i % 4 else None,
            }
        )
    return out


def _store(entries: list[dict]) -> None:
    """Memories written straight to the table (as a bulk tool or an older cairn would), indexed by `sync`."""
    now = dt.datetime(2026, 1, 1)
    rows = [
        {
            "content": e["content"],
            "content_hash": sha256(e["content"]),
            "norm_hash": sha256(normalise(e["content"])),
            "keywords": e.get("keywords", []),
            "scope": e.get("scope", "global"),
            "kind": e.get("kind", "fact"),
            "confidence": 0.75,
            "session_id": e.get("session_id"),
            "created_at": now,
            "updated_at": now,
        }
        for e in entries
    ]
    with memory_proxy.atomic():
        for start in range(0, len(rows), 1000):
            Memory.insert_many(rows[start : start + 1000]).execute()
    search_index.sync()


def _queries(texts: list[str], n: int, seed: int = 5) -> list[str]:
    """Prompts of 3 to 300 words: a memory's own words, others', and words no memory has."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = []
        for _ in range(rng.choice([1, 2, 4, 8])):
            source = rng.choice(texts).split()
            start = rng.randrange(len(source))
            words += source[start : start + rng.randint(3, 40)]
        words += rng.sample(["why", "does", "the", "xylophone", "quux", "it", "fail"], rng.randint(0, 3))
        out.append(" ".join(words) if i % 7 else " ".join(words[:3]))
    return out


def _compare(queries: list[str], scopes: list[str | None], settings: Settings, k: int = 10) -> int:
    table, fallback = _table_engine(), _fallback()
    compared = 0
    for i, query in enumerate(queries):
        scope = scopes[i % len(scopes)]
        request = PromptRequest(query, scope=scope, k=k, log=False, strict_scope=False)
        want, got = prompt_turn(request, settings, table), prompt_turn(request, settings, fallback)
        _same_or_tied(want, got)
        compared += bool(want.items)
    return compared


def test_the_fallback_ranks_as_the_rank_engines_table_on_generated_text():
    entries = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()] + _generated(1500)
    _store(entries)
    queries = _queries([e["content"] for e in entries], 50)
    assert _compare(queries, [None, "alpha", "global", "webshop", "beta"], Settings()) >= 45


@pytest.mark.parametrize(
    "overrides",
    [
        {"relevance_prefilter_enabled": False},
        {"keyword_field_weight": 3},
        {"keyword_field_weight": 0},
        {"score_w_confidence": 0.1, "score_w_recency": 0.05},
        {"score_w_scope": 0.0},
        {"rank_profile": "dialog"},
        {"rank_profile": "dialog", "relevance_prefilter_enabled": False},
        {"composite_floor": "off"},
    ],
    ids=[
        "prefilter-off",
        "keyword-weight-3",
        "keyword-weight-0",
        "confidence-recency",
        "no-scope-bonus",
        "dialog-profile",
        "dialog-profile-prefilter-off",
        "no-floor",
    ],
)
def test_the_fallback_ranks_as_the_table_whatever_the_weights(overrides, monkeypatch):
    for name, value in overrides.items():
        monkeypatch.setenv(f"CAIRN_{name.upper()}", str(value))
    entries = _generated(400, seed=3)
    _store(entries)
    Memory.update(confidence=0.9, updated_at=dt.datetime(2025, 6, 1)).where(Memory.id % 3 == 0).execute()
    search_index.sync()
    assert _compare(_queries([e["content"] for e in entries], 12, seed=8), [None, "alpha", "global"], Settings())


def _compare_windows(queries: list[str], scopes: list[str | None], settings: Settings, tmp_path) -> int:
    """_compare with each prompt after two earlier exchanges of other queries (a transcript): the weighted query
    (the earlier turns' terms at CONTEXT_TERM_WEIGHT) through MaxScore's bounds and the stored counts."""
    table, fallback = _table_engine(), _fallback()
    compared = 0
    for i, query in enumerate(queries):
        rows = []
        for j in (1, 2):
            rows.append({"type": "user", "uuid": f"u{j}", "message": {"role": "user", "content": queries[i - j]}})
            text = queries[i - j - 2][:200]
            content = [{"type": "text", "text": text}]
            rows.append(
                {
                    "type": "assistant",
                    "uuid": f"a{j}",
                    "message": {"id": f"m{j}", "role": "assistant", "content": content},
                }
            )
        path = tmp_path / f"{i}.jsonl"
        path.write_text("\n".join(orjson.dumps(r).decode() for r in rows) + "\n")
        scope = scopes[i % len(scopes)]
        request = PromptRequest(query, scope=scope, transcript=str(path), k=10, log=False, strict_scope=False)
        want, got = prompt_turn(request, settings, table), prompt_turn(request, settings, fallback)
        assert (
            want.context.earlier and want.items[0].components["window"]["term_weight"] == settings.CONTEXT_TERM_WEIGHT
        )
        _same_or_tied(want, got)
        compared += bool(want.items)
    return compared


@pytest.mark.parametrize(
    "overrides",
    [{}, {"score_w_confidence": 0.1}, {"keyword_field_weight": 3}, {"rank_profile": "dialog"}],
    ids=["maxscore", "every-memory", "keyword-weight-3", "dialog-profile"],
)
def test_the_fallback_ranks_a_window_as_the_table_does(overrides, monkeypatch, tmp_path):
    for name, value in overrides.items():
        monkeypatch.setenv(f"CAIRN_{name.upper()}", str(value))
    entries = _generated(400, seed=4)
    _store(entries)
    queries = _queries([e["content"] for e in entries], 12, seed=9)
    assert _compare_windows(queries, [None, "alpha", "global"], Settings(), tmp_path) >= 10


@pytest.mark.parametrize("profile", ["default", "dialog"])
def test_the_fallback_ranks_as_the_rank_engines_table_on_locomo(profile, monkeypatch):
    """Real conversational text: the dialog turns (each LoCoMo session a cairn session: the dialog profile's
    neighbours) and observations of LoCoMo conversations, one scope each, ranked for the QA questions asked after
    the conversation's last turns (a context window of prompt + transcript): the 50 top 10s identical or tied."""
    monkeypatch.setenv("CAIRN_RANK_PROFILE", profile)
    data = json.loads(shared("locomo", "locomo_dev.json").read_text())
    entries, queries, scopes = [], [], []
    for conv in data[:3]:
        c, scope = conv["conversation"], conv["sample_id"]
        sessions = sorted((k for k in c if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
        turns = [(f"{scope}-{key}", t) for key in sessions for t in c[key]]
        entries += [
            {"content": f"{t['speaker']}: {t['text']}", "scope": scope, "session_id": session}
            for session, t in turns
            if t["text"].strip()
        ]
        turns = [t for _, t in turns]
        for facts in conv["observation"].values():
            entries += [{"content": f[0], "scope": "global"} for speaker in facts.values() for f in speaker]
        recent = " ".join(t["text"] for t in turns[-4:])
        for qa in conv["qa"][:17]:
            queries.append(f"{qa['question']} {recent}")
            scopes.append(scope)
    _store(entries)
    settings = Settings()
    table, fallback = _table_engine(), _fallback()
    assert len(queries) >= 50
    for query, scope in zip(queries[:50], scopes):
        request = PromptRequest(query, scope=scope, k=10, log=False)
        _same_or_tied(prompt_turn(request, settings, table), prompt_turn(request, settings, fallback))


# --- the hot path -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_fallback_imports_no_numpy_and_the_daemon_down_hook_still_injects(cairn_home):
    """Exactly what Claude Code runs with no daemon: `cairn hook prompt` (and `cairn rank`) in a fresh interpreter,
    CAIRN_DAEMON=auto; the memories are injected from the full-text index, logged as the fallback's (deliveries and
    hook_state, through the lean connection), and neither numpy, a model library nor peewee is imported."""
    assert importing.import_jsonl(EXAMPLES, Settings(), embed=lambda texts: None).added == 18
    db.close_all()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update({"CAIRN_HOME": str(cairn_home), "CAIRN_EMBED_MODEL": "hashing", "CAIRN_DAEMON": "auto"})
    env.update({"CAIRN_HOOK_SCOPE": "webshop", "CAIRN_DAEMON_BACKOFF_S": "0", "PYTHONPATH": str(ROOT)})
    # "a daemon was just started": the hook's autostart starts none here
    marker = Path(singleton.spawn_path(cairn_home))
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{time.time():.3f} 0\n")  # stamped now: within the spawn grace, so no daemon is started
    heavy = ("numpy", "torch", "transformers", "sentence_transformers", "rich", "typer", "tqdm", "peewee", "argparse")
    payload = {
        "session_id": "down",
        "cwd": "/src/webshop",
        "hook_event_name": "UserPromptSubmit",
        "prompt": "the integration tests fail with connection refused on port 5433",
    }
    for argv, stdin in (
        (["hook", "prompt"], json.dumps(payload)),
        (["rank", "how are prices stored at the checkout?", "--scope", "webshop", "--json"], ""),
    ):
        code = (
            "import sys, json\nfrom cairn_cli import entry\n"
            f"sys.argv = ['cairn', *{argv!r}]\nrc = 0\n"
            "try:\n    entry.main()\nexcept SystemExit as exc:\n    rc = exc.code\n"
            f"sys.stderr.write('\\n' + json.dumps([m for m in {heavy!r} if m in sys.modules]))\nsys.exit(rc)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], input=stdin, capture_output=True, text=True, env=env, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stderr.strip().splitlines()[-1]) == [], f"{argv[0]} imported heavy modules"
        if argv[0] == "hook":
            assert re.search(r'<memory id="(\d+)"', out.stdout)[1] == "1", out.stdout
        else:
            assert json.loads(out.stdout)["memories"][0]["id"] == 2
    rows = list(
        sqlite3.connect(cairn_home / "ephemeral.db").execute(
            "SELECT memory_id, ranker, score_components FROM memory_deliveries WHERE session_id = 'down' ORDER BY rank"
        )
    )
    assert rows and rows[0][0] == 1 and all(r[1] == "cairn-fallback" for r in rows)
    assert json.loads(rows[0][2])["keywords_bm25"] > 0 and json.loads(rows[0][2])["ranker"] == "cairn-fallback"
    (state,) = sqlite3.connect(cairn_home / "ephemeral.db").execute(
        "SELECT data FROM hook_state WHERE session_id = 'down'"
    )
    assert json.loads(state[0])["delivered"][0] == 1
    assert not (cairn_home / "daemon.sock").exists()


# --- PostgreSQL -------------------------------------------------------------------------------------------------
# Against a fresh database on the session's throw-away server (tests/pgserver.py, the `pg_server` fixture).


def _pg(url: str) -> peewee.PostgresqlDatabase:
    from urllib.parse import urlparse

    parsed = urlparse(url)
    return peewee.PostgresqlDatabase(
        parsed.path.lstrip("/"), user=parsed.username, host=parsed.hostname, port=parsed.port or 5432
    )


@pytest.fixture
def pg_url(pg_server):
    db.close_all()
    yield pg_server.create_database("ft")
    db.close_all()


def test_postgres_keeps_the_index_in_step_and_ranks_as_the_table(pg_url, tmp_path):
    settings = Settings(DB_URL=pg_url)
    open_stores(settings, create=True)  # an empty database: made on purpose
    assert isinstance(memory_proxy.obj, peewee.PostgresqlDatabase)
    assert importing.import_jsonl(EXAMPLES, settings, embed=lambda texts: None).added == 18
    assert_in_step()
    merged = dedup.add_memories(
        [memories.validate_entry({"content": "Prices are stored as integer cents", "keywords": ["money"]})],
        settings,
        embed=lambda texts: None,
    )
    first = _add({"content": "Deploys go through the `release` pipeline", "scope": "webshop"})[0]
    second = _add({"content": "Deploys go through the `ship` pipeline since March", "scope": "webshop"})[0]
    memories.supersede(first.id, second.id, settings)
    assert_in_step()
    assert merged and _sql("SELECT count(*) FROM fulltext_docs WHERE memory_id = ?", (first.id,)) == [(0,)]
    huge = "a_" + "x" * 3000  # a term PostgreSQL cannot put in a tsvector: left out of it, the write goes through
    _add({"content": f"The generated token {huge} is never logged", "scope": "webshop"})
    entries = _generated(300, seed=4)
    _store(entries)
    assert_in_step()
    request = PromptRequest(f"where is {huge} logged", scope="webshop", log=False)
    _same_or_tied(prompt_turn(request, settings, _table_engine()), prompt_turn(request, settings, _fallback()))
    scopes = [None, "alpha", "webshop", "global"]
    assert _compare(_queries([e["content"] for e in entries], 20, seed=2), scopes, settings) >= 15


def test_postgres_store_made_before_the_index_is_indexed_when_opened(pg_url):
    old = _pg(pg_url)
    migrations.apply_pending(old, [m for m in migrations.MEMORY_MIGRATIONS if m[0] < "0005"])
    for i, entry in enumerate(
        [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()], start=1
    ):
        old.execute_sql(
            "INSERT INTO memories (content, content_hash, norm_hash, keywords, scope, kind, confidence,"
            " corroborations, contradictions, created_at, updated_at, superseded_by)"
            " VALUES (%s, %s, %s, %s, %s, %s, 0.75, 0, 0, '2026-01-01', '2026-01-01', %s)",
            (
                entry["content"],
                sha256(entry["content"]),
                sha256(normalise(entry["content"])),
                json.dumps(entry.get("keywords", [])),
                entry.get("scope", "global"),
                entry.get("kind", "fact"),
                2 if i == 4 else None,
            ),
        )
    old.close()
    open_stores(Settings(DB_URL=pg_url))
    assert [r[0] for r in _sql("SELECT name FROM cairn_migrations ORDER BY name")][-1] >= "0005_memories_fulltext"
    assert_in_step()
    assert _sql("SELECT count(*) FROM fulltext_docs") == [(17,)]
    request = PromptRequest("how should prices be stored for the checkout?", scope="webshop", log=False)
    _same_or_tied(prompt_turn(request, Settings(), _table_engine()), prompt_turn(request, Settings(), _fallback()))
