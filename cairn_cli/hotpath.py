"""What the shell hooks' hot path shares between entry.py (parsed by hand) and the Typer commands: reading the
prompt, printing a ranking, and the one line an unexpected exception becomes. stdlib only."""

from __future__ import annotations

import sys

from cairn_cli.errors import InvalidInput


def read_text_arg(value: str | None, what: str, hint: str) -> str:
    """The argument, or stdin when it is '-' or absent and stdin is not a terminal. Bytes that are not UTF-8 are
    replaced, never fatal."""
    if value is not None and value != "-":
        return value
    if value is None and sys.stdin.isatty():
        raise InvalidInput(f"no {what} given", hint)
    return stdin_bytes().decode("utf-8", errors="replace")


def stdin_bytes() -> bytes:
    """All of stdin as bytes, at most CAIRN_MAX_INPUT_BYTES (a text-mode stand-in, as in tests, is encoded)."""
    from cairn_cli.inputs import max_input_bytes, read_bounded, too_large

    cap = max_input_bytes()
    if hasattr(sys.stdin, "buffer"):
        return read_bounded(sys.stdin.buffer.read, "stdin", cap)
    data = sys.stdin.read(cap + 1).encode()
    if len(data) > cap:
        raise too_large("stdin", cap)
    return data


def read_prompt(value: str | None) -> str:
    return read_text_arg(value, "prompt", "pass the prompt as an argument or pipe it on stdin")


def emit_rank(result: dict, as_json: bool) -> None:
    if as_json:
        import json  # here: the text answer is the shell hook's hot path, and json imports re and enum

        sys.stdout.write(json.dumps({k: v for k, v in result.items() if k != "block"}, indent=2) + "\n")
    else:
        if result["block"]:
            sys.stdout.write(result["block"] + "\n")
        for note in result.get("notes", []):
            if note.startswith("fallback"):
                sys.stderr.write(f"cairn: {note}\n")
        if not result["memories"]:
            sys.stderr.write(f"cairn: no memory above the threshold among {result['candidates']} candidates\n")
    sys.stdout.flush()


def unexpected(exc: Exception) -> int:
    """An exception cairn did not raise: one line and exit 1 (what it means when the environment caused it,
    errors.explain); the traceback only under CAIRN_DEBUG. Both faces use it: entry.py and cli.py's decorator."""
    from cairn_cli import config
    from cairn_cli.errors import explain

    try:
        debug = bool(config.get("DEBUG"))
    except Exception:  # a broken config.toml must not hide the original error
        debug = False
    if debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    known = explain(exc)
    if known is not None:
        sys.stderr.write(f"error: {known.one_line()}\n")
        return known.exit_code
    sys.stderr.write(f"error: unexpected {type(exc).__name__}: {exc} (set CAIRN_DEBUG=1 for a traceback)\n")
    return 1
