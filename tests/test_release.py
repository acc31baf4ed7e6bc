"""The release: `cairn --version`, the record of what each release's stores hold, and the upgrade: stores written by
the previous release (built from its migrations, rows put in with plain SQL as it wrote them) open with this cairn,
are migrated, and lose nothing.

The previous release's migrations come from cairn_cli/db/releases.py (no git at test time: a CI clone may lack
tags); where the repository has the release's tag, the list is checked against it, and the stores are also built
by the tagged code itself."""

from __future__ import annotations

import datetime as dt
import os
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import orjson
import pytest

from cairn_cli import __version__, db
from cairn_cli.config import Settings
from cairn_cli.db import migrations, releases
from tests.conftest import ROOT

SKIP_TABLES = {"cairn_migrations"}  # grows with the migrations; checked apart
DERIVED = ("fulltext_",)  # the full-text index: rebuilt from the memories by whichever cairn opens the store
T0 = dt.datetime(2026, 10, 1, 9, 30, 15, 123456)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


# -- --version -----------------------------------------------------------------------------------------------------


def test_version_through_the_console_script_and_the_typer_app(cli):
    out = subprocess.run(
        [sys.executable, "-m", "cairn_cli", "--version"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, f"cairn {__version__}\n", "")
    result = cli("--version")
    assert result.exit_code == 0 and result.output == f"cairn {__version__}\n"


def test_the_version_is_newer_than_every_release_and_pyproject_reads_it():
    assert _version_tuple(__version__) > max(_version_tuple(v) for v in releases.RELEASES)
    assert max(releases.RELEASES, key=_version_tuple) == releases.PREVIOUS
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'attr = "cairn_cli.__version__"' in pyproject


# -- the record of releases ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", sorted(releases.RELEASES))
def test_a_release_is_a_prefix_of_the_append_only_registry(version):
    for kind, names in releases.RELEASES[version].items():
        current = [name for name, _ in migrations.REGISTRIES[kind]]
        assert tuple(current[: len(names)]) == names, f"{kind}: the registry must only ever be appended to"


def _tag(version: str) -> str | None:
    """The release's tag when this checkout has it (a CI clone may not)."""
    tag = releases.TAGS[version]
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return tag if out.returncode == 0 else None


@pytest.mark.parametrize("version", sorted(releases.RELEASES))
def test_a_release_matches_the_migrations_of_its_tag(version):
    tag = _tag(version)
    if tag is None:
        pytest.skip(f"tag {releases.TAGS[version]} not in this checkout")
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{tag}:cairn_cli/db/schema.py"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    namespace: dict = {}
    exec(compile(text, f"{tag}:cairn_cli/db/schema.py", "exec"), namespace)
    assert {k: tuple(v) for k, v in namespace["MIGRATIONS"].items()} == releases.RELEASES[version]


# -- the stores of the previous release ------------------------------------------------------------------------------


def _vector(seed: int) -> bytes:
    return struct.pack("<8f", *[(seed * 7 + i) / 13.0 for i in range(8)])


def _rows(ts) -> dict[str, list[dict]]:
    """Rows as 0.1.0 wrote them, every column it had, `ts` turning a datetime into the store's own form."""
    mem = [
        {
            "id": i,
            "content": content,
            "content_hash": f"{i:064x}",
            "norm_hash": f"{i + 100:064x}",
            "keywords": orjson.dumps(keywords).decode(),
            "scope": scope,
            "kind": kind,
            "confidence": 0.75 + i / 100,
            "corroborations": i,
            "contradictions": i % 2,
            "source_ref": "gen-1",
            "session_id": f"s{i}",
            "created_at": ts(T0 + dt.timedelta(hours=i)),
            "updated_at": ts(T0 + dt.timedelta(hours=i, minutes=5)),
            "superseded_by": superseded,
            "embedding": _vector(i),
            "embedding_model": "all-MiniLM-L6-v2",
            "instance": "laptop-a1b2c3",
        }
        for i, content, keywords, scope, kind, superseded in (
            (
                1,
                "Run make db-up before pytest: PostgreSQL listens on 5433",
                ["pytest", "postgres"],
                "webshop",
                "procedure",
                None,
            ),
            (2, "Prices are stored as integer cents, never floats", ["prices", "money"], "webshop", "decision", None),
            (3, "Deploy with make release after the tests pass", ["deploy"], "global", "procedure", 4),
            (4, "Deploy with `make release` once CI is green", ["deploy", "ci"], "global", "procedure", None),
        )
    ]
    memory = {
        "memories": mem,
        "memory_merges": [
            {
                "id": 1,
                "memory_id": 2,
                "content": "store prices as integer cents",
                "keywords": '["prices"]',
                "scope": "webshop",
                "kind": "decision",
                "source_ref": "gen-1",
                "session_id": "s9",
                "method": "semantic",
                "similarity": 0.9712345678901234,
                "merged_at": ts(T0 + dt.timedelta(days=1)),
            }
        ],
        "machine_state": [
            {
                "key": "generation_rules",
                "value": orjson.dumps({"version": "gen-1", "text": "write memories that stand alone"}).decode(),
                "updated_at": ts(T0),
                "history": orjson.dumps([{"at": "2026-10-01T09:30:15", "by": "seed", "new": "gen-1"}]).decode(),
            },
            {
                "key": "floor:cross-encoder/ms-marco-MiniLM-L-6-v2",
                "value": "-2.5",
                "updated_at": ts(T0),
                "history": "[]",
            },
        ],
        "replay_runs": [
            {
                "id": "run-1",
                "status": "done",
                "config": '{"a": "gen-1", "b": "gen-2"}',
                "sent": '{"anthropic": {"calls": 4}}',
                "report": '{"verdict": "no difference"}',
                "created_at": ts(T0),
                "updated_at": ts(T0),
            }
        ],
        "replay_calls": [
            {
                "key": "f" * 64,
                "backend": "anthropic",
                "model": "claude-sonnet-4-5",
                "role": "writer",
                "answer": "[cm]{}[/cm]",
                "input_tokens": 1200,
                "output_tokens": 80,
                "run_id": "run-1",
                "created_at": ts(T0),
            }
        ],
        "student_versions": [
            {
                "name": "student-20261001",
                "checksum": "a" * 64,
                "size": 11,
                "blob": b"\x00model\xffblob",
                "card": '{"ndcg": 0.61}',
                "instance": "laptop-a1b2c3",
                "published_at": ts(T0),
            }
        ],
    }
    window = "integration tests fail with connection refused on port 5433\n\nearlier: make db-up"
    deliveries = []
    for i, (memory_id, grade, hard, engaged, method, backfill) in enumerate(
        (
            (1, 3, False, True, "lexical", None),
            (2, 0, True, False, "lexical", None),
            (4, None, None, True, "semantic", None),
            (1, None, None, False, "lexical", "backfill-1"),
            (2, None, None, None, None, None),
        ),
        start=1,
    ):
        deliveries.append(
            {
                "id": i,
                "session_id": "s1" if i <= 3 else "s2",
                "turn": 1 if i <= 3 else 2,
                "memory_id": memory_id,
                "context_window": window + f" #{i}",
                "context_key": f"{i:016x}",
                "rank": i,
                "final_score": 0.8123456789 - i / 10,
                "score_components": orjson.dumps({"similarity": 0.5 + i / 10, "keywords": 0.25}).decode(),
                "reranker_model": "cross-encoder/ms-marco-MiniLM-L-6-v2",
                "ranker": "cairn",
                "layer": "prompt",
                "scope": "webshop",
                "delivered_at": ts(T0 + dt.timedelta(minutes=i)),
                "grade": grade,
                "hard_negative": hard,
                "graded_at": ts(T0 + dt.timedelta(minutes=30)) if grade is not None else None,
                "engaged": engaged,
                "engaged_score": 0.42 if engaged is not None else None,
                "engaged_method": method,
                "arm": "A" if i % 2 else "B",
                "engaged_lexical": 0.42 if engaged is not None else None,
                "engaged_semantic": 0.61 if method == "semantic" else None,
                "engaged_at": ts(T0 + dt.timedelta(minutes=31)) if engaged is not None else None,
                "engaged_backfill": backfill,
                "instance": "laptop-a1b2c3",
            }
        )
    hook = {
        "prompt": "integration tests fail with connection refused on port 5433",
        "scope": "webshop",
        "generation_version": "gen-1",
        "source_ref": "gen-1",
        "delivered": [1, 2, 4],
        "abstained": None,
        "cwd": "/home/u/webshop",
        "agent_type": None,
        "stop": {"response_sha256": "b" * 64, "memories": 1, "graded": 2, "engaged": 2},
    }
    ephemeral = {
        "memory_deliveries": deliveries,
        "hook_state": [
            {
                "id": 1,
                "session_id": "s1",
                "turn": 1,
                "arm": "A",
                "transcript_path": "/home/u/.claude/projects/webshop/s1.jsonl",
                "is_subagent": False,
                "agent_id": None,
                "context_key": f"{1:016x}",
                "data": orjson.dumps(hook).decode(),
                "created_at": ts(T0),
                "instance": "laptop-a1b2c3",
            },
            {
                "id": 2,
                "session_id": "s2",
                "turn": 2,
                "arm": "B",
                "transcript_path": None,
                "is_subagent": True,
                "agent_id": "agent-7",
                "context_key": "",
                "data": '{"arm": "B", "is_subagent": true, "source_ref": "gen-2"}',
                "created_at": ts(T0 + dt.timedelta(minutes=4)),
                "instance": None,
            },
        ],
        "evidence_applied": [
            {"id": 1, "session_id": "s1", "turn": 1, "memory_id": 1, "kind": "cu", "applied_at": ts(T0)},
            {"id": 2, "session_id": "s1", "turn": 1, "memory_id": 2, "kind": "-!", "applied_at": ts(T0)},
        ],
    }
    return {"memory": memory, "ephemeral": ephemeral}


def _insert(database, rows: dict[str, list[dict]]) -> None:
    with database.atomic():
        for table, items in rows.items():
            for row in items:
                cols = ", ".join(row)
                marks = ", ".join([database.param] * len(row))
                database.execute_sql(f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(row.values()))
    if database.param != "?":  # explicit ids: move PostgreSQL's sequences past them, as the release's inserts did
        for table, items in rows.items():
            if items and "id" in items[0] and isinstance(items[0]["id"], int):
                database.execute_sql(
                    f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT MAX(id) FROM {table}))"
                )


def _value(v):
    return bytes(v) if isinstance(v, memoryview) else v


def _snapshot(database) -> dict[str, dict]:
    """Every row of every table (not the derived index, not the ledger), keyed by its first column."""
    out = {}
    for table in sorted(database.get_tables()):
        if table in SKIP_TABLES or table.startswith(DERIVED):
            continue
        cursor = database.execute_sql(f"SELECT * FROM {table}")
        names = [c[0] for c in cursor.description]
        out[table] = {row[0]: {n: _value(v) for n, v in zip(names, row)} for row in cursor.fetchall()}
    return out


def _ledger(database) -> list[str]:
    return sorted(n for (n,) in database.execute_sql("SELECT name FROM cairn_migrations").fetchall())


def _build_with_the_registry(kind: str, url: str, names: tuple[str, ...]) -> None:
    """The release's migrations, exactly, from the registry (append-only: the released ones are unchanged)."""
    database = db.connect_store(kind, url, create=True, migrate=False)
    try:
        migrations.apply_pending(database, [m for m in migrations.REGISTRIES[kind] if m[0] in names])
    finally:
        database.close()


def _build_with_the_tagged_code(tmp_path: Path, tag: str, urls: dict[str, str]) -> None:
    """The release's own code (`git archive` of its tag) opens the stores: its open_db applies its migrations."""
    old = tmp_path / "release"
    old.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", tag, "cairn_cli"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    (tmp_path / "release.tar").write_bytes(archive)
    with tarfile.open(tmp_path / "release.tar") as tar:
        tar.extractall(old, filter="data")
    code = (
        "import sys, cairn_cli\n"
        f"assert cairn_cli.__file__.startswith({str(old)!r}), cairn_cli.__file__\n"
        "from cairn_cli import db\n"
        "db.open_db(sys.argv[1], sys.argv[2])\n"
        "db.close_all()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update({"PYTHONPATH": str(old), "CAIRN_HOME": str(tmp_path / "release-home")})
    out = subprocess.run(
        [sys.executable, "-c", code, urls["memory"], urls["ephemeral"]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # not the checkout: its cairn_cli must not shadow the release's
        timeout=300,
    )
    assert out.returncode == 0, out.stderr


@pytest.fixture(params=["registry", "tag"])
def previous_stores(request, backend, tmp_path, monkeypatch):
    """Both stores as the previous release left them, with its rows in them; the settings point at them and
    nothing of this cairn has opened them yet. Returns {kind: (url, snapshot before the upgrade)}."""
    names = releases.RELEASES[releases.PREVIOUS]
    if backend == "postgresql":
        server = request.getfixturevalue("pg_server")
        urls = {"memory": server.create_database("old_mem"), "ephemeral": server.create_database("old_eph")}
    else:
        urls = {kind: f"sqlite:///{tmp_path / f'old-{kind}.db'}" for kind in ("memory", "ephemeral")}
    db.close_all()
    if request.param == "tag":
        tag = _tag(releases.PREVIOUS)
        if tag is None:
            pytest.skip(f"tag {releases.TAGS[releases.PREVIOUS]} not in this checkout")
        _build_with_the_tagged_code(tmp_path, tag, urls)
    else:
        for kind in ("memory", "ephemeral"):
            _build_with_the_registry(kind, urls[kind], names[kind])
    out = {}
    for kind, rows in _rows(str if backend == "sqlite" else (lambda v: v)).items():
        database = db.connect_store(kind, urls[kind], create=False, migrate=False)
        try:
            assert _ledger(database) == sorted(names[kind])  # exactly the release's migrations, no more
            _insert(database, rows)
            out[kind] = (urls[kind], _snapshot(database))
        finally:
            database.close()
    monkeypatch.setenv("CAIRN_DB_URL", urls["memory"])
    monkeypatch.setenv("CAIRN_EPHEMERAL_DB_URL", urls["ephemeral"])
    return out


def test_the_previous_release_stores_open_migrate_and_lose_nothing(previous_stores, backend):
    from cairn_cli.core.store import open_stores

    open_stores(Settings())  # what every command, hook and daemon request does first: migrates both stores
    for kind, (url, before) in previous_stores.items():
        database = db.connect_store(kind, url, create=False, migrate=False)
        try:
            assert _ledger(database) == sorted(name for name, _ in migrations.REGISTRIES[kind])
            after = _snapshot(database)
        finally:
            database.close()
        assert set(before) <= set(after), f"{kind}: tables gone"
        for table, rows in before.items():
            assert set(rows) == set(after[table]), f"{kind}.{table}: rows lost or added"
            for key, row in rows.items():
                now = after[table][key]
                assert {c: now.get(c, "<column gone>") for c in row} == row, f"{kind}.{table} {key}"
    assert previous_stores["memory"][1]["memories"][1]["embedding"] == _vector(1)  # the bytes, not a copy's


def test_the_previous_release_stores_work_with_this_cairn(previous_stores, cli):
    """Beyond the bytes: what each part of the loop reads from an upgraded store is there."""
    from cairn_cli.core.learning import export
    from cairn_cli.core.store import hookstate, memories, open_stores

    s = Settings()
    open_stores(s)
    live = {m.id: m for m in memories.list_memories(s)}
    assert sorted(live) == [1, 2, 4] and live[1].keywords == ["pytest", "postgres"] and live[1].corroborations == 1
    assert [m.id for m in memories.list_memories(s, include_superseded=True)] == [1, 2, 3, 4]
    graded = export.graded_rows(s)
    assert [(r.delivery_id, r.grade, r.hard_negative, r.memory) for r in graded] == [
        (1, 3, False, live[1].content),
        (2, 0, True, live[2].content),
    ]
    assert all(r.query.startswith("integration tests fail") for r in graded)
    assert {r.delivery_id for r in export.engagement_rows(s, min_pos=0.0)} == {3, 4}
    turn = hookstate.get_turn("s1", 1)
    assert turn.data["prompt"].startswith("integration tests") and turn.data["stop"]["graded"] == 2
    result = cli("rank", "pytest connection refused on port 5433", "--scope", "webshop", "--no-log", "--json")
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.output)["memories"][0]["id"] == 1  # the full-text index was built on open
    shown = cli("stats", "deliveries", "--json")
    assert shown.exit_code == 0, shown.output
    assert sum(g["deliveries"] for g in orjson.loads(shown.output)) == 5
