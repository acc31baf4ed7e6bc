"""`cairn db copy`: one whole store (the memory store or the delivery log) copied from one database to another,
SQLite to PostgreSQL and back, in one transaction on the target, then verified by row counts and checksums; a rerun
copies nothing (docs/store.md).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import struct
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field

import orjson

from cairn_cli.errors import ConfigError, Conflict, InvalidInput, NotFound

STORES = ("memory", "ephemeral")
BATCH = 500

Progress = Callable[[int, str], Callable[[int], None]]


@dataclass
class TableCopy:
    table: str
    source_rows: int = 0
    copied: int = 0  # rows the target did not hold (on a dry run: would not)
    unchanged: int = 0  # rows the target held with the same content
    replaced: int = 0  # rows the target held with other content, overwritten
    target_rows: int | None = None  # after the copy: the target's rows holding the source's keys (None: dry run)
    target_total: int | None = None  # after the copy: every row of the target's table
    source_checksum: str | None = None
    target_checksum: str | None = None

    @property
    def equal(self) -> bool | None:
        if self.target_rows is None:
            return None
        return self.target_rows == self.source_rows and self.source_checksum == self.target_checksum


@dataclass
class CopyReport:
    store: str
    source: str  # URLs as they may be printed: no password
    target: str
    dry_run: bool
    overwrite: bool
    tables: list[TableCopy] = field(default_factory=list)
    fulltext_indexed: int | None = None  # memories the target indexed (memory store, not a dry run)
    fulltext_in_step: bool | None = None

    @property
    def copied(self) -> int:
        return sum(t.copied + t.replaced for t in self.tables)

    @property
    def ok(self) -> bool:
        return all(t.equal is not False for t in self.tables) and self.fulltext_in_step is not False

    def as_dict(self) -> dict:
        out = asdict(self)
        for row, t in zip(out["tables"], self.tables):
            row["checksum_equal"] = t.equal
        return {**out, "copied": self.copied, "ok": self.ok}


# --- the canonical row --------------------------------------------------------------------------------------------


def _value(value):
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="microseconds")
    if isinstance(value, float):
        try:
            value = struct.unpack("f", struct.pack("f", value))[0]
        except OverflowError:  # beyond single precision: PostgreSQL would have refused it
            pass
        return format(value, ".9g")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return value


def canonical(row: dict) -> bytes:
    """A row as compared and checksummed: the same bytes for the same content on SQLite and on PostgreSQL."""
    return orjson.dumps({k: _value(v) for k, v in row.items()}, option=orjson.OPT_SORT_KEYS)


def _differing(a: dict, b: dict) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if _value(a.get(k)) != _value(b.get(k)))


# --- the copy ---------------------------------------------------------------------------------------------------


def copy_store(
    store: str,
    source_url: str,
    target_url: str,
    *,
    overwrite: bool = False,
    dry_run: bool = False,
    batch: int = BATCH,
    progress: Progress | None = None,
) -> CopyReport:
    """Copy every row of `store` ("memory" or "ephemeral") from `source_url` to `target_url` and verify it."""
    from cairn_cli import db
    from cairn_cli.db import transfer

    if store not in STORES:
        raise InvalidInput(f"unknown store {store!r}", "pass --store memory or --store ephemeral")
    if source_url == target_url:
        raise InvalidInput("--from and --to name the same database", "name another database with --to")
    report = CopyReport(store, db.safe_url(source_url), db.safe_url(target_url), dry_run, overwrite)
    source = db.connect_store(store, source_url, create=False, flag="--from")
    target = None
    try:
        target = _open_target(store, target_url, dry_run=dry_run)
        names = transfer.table_names(store)
        report.tables = [TableCopy(t, source_rows=transfer.count(source, t)) for t in names]
        total = sum(t.source_rows for t in report.tables)
        with _bar(progress, total, "copy") as tick, target.atomic() if target and not dry_run else nullcontext():
            for t in report.tables:
                _copy_table(source, target, t, overwrite=overwrite, dry_run=dry_run, batch=batch, tick=tick)
            if target is not None and not dry_run:
                transfer.reset_sequences(target, names)
                if store == "memory":
                    from cairn_cli.core.store import search_index

                    with db.bound("memory", target):
                        report.fulltext_indexed = search_index.sync()
        if target is not None and not dry_run:
            with _bar(progress, total, "verify") as tick:
                live = [_verify_table(source, target, t, batch=batch, tick=tick) for t in report.tables]
            if store == "memory":
                report.fulltext_in_step = _fulltext_in_step(target, live[0])
    finally:
        source.close()
        if target is not None:
            target.close()
    return report


def _bar(progress: Progress | None, total: int, what: str):
    if progress is None:
        return nullcontext(lambda n: None)
    return nullcontext(progress(total, what))


def _open_target(store: str, url: str, *, dry_run: bool):
    """The target, migrated; on a dry run as it is (None when it does not exist yet: every row would be copied)."""
    from cairn_cli import db
    from cairn_cli.db.schema import MIGRATIONS

    if not dry_run:
        return db.connect_store(store, url, create=True, flag="--to")
    try:
        target = db.connect_store(store, url, create=False, migrate=False, flag="--to")
    except NotFound:
        return None
    pending = db.pending_migrations(store, target)
    if len(pending) == len(MIGRATIONS[store]):
        target.close()
        return None  # an empty database: nothing in it yet
    if pending:
        target.close()
        raise ConfigError(
            f"the target's schema is behind ({len(pending)} migrations to apply: {', '.join(pending)})",
            "run the copy without --dry-run (it migrates the target first)",
        )
    return target


def _copy_table(source, target, t: TableCopy, *, overwrite: bool, dry_run: bool, batch: int, tick) -> None:
    from cairn_cli.db import transfer

    key = transfer.key_column(t.table)
    has_rows = target is not None and transfer.count(target, t.table) > 0
    after = None
    while rows := transfer.page(source, t.table, after, batch):
        after = rows[-1][key]
        there = transfer.fetch(target, t.table, [r[key] for r in rows]) if has_rows else {}
        new, changed = [], []
        for row in rows:
            other = there.get(row[key])
            if other is None:
                new.append(row)
            elif canonical(other) == canonical(row):
                t.unchanged += 1
            elif overwrite:
                changed.append(row)
            else:
                raise Conflict(
                    f"{t.table} {key} {row[key]!r} differs in the target ({', '.join(_differing(row, other))})",
                    "pass --overwrite to replace the target's row with the source's, or copy into another database",
                )
        t.copied += len(new)
        t.replaced += len(changed)
        if not dry_run:
            transfer.insert(target, t.table, new)
            for row in changed:
                transfer.update(target, t.table, row)
        tick(len(rows))


def _verify_table(source, target, t: TableCopy, *, batch: int, tick) -> list[int]:
    """Row counts and checksums of the source's rows and of the target's rows under the same keys, in the source's
    key order. Returns the keys of the live memories (the memories table; else unused)."""
    from cairn_cli.db import transfer

    key = transfer.key_column(t.table)
    src, dst = hashlib.sha256(), hashlib.sha256()
    found, live, after = 0, [], None
    while rows := transfer.page(source, t.table, after, batch):
        after = rows[-1][key]
        there = transfer.fetch(target, t.table, [r[key] for r in rows])
        for row in rows:
            src.update(canonical(row) + b"\n")
            other = there.get(row[key])
            found += other is not None
            dst.update((canonical(other) if other is not None else b"(missing)") + b"\n")
            if t.table == "memories" and row.get("superseded_by") is None:
                live.append(row[key])
        tick(len(rows))
    t.target_rows, t.target_total = found, transfer.count(target, t.table)
    t.source_checksum, t.target_checksum = src.hexdigest(), dst.hexdigest()
    return live


def _fulltext_in_step(target, live_ids: list[int]) -> bool:
    """Nothing queued, and the target's index rows of the copied live memories are what those memories give."""
    from cairn_cli import db
    from cairn_cli.core.store.search_index import rows_of
    from cairn_cli.db import fulltext as sql

    with db.bound("memory", target):
        if sql.pending(1):
            return False
        for start in range(0, len(live_ids), BATCH):
            ids = live_ids[start : start + BATCH]
            if sorted(map(tuple, sql.docs(ids))) != sorted(rows_of(sql.live_memories(ids))):
                return False
    return True
