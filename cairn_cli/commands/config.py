"""`cairn config show`: every setting, the value in force and where it came from."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import Json, opened_settings, settings


def show(
    no_state: Annotated[
        bool,
        typer.Option("--no-state", help="Do not read machine state (calibrated values) from the memory store."),
    ] = False,
    json: Json = False,
) -> None:
    """Every CAIRN_* setting, grouped as the README groups them, with its value and its source: flag, environment,
    config.toml, default, or machine state (a value cairn calibrated itself wins over the configured one).

    Example: cairn config show --json
    """
    from cairn_cli.core.settings_report import settings_report

    rows = settings_report(settings() if no_state else opened_settings(), machine_state=not no_state)
    if json:
        output.json_out(rows)
        return
    for group in dict.fromkeys(row.group for row in rows):
        cells = [
            {**vars(row), "source": f"{row.source} ({row.state_key})" if row.state_key else row.source}
            for row in rows
            if row.group == group
        ]
        output.table(cells, ["name", "value", "source"], title=group)
