"""`cairn doctor`: what is wrong and how to fix it."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import Json, settings


def doctor(
    apply: Annotated[
        bool, typer.Option("--apply", help="Fix what cairn can fix itself (e.g. write spooled Stops).")
    ] = False,
    json: Json = False,
) -> None:
    """Check the home, the stores and the Stop spool; say what is wrong and the fix. Exit 1 while anything is left.

    Example: cairn doctor --apply
    """
    from cairn_cli.core.doctor import diagnose
    from cairn_cli.daemon import dispatch

    report = diagnose(settings(), apply=apply, embed_with_model=dispatch.embed_with_model, embed=dispatch.embed)
    if json:
        output.json_out(report.as_dict())
    else:
        rows = [{**vars(f), "applied": f.applied or ""} for f in report.findings]
        output.table(rows, ["check", "status", "message", "fix", "applied"][: 5 if apply else 4], title=report.home)
    if not report.healthy:
        raise typer.Exit(1)
