"""Retention: the delivery log's long text expires after CAIRN_RETENTION_DAYS; labels, ids and scores never do, and
what train-reranker reads stays exactly as it was."""

from __future__ import annotations

import datetime as dt
import json

import orjson
import pytest

from cairn_cli import db, hook_entry
from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.learning import export
from cairn_cli.core.store import retention
from tests.conftest import EXAMPLES

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")

LATER = dt.timedelta(days=45)  # past the default 30 days


def _payload(session: str, prompt: str, event: str = "UserPromptSubmit", **extra) -> bytes:
    return json.dumps(
        {"session_id": session, "cwd": "/home/u/webshop", "hook_event_name": event, "prompt": prompt, **extra}
    ).encode()


def _graded_turn(capsys, session: str, prompt: str) -> list[int]:
    """A prompt, then a Stop grading the first two memories shown (every shown one gets an engagement decision)."""
    assert hook_entry.run_prompt(_payload(session, prompt)) == 0
    shown = [int(x.split('"')[1]) for x in capsys.readouterr().out.split("<memory id=")[1:]]
    message = f'Start the database before the tests.\n[cm]{{"rg": ["{shown[0]}:3", "{shown[1]}:0"]}}[/cm]'
    assert hook_entry.run_stop(_payload(session, "", "Stop", last_assistant_message=message)) == 0
    return shown


def _ungraded_turn(capsys, session: str, prompt: str) -> None:
    """A prompt whose session ended before its Stop: its deliveries carry no label."""
    assert hook_entry.run_prompt(_payload(session, prompt)) == 0
    capsys.readouterr()


def _table(table: str) -> dict[int, dict]:
    cursor = db.connection("ephemeral").execute_sql(f"SELECT * FROM {table} ORDER BY id")
    names = [c[0] for c in cursor.description]
    return {row[0]: dict(zip(names, row)) for row in cursor.fetchall()}


@pytest.fixture
def log(cli, capsys):
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    capsys.readouterr()
    _graded_turn(capsys, "s1", "integration tests fail with connection refused on port 5433")
    _ungraded_turn(capsys, "s2", "how should prices be stored in the webshop database?")
    _ungraded_turn(capsys, "s2", "deploy the webshop to production " + "with a long pasted log line " * 20)
    return Settings()


def _training_rows(s: Settings):
    graded = [(r.query, r.memory, r.grade, r.delivery_id) for r in export.graded_rows(s)]
    engaged = [(r.query, r.memory, r.grade, r.delivery_id) for r in export.engagement_rows(s, min_pos=0.0)]
    return graded, engaged


def test_unlabelled_windows_and_prompts_expire_labels_and_training_data_stay(log):
    s = Settings()
    deliveries_before, hooks_before = _table("memory_deliveries"), _table("hook_state")
    training_before = _training_rows(s)
    assert training_before[0] and training_before[1]  # graded rows and engagement rows to protect
    unlabelled = {i for i, r in deliveries_before.items() if r["grade"] is None and r["engaged"] is None}
    labelled = set(deliveries_before) - unlabelled
    assert unlabelled and labelled

    now = utcnow() + LATER
    report = retention.apply_retention(s, now=now, batch_size=2, by="test")

    windows, hooks = report.tables
    assert (windows.table, windows.field, windows.expired) == ("memory_deliveries", "context_window", len(unlabelled))
    assert windows.chars == sum(len(deliveries_before[i]["context_window"]) for i in unlabelled)
    assert windows.kept_labelled == len(labelled)
    assert (hooks.table, hooks.expired) == ("hook_state", len(hooks_before))
    assert hooks.chars >= sum(len(orjson.loads(r["data"])["prompt"]) for r in hooks_before.values())
    assert report.batches >= len(unlabelled) // 2  # batched, never one transaction over the whole log
    after = _table("memory_deliveries")
    for i, row in after.items():
        kept = {k: v for k, v in row.items() if k != "context_window"}
        assert kept == {k: v for k, v in deliveries_before[i].items() if k != "context_window"}, i
        assert row["context_window"] == ("" if i in unlabelled else deliveries_before[i]["context_window"]), i
    for i, row in _table("hook_state").items():
        data, old = orjson.loads(row["data"]), orjson.loads(hooks_before[i]["data"])
        assert (
            "prompt" not in data
            and data["expired"] == ["prompt"]
            and data["expired_at"] == now.isoformat("T", "seconds")
        )
        assert {k: v for k, v in data.items() if k not in ("expired", "expired_at")} == {
            k: v for k, v in old.items() if k != "prompt"
        }
        assert {k: v for k, v in row.items() if k != "data"} == {
            k: v for k, v in hooks_before[i].items() if k != "data"
        }
    assert _training_rows(s) == training_before  # every label and the window it was given for
    record = retention.last_run()
    assert record["by"] == "test" and record["report"]["expired"] == len(unlabelled) + len(hooks_before)


def test_a_rerun_changes_nothing(log):
    s = Settings()
    now = utcnow() + LATER
    retention.apply_retention(s, now=now)
    tables = _table("memory_deliveries"), _table("hook_state")
    again = retention.apply_retention(s, now=now + dt.timedelta(days=1))
    assert again.expired == 0 and again.chars == 0 and again.batches == 0
    assert (_table("memory_deliveries"), _table("hook_state")) == tables


def test_a_dry_run_counts_and_changes_nothing(log):
    s = Settings()
    tables = _table("memory_deliveries"), _table("hook_state")
    dry = retention.apply_retention(s, dry_run=True, now=utcnow() + LATER)
    assert dry.dry_run and dry.expired > 0 and "would expire" in dry.summary()
    assert (_table("memory_deliveries"), _table("hook_state")) == tables
    assert retention.last_run() is None  # a dry run is not a run
    real = retention.apply_retention(s, now=utcnow() + LATER)
    assert [(t.expired, t.chars) for t in real.tables] == [(t.expired, t.chars) for t in dry.tables]


def test_only_what_is_older_than_the_retention_period_expires(log, monkeypatch):
    s = Settings()
    old = utcnow() - dt.timedelta(days=10)
    conn = db.connection("ephemeral")
    p = conn.param
    conn.execute_sql(f"UPDATE memory_deliveries SET delivered_at = {p} WHERE session_id = {p}", (old, "s2"))
    conn.execute_sql(f"UPDATE hook_state SET created_at = {p} WHERE session_id = {p}", (old, "s2"))
    monkeypatch.setenv("CAIRN_RETENTION_DAYS", "7")
    report = retention.apply_retention(Settings())
    assert report.days == 7.0 and report.expired > 0
    windows = {
        r["session_id"]: r["context_window"]
        for r in _table("memory_deliveries").values()
        if r["grade"] is None and r["engaged"] is None
    }
    assert windows == {"s2": ""}
    prompts = {r["session_id"]: "prompt" in orjson.loads(r["data"]) for r in _table("hook_state").values()}
    assert prompts == {"s1": True, "s2": False}
    monkeypatch.setenv("CAIRN_RETENTION_DAYS", "0")  # off: nothing expires, whatever its age
    off = retention.apply_retention(Settings(), now=utcnow() + dt.timedelta(days=3650))
    assert off.cutoff is None and off.tables == [] and "retention off" in off.summary()
    assert all("prompt" in orjson.loads(r["data"]) for r in _table("hook_state").values() if r["session_id"] == "s1")
    del s


def test_a_grade_arriving_late_keeps_its_window_and_expired_rows_are_skipped_by_training(log):
    s = Settings()
    now = utcnow() + LATER
    retention.apply_retention(s, now=now)
    expired = [i for i, r in _table("memory_deliveries").items() if r["context_window"] == ""]
    assert expired
    conn = db.connection("ephemeral")
    conn.execute_sql(f"UPDATE memory_deliveries SET grade = 2 WHERE id = {conn.param}", (expired[0],))
    assert expired[0] not in {r.delivery_id for r in export.graded_rows(s)}  # no pair with an empty query


def test_status_says_what_would_expire_and_what_has(log):
    s = Settings()
    now = utcnow() + LATER
    before = retention.retention_status(s, now=now)
    assert before.last_run is None and before.expired_so_far == {"memory_deliveries": 0, "hook_state": 0}
    assert sum(t.expired for t in before.due) > 0
    done = retention.apply_retention(s, now=now)
    after = retention.retention_status(s, now=now)
    assert sum(t.expired for t in after.due) == 0
    assert after.expired_so_far == {
        "memory_deliveries": done.tables[0].expired,
        "hook_state": len(_table("hook_state")),
    }
    assert after.last_run is not None and retention.seconds_since_last_run() is not None


def test_backfill_says_a_turn_s_prompt_expired(log):
    from cairn_cli.core.hooks import backfill
    from cairn_cli.core.store import hookstate

    retention.apply_retention(Settings(), now=utcnow() + LATER)
    row = hookstate.get_turn("s1", 1)
    row.transcript_path = "/nonexistent/s1.jsonl"
    assert backfill._Responses().response(row, 0) == (None, backfill.PROMPT_EXPIRED)
