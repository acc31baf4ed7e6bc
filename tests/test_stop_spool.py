"""A Stop is never lost: a store locked by other writers is retried within the budget, then the Stop waits in the
spool, and the next Stop, `cairn doctor --apply` or the daemon writes it, exactly once."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from cairn_cli import db, hook_entry
from cairn_cli.config import Settings
from cairn_cli.core.hooks import spool
from cairn_cli.core.store import deliveries, memories, merges
from tests.conftest import EXAMPLES
from tests.test_hooks import hook_log, prompt_payload, stop_payload


@pytest.fixture
def store(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0


def shown_ids(out: str) -> list[int]:
    return [int(x.split('"')[1]) for x in out.split("<memory id=")[1:]]


def cm_message(shown: list[int], content: str) -> str:
    grades = ", ".join(f'"{i}:{3 if n == 0 else 1}"' for n, i in enumerate(shown))
    return (
        f'Done.\n[cm]{{"m": [{{"content": "{content}", "keywords": ["spool"], "scope": "webshop", '
        f'"kind": "procedure"}}], "rg": [{grades}]}}[/cm]'
    )


def prompt_turn(capsys, session: str) -> list[int]:
    assert hook_entry.run_prompt(prompt_payload(session_id=session)) == 0
    return shown_ids(capsys.readouterr().out)


class WriteLock:
    """Another writer holding the SQLite store's write lock (BEGIN IMMEDIATE on its own connection)."""

    def __init__(self, path):
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=0.1)

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, *exc):
        self.conn.execute("ROLLBACK")
        self.conn.close()


@pytest.fixture
def quick_busy(monkeypatch):
    """A short busy_timeout and write budget, so that a locked store is given up on in a fraction of a second."""
    monkeypatch.setitem(db._SQLITE_PRAGMAS, "busy_timeout", 50)
    monkeypatch.setenv("CAIRN_STOP_WRITE_BUDGET_S", "0.2")
    db.close_all()
    from cairn_cli.core.store import open_stores

    open_stores(Settings())


def new_memories(content: str) -> list:
    return [m for m in memories.list_memories(Settings()) if m.content == content]


def test_a_stop_that_finds_the_store_locked_waits_in_the_spool_and_doctor_applies_it_once(
    store, capsys, cairn_home, quick_busy, cli
):
    shown = prompt_turn(capsys, "s1")
    message = cm_message(shown, "Run make spool-up before the tests")
    with WriteLock(cairn_home / "memory.db"):
        assert hook_entry.run_stop(stop_payload(message)) == 0
    assert "session s1 turn 1: spooled to" in hook_log(cairn_home)
    waiting = spool.waiting(str(cairn_home))
    assert len(waiting) == 1 and stat.S_IMODE(os.stat(waiting[0].path).st_mode) == 0o600
    record = json.loads(Path(waiting[0].path).read_text())
    assert record["turn"] == 1 and record["payload"]["last_assistant_message"] == message
    assert "locked" in record["error"]
    assert new_memories("Run make spool-up before the tests") == []

    # doctor says what waits and how to fix it (exit 1); --apply writes it (exit 0); a rerun changes nothing
    result = cli("doctor")
    assert result.exit_code == 1 and "1 Stops are waiting" in result.output and "doctor --apply" in result.output
    spooled_copy = Path(waiting[0].path).read_text()
    result = cli("doctor", "--apply", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["healthy"] is True
    assert len(new_memories("Run make spool-up before the tests")) == 1
    graded = {r.memory_id: r.grade for r in deliveries.list_deliveries(Settings(), session_id="s1")}
    assert graded[shown[0]] == 3 and all(graded[i] == 1 for i in shown[1:])
    assert spool.waiting(str(cairn_home)) == []

    # the same spooled Stop once more (a crash between the commit and the unlink): applied never twice
    with open(os.path.join(spool.spool_dir(str(cairn_home)), "stop-1-1.json"), "w") as fh:
        fh.write(spooled_copy)
    merges_before = len(merges.merges_of(new_memories("Run make spool-up before the tests")[0].id, Settings()))
    assert cli("doctor", "--apply").exit_code == 0
    mem = new_memories("Run make spool-up before the tests")
    assert len(mem) == 1 and len(merges.merges_of(mem[0].id, Settings())) == merges_before


def test_the_next_stop_writes_the_stops_waiting_in_the_spool(store, capsys, cairn_home, quick_busy):
    first = prompt_turn(capsys, "s1")
    with WriteLock(cairn_home / "ephemeral.db"):
        assert hook_entry.run_stop(stop_payload(cm_message(first, "First session's lesson"))) == 0
    assert len(spool.waiting(str(cairn_home))) == 1
    # s1's next prompt comes before anyone applies the spool: the spooled Stop still grades turn 1
    prompt_turn(capsys, "s1")
    second = prompt_turn(capsys, "s2")
    assert hook_entry.run_stop(stop_payload(cm_message(second, "Second session's lesson"), session_id="s2")) == 0
    assert spool.waiting(str(cairn_home)) == []
    assert len(new_memories("First session's lesson")) == 1 and len(new_memories("Second session's lesson")) == 1
    turn1 = {r.memory_id: r.grade for r in deliveries.list_deliveries(Settings(), session_id="s1", turn=1)}
    assert turn1[first[0]] == 3
    assert all(r.grade is None for r in deliveries.list_deliveries(Settings(), session_id="s1", turn=2))
    assert "1 waiting Stops applied" in hook_log(cairn_home)


def test_a_stop_retries_a_store_that_another_writer_releases_within_the_budget(store, capsys, cairn_home, monkeypatch):
    """Locked at the first attempt, free at the second: written, nothing spooled."""
    monkeypatch.setitem(db._SQLITE_PRAGMAS, "busy_timeout", 50)
    db.close_all()
    from cairn_cli.core.store import open_stores

    open_stores(Settings())
    shown = prompt_turn(capsys, "s1")
    lock = WriteLock(cairn_home / "memory.db").__enter__()
    real_write = __import__("cairn_cli.core.hooks.stop", fromlist=["_write"])._write
    attempts = []

    def write_then_release(*args):
        attempts.append(1)
        try:
            return real_write(*args)
        finally:
            if len(attempts) == 1:
                lock.__exit__(None, None, None)  # the other writer commits after our first attempt failed

    monkeypatch.setattr("cairn_cli.core.hooks.stop._write", write_then_release)
    assert hook_entry.run_stop(stop_payload(cm_message(shown, "Written on the second attempt"))) == 0
    assert len(attempts) == 2 and spool.waiting(str(cairn_home)) == []
    assert len(new_memories("Written on the second attempt")) == 1


def test_retry_conflicts_retries_only_lost_conflicts_and_keeps_to_its_budget():
    calls = []
    sleeps: list[float] = []
    now = [0.0]

    def locked():
        calls.append(1)
        raise sqlite3.OperationalError("database is locked")

    def sleep(s):
        sleeps.append(s)
        now[0] += s

    with pytest.raises(sqlite3.OperationalError):
        db.retry_conflicts(locked, budget_s=3.0, sleep=sleep, clock=lambda: now[0])
    assert len(calls) > 3 and now[0] <= 3.0 and max(sleeps) <= 1.5
    calls.clear()

    def broken():
        calls.append(1)
        raise sqlite3.OperationalError("no such table: memories")

    with pytest.raises(sqlite3.OperationalError):
        db.retry_conflicts(broken, budget_s=3.0, sleep=sleep)
    assert len(calls) == 1  # not a conflict: never retried


def test_a_hook_error_names_the_session_and_the_turn(store, capsys, cairn_home, monkeypatch):
    prompt_turn(capsys, "s1")

    def boom(*args, **kwargs):
        raise RuntimeError("engagement broke")

    monkeypatch.setattr("cairn_cli.core.labels.engagement.engagement_decisions", boom)
    assert hook_entry.run_stop(stop_payload("an answer")) == 0
    assert "stop error: session=s1 turn=1: unexpected RuntimeError: engagement broke" in hook_log(cairn_home)


def test_doctor_finds_loose_modes_and_an_unreadable_store_and_fixes_the_modes(store, cli, cairn_home):
    os.chmod(cairn_home, 0o755)
    os.chmod(cairn_home / "memory.db", 0o644)
    result = cli("doctor")
    assert result.exit_code == 1 and "open to other accounts" in result.output
    assert cli("doctor", "--apply").exit_code == 0
    assert stat.S_IMODE(os.stat(cairn_home).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cairn_home / "memory.db").st_mode) == 0o600
    db.close_all()
    (cairn_home / "ephemeral.db").write_bytes(b"this is not a database" * 100)
    result = cli("doctor", "--json")
    report = json.loads(result.output)
    assert result.exit_code == 1
    bad = next(f for f in report["findings"] if f["check"] == "ephemeral store")
    assert bad["status"] == "error" and bad["fix"]


@pytest.mark.slow
def test_a_running_daemon_writes_the_stops_waiting_in_the_spool(store, capsys, cairn_home, quick_busy):
    from tests.test_daemon import serve, state_is, stop_serving, wait_for

    shown = prompt_turn(capsys, "s1")
    with WriteLock(cairn_home / "memory.db"):
        assert hook_entry.run_stop(stop_payload(cm_message(shown, "Applied by the daemon's watch"))) == 0
    assert len(spool.waiting(str(cairn_home))) == 1
    db.close_all()
    proc = serve(cairn_home, CAIRN_DAEMON_WATCH_S="0.2")
    try:
        wait_for(lambda: state_is(cairn_home, "running"), "running daemon")
        wait_for(lambda: not spool.waiting(str(cairn_home)), "the spool applied by the daemon")
    finally:
        stop_serving(proc)
    from cairn_cli.core.store import open_stores

    open_stores(Settings())
    assert len(new_memories("Applied by the daemon's watch")) == 1
    assert {r.memory_id: r.grade for r in deliveries.list_deliveries(Settings(), session_id="s1")}[shown[0]] == 3
    assert "spool: applying" in (cairn_home / "logs" / "daemon.log").read_text()


def test_doctor_expires_text_past_the_retention_period_on_apply(store, capsys, cli):
    prompt_turn(capsys, "s1")
    db.execute("ephemeral", "UPDATE hook_state SET created_at = ?", ("2001-01-01 00:00:00",))
    db.execute("ephemeral", "UPDATE memory_deliveries SET delivered_at = ?", ("2001-01-01 00:00:00",))
    result = cli("doctor", "--only", "retention")
    assert result.exit_code == 1 and "older than 30 days" in result.output
    assert cli("doctor", "--only", "retention", "--apply").exit_code == 0
    from cairn_cli.core.store.hookstate import get_turn

    assert "prompt" not in (get_turn("s1", 1).data or {})
    assert db.execute("ephemeral", "SELECT DISTINCT context_window FROM memory_deliveries") == [("",)]
    assert cli("doctor", "--only", "retention").exit_code == 0  # a rerun finds nothing left
