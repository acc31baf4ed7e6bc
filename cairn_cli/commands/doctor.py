"""`cairn doctor`: what is wrong and how to fix it."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import Json, settings
from cairn_cli.core.doctor import CHECKS

Check = Enum("Check", {name: name for name in CHECKS}, type=str)  # type: ignore[misc]


def doctor(
    apply: Annotated[
        bool, typer.Option("--apply", help="Fix what cairn can fix itself (write spooled Stops, expire old text).")
    ] = False,
    only: Annotated[Check | None, typer.Option(help="Run this check alone.")] = None,
    json: Json = False,
) -> None:
    """Check the home, the stores, the Stop spool and retention; say what is wrong and the fix. Exit 1 while
    anything is left.

    Example: cairn doctor --apply
    """
    from pathlib import Path

    from cairn_cli import config
    from cairn_cli.core.doctor import diagnose
    from cairn_cli.daemon import control, dispatch

    def daemon_status() -> tuple[str, str]:
        status = control.status(Path(config.home_dir()))
        return status.state, status.detail

    report = diagnose(
        settings(),
        apply=apply,
        only=only.value if only else None,
        embed_with_model=dispatch.embed_with_model,
        embed=dispatch.embed_with_model,
        daemon_status=daemon_status,
    )
    if json:
        output.json_out(report.as_dict())
    else:
        rows = [{**vars(f), "applied": f.applied or ""} for f in report.findings]
        output.table(rows, ["check", "status", "message", "fix", "applied"][: 5 if apply else 4], title=report.home)
    if not report.healthy:
        raise typer.Exit(1)
