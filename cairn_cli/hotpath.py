"""What `cairn rank` needs on the shell hook's hot path, shared by entry.py (argparse) and commands/rank.py
(Typer): reading the prompt, the request fields, printing the result. stdlib only."""

from __future__ import annotations

import sys

from cairn_cli.errors import InvalidInput

MAX_TURN = 2**31 - 1  # a turn number the databases store as a 32-bit integer
MAX_SESSION_CHARS = 200  # what the session_id columns hold


def clean_text(text: str) -> str:
    """`text` without lone surrogates (a `\\ud800` in a hook's JSON): they cannot be encoded, stored or sent to the
    daemon, so each becomes U+FFFD instead of losing the whole turn."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def session_key(session_id: str) -> str:
    """The session id as stored: clean text, and at most MAX_SESSION_CHARS (a longer one keeps its start and gets
    a hash of the whole, so that it stays unique and the Stop finds the turns its prompt logged)."""
    session_id = clean_text(session_id)
    if len(session_id) <= MAX_SESSION_CHARS:
        return session_id
    import hashlib

    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:16]
    return f"{session_id[: MAX_SESSION_CHARS - 17]}~{digest}"


def read_text_arg(value: str | None, what: str, hint: str) -> str:
    """The argument, or stdin when it is '-' or absent and stdin is not a terminal. Bytes that are not UTF-8 are
    replaced, never fatal."""
    if value is not None and value != "-":
        return value
    if value is None and sys.stdin.isatty():
        raise InvalidInput(f"no {what} given", hint)
    return stdin_bytes().decode("utf-8", errors="replace")


_CHUNK = 1 << 20  # what one read asks for: a small prompt costs one read, /dev/zero never more than the cap


def max_input_bytes() -> int:
    from cairn_cli import config

    return int(str(config.get("MAX_INPUT_BYTES")))


def _too_large(what: str, cap: int) -> InvalidInput:
    return InvalidInput(
        f"{what} is larger than {cap} bytes ({cap / 2**20:g} MiB)", "send less, or raise CAIRN_MAX_INPUT_BYTES"
    )


def read_bounded(read, what: str, cap: int) -> bytes:
    """What `read(n)` gives until its end, in chunks, at most `cap` bytes: past it InvalidInput, and nothing more is
    read (a stream that never ends, /dev/zero, costs the cap, not all the memory there is)."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = read(min(_CHUNK, cap + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > cap:
            raise _too_large(what, cap)


def stdin_bytes() -> bytes:
    """All of stdin as bytes, at most CAIRN_MAX_INPUT_BYTES (a text-mode stand-in, as in tests, is encoded)."""
    cap = max_input_bytes()
    if hasattr(sys.stdin, "buffer"):
        return read_bounded(sys.stdin.buffer.read, "stdin", cap)
    data = sys.stdin.read(cap + 1).encode()
    if len(data) > cap:
        raise _too_large("stdin", cap)
    return data


def read_file(path, hint: str) -> bytes:
    """A regular file's bytes, at most CAIRN_MAX_INPUT_BYTES. NotFound when it cannot be read (missing,
    permissions); InvalidInput when it is a FIFO, a device, a socket or a directory (opened non-blocking and
    checked before a byte is read: never a hang on a FIFO nor an endless /dev/zero) or larger than the cap."""
    import os
    import stat

    from cairn_cli.errors import NotFound

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise NotFound(f"cannot read {path}: no such file", hint) from None
    except OSError as exc:
        raise NotFound(f"cannot read {path}: {exc.strerror or exc}", hint) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket: never read)"
            raise InvalidInput(f"{path} is {kind}", hint)
        cap = max_input_bytes()
        try:
            return read_bounded(lambda n: os.read(fd, n), f"{path}", cap)
        except OSError as exc:
            raise NotFound(f"cannot read {path}: {exc.strerror or exc}", hint) from None
    finally:
        os.close(fd)


def read_prompt(value: str | None) -> str:
    return read_text_arg(value, "prompt", "pass the prompt as an argument or pipe it on stdin")


def rank_fields(prompt, session, scope, transcript, k, layer, turn, log) -> dict:
    return {
        "prompt": clean_text(prompt),
        "session_id": session_key(session),
        "scope": None if scope is None else clean_text(scope),
        "transcript": transcript,
        "k": k,
        "layer": layer,
        "turn": turn,
        "log": log,
    }


def emit_rank(result: dict, as_json: bool) -> None:
    import json

    if as_json:
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
