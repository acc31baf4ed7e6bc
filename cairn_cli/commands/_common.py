"""What every command shares: the global database flags turned into Settings, the stores opened once, the
options every reporting command takes, and reading the agent's response."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cairn_cli.config import Settings

_globals: dict[str, str | None] = {}

Json = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
Since = Annotated[
    str | None, typer.Option(help="Only from this ISO date or datetime on (UTC), e.g. 2024-05-01 or 2024-05-01T12:00.")
]
Session = Annotated[str | None, typer.Option(help="Only this session's deliveries.")]
Instance = Annotated[
    str | None,
    typer.Option(help="Only what this instance wrote, in a store several machines share (default: all, pooled)."),
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Show what it would do; change nothing.")]
ResponseFile = Annotated[Path | None, typer.Option("--file", help="Read the response from this file.")]


def set_globals(**values: str | None) -> None:
    _globals.update({k: v for k, v in values.items() if v is not None})


def globals_overrides() -> dict:
    return dict(_globals)


def settings(**overrides) -> Settings:
    return Settings(**{**_globals, **{k: v for k, v in overrides.items() if v is not None}})


def opened_settings(*, read_only: bool = False, create: bool = False, **overrides) -> Settings:
    """The settings, with the memory store and the delivery log opened once for this command. A store that does
    not exist is an error naming it (a mistyped --db-url never becomes a new empty store), except the default ones
    under CAIRN_HOME, and any when the command makes its stores on purpose (`create`). `read_only`: not even the
    default ones (a command that only reads never creates a store)."""
    from cairn_cli.core.store import open_stores

    s = settings(**overrides)
    open_stores(s, create=False if read_only else (True if create else None))
    return s


def read_response(response: str | None, file: Path | None) -> str:
    """The agent's response: `--file PATH`, else the argument, else stdin (bytes that are not UTF-8 replaced; at most
    CAIRN_MAX_INPUT_BYTES of either)."""
    from cairn_cli.hotpath import read_text_arg
    from cairn_cli.inputs import read_file

    if file is not None:
        return read_file(file, "pass the path of the response text, or pipe it on stdin").decode(
            "utf-8", errors="replace"
        )
    return read_text_arg(response, "response", "pass the response text, --file PATH, or pipe it on stdin")
