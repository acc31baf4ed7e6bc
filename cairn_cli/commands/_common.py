"""What every command shares: the global database flags, turned into Settings."""

from __future__ import annotations

from cairn_cli.config import Settings

_globals: dict[str, str | None] = {}


def set_globals(**values: str | None) -> None:
    _globals.update({k: v for k, v in values.items() if v is not None})


def globals_overrides() -> dict:
    return dict(_globals)


def settings(**overrides) -> Settings:
    return Settings(**{**_globals, **{k: v for k, v in overrides.items() if v is not None}})


