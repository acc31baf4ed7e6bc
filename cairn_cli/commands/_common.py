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




def read_response(response: str | None, file) -> str:
    """The agent's response: `--file PATH`, else the argument, else stdin (bytes that are not UTF-8 replaced)."""
    from cairn_cli.errors import NotFound
    from cairn_cli.hotpath import read_text_arg

    if file is not None:
        if not file.is_file():
            raise NotFound(f"no such file: {file}", "pass the path of the response text")
        return file.read_bytes().decode("utf-8", errors="replace")
    return read_text_arg(response, "response", "pass the response text, --file PATH, or pipe it on stdin")
