"""Bounded reads of what users hand cairn (stdin, a file named on the command line): at most CAIRN_MAX_INPUT_BYTES,
never a hang on a FIFO nor an endless /dev/zero. Stdlib only: the hooks read their stdin through it."""

from __future__ import annotations

import os

from cairn_cli.errors import InvalidInput

_CHUNK = 1 << 20  # what one read asks for: a small prompt costs one read, /dev/zero never more than the cap


def max_input_bytes() -> int:
    from cairn_cli import config

    return int(str(config.get("MAX_INPUT_BYTES")))


def too_large(what: str, cap: int) -> InvalidInput:
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
            raise too_large(what, cap)


def read_file(path, hint: str) -> bytes:
    """A regular file's bytes, at most CAIRN_MAX_INPUT_BYTES. NotFound when it cannot be read (missing,
    permissions); InvalidInput when it is a FIFO, a device, a socket or a directory (opened non-blocking and
    checked before a byte is read: never a hang on a FIFO nor an endless /dev/zero) or larger than the cap."""
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
