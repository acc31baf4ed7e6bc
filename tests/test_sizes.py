"""`cairn stats stores`: how big each store is, per table, with the long text retention can expire, and the logs."""

from __future__ import annotations

import orjson
import pytest

from cairn_cli import db, hook_entry
from cairn_cli.config import Settings
from cairn_cli.core.store.sizes import store_sizes
from tests.conftest import EXAMPLES

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")


def _count(kind: str, table: str) -> int:
    return db.execute(kind, f"SELECT COUNT(*) FROM {table}")[0][0]


def test_sizes_per_store_and_table(cli, backend):
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    assert cli("rank", "how do I deploy the webshop?", "--session", "s1").exit_code == 0
    hook_entry.log("prompt session=s1 a line in the hook's log")
    report = store_sizes(Settings())
    stores = {s.store: s for s in report.stores}
    assert set(stores) == {"memory", "ephemeral"}
    for kind, s in stores.items():
        assert s.backend == backend and s.bytes and s.bytes > 0
        tables = {t.table: t for t in s.tables}
        for table, t in tables.items():
            assert t.rows == _count(kind, table), table
            assert t.bytes is None or t.bytes > 0
    memories = {t.table: t for t in stores["memory"].tables}["memories"]
    assert memories.rows == len([line for line in EXAMPLES.read_text().splitlines() if line.strip()])
    window = {t.table: t for t in stores["ephemeral"].tables}["memory_deliveries"]
    windows = db.execute("ephemeral", "SELECT context_window FROM memory_deliveries")
    assert window.long_text == "context_window" and window.text_chars == sum(len(w) for (w,) in windows) > 0
    if backend == "sqlite":
        assert set(stores["memory"].files) >= {"memory.db"}
        assert stores["memory"].bytes == sum(stores["memory"].files.values())
    else:
        assert all(t.bytes and t.bytes > 0 for t in stores["ephemeral"].tables)  # pg_total_relation_size
    assert report.logs["hook.log"] > 0


def test_stores_command_json_and_table_with_the_password_masked(cli, backend, monkeypatch):
    if backend == "postgresql":  # a password in the URL (the throw-away server trusts local connections)
        url = Settings().DB_URL
        monkeypatch.setenv("CAIRN_DB_URL", url.replace("postgresql://postgres@", "postgresql://postgres:s3cret@"))
    out = cli("stats", "stores", "--json")
    assert out.exit_code == 0, out.output
    data = orjson.loads(out.output)
    assert [s["store"] for s in data["stores"]] == ["memory", "ephemeral"]
    assert "s3cret" not in out.output
    if backend == "postgresql":
        assert "postgres:***@" in data["stores"][0]["url"]
    table = cli("stats", "stores")
    assert table.exit_code == 0 and "memory_deliveries" in table.output and "context_window" in table.output
