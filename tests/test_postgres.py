"""The storage-facing flows on both backends (the `backend` fixture: SQLite files, or two fresh databases on the
session's throw-away PostgreSQL server), and what only PostgreSQL has: migrations taken under an advisory lock, a
refused connection worded in one line without its password."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import orjson
import pytest

from cairn_cli.config import Settings
from tests.conftest import EXAMPLES


def _prompt(session: str, prompt: str, transcript) -> None:
    from cairn_cli.hook_entry import run_prompt

    payload = {"hook_event_name": "UserPromptSubmit", "session_id": session, "prompt": prompt, "cwd": "/w/webshop"}
    if transcript:
        payload["transcript_path"] = str(transcript)
    assert run_prompt(orjson.dumps(payload)) == 0


def _stop(session: str, message: str) -> None:
    from cairn_cli.hook_entry import run_stop

    payload = {"hook_event_name": "Stop", "session_id": session, "last_assistant_message": message}
    assert run_stop(orjson.dumps(payload)) == 0


def test_memories_rank_log_and_the_fallback_on_each_backend(backend, cli, monkeypatch):
    from cairn_cli.core.store import deliveries
    from cairn_cli.db.tables import memory_proxy

    assert type(memory_proxy.obj).__name__ == ("PostgresqlDatabase" if backend == "postgresql" else "SqliteDatabase")
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    listed = json.loads(cli("memory", "list", "--json").stdout)
    assert len(listed) == 18
    ranked = json.loads(
        cli("rank", "integration tests fail with connection refused", "--scope", "webshop", "--json").stdout
    )
    assert ranked["memories"] and "PostgreSQL" in ranked["memories"][0]["content"]
    rows = deliveries.list_deliveries(Settings(), session_id="cli")
    assert [r.memory_id for r in sorted(rows, key=lambda r: r.rank)] == [m["id"] for m in ranked["memories"]]
    # the daemon down: the full-text index ranks (tsvector + GIN on PostgreSQL)
    monkeypatch.setenv("CAIRN_DAEMON", "auto")
    down = json.loads(
        cli("rank", "integration tests fail with connection refused", "--scope", "webshop", "--json").stdout
    )
    assert down["ranker"] == "cairn-fallback" and "PostgreSQL" in down["memories"][0]["content"]


def test_hook_prompt_stop_grades_and_evidence_applied_once_on_each_backend(backend, cli, tmp_path):
    from cairn_cli.db.tables import EvidenceApplied, Memory, MemoryDelivery

    assert cli("memory", "import", EXAMPLES).exit_code == 0
    _prompt("s1", "how should prices be stored for the checkout?", None)
    shown = list(MemoryDelivery.select().where(MemoryDelivery.session_id == "s1").order_by(MemoryDelivery.rank))
    assert shown
    first = shown[0].memory_id
    before = Memory.get_by_id(first).corroborations
    grades = [f"{d.memory_id}:{3 if d.memory_id == first else 0}" for d in shown]
    cm = {
        "m": [{"content": "Refunds are booked in integer cents too", "keywords": ["refunds"]}],
        "rg": grades,
        "cu": [first],
    }
    message = f"Store prices as integer cents.\n[cm]{json.dumps(cm)}[/cm]"
    _stop("s1", message)
    _stop("s1", message)  # the same Stop again changes nothing
    assert cli("grade", "--session", "s1", message).exit_code == 0  # nor does a grade of it
    graded = {d.memory_id: d.grade for d in MemoryDelivery.select().where(MemoryDelivery.session_id == "s1")}
    assert graded[first] == 3 and all(g == 0 for m, g in graded.items() if m != first)
    assert Memory.get_by_id(first).corroborations == before + 1
    assert EvidenceApplied.select().where(EvidenceApplied.session_id == "s1").count() == 1
    assert Memory.select().where(Memory.content == "Refunds are booked in integer cents too").count() == 1
    stats = json.loads(cli("stats", "deliveries", "--json").stdout)
    assert sum(g["graded"] for g in stats) == len(shown)


def test_two_instances_migrating_one_postgres_store_at_once_apply_each_migration_once(pg_server):
    import peewee

    from cairn_cli.db import migrations

    url = pg_server.create_database("race")
    name = url.rsplit("/", 1)[1]
    applied: list[list[str]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def instance() -> None:
        conn = peewee.PostgresqlDatabase(name, user="postgres", host="127.0.0.1", port=pg_server.port)
        try:
            start.wait()
            applied.append(migrations.apply_pending(conn, migrations.MEMORY_MIGRATIONS))
        except BaseException as exc:
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=instance) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    every = [n for n, _ in migrations.MEMORY_MIGRATIONS]
    assert sorted(applied, key=len) == [[], every]  # one instance applied them all, the other found them done
    check = peewee.PostgresqlDatabase(name, user="postgres", host="127.0.0.1", port=pg_server.port)
    rows = check.execute_sql("SELECT name, count(*) FROM cairn_migrations GROUP BY name").fetchall()
    check.close()
    assert sorted(rows) == [(n, 1) for n in every]


def test_a_refused_connection_is_one_line_naming_the_host_and_never_the_password(cli, monkeypatch, cairn_home):
    pytest.importorskip("psycopg2")
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("CAIRN_DB_URL", f"postgresql://cairn:s3cret-pw@127.0.0.1:{port}/cairn")
    from cairn_cli import db
    from cairn_cli.commands import _common

    db.close_all()
    _common._globals.clear()
    result = cli("memory", "list")
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "PostgreSQL is running" in lines[0]
    assert "s3cret-pw" not in result.output and "cairn:***@" in result.output
    # a hook fails open and logs the failure: without the password either
    from cairn_cli.hook_entry import run_prompt

    payload = {"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "prices?", "cwd": "/w/app"}
    assert run_prompt(orjson.dumps(payload)) == 0
    log = (cairn_home / "logs" / "hook.log").read_text()
    assert f"127.0.0.1:{port}" in log and "s3cret-pw" not in log


def _graded_turn(session: str, prompt: str) -> int:
    from cairn_cli.db.tables import MemoryDelivery

    before = MemoryDelivery.select().where(MemoryDelivery.session_id == session).count()
    _prompt(session, prompt, None)
    shown = list(MemoryDelivery.select().where(MemoryDelivery.session_id == session).order_by(MemoryDelivery.id))
    shown = shown[before:]  # this turn's
    grades = [f"{d.memory_id}:{3 if i == 0 else 0}" for i, d in enumerate(shown)]
    _stop(session, f"Done.\n[cm]{json.dumps({'rg': grades})}[/cm]")
    return len(shown)


def test_every_row_carries_the_instance_that_wrote_it_and_stats_training_calibration_filter(backend, cli, monkeypatch):
    from cairn_cli.db.tables import HookState, Memory, MemoryDelivery

    monkeypatch.setenv("CAIRN_INSTANCE", "alice")
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    alice = _graded_turn("s-alice", "how should prices be stored for the checkout?")
    monkeypatch.setenv("CAIRN_INSTANCE", "bob")
    assert cli("memory", "add", "Bob's deploys run from the release branch only", "--scope", "webshop").exit_code == 0
    bob = _graded_turn("s-bob", "where do deploys run from?") + _graded_turn("s-bob", "and how are prices stored?")
    assert {m.instance for m in Memory.select()} == {"alice", "bob"}
    assert {(d.session_id, d.instance) for d in MemoryDelivery.select()} == {("s-alice", "alice"), ("s-bob", "bob")}
    assert {(h.session_id, h.instance) for h in HookState.select()} == {("s-alice", "alice"), ("s-bob", "bob")}
    per = {r["instance"]: r for r in json.loads(cli("stats", "instances", "--json").stdout)}
    assert (per["alice"]["memories"], per["alice"]["prompts"], per["alice"]["deliveries"]) == (18, 1, alice)
    assert (per["bob"]["memories"], per["bob"]["prompts"], per["bob"]["deliveries"], per["bob"]["sessions"]) == (
        1,
        2,
        bob,
        1,
    )
    assert per["alice"]["graded"] == alice and per["bob"]["graded"] == bob
    pooled = json.loads(cli("stats", "deliveries", "--json").stdout)
    only_bob = json.loads(cli("stats", "deliveries", "--instance", "bob", "--json").stdout)
    assert sum(g["deliveries"] for g in pooled) == alice + bob and sum(g["deliveries"] for g in only_bob) == bob
    dry = json.loads(cli("train-reranker", "--dry-run", "--instance", "alice", "--json").stdout)
    assert dry["rows"] == alice and dry["instance"] == "alice"
    assert json.loads(cli("train-reranker", "--dry-run", "--json").stdout)["rows"] == alice + bob  # pooled

    def calibrated(*extra: str) -> int:
        out = cli("calibrate-floor", "--model", "composite", "--min-grade3", "1", "--json", *extra)
        assert out.exit_code == 0, out.output
        return sum(json.loads(out.stdout)["counts"].values())

    assert (calibrated("--instance", "alice"), calibrated("--instance", "bob"), calibrated()) == (
        alice,
        bob,
        alice + bob,
    )


def test_the_default_instance_id_is_made_once_per_home_and_kept_private(cairn_home, monkeypatch):
    import os

    from cairn_cli.core.store import INSTANCE_FILE, _instances, instance_id

    monkeypatch.delenv("CAIRN_INSTANCE", raising=False)
    _instances.clear()
    first = instance_id(Settings())
    _instances.clear()  # a new process reads the same file
    assert instance_id(Settings()) == first and first.count("-") >= 1
    path = cairn_home / INSTANCE_FILE
    assert path.read_text().strip() == first and (os.stat(path).st_mode & 0o777) == 0o600
    monkeypatch.setenv("CAIRN_INSTANCE", "ci-runner")
    assert instance_id(Settings()) == "ci-runner"


@pytest.mark.slow
def test_two_homes_sharing_a_store_promote_the_ab_once(backend, cli, tmp_path):
    """Two machines (two CAIRN_HOMEs) share one store and run `cairn ab selfmod` at once: while one holds the
    store's lock (the PostgreSQL advisory lock; a lock file beside a shared SQLite file) the other does nothing, and
    once the first has promoted B the second finds the new arms and promotes nothing again."""
    import os
    import subprocess
    import sys

    from cairn_cli import config
    from cairn_cli.core.experiment import ab, rules
    from tests.test_ab import _world

    s = _world([(0.25, 0.75)] * 12)
    assert ab.evaluate(s).decision == "promote"
    ab.queue_add("Name the file a memory is about first.", s)  # after the promotion, the next B
    other = dict(os.environ, CAIRN_HOME=str(tmp_path / "other-home"), CAIRN_INSTANCE="other")
    other["CAIRN_DB_URL"] = config.memory_db_url(s.DB_URL)
    other["CAIRN_EPHEMERAL_DB_URL"] = config.ephemeral_db_url(s.EPHEMERAL_DB_URL)

    def selfmod() -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "cairn_cli", "ab", "selfmod", "--json"], env=other, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout) if out.stdout.strip() else {"held": out.stderr}

    with ab.selfmod_lock() as locked:
        assert locked
        blocked = selfmod()  # the other machine while this one holds the lock
        assert "held" in blocked and "holds the lock" in blocked["held"]
        decision = ab.evaluate(s)
        ab.apply_decision(decision, s, by="test")
    after = selfmod()
    assert after["decision"]["decision"] == "continue" and after["applied"] is None
    assert rules.live(s).version == "gen-2"
    assert [h["new"] for h in _audit(rules.VERSION_KEY)[1]] == ["gen-2"]
    # the other machine's next prompt gets the team's new rules
    payload = {"hook_event_name": "UserPromptSubmit", "session_id": "o1", "prompt": "prices?", "cwd": "/w/webshop"}
    shown = subprocess.run(
        [sys.executable, "-m", "cairn_cli", "hook", "prompt"],
        env={**other, "CAIRN_DAEMON": "off"},
        input=json.dumps(payload),
        capture_output=True,
        text=True,
    )
    assert '<cairn-rules version="gen-2">' in shown.stdout


def test_a_transaction_that_loses_a_deadlock_is_retried_and_both_writers_land(pg_server):
    """Two writers update the same two rows in opposite orders: PostgreSQL aborts one of them (deadlock detected,
    40P01). Without a retry that writer's update is lost; under `retry_conflicts` it runs again and both land."""
    import peewee

    from cairn_cli.db import conflict_code, retry_conflicts

    name = pg_server.create_database("dl").rsplit("/", 1)[1]

    def connect() -> peewee.PostgresqlDatabase:
        return peewee.PostgresqlDatabase(name, user="postgres", host="127.0.0.1", port=pg_server.port)

    setup = connect()
    setup.execute_sql("CREATE TABLE counters (id int primary key, n int not null)")
    setup.execute_sql("INSERT INTO counters VALUES (1, 0), (2, 0)")
    setup.execute_sql(f"ALTER DATABASE \"{name}\" SET deadlock_timeout = '100ms'")
    setup.close()

    def race(wrap) -> list[str]:
        both = threading.Barrier(2)
        first_try = {0: True, 1: True}
        failures: list[str] = []

        def writer(i: int) -> None:
            db = connect()
            order = (1, 2) if i == 0 else (2, 1)

            def transaction() -> None:
                with db.atomic():
                    db.execute_sql("UPDATE counters SET n = n + 1 WHERE id = %s", (order[0],))
                    if first_try[i]:
                        first_try[i] = False
                        both.wait()  # each holds its first row: the second updates cross
                    db.execute_sql("UPDATE counters SET n = n + 1 WHERE id = %s", (order[1],))

            try:
                wrap(transaction)
            except peewee.DatabaseError as exc:
                failures.append(conflict_code(exc) or str(exc))
            finally:
                db.close()

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return failures

    assert race(lambda fn: fn()) == ["40P01"]  # without a retry, one writer's transaction is lost
    assert race(retry_conflicts) == []
    check = connect()
    counts = check.execute_sql("SELECT n FROM counters ORDER BY id").fetchall()
    check.close()
    assert counts == [(3,), (3,)]  # 1 + 2 per row: the lost transaction of the first race, both of the second


def test_another_instances_long_transaction_never_hangs_a_stop(pg_server, cli, monkeypatch, tmp_path):
    """Another instance holds a memory's row lock in a long transaction: the Stop that corroborates that memory
    waits CAIRN_DB_LOCK_TIMEOUT_MS a statement, retries within CAIRN_STOP_WRITE_BUDGET_S, then waits in the spool
    (exit 0, logged) having written nothing of its turn, and is applied in full once the other transaction ended."""
    import psycopg2

    from cairn_cli import db
    from cairn_cli.commands import _common
    from cairn_cli.core.store import open_stores
    from cairn_cli.db.tables import Memory, MemoryDelivery

    mem, eph = pg_server.create_database("long_mem"), pg_server.create_database("long_eph")
    monkeypatch.setenv("CAIRN_DB_URL", mem)
    monkeypatch.setenv("CAIRN_EPHEMERAL_DB_URL", eph)
    monkeypatch.setenv("CAIRN_DB_LOCK_TIMEOUT_MS", "200")
    monkeypatch.setenv("CAIRN_STOP_WRITE_BUDGET_S", "0.5")
    db.close_all()
    _common._globals.clear()
    open_stores(Settings(), create=True)
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    _prompt("s1", "how should prices be stored for the checkout?", None)
    shown = [d.memory_id for d in MemoryDelivery.select().where(MemoryDelivery.session_id == "s1")]
    target = shown[0]
    before = Memory.get_by_id(target).corroborations
    message = f"Cents.\n[cm]{json.dumps({'rg': [f'{m}:2' for m in shown], 'cu': [target]})}[/cm]"
    other = psycopg2.connect(mem.replace("postgresql://", "postgres://"))
    try:
        cur = other.cursor()
        cur.execute("SELECT id FROM memories WHERE id = %s FOR UPDATE", (target,))  # held: the transaction stays open
        _stop("s1", message)
    finally:
        other.rollback()
        other.close()
    log = (tmp_path / "home" / "logs" / "hook.log").read_text()
    assert "session s1 turn 1: spooled to" in log and "stop error" not in log
    from cairn_cli.core.hooks import spool

    (waiting,) = spool.waiting(str(tmp_path / "home"))
    assert "lock timeout" in json.loads(Path(waiting.path).read_text())["error"]
    assert Memory.get_by_id(target).corroborations == before  # nothing of the turn was written
    assert all(d.grade is None for d in MemoryDelivery.select().where(MemoryDelivery.session_id == "s1"))
    assert cli("doctor", "--apply").exit_code == 0  # the other transaction is over: the Stop applies in full
    assert Memory.get_by_id(target).corroborations == before + 1
    assert all(d.grade == 2 for d in MemoryDelivery.select().where(MemoryDelivery.session_id == "s1"))


def test_scores_keep_double_precision_on_postgresql(backend, cli):
    """A peewee FloatField is REAL (float4) on PostgreSQL: migrations make scores and confidences double precision
    there, as on SQLite, so a confidence or a composite score reads back as written."""
    from cairn_cli.db.tables import Memory, MemoryDelivery

    assert cli("memory", "import", EXAMPLES).exit_code == 0
    Memory.update(confidence=0.123456789012345).where(Memory.id == 1).execute()
    assert Memory.get_by_id(1).confidence == pytest.approx(0.123456789012345, rel=1e-14)
    assert cli("rank", "how should prices be stored?", "--scope", "webshop").exit_code == 0
    d = MemoryDelivery.select().first()
    MemoryDelivery.update(final_score=0.987654321098765, engaged_semantic=0.55555555555555).where(
        MemoryDelivery.id == d.id
    ).execute()
    back = MemoryDelivery.get_by_id(d.id)
    assert back.final_score == pytest.approx(0.987654321098765, rel=1e-14)
    assert back.engaged_semantic == pytest.approx(0.55555555555555, rel=1e-14)


def test_a_unix_socket_url_connects_through_the_socket(pg_server, cli, monkeypatch):
    """`postgresql://user@/db?host=/socket/dir` (libpq's form) reaches the server through its Unix socket."""
    from cairn_cli import db
    from cairn_cli.commands import _common
    from cairn_cli.db.tables import memory_proxy

    name = pg_server.create_database("sock").rsplit("/", 1)[1]
    monkeypatch.setenv("CAIRN_DB_URL", f"postgresql://postgres@:{pg_server.port}/{name}?host={pg_server.sock}")
    db.close_all()
    _common._globals.clear()
    assert cli("memory", "add", "Reached through the socket").exit_code == 0
    peer = memory_proxy.obj.execute_sql("SELECT inet_server_addr()").fetchone()[0]
    assert peer is None  # a Unix-socket connection has no server address


def _audit(key: str) -> tuple:
    """(value, audit trail) of a machine-state key as stored; (None, []) when it was never set."""
    from cairn_cli.db.tables import MachineState

    row = MachineState.get_or_none(MachineState.key == key)
    return (None, []) if row is None else (row.value, list(row.history))
