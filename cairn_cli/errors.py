"""One error family for the whole tool; cli.py maps it to one stderr line and an exit code."""

from __future__ import annotations


class CairnError(Exception):
    """Base class: a message for the operator and a hint naming the fix."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class InvalidInput(CairnError):
    """Bad usage or malformed input: exit 2."""

    exit_code = 2


class NotFound(CairnError):
    """A named thing (memory id, file, session) does not exist: exit 1."""


class ConfigError(CairnError):
    """A setting has a value cairn cannot use: exit 1."""


class MissingDependency(CairnError):
    """An optional extra or a model is not installed: exit 1."""


class DeadlineExceeded(CairnError):
    """The caller stopped waiting: the work is abandoned before anything is written."""


class Conflict(CairnError):
    """The target already holds something else under the same key: exit 1, nothing written."""


def explain(exc: BaseException) -> CairnError | None:
    """What an exception cairn did not raise itself means, when the environment caused it: a store that may be read
    but not written (a read-only CAIRN_HOME, another account's file), a file or folder this account may not touch.
    None for anything else (a bug: the caller reports it as unexpected)."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    if "readonly database" in first:  # SQLite's "attempt to write a readonly database"
        return ConfigError(
            f"the store is read-only here ({first}): this command writes to it",
            "run it as the account that owns CAIRN_HOME / the store, or point CAIRN_HOME or --db-url at a writable one",
        )
    if isinstance(exc, PermissionError | IsADirectoryError | NotADirectoryError) and exc.filename:
        return ConfigError(f"cannot use {exc.filename}: {exc.strerror}", "check its permissions, or CAIRN_HOME")
    return None
