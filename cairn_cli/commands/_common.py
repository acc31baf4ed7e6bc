"""What every command shares: the global database flags, turned into Settings."""

from __future__ import annotations

import sys

import typer

from cairn_cli.config import Settings
from cairn_cli.errors import InvalidInput

_globals: dict[str, str | None] = {}


def set_globals(**values: str | None) -> None:
    _globals.update({k: v for k, v in values.items() if v is not None})


def settings(**overrides) -> Settings:
    return Settings(**{**_globals, **{k: v for k, v in overrides.items() if v is not None}})


def read_text_arg(value: str | None, what: str, hint: str) -> str:
    """The argument, or stdin when it is '-' or absent and stdin is not a terminal. Bytes that are not UTF-8 are
    replaced, never fatal."""
    if value is not None and value != "-":
        return value
    if value is None and sys.stdin.isatty():
        raise InvalidInput(f"no {what} given", hint)
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    return data.decode("utf-8", errors="replace")


JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON on stdout.")
