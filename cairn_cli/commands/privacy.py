"""`cairn forget` and `cairn redact`: what the user asks cairn to stop keeping (core/privacy/)."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import DryRun, Json, opened_settings


def forget(
    ids: Annotated[list[int] | None, typer.Argument(help="Memory ids to forget.")] = None,
    pattern: Annotated[
        str | None,
        typer.Option(
            "--pattern",
            help="Forget the memories whose text or keywords match this regular expression (any case), and remove "
            "the matching text from everything else cairn stored: prompts, context windows, logs, the spool.",
        ),
    ] = None,
    scope: Annotated[
        str | None, typer.Option(help="Forget the memories of this scope (with --pattern: those that match).")
    ] = None,
    dry_run: DryRun = False,
    json: Json = False,
) -> None:
    """Forget memories and purge their text from every place cairn kept it (deliveries, hook state, merges, the
    spool, logs, exported training data), on SQLite and PostgreSQL; reports a deployed learner trained on it.

    Example: cairn forget 12 40 · cairn forget --pattern 'acme-corp' --dry-run · cairn forget --scope old-project
    """
    from cairn_cli import config
    from cairn_cli.core.privacy import forget as forgetting

    report = forgetting.forget(
        opened_settings(), config.home(), ids=ids or [], pattern=pattern, scope=scope, dry_run=dry_run
    )
    if json:
        output.json_out(report.as_dict())
        return
    verb = "would forget" if dry_run else "forgot"
    output.text_out(
        f"{verb} {len(report.memories)} memories ({report.deliveries} deliveries, {report.merges} merges, "
        f"{report.vectors} vectors, {report.evidence} evidence records)"
        + (
            f": {', '.join(map(str, report.memories[:20]))}{' …' if len(report.memories) > 20 else ''}"
            if report.memories
            else ""
        )
    )
    _show_places(report.purged, "would remove the text from" if dry_run else "removed the text from")
    for learner in report.learners:
        output.message(
            f"the deployed {learner['learner']} ({learner['version']}, {learner['deployed_at']}) was trained on "
            "forgotten text: retrain it (`cairn train-reranker`) or roll it back (`--rollback`)"
        )
    for note in report.notes:
        output.message(note)


def redact(
    text: Annotated[str | None, typer.Argument(help="Text to redact (default: stdin); not with --scan.")] = None,
    scan: Annotated[
        bool,
        typer.Option("--scan", help="Find the secrets already stored (by earlier versions) and redact them in place."),
    ] = False,
    dry_run: DryRun = False,
    json: Json = False,
) -> None:
    """Redact secrets: the text given (printed back), or with --scan everything cairn stored (audited, idempotent).

    Example: cairn redact --scan --dry-run · echo "token ghp_…" | cairn redact
    """
    if not scan:
        from cairn_cli.core.private import strip_private
        from cairn_cli.core.redact import redact as redact_text
        from cairn_cli.errors import InvalidInput
        from cairn_cli.hotpath import read_text_arg

        if dry_run:
            raise InvalidInput("--dry-run goes with --scan", "run `cairn redact --scan --dry-run`")
        redacted, counts = redact_text(strip_private(read_text_arg(text, "text", "pass the text or pipe it on stdin")))
        output.json_out({"text": redacted, "kinds": counts}) if json else output.text_out(redacted)
        return
    from cairn_cli import config
    from cairn_cli.core.privacy import scan as scanning

    if text is not None:
        from cairn_cli.errors import InvalidInput

        raise InvalidInput("--scan reads the stores, not a text", "run `cairn redact --scan` alone")
    report = scanning.scan(opened_settings(), config.home(), dry_run=dry_run)
    if json:
        output.json_out(report.as_dict())
        return
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(report.kinds.items())) or "none"
    output.text_out(f"{'found' if dry_run else 'redacted'} {report.total} stored secrets ({kinds})")
    _show_places(report.found, "in" if dry_run else "redacted in")
    for note in report.notes:
        output.message(note)


def _show_places(found, verb: str) -> None:
    if found.rows:
        output.table(
            [{"place": p, "rows or files": n, "replaced": found.hits[p]} for p, n in sorted(found.rows.items())],
            ["place", "rows or files", "replaced"],
            title=verb,
        )
    for skipped in found.skipped:
        output.message(f"not rewritten: {skipped}")
