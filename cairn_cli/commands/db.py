"""`cairn db init`: a store made on purpose (core/store/create.py); `cairn db copy`: a whole store moved between
SQLite and PostgreSQL (core/store/copy.py)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import DryRun, Json, settings


class Store(str, Enum):
    memory = "memory"
    ephemeral = "ephemeral"


def init(
    url: Annotated[
        str | None,
        typer.Argument(
            help="The database to make the store in (default: each store's configured URL, CAIRN_HOME's without one)."
        ),
    ] = None,
    store: Annotated[
        Store | None, typer.Option(help="Which store (default: both; a URL names one, so say which).")
    ] = None,
    json: Json = False,
) -> None:
    """Create a store and bring it to this cairn's schema; a store already there is left as it is (a rerun does
    nothing). Only the default stores under CAIRN_HOME are made without being asked: a store at another URL is made
    here (or by `memory add` / `memory import`, or as `db copy`'s target).

    Example: cairn db init postgresql://cairn@db/cairn_memories --store memory
    """
    from cairn_cli.core.store.create import STORES, init_stores

    results = init_stores(settings(), STORES if store is None else (store.value,), url)
    if json:
        output.json_out([r.as_dict() for r in results])
        return
    for r in results:
        if r.created:
            output.text_out(f"{r.store} store created at {r.url} ({len(r.applied)} migrations)")
        elif r.applied:
            output.text_out(f"{r.store} store at {r.url}: {len(r.applied)} migrations applied ({', '.join(r.applied)})")
        else:
            output.text_out(f"{r.store} store at {r.url}: already at the current schema")


def copy(
    from_url: Annotated[
        str, typer.Option("--from", help="The database to copy from (sqlite:///path, postgresql://…).")
    ],
    to_url: Annotated[str, typer.Option("--to", help="The database to copy into (migrated first).")],
    store: Annotated[
        Store,
        typer.Option(help="memory: memories, merges, machine state, replay; ephemeral: deliveries, hook state."),
    ],
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace a target row whose content differs (else: refuse).")
    ] = False,
    dry_run: DryRun = False,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, max=10000, help="Rows per read and write.")] = 500,
    json: Json = False,
) -> None:
    """Copy one whole store from one database to another, ids and every column kept, then verify it: per table the
    row counts and a checksum of the copied rows on both sides. A rerun copies nothing; a target row with other
    content is refused unless --overwrite. Exit 1 when the verification fails.

    Example: cairn db copy --from sqlite:///$HOME/.local/share/cairn/memory.db --to postgresql://cairn@db/cairn --store memory
    """
    from cairn_cli.core.store.copy import copy_store

    with output.progress_bars("row", enabled=not json) as bars:
        report = copy_store(
            store.value, from_url, to_url, overwrite=overwrite, dry_run=dry_run, batch=batch_size, progress=bars
        )
    output.json_out(report.as_dict()) if json else _show_copy(report, dry_run)
    if not report.ok:
        _refuse_unverified(report)


def _show_copy(report, dry_run: bool) -> None:
    rows = [
        {
            "table": t.table,
            "source rows": t.source_rows,
            "copied": t.copied,
            "unchanged": t.unchanged,
            "replaced": t.replaced,
            "target rows": "-" if t.target_rows is None else t.target_rows,
            "target total": "-" if t.target_total is None else t.target_total,
            "checksum equal": "-" if t.equal is None else ("yes" if t.equal else "NO"),
        }
        for t in report.tables
    ]
    columns = ["table", "source rows", "copied", "unchanged", "replaced", "target rows", "target total"]
    title = f"{report.store} store: {report.source} -> {report.target}" + (" (dry run)" if dry_run else "")
    output.table(rows, [*columns, "checksum equal"], title=title)
    if report.fulltext_indexed is not None:
        step = "in step" if report.fulltext_in_step else "NOT in step"
        output.message(f"full-text index: {report.fulltext_indexed} memories indexed on the target, {step}")
    if dry_run:
        output.message(f"dry run: {report.copied} rows would be copied; nothing written")
    elif report.copied == 0:
        output.message("nothing to copy: the target already holds every row")
    else:
        output.message(f"copied {report.copied} rows")


def _refuse_unverified(report) -> None:
    """Exit 1 naming what differs: a copy that does not verify."""
    from cairn_cli.errors import CairnError

    bad = [t.table for t in report.tables if t.equal is False] + (["full-text index"] * (not report.fulltext_in_step))
    raise CairnError(
        f"the copy does not verify: {', '.join(bad)} differ", "rerun with --overwrite, or inspect the target"
    )
