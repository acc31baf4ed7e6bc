"""`cairn db copy`: a whole store from SQLite to PostgreSQL (the session's throw-away server) and back, ids and
every column kept, idempotent, conflicts refused, verified by counts and checksums; the copy is a working store."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

from tests.conftest import EXAMPLES

MEMORY_TABLES = ["memories", "memory_merges", "machine_state", "replay_calls", "replay_runs"]
EPHEMERAL_TABLES = ["memory_deliveries", "hook_state", "evidence_applied"]
PROMPT = "integration tests fail with connection refused"


def _fill(cli) -> None:
    """A store with real content: imported memories, rankings logged (deliveries, hook state), a grade, a
    corroboration (evidence applied), a merge, a superseded memory, machine state."""
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    for turn, prompt in enumerate([PROMPT, "how should prices be stored?", "how do I add a migration?"], 1):
        assert cli("rank", prompt, "--session", "s1", "--turn", turn, "--scope", "webshop").exit_code == 0
    block = '[cm]{"rg": ["1:3", "2:0!"], "cu": [1]}[/cm]'
    assert cli("grade", "--session", "s1", "--turn", 1, block).exit_code in (0, 2)
    assert cli("memory", "add", "The checkout uses integer cents", "--scope", "webshop").exit_code == 0
    assert cli("memory", "supersede", 2, 19).exit_code == 0
    assert cli("memory", "add", "the checkout uses integer cents", "--scope", "webshop").exit_code == 0  # a merge
    from cairn_cli.config import Settings
    from cairn_cli.core.store import state
    from cairn_cli.db.tables import Memory, ReplayCall, ReplayRun

    # a double that PostgreSQL's REAL columns hold only to single precision
    Memory.update(confidence=0.7123456789123).where(Memory.id == 5).execute()

    state.put("test.weights", {"w": 0.123456789, "on": True}, Settings(), by="test", reason="a store with state")
    ReplayRun.create(id="run1", status="complete", config={"a": "v1", "seed": 7}, sent={"writer": {"calls": 2}})
    ReplayCall.create(
        key="k" * 64, backend="command", model="m", role="judge", answer="B wins", input_tokens=9, output_tokens=2,
        run_id="run1",
    )  # fmt: skip


def _dump(path, table: str) -> list[tuple]:
    """Every row of a SQLite table as stored, in id order, read with the sqlite3 module itself."""
    con = sqlite3.connect(path)
    try:
        key = "key" if table in ("machine_state", "replay_calls") else "id"
        return con.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall()
    finally:
        con.close()


def _same(a: list[tuple], b: list[tuple]) -> bool:
    """Equal rows; floats at PostgreSQL REAL's precision (cairn's float columns are REAL there)."""
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        for x, y in zip(ra, rb, strict=True):
            if isinstance(x, float) and isinstance(y, float):
                if not math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-12):
                    return False
            elif x != y:
                return False
    return True


def _copy(cli, store: str, src: str, dst: str, *extra: str):
    return cli("db", "copy", "--from", src, "--to", dst, "--store", store, *extra)


def _report(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _use(monkeypatch, memory_url: str, ephemeral_url: str) -> None:
    """Make the stores at these URLs the ones cairn opens, as CAIRN_DB_URL / CAIRN_EPHEMERAL_DB_URL would."""
    from cairn_cli import db
    from cairn_cli.commands import _common

    monkeypatch.setenv("CAIRN_DB_URL", memory_url)
    monkeypatch.setenv("CAIRN_EPHEMERAL_DB_URL", ephemeral_url)
    db.close_all()
    _common._globals.clear()


def _fallback_top(cli, monkeypatch) -> dict:
    monkeypatch.setenv("CAIRN_DAEMON", "auto")
    ranked = json.loads(cli("rank", PROMPT, "--scope", "webshop", "--no-log", "--json").stdout)
    monkeypatch.setenv("CAIRN_DAEMON", "off")
    assert ranked["ranker"] == "cairn-fallback"
    return ranked["memories"][0]


@pytest.fixture
def filled(cli, cairn_home):
    """The filled SQLite store's two URLs and paths."""
    _fill(cli)
    return {
        "memory": (f"sqlite:///{cairn_home / 'memory.db'}", cairn_home / "memory.db"),
        "ephemeral": (f"sqlite:///{cairn_home / 'ephemeral.db'}", cairn_home / "ephemeral.db"),
    }


def test_sqlite_to_postgresql_and_back_is_identical_and_the_copy_ranks(cli, filled, pg_server, tmp_path, monkeypatch):
    top_before = _fallback_top(cli, monkeypatch)
    pg, back = {}, {}
    for store, tables in (("memory", MEMORY_TABLES), ("ephemeral", EPHEMERAL_TABLES)):
        src_url, src_path = filled[store]
        pg[store] = pg_server.create_database(store[:3])
        there = _report(_copy(cli, store, src_url, pg[store], "--json"))
        assert there["ok"] and [t["table"] for t in there["tables"]] == tables
        assert all(t["checksum_equal"] and t["target_rows"] == t["source_rows"] for t in there["tables"])
        assert there["copied"] == sum(t["source_rows"] for t in there["tables"]) > 0
        back_path = tmp_path / f"back-{store}.db"
        back[store] = f"sqlite:///{back_path}"
        home = _report(_copy(cli, store, pg[store], back[store], "--json"))
        assert home["ok"] and home["copied"] == there["copied"]
        # the original and the round trip, read with sqlite3 itself: every row and column, floats at REAL's precision
        for table in tables:
            original = _dump(src_path, table)
            assert original, table
            assert _same(original, _dump(back_path, table)), table
        # and by the copy's own checksums: the original copied onto its round trip changes nothing
        again = _report(_copy(cli, store, src_url, back[store], "--json"))
        assert again["copied"] == 0 and all(t["checksum_equal"] for t in again["tables"])
        assert {t["table"]: t["source_checksum"] for t in again["tables"]} == {
            t["table"]: t["source_checksum"] for t in there["tables"]
        }
    assert _dump(filled["memory"][1], "memories") and _dump(filled["ephemeral"][1], "memory_deliveries")
    assert _dump(filled["ephemeral"][1], "hook_state") and _dump(filled["ephemeral"][1], "evidence_applied")
    assert any(row[14] is not None for row in _dump(filled["memory"][1], "memories"))  # superseded_by
    assert any(row[15] for row in _dump(filled["memory"][1], "memories"))  # an embedding blob
    # the PostgreSQL copy is a working store: the full-text fallback finds the same top memory, ranking logs
    _use(monkeypatch, pg["memory"], pg["ephemeral"])
    assert _fallback_top(cli, monkeypatch)["id"] == top_before["id"]
    ranked = json.loads(cli("rank", PROMPT, "--scope", "webshop", "--session", "s9", "--json").stdout)
    assert ranked["memories"][0]["id"] == top_before["id"]


def test_a_second_copy_changes_nothing_and_a_conflict_is_refused_unless_overwrite(cli, filled, pg_server):
    from cairn_cli import db

    src = filled["memory"][0]
    target = pg_server.create_database("mem")
    assert _report(_copy(cli, "memory", src, target, "--json"))["copied"] > 0
    second = _copy(cli, "memory", src, target)
    assert second.exit_code == 0, second.output
    assert "nothing to copy" in second.output
    assert _report(_copy(cli, "memory", src, target, "--json"))["copied"] == 0
    # a row the target holds with other content
    conn = db.connect_store("memory", target)
    conn.execute_sql("UPDATE memories SET confidence = 0.01, content = 'changed' WHERE id = 3")
    conn.close()
    refused = _copy(cli, "memory", src, target)
    assert refused.exit_code == 1, refused.output
    line = refused.output.strip()
    assert "\n" not in line and "memories id 3 differs" in line and "--overwrite" in line
    overwritten = _report(_copy(cli, "memory", src, target, "--overwrite", "--json"))
    memories = next(t for t in overwritten["tables"] if t["table"] == "memories")
    assert memories["replaced"] == 1 and memories["copied"] == 0 and overwritten["ok"]
    conn = db.connect_store("memory", target)
    assert conn.execute_sql("SELECT content FROM memories WHERE id = 3").fetchone()[0] != "changed"
    conn.close()
    assert _report(_copy(cli, "memory", src, target, "--json"))["copied"] == 0


def test_a_target_with_other_rows_keeps_them_and_new_rows_get_fresh_ids(cli, filled, pg_server, monkeypatch):
    from cairn_cli import db

    target = pg_server.create_database("mem")
    conn = db.connect_store("memory", target)
    conn.execute_sql(
        "INSERT INTO machine_state (key, value, updated_at, history) VALUES ('team.only', '1', now(), '[]')"
    )
    conn.close()
    report = _report(_copy(cli, "memory", filled["memory"][0], target, "--json"))
    state = next(t for t in report["tables"] if t["table"] == "machine_state")
    assert state["target_total"] == state["source_rows"] + 1 and state["checksum_equal"]
    copied_max = max(row[0] for row in _dump(filled["memory"][1], "memories"))
    eph = pg_server.create_database("eph")
    assert _copy(cli, "ephemeral", filled["ephemeral"][0], eph).exit_code == 0
    deliveries_max = max(row[0] for row in _dump(filled["ephemeral"][1], "memory_deliveries"))
    _use(monkeypatch, target, eph)
    added = cli("memory", "add", "A memory written on the team's server", "--scope", "webshop")
    assert added.exit_code == 0, added.output
    from cairn_cli.db.tables import Memory, MemoryDelivery

    newest = Memory.get(Memory.content == "A memory written on the team's server")
    assert newest.id == copied_max + 1
    assert cli("rank", PROMPT, "--scope", "webshop", "--session", "s9").exit_code == 0
    assert min(d.id for d in MemoryDelivery.select().where(MemoryDelivery.session_id == "s9")) == deliveries_max + 1


def test_dry_run_writes_nothing(cli, filled, pg_server, tmp_path):
    from cairn_cli import db

    target = pg_server.create_database("mem")
    report = _report(_copy(cli, "memory", filled["memory"][0], target, "--dry-run", "--json"))
    assert report["dry_run"] and report["copied"] == sum(t["source_rows"] for t in report["tables"]) > 0
    assert all(t["checksum_equal"] is None for t in report["tables"])
    conn = db.connect_store("memory", target, migrate=False)
    assert conn.get_tables() == []  # not even migrated
    conn.close()
    missing = tmp_path / "nowhere.db"
    text = _copy(cli, "ephemeral", filled["ephemeral"][0], f"sqlite:///{missing}", "--dry-run")
    assert text.exit_code == 0, text.output
    assert "would be copied; nothing written" in text.output and not missing.exists()
    # on a target holding part of it: only the rest would be copied
    assert _copy(cli, "memory", filled["memory"][0], target).exit_code == 0
    assert _report(_copy(cli, "memory", filled["memory"][0], target, "--dry-run", "--json"))["copied"] == 0


@pytest.mark.parametrize(
    "to, words",
    [
        ("postgresql://cairn:s3cret@127.0.0.1:1/team", "check that PostgreSQL is running at 127.0.0.1:1"),
        ("mysql://cairn:s3cret@db.example/team", "use sqlite:///path or postgresql://user@host/db"),
    ],
)
def test_a_bad_url_is_one_line_naming_the_fix_never_the_password(cli, filled, to, words):
    result = _copy(cli, "memory", filled["memory"][0], to)
    assert result.exit_code == 1, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert words in result.output and "s3cret" not in result.output and "***" in result.output


def test_bad_usage(cli, filled):
    src = filled["memory"][0]
    assert _copy(cli, "memory", src, src).exit_code == 2
    assert cli("db", "copy", "--from", src, "--to", "sqlite:///x.db", "--store", "both").exit_code == 2
    missing = cli("db", "copy", "--from", "sqlite:///nowhere.db", "--to", src, "--store", "memory")
    assert missing.exit_code == 1 and "no memory store at" in missing.output
