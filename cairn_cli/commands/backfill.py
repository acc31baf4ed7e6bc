"""`cairn backfill-semantic`: run the semantic second chance over history (core/hooks/backfill.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import Json, Session, Since, opened_settings


def backfill_semantic(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Examine and report; write nothing (no row, no audit record).")
    ] = False,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Examine at most this many deliveries (oldest first).")
    ] = None,
    since: Since = None,
    session: Session = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, max=4096, help="Deliveries per embedding request.")
    ] = 64,
    json: Json = False,
) -> None:
    """Retro-score deliveries decided "not engaged" by the lexical test alone (no semantic measurement; main-agent
    turns only) with the semantic second chance, recovering each response from its session's transcript. A rescued
    row is tagged `semantic-backfill`, a basis of its own; every examined row is marked, so a rerun examines nothing
    again. Exit 0 when the run completes, rescued or not.

    Example: cairn backfill-semantic --dry-run --since 2026-07-01
    """
    from cairn_cli.core import stats
    from cairn_cli.core.hooks import backfill
    from cairn_cli.daemon import dispatch

    opts = backfill.BackfillOptions(
        dry_run=dry_run, limit=limit, since=stats.parse_since(since), session=session, batch_size=batch_size
    )
    with output.progress_bars("delivery", enabled=not json) as bars:
        report = backfill.run(
            opened_settings(read_only=dry_run), opts, embed_with_model=dispatch.embed_daemon_first, progress=bars
        )
    output.json_out(report.as_dict()) if json else _show(report)


def _show(report) -> None:
    share = "" if report.rescued_share is None else f" ({report.rescued_share:.1%})"
    output.key_values(
        {
            "run": report.run + (" (dry run: nothing written)" if report.dry_run else ""),
            "selected": report.selected,
            "examined": report.examined,
            "rescued": f"{report.rescued}{share}",
            "threshold": f"{report.threshold:g} ({report.threshold_source})",
            "embedder": report.model or "-",
            "seconds": report.seconds,
            **{f"skipped: {why}": n for why, n in report.skipped.items()},
        },
        title="semantic engagement backfill",
    )
    rows = []
    for side, g in report.grades.items():
        interval = "-" if g.ci_low is None else f"[{g.ci_low:.2f}, {g.ci_high:.2f}]"
        rows.append(
            {
                "rows": side.replace("_", " "),
                "graded n": g.n,
                "mean grade": "-" if g.mean is None else f"{g.mean:.2f}",
                "95% interval": interval,
                "verdict": "too small to act on" if g.too_small else "",
            }
        )
    output.table(rows, ["rows", "graded n", "mean grade", "95% interval", "verdict"], title="agent grades")
    for note in report.notes:
        output.message(note)
